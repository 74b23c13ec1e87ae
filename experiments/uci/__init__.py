"""UCI regression benchmark (Dutordoir et al., 2021, Sec. 5.2, Fig. 7, appendix E.1).

    python -m experiments uci --dataset boston-embedded --method nn,adgp --budget small
    python -m experiments uci --dataset all --method all --data-dir $ADGP_DATA_DIR --out docs/results/uci
    python -m experiments uci --report-only --out docs/results/uci_long --doc docs/results/uci_tables.md --part tables
    python -m experiments uci --splits-kind gap --dataset yacht --method nn --budget converged

``--splits-kind gap`` runs the same methods on the "gap" splits (regression under covariate shift: split k holds out
the middle third of the rows sorted by feature k; :func:`activated_dgp.data.load_uci` with ``splits="gap"``). The
splits are among its protocol's settings, so gap records never count as, or mix with, published-split cells; its
default ``--out`` is ``docs/results/uci_gap`` and its page ``<out>.md``.

(``python -m experiments.uci …`` is the same command.) A study on the harness (experiments/harness/): each
(dataset, method, split) cell is one record appended atomically to ``<out>/records.jsonl``, stamped with the run's
:func:`PROTOCOL` (the budget's settings, the splits, each method's own version: :func:`experiments.methods.budget_protocol`),
so an interrupted run resumes where it stopped and never repeats a finished cell, and a record made under an
earlier version counts for as long as its method did not change (the harness's carry-over rule; records made before
the study declared its protocol carry it as a line, ``converged:nn10000:…:v6``, read by :func:`upgrade`). Every trained network (stage 1) is
also saved to ``<out>/networks`` (or ``--artifacts``; :class:`experiments.methods.NetworkCache`), so a cell
interrupted after stage 1 resumes from its network instead of training it again.
Cells run split by split, datasets small to large, all methods per split: partial results cover every dataset.
After the cells, ``<out>/table.md``, ``<out>/summary.csv`` and ``<out>/uci.png`` (Fig. 7: median and 25/75 %
quantiles of RMSE and NLPD per method) are written from all records; ``--doc`` also refreshes the generated
block of a Markdown page. The cells: experiments/uci/cells.py; the report: experiments/uci/report.py; the methods
and their protocol: experiments/methods/.
"""

from __future__ import annotations

import sys

# The study's interface for the harness (experiments/harness/study.py). Note that ``experiments.uci.cells`` here is
# the function :func:`cells`; the module of that name is read with ``from experiments.uci.cells import …``.
from experiments.harness import cli
from experiments.uci.cells import (
    CALIBRATION_METRICS, DEFAULT_METHODS, DEFAULT_OUT, ENSEMBLE_METHODS, GAP_METHODS, GAP_OUT, KEY, LLA_METHODS,
    METHOD_ORDER, METRICS, PROTOCOL, RECIPE_METHODS, add_options, artifact_cache, cells, prepare, record_kind, rescore,
    run_cell, split_counts, splits_kind, upgrade,
)
from experiments.uci.report import REPORT_RUNS, report


def main(argv=None) -> list:
    """``python -m experiments.uci …``: the same as ``python -m experiments uci …`` (the pages cite this form)."""
    return cli.main("uci", sys.modules[__name__], argv)


__all__ = [
    "CALIBRATION_METRICS", "DEFAULT_METHODS", "DEFAULT_OUT", "ENSEMBLE_METHODS", "GAP_METHODS", "GAP_OUT", "KEY",
    "LLA_METHODS", "METHOD_ORDER", "METRICS", "PROTOCOL", "RECIPE_METHODS", "REPORT_RUNS", "add_options",
    "artifact_cache", "cells", "main", "prepare", "record_kind", "report", "rescore", "run_cell", "split_counts",
    "splits_kind", "upgrade",
]
