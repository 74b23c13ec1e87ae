"""Execute the tutorials and write the executed notebooks the docs site shows.

Each tutorial is a jupytext percent-format script, ``docs/tutorials/<name>.py`` (the source, run by the tests in
fast mode). This runs it in full mode in a fresh Jupyter kernel, in an empty temporary folder, with the checkout's
``activated_dgp`` importable and TensorFlow's C++ logging off, and writes ``docs/tutorials/<name>.ipynb`` with its
outputs. The site renders those notebooks (mkdocs-jupyter, no execution at build time); ``tests/test_tutorials.py``
checks that each notebook's code is its script's, so a stale notebook fails the tests. Run it from the repository
root after changing a tutorial or what it prints:

    python docs/_tools/execute_tutorials.py                  # every tutorial
    python docs/_tools/execute_tutorials.py activated_svgp   # only these
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbconvert.preprocessors import ExecutePreprocessor

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"


WARNING = re.compile(r"^\S.*?:\d+: (\w*Warning): (.*)$", flags=re.M)  # "path:line: Category: message"
PROGRESS_BAR = re.compile(r"^\s*\d+/\d+ \[[=>.]*\]")  # a tf-keras Progbar line: " 69/100 [=====>....] - ETA: 4s"


def clean(notebook) -> None:
    """Drop what changes from run to run without changing the content: execution timestamps, progress bars (tf-keras
    Progbar lines), stderr output that holds no warning, and the file paths of the warnings."""
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            if output.output_type == "stream":
                if output.name == "stderr":  # keep the warnings, as "Category: message" without the file paths
                    output.text = "".join(f"{match[1]}: {match[2]}\n" for match in WARNING.finditer(output.text))
                lines = [line for line in re.split(r"[\r\n]", output.text) if line.strip("\x08 \t") and not PROGRESS_BAR.match(line.strip("\x08"))]
                if not lines:
                    continue
                output.text = "\n".join(lines) + "\n"
            kept.append(output)
        cell.outputs = kept


def execute(script: Path) -> Path:
    notebook = jupytext.read(script)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    with tempfile.TemporaryDirectory() as folder:
        # an IPython start-up file quiets TensorFlow's Python logger in the kernel, which logs INFO to stdout in an
        # interactive shell (the C++ one: TF_CPP_MIN_LOG_LEVEL)
        startup = Path(folder) / "ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-quiet-tensorflow.py").write_text('import tensorflow\ntensorflow.get_logger().setLevel("ERROR")\n')
        os.environ["IPYTHONDIR"] = str(Path(folder) / "ipython")
        work = Path(folder) / "work"
        work.mkdir()
        ExecutePreprocessor(timeout=None, kernel_name="python3").preprocess(notebook, {"metadata": {"path": str(work)}})
    clean(notebook)
    target = script.with_suffix(".ipynb")
    nbformat.write(notebook, target)
    return target


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="tutorial names (default: all)")
    names = parser.parse_args(argv).names
    scripts = [TUTORIALS / f"{name}.py" for name in names] or sorted(TUTORIALS.glob("*.py"))
    missing = [str(s) for s in scripts if not s.exists()]
    if missing:
        raise SystemExit(f"no such tutorial: {missing}")
    # the kernel inherits this environment: full mode, quiet TensorFlow, this checkout's library
    os.environ.pop("ADGP_TUTORIAL_FAST", None)
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for script in scripts:
        start = time.perf_counter()
        target = execute(script)
        print(f"{target.relative_to(ROOT)}: {time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
