"""What the recipe screen reads: it runs no cell of its own (its cells are UCI and rotated-MNIST cells, run by those
studies); its options name the records folders, read through the harness with each study's key and upgrade
(:func:`experiments.harness.study.load_records`)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from experiments.harness.study import load_records, newest_protocol
from experiments.methods import BUDGETS, budget_protocol
from experiments.recipes.rule import CANDIDATES, RECIPES, SCREEN_BUDGET, Evaluation, evaluate

KEY = ("candidate",)  # nothing is run: the study has no cells of its own
REPORT_ARGS: List[str] = []
BLOCK_COMMAND = "python -m experiments recipes"


def add_options(parser) -> None:
    """The screen's inputs and outputs (the harness adds --out, --report-only, …; this study always only reports)."""
    parser.add_argument("--uci-out", type=Path, default=Path("docs/results/uci_long"),
                        help="folder of the UCI records (records.jsonl) holding the screen's UCI cells (default %(default)s)")
    parser.add_argument("--rotated-root", type=Path, default=Path("docs/results/rotated_mnist_recipes"),
                        help="folder with one records folder per recipe, <root>/<recipe>/records.jsonl (default %(default)s)")
    parser.add_argument("--controls", type=Path, default=Path("docs/results/rotated_mnist_controls/records.jsonl"),
                        help="the rotated-MNIST controls' records (default %(default)s)")
    parser.add_argument("--doc", type=Path, default=None, help="the page (default docs/results/recipes.md, next to --out)")
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/recipes.png"), help="the figure (default %(default)s)")
    parser.add_argument("--screen-closed", action="store_true",
                        help="decide among the complete candidates although cells are missing (the screen is over)")


def cells(options) -> List[Dict]:
    return []  # report-only: the screen's cells are UCI and rotated-MNIST cells, run by those studies


def run_cell(cell, options, context) -> Dict:
    raise ValueError("the recipes study trains nothing; run the screen's cells with `python -m experiments uci` / `rotated_mnist`")


def load_uci(path: Path) -> Dict[Tuple[str, str, int], Dict]:
    """The screen budget's UCI records under its current protocol (:func:`experiments.methods.budget_protocol`; older
    records carried over only where their method did not change), by (method, dataset, split)."""
    records = load_records("uci", path, protocol=budget_protocol(BUDGETS[SCREEN_BUDGET]))
    return {(r["method"], r["dataset"], r["split"]): r for r in records}


def load_rotated(path: Path) -> Dict[Tuple[str, int], Dict]:
    """A rotated-MNIST records file's records of its newest protocol, by (model, seed); {} when there is none."""
    records = load_records("rotated_mnist", path, protocol=newest_protocol("rotated_mnist", path))
    return {(r["model"], r["seed"]): r for r in records}


def load_all(options) -> Tuple[Dict, Dict[str, Dict], Dict]:
    """The screen's records: UCI (:func:`load_uci`), recipe -> its rotated-MNIST records, and the controls'."""
    rotated = {recipe: load_rotated(Path(options.rotated_root) / recipe / "records.jsonl") for recipe in RECIPES}
    return load_uci(Path(options.uci_out) / "records.jsonl"), rotated, load_rotated(Path(options.controls))


def evaluate_all(options, loaded=None) -> List[Evaluation]:
    uci, rotated, controls = loaded or load_all(options)
    return [evaluate(candidate, uci, rotated, controls) for candidate in CANDIDATES]
