"""The spectral-figures study (experiments.figures): its committed record is what the figure code gives, and the
tables on docs/figures.md are what its report makes from that record."""

import json
from pathlib import Path

import numpy as np

from experiments import figures
from experiments.harness import blocks, cli

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "figures" / "records.jsonl"
PAGE = ROOT / "docs" / "figures.md"


def _committed(figure: str) -> dict:
    return next(r for r in map(json.loads, RECORDS.read_text().splitlines()) if r["figure"] == figure)


def test_the_committed_tables_are_what_the_records_give(tmp_path):
    """Each table block of the page equals the report's output from the committed records, and nothing else on
    the page changes (so ``python -m experiments report`` leaves a fresh clone clean)."""
    committed = PAGE.read_text()
    stale = committed
    for name in figures.TABLES:
        stale = stale.replace(blocks.read_block(PAGE, name), "stale\n")
    page = tmp_path / "figures.md"
    page.write_text(stale)
    out = tmp_path / "figures"
    out.mkdir()
    (out / "records.jsonl").write_text(RECORDS.read_text())
    options = cli.parse("figures", figures, ["--report-only", "--quiet", "--out", str(out), "--doc", str(page)])
    records = [r for r in map(json.loads, RECORDS.read_text().splitlines()) if r["protocol"] == figures.PROTOCOL]
    figures.report(records, options)
    assert blocks.without_commands(page.read_text()) == blocks.without_commands(committed)


def test_the_spectra_record_is_what_the_figure_code_gives(tmp_path):
    """Fig. C.2's cell (the cheapest) recomputed here gives the committed coefficients."""
    path, quantities = figures.figureC2(tmp_path)
    assert path.exists()
    committed = _committed("figC2")
    assert [(e["series"], e["dimension"]) for e in quantities["spectra"]] == [(e["series"], e["dimension"]) for e in committed["spectra"]]
    for new, old in zip(quantities["spectra"], committed["spectra"]):
        # The odd coefficients of an even shape function are zero; computed they are round-off (~1e-16 of the
        # largest), which differs between CPUs. They are held to an absolute tolerance scaled by the largest.
        scale = np.max(np.abs(old["coefficients"]))
        np.testing.assert_allclose(new["coefficients"], old["coefficients"], rtol=1e-9, atol=1e-12 * scale)


def test_table_summaries():
    """The summaries the tables state: where a norm levels off, which Ñ it grows at, and from which level the
    nonzero coefficients stay below a threshold."""
    levels = [2, 3, 4, 5, 6]
    assert figures.levelled_off_from(levels, [1.0, 2.0, 2.0, 2.999, 3.0]) == 5
    assert figures.levelled_off_from(levels, [3.0] * 5) == 2
    assert figures.grows_at(levels, [1.0, 2.0, 2.0, 3.0, 3.0]) == "odd only"
    assert figures.grows_at(levels, [1.0, 1.0, 2.0, 2.0, 3.0]) == "even only"
    assert figures.grows_at(levels, [1.0] * 5) == "never"
    magnitudes = np.array([1.0, 0.5, 1e-3, 0.0, 1e-10, 0.0, 1e-11, 0.0])
    assert figures.below_from(magnitudes, 1e-9) == 4
    assert figures.below_from(magnitudes, 1e-12) is None
