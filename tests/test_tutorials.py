"""Every tutorial under docs/tutorials runs, in its fast mode (small data, few epochs), and the docs site builds in
strict mode (mkdocs: no warning, no broken reference; it renders the tutorials without executing them again).

The tutorials run in the fresh process of tests/conftest.py (``RUNNER``), one after another, so that TensorFlow, GPflow
and GPflux are imported once (≈ 14 CPU-seconds a process on this machine) instead of once per tutorial. Each still runs
as a user runs it: as ``__main__`` from its own file (``runpy.run_path``), in a namespace of its own and an empty
working folder of its own, with the Keras session cleared, GPflow's configuration restored and figures closed before
it."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))

RUNNER = """
import contextlib, copy, io, json, os, runpy, sys, time, traceback
from pathlib import Path
import gpflow, matplotlib.pyplot, tf_keras

folder, tutorials = Path(sys.argv[1]), sys.argv[2:]
config = copy.deepcopy(gpflow.config.config())
results = {}
for tutorial in tutorials:
    tf_keras.backend.clear_session()
    gpflow.config.set_config(copy.deepcopy(config))
    matplotlib.pyplot.close("all")
    work = folder / Path(tutorial).stem
    work.mkdir()
    os.chdir(work)
    sys.argv = [tutorial]
    output, start = io.StringIO(), time.perf_counter()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            runpy.run_path(tutorial, run_name="__main__")
        error = None
    except (Exception, SystemExit):  # a tutorial must run to its end; Ctrl-C still stops the runner
        error = traceback.format_exc()
    results[tutorial] = dict(error=error, output=output.getvalue()[-3000:], seconds=time.perf_counter() - start)
    (folder / "results.json").write_text(json.dumps(results))
tf_keras.backend.clear_session()  # the process as it was found
gpflow.config.set_config(config)
matplotlib.pyplot.close("all")
"""


def _environment() -> dict:
    return dict(os.environ, ADGP_TUTORIAL_FAST="1", MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3", NO_MKDOCS_2_WARNING="1")


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 5, [t.name for t in TUTORIALS]


@pytest.fixture(scope="module")
def tutorial_runs(tmp_path_factory, fresh_process) -> dict:
    """{tutorial path: {"error", "output", "seconds"}} from one run of ``RUNNER`` over every tutorial."""
    folder = tmp_path_factory.mktemp("tutorials")
    try:
        fresh_process.run(RUNNER, folder, *TUTORIALS, cwd=folder, env={"ADGP_TUTORIAL_FAST": "1"}, timeout=1200)
    except (AssertionError, RuntimeError) as stopped:  # the runner itself failed or its process died: say where
        results = json.loads((folder / "results.json").read_text()) if (folder / "results.json").exists() else {}
        missing = [t.name for t in TUTORIALS if str(t) not in results]
        pytest.fail(f"the tutorial runner stopped before {missing}:\n{stopped}")
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs(tutorial, tutorial_runs):
    result = tutorial_runs[str(tutorial)]
    assert result["error"] is None, f"{tutorial.name} failed:\n{result['output']}\n{result['error']}"


def test_docs_site_builds_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (the test extra includes it)")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=_environment(),
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "site" / "tutorials" / "activated_svgp" / "index.html").exists()
    assert (tmp_path / "site" / "api" / "zonal" / "index.html").exists()
