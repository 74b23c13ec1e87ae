"""Every tutorial under docs/tutorials, every example script under docs/examples and the code of every how-to page
under docs/howto runs, the tutorials and examples in their fast mode (small data, few epochs), and the docs site
builds in strict mode (mkdocs: no warning, no broken reference).

The scripts run in ONE fresh Python process (``RUNNER``), one after another, so that TensorFlow, GPflow and GPflux
are imported once (≈ 14 CPU-seconds a process on this machine) instead of once per tutorial. Each still runs as a
user runs it: as ``__main__`` from its own file (``runpy.run_path``), in a namespace of its own and an empty working
folder of its own, with the Keras session cleared, GPflow's configuration restored and figures closed before it."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
HOWTOS = sorted(page for page in (ROOT / "docs" / "howto").glob("*.md") if page.name != "index.md")
README = ROOT / "README.md"
SCRIPTS = TUTORIALS + EXAMPLES + HOWTOS + [README]  # a Markdown page runs as the concatenation of its ```python blocks
#: run only with the slow tests: the README's example makes the calls the getting-started example makes
#: (train_two_stage from a trained tf-keras network, predict_y) and checkpoint_and_resume's (activated_dgp.save)
SLOW_SCRIPTS = [README]

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
    output, start, cpu = io.StringIO(), time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            runpy.run_path(tutorial, run_name="__main__")
        error = None
    except (Exception, SystemExit):  # a tutorial must run to its end; Ctrl-C still stops the runner
        error = traceback.format_exc()
    results[tutorial] = dict(error=error, output=output.getvalue()[-3000:], seconds=time.perf_counter() - start,
                             cpu_seconds=time.process_time() - cpu)
    (folder / "results.json").write_text(json.dumps(results))
tf_keras.backend.clear_session()  # the process as it was found
gpflow.config.set_config(config)
matplotlib.pyplot.close("all")
"""


def _environment() -> dict:
    """The runner's environment: fast mode, no display, quiet TensorFlow, and this checkout first on the import path
    (so the scripts run the code under test whatever package is installed)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, ADGP_TUTORIAL_FAST="1", MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3", NO_MKDOCS_2_WARNING="1",
                PYTHONPATH=path)


def python_blocks(page: Path) -> list:
    """The ```python fenced blocks of a Markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def _script_id(path: Path) -> str:
    return "readme" if path == README else f"{path.parent.name}-{path.stem}"


def test_there_are_tutorials_examples_and_howtos():
    assert len(TUTORIALS) >= 5, [t.name for t in TUTORIALS]
    assert [e.name for e in EXAMPLES] == ["getting_started.py"]
    assert len(HOWTOS) >= 6, [h.name for h in HOWTOS]
    for page in HOWTOS:
        assert python_blocks(page), f"{page.name} has no ```python block to run"


@pytest.fixture(scope="module")
def tutorial_runs(tmp_path_factory, slow_tests_run) -> dict:
    """{script path: {"error", "output", "seconds"}} from one run of ``RUNNER`` over every tutorial, example and how-to
    page (each page's code written to a file of its own first), and the README when the slow tests run."""
    folder = tmp_path_factory.mktemp("tutorials")
    scripts = [s for s in SCRIPTS if slow_tests_run or s not in SLOW_SCRIPTS]
    paths = {}
    for script in scripts:
        if script.suffix == ".md":
            code = folder / f"page_{script.stem}.py"
            code.write_text("\n".join(python_blocks(script)))
            paths[script] = code
        else:
            paths[script] = script
    run = subprocess.run(
        [sys.executable, "-c", RUNNER, str(folder), *map(str, paths.values())], cwd=folder, env=_environment(), capture_output=True,
        text=True, timeout=1200,
    )
    results = json.loads((folder / "results.json").read_text()) if (folder / "results.json").exists() else {}
    if len(results) < len(scripts):  # the process itself died (a crash, not an exception): say where
        missing = [s.name for s in scripts if str(paths[s]) not in results]
        pytest.fail(f"the tutorial runner stopped before {missing} (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return {script: dict(results[str(path)], folder=folder / Path(path).stem) for script, path in paths.items()}


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SCRIPTS else s for s in SCRIPTS],
                         ids=[_script_id(s) for s in SCRIPTS])
def test_tutorial_runs(script, tutorial_runs):
    result = tutorial_runs[script]
    assert result["error"] is None, f"{script.name} failed:\n{result['output']}\n{result['error']}"


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_executed_notebook_is_the_tutorials(tutorial):
    """The site shows docs/tutorials/<name>.ipynb, executed from <name>.py: its cells must be the script's (else it is
    stale: rerun ``python docs/_tools/execute_tutorials.py <name>``), every code cell run, none with an error."""
    import jupytext
    import nbformat

    executed = tutorial.with_suffix(".ipynb")
    assert executed.exists(), f"{executed.name} is missing: python docs/_tools/execute_tutorials.py {tutorial.stem}"
    notebook, source = nbformat.read(executed, as_version=4), jupytext.read(tutorial)
    cells = [(cell.cell_type, cell.source) for cell in notebook.cells]
    assert cells == [(cell.cell_type, cell.source) for cell in source.cells], (
        f"{executed.name} is stale: python docs/_tools/execute_tutorials.py {tutorial.stem}"
    )
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), f"{executed.name} has cells that did not run"
    assert not [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert str(ROOT) not in executed.read_text(), f"{executed.name} shows a path of the machine that executed it"


def test_getting_started_output_on_the_page_is_the_scripts(tutorial_runs):
    """The committed lines the Getting started page shows are the lines the script prints, numbers apart (the fast run
    trains for a few epochs), and the fast run wrote its figure."""
    example = ROOT / "docs" / "examples" / "getting_started.py"
    result = tutorial_runs[example]
    assert result["error"] is None, result["error"]

    def shape(text):
        return [re.sub(r"-?\d+(\.\d+)?(e[-+]\d+)?", "#", line) for line in text.splitlines()]

    written = (result["folder"] / "getting_started.txt").read_text()
    assert shape(written) == shape((ROOT / "docs" / "examples" / "getting_started.txt").read_text())
    assert (result["folder"] / "getting_started.png").stat().st_size > 10_000
    page = (ROOT / "docs" / "getting_started.md").read_text()
    assert '--8<-- "docs/examples/getting_started.txt"' in page and "figures/getting_started.png" in page


def test_docs_site_builds_in_strict_mode(built_site):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (the test extra includes it)")
    returncode, output, site = built_site  # tests/conftest.py: one strict build, shared with tests/test_docs_browser.py
    assert returncode == 0, output
    assert (site / "tutorials" / "activated_svgp" / "index.html").exists()
    assert (site / "api" / "zonal" / "index.html").exists()

    # the API reference shows no Sphinx role as literal text (docs/_tools/sphinx_roles.py rewrites them) ...
    literal = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):(?:`|<code>)")
    api_pages = sorted((site / "api").rglob("index.html"))
    assert len(api_pages) >= 7
    found = {str(page.relative_to(site)): len(literal.findall(page.read_text())) for page in api_pages}
    assert sum(found.values()) == 0, found
    # ... and a role naming a rendered object links to it: the package docstring's :class:`ZonalArcCosine`, at the
    # anchor of the class's defining module as Python itself reports it
    from activated_dgp import ZonalArcCosine

    anchor = f"{ZonalArcCosine.__module__}.{ZonalArcCosine.__qualname__}"
    assert re.search(rf'<a class="autorefs[^"]*"[^>]*href="zonal/#{re.escape(anchor)}"><code>ZonalArcCosine</code></a>',
                     (site / "api" / "index.html").read_text())

    # the changelog page is CHANGELOG.md itself, and the home page shows the README's example
    first_heading = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert first_heading[3:] in (site / "changelog" / "index.html").read_text()
    assert "train_two_stage" in (site / "index.html").read_text()

    # links between pages resolve; mkdocs checks Markdown pages, not the tutorials' rendered notebooks
    for page in sorted((site / "tutorials").rglob("index.html")):
        for href in re.findall(r'<a[^>]* href="([^"#:]+)(?:#[^"]*)?"', page.read_text()):
            target = (page.parent / href).resolve()
            assert (target / "index.html").exists() or target.is_file(), f"{page.relative_to(site)} links to a missing {href}"
