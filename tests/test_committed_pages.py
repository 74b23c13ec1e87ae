"""``python -m experiments report`` leaves a fresh clone clean: every results page, and every other text file a
study's report writes under docs/ (tables, summaries), is what that study's report makes from the committed
records alone (nothing trained, no data read).

One case per registered study, through the harness's own entry points: in a copy of docs/ (the working folder, so
the report runs' relative paths land in the copy), each generated block of the study on the pages its report runs
write is replaced by "stale" (a page the study writes whole is replaced whole), then every report run of the study
(``cli.report_runs``) runs as ``python -m experiments report`` runs it; every text file of the copy must then equal
the committed one, and no file may appear. Figures are not compared (their rendering is not written: a report's
PNG is drawn by the same code the study tests run, and its bytes depend on the matplotlib version)."""

import re
import shutil
from pathlib import Path

import matplotlib.figure
import pytest

from experiments.harness import cli, registry

ROOT = Path(__file__).resolve().parents[1]
TEXT = {".md", ".csv", ".json", ".jsonl", ".txt"}
MARKER = re.compile(r"<!-- BEGIN GENERATED ([A-Za-z0-9_.\-]+): (.*?) -->\n(.*?)<!-- END GENERATED \1 -->", re.S)


def _texts(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.suffix in TEXT}


def _stale(page: Path, study: str) -> None:
    """Replace the study's generated blocks on ``page`` by "stale" (the whole page when it has none of them)."""
    text = page.read_text()

    def replace(match):
        named = re.search(r"python -m experiments[ .](\w+)", match.group(2))
        return match.group(0).replace(match.group(3), "stale\n") if named and named.group(1) == study else match.group(0)

    staled = MARKER.sub(replace, text)
    page.write_text(staled if staled != text else "stale\n")


@pytest.mark.parametrize("name", list(registry.STUDIES))
def test_a_studys_report_rewrites_its_committed_pages_from_the_committed_records(tmp_path, monkeypatch, name):
    study = registry.study(name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    committed = _texts(tmp_path / "docs")
    pages = [page for page in dict.fromkeys(map(Path, cli.report_pages(name, study))) if page.is_file()]
    for page in pages:
        _stale(page, name)
    assert all(page.read_text() != committed[page.relative_to("docs").as_posix()] for page in pages)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *args, **kwargs: None)
    for extra in cli.report_runs(study):
        cli.main(name, study, ["--report-only", "--quiet", *extra])
    written = _texts(tmp_path / "docs")
    assert sorted(written) == sorted(committed)  # no new file
    changed = [path for path in committed if written[path] != committed[path]]
    assert not changed, f"the report of {name} changed {changed}"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.iterdir()) in (["docs"], [".cache", "docs"])
