import fcntl
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _float64_and_seed():
    gpflow.config.set_default_float(np.float64)
    np.random.seed(0)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _interrupt_after(epochs: int):
    """A tf-keras callback that raises KeyboardInterrupt at the end of epoch ``epochs`` (a simulated crash,
    after the callbacks listed before it have run)."""
    import tf_keras

    class InterruptAfter(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == epochs:
                raise KeyboardInterrupt("simulated interruption")

    return InterruptAfter()


@pytest.fixture(scope="session")
def interrupt_after():
    """``interrupt_after(epochs)``: a callback that simulates a crash at the end of that epoch."""
    return _interrupt_after


def _save_with_tampered_config(obj, kind_name: str, directory, tamper):
    """``activated_dgp.save(obj, directory)`` with the config of its saved kind ``kind_name`` edited by ``tamper``: a
    directory whose header disagrees with its variables, written by the real writer."""
    import dataclasses

    from activated_dgp import saving

    kind = next(k for k in saving._KINDS.values() if k.name == kind_name)

    def describe(item):
        description = kind.describe(item)
        tamper(description.config)
        return description

    saving.register_saved_kind(dataclasses.replace(kind, describe=describe))
    try:
        return saving.save(obj, directory)
    finally:
        saving.register_saved_kind(kind)


@pytest.fixture(scope="session")
def save_with_tampered_config():
    """``save_with_tampered_config(obj, kind_name, directory, tamper)``: save with the kind's config edited."""
    return _save_with_tampered_config


# Slow tests (@pytest.mark.slow) are deselected unless --runslow is given or ADGP_RUN_SLOW=1.
def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test, deselected unless --runslow or ADGP_RUN_SLOW=1")


def run_slow(config) -> bool:
    """Whether this session runs the tests marked slow (--runslow or ADGP_RUN_SLOW=1)."""
    return config.getoption("--runslow") or os.environ.get("ADGP_RUN_SLOW") == "1"


@pytest.fixture(scope="session")
def slow_tests_run(request) -> bool:
    """True when this session runs the tests marked slow: a module-scope fixture leaves out work only they read."""
    return run_slow(request.config)


def pytest_collection_modifyitems(config, items):
    if run_slow(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow or ADGP_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# ------------------------------------------------------------------------------------------ the fresh process

#: The reader process: started fresh (its first act imports the library, recording any DeprecationWarning of ours),
#: then runs each script it is sent as ``__main__`` in a namespace of its own, with the request's argv, working folder
#: and environment, printing into a buffer; it answers one JSON line per script on the file descriptor it is given.
_READER = r"""
import contextlib, io, json, os, sys, traceback, warnings
answers = os.fdopen(int(sys.argv[1]), "w")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import activated_dgp, activated_dgp.zonal, activated_dgp.deep, activated_dgp.training
answers.write(json.dumps([str(w.message) for w in caught if "is deprecated; use activated_dgp" in str(w.message)]) + "\n")
answers.flush()
for line in sys.stdin:
    request = json.loads(line)
    saved_environment, saved_path = dict(os.environ), list(sys.path)
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["-c", *request["argv"]]
    output, error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exec(compile(request["code"], "<fresh process>", "exec"), {"__name__": "__main__"})
    except (Exception, SystemExit):
        error = traceback.format_exc()
    os.environ.clear(), os.environ.update(saved_environment)
    sys.path[:] = saved_path
    answers.write(json.dumps({"stdout": output.getvalue(), "error": error}) + "\n")
    answers.flush()
"""


class FreshProcess:
    """A Python process that never held the tests' objects: scripts sent to it load what a test saved, as a user's
    new session would. One per test session (one per pytest-xdist worker), started on first use, so that the suite
    imports TensorFlow, GPflow and the library once per worker instead of once per round trip."""

    def __init__(self):
        self._process = None

    def _start(self):
        read, write = os.pipe()
        self._log = tempfile.TemporaryFile()  # TensorFlow's C++ log lines: never a pipe nobody reads
        environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", MPLBACKEND="Agg",
                           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self._process = subprocess.Popen([sys.executable, "-c", _READER, str(write)], stdin=subprocess.PIPE, stdout=self._log,
                                         stderr=subprocess.STDOUT, pass_fds=(write,), env=environment, text=True, cwd=ROOT)
        os.close(write)
        self._answers = os.fdopen(read)
        self._import_warnings = json.loads(self._answer(600))

    def _answer(self, timeout: float) -> str:
        import select

        ready, _, _ = select.select([self._answers], [], [], timeout)
        line = self._answers.readline() if ready else None
        if not line:
            self._process.kill()
            self._process.wait()
            self._log.seek(0)
            why = "died" if ready else f"gave no answer in {timeout:.0f} s"
            raise RuntimeError(f"the fresh process {why}:\n" + self._log.read().decode(errors="replace")[-3000:])
        return line

    def _ensure(self):
        if self._process is None or self._process.poll() is not None:
            self._start()

    @property
    def import_warnings(self) -> list:
        """The messages of the library's own DeprecationWarnings seen while the process imported activated_dgp and
        its subpackages, its first act."""
        self._ensure()
        return self._import_warnings

    def run(self, code: str, *argv, cwd=None, env=None, timeout: float = 1200) -> str:
        """Run ``code`` as a script (``sys.argv[1:]`` = ``argv``, working folder ``cwd``, ``env`` added to the
        environment) in the fresh process: its printed output, or an AssertionError with the script's traceback."""
        self._ensure()
        request = dict(code=code, argv=[str(a) for a in argv], cwd=str(cwd or ROOT), env=dict(env or {}))
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = json.loads(self._answer(timeout))
        assert answer["error"] is None, f"the script failed in the fresh process:\n{answer['stdout'][-3000:]}\n{answer['error']}"
        return answer["stdout"]

    def close(self):
        if self._process is not None and self._process.poll() is None:
            self._process.stdin.close()
            self._process.wait(timeout=60)


@pytest.fixture(scope="session")
def fresh_process():
    """``fresh_process.run(script, *argv, cwd=…, env=…)``: the script's output from a process other than the test's."""
    process = FreshProcess()
    yield process
    process.close()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The docs site, built once per test run by ``mkdocs build --strict``: ``(returncode, output, site folder)``.

    Under pytest-xdist the workers share it: the first to ask builds it while holding a lock in the run's common
    temporary folder, the others wait and reuse it (one build, whichever modules ask)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker's base temporary folder is in
    site, result = root / "docs_site", root / "docs_site.json"
    with open(root / "docs_site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NO_MKDOCS_2_WARNING="1", MPLBACKEND="Agg", PYTHONPATH=path)
            run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            result.write_text(json.dumps(dict(returncode=run.returncode, output=run.stdout[-3000:] + run.stderr[-3000:])))
        built = json.loads(result.read_text())
    return built["returncode"], built["output"], site
