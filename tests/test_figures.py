"""The spectral-figures study (experiments.figures): its committed record is what the figure code gives (the tables
on docs/figures.md from that record: tests/test_committed_pages.py)."""

import json
from pathlib import Path

import numpy as np

from experiments import figures

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "figures" / "records.jsonl"


def _committed(figure: str) -> dict:
    return next(r for r in map(json.loads, RECORDS.read_text().splitlines()) if r["figure"] == figure)


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
