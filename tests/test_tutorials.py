"""Every tutorial under docs/tutorials runs, in its fast mode (small data, few epochs), and the docs site builds in
strict mode (mkdocs: no warning, no broken reference)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))


def _environment() -> dict:
    return dict(os.environ, ADGP_TUTORIAL_FAST="1", MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3", NO_MKDOCS_2_WARNING="1")


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 5, [t.name for t in TUTORIALS]


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs(tutorial, tmp_path):
    run = subprocess.run([sys.executable, str(tutorial)], cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{tutorial.name} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


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
