"""The stage-2 recipe screen: which recipe becomes ``train_two_stage``'s default, by a rule written before any
screen record existed (:data:`RULE`, applied by :func:`decide`).

    python -m experiments recipes            # report only: reads the records, trains nothing

Candidates: the recipes {paper, validation, elbo, floor} (UCI methods ``adgp_paper``, ``adgp``, ``adgp_elbo``,
``adgp_floor``: experiments/methods/adgp.py ``STAGE2_RECIPES``), each with the far-field residual on and off (the
same fit, scored both ways: ``extra.far_field_off`` in a UCI record, ``far_field_off`` in a rotated-MNIST one).
Screened cells:

* UCI, :data:`SCREEN_DATASETS` × splits :data:`SCREEN_SPLITS` under the :data:`SCREEN_BUDGET` protocol, with NN and
  NN+TS of the same splits (``--uci-out``, default docs/results/uci_long/records.jsonl);
* rotated MNIST, seed(s) :data:`SCREEN_SEEDS`: the candidate's conv-fine-tuned ADGP (model ``adgp_ft``) in
  ``<--rotated-root>/<recipe>/records.jsonl`` (default docs/results/rotated_mnist_recipes), and the controls ``nn``,
  ``nn_ts_ft``, ``nn_dropout_ft`` in ``--controls`` (default docs/results/rotated_mnist_controls/records.jsonl).

A missing cell is shown as missing, never filled in. The page: docs/results/recipes.md (generated block
``recipes``) and docs/figures/recipes.png (in-distribution NLPD against test log-likelihood under shift).
The rule and what the records say under it: experiments/recipes/rule.py; the options and the records read:
cells.py; the page and figures: report.py.
"""

from __future__ import annotations

import sys

# The study's interface for the harness (experiments/harness/study.py), and the rule's names.
from experiments.harness import cli
from experiments.recipes.cells import (
    KEY, REPORT_ARGS, add_options, cells, evaluate_all, load_all, load_rotated, load_uci, run_cell,
)
from experiments.recipes.report import follow_up_markdown, full_size_figure, full_size_markdown, markdown, report
from experiments.recipes.rule import (
    AMENDMENT, CANDIDATES, FOLLOW_UP, READING, RECIPES, RULE, SCREEN_DATASETS, SCREEN_SEEDS, SCREEN_SPLITS, Decision,
    Evaluation, FollowUp, FullSize, decide, evaluate, follow_up, full_size,
)


def main(argv=None) -> list:
    """``python -m experiments.recipes …``: the same as ``python -m experiments recipes …``."""
    return cli.main("recipes", sys.modules[__name__], argv)


__all__ = [
    "AMENDMENT", "CANDIDATES", "Decision", "Evaluation", "FOLLOW_UP", "FollowUp", "FullSize", "KEY", "READING", "RECIPES",
    "REPORT_ARGS", "RULE", "SCREEN_DATASETS", "SCREEN_SEEDS", "SCREEN_SPLITS", "add_options", "cells", "decide",
    "evaluate", "evaluate_all", "follow_up", "follow_up_markdown", "full_size", "full_size_figure", "full_size_markdown",
    "load_all", "load_rotated", "load_uci", "main", "markdown", "report", "run_cell",
]
