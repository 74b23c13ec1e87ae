"""Issue 36's stage-2 recipe screen: which recipe becomes ``train_two_stage``'s default, by a rule written before any
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
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from activated_dgp.data.uci import UCI_DATASETS  # noqa: E402
from experiments.harness.blocks import write_block  # noqa: E402
from experiments.harness.statistics import standard_error  # noqa: E402
from experiments.harness.store import ResultStore  # noqa: E402
from experiments.harness.study import page_path  # noqa: E402

KEY = ("candidate",)  # nothing is run: the study has no cells of its own
REPORT_ARGS: List[str] = []
BLOCK_COMMAND = "python -m experiments recipes"

RECIPES = ("paper", "validation", "elbo", "floor")
UCI_METHOD = {"paper": "adgp_paper", "validation": "adgp", "elbo": "adgp_elbo", "floor": "adgp_floor"}
FAR_FIELD = ("on", "off")
CANDIDATES = tuple(f"{recipe}/{far}" for recipe in RECIPES for far in FAR_FIELD)
SCREEN_DATASETS = ("bostonHousing", "concrete", "energy", "wine-quality-red", "yacht")
SCREEN_SPLITS = (0, 1)
SCREEN_BUDGET = "converged-long"
SCREEN_SEEDS = (0,)
SHIFT_ANGLES = tuple(range(45, 181, 15))  # 45°, 60°, …, 180°: ten angles
ROTATED_MODEL = "adgp_ft"
CONTROLS = ("nn", "nn_ts_ft", "nn_dropout_ft")
ACCURACY_MARGIN = 0.01  # "at most 1 point below"
RULE_DATE = "2026-11-25"

#: The rule, verbatim as written before any screen record existed.
RULE = f"""Rule (written {RULE_DATE} before any screen record existed):
1. Admissible: UCI RMSE within one SE of NN's (paired splits) on every screened set but at most one; and rotated-MNIST 0° accuracy at most 1 point below NN's (seed mean).
2. Score = (screened UCI sets where the candidate's mean NLPD < NN+TS's) / (sets screened) + (angles 45°–180° where the candidate's mean test log-likelihood > the larger of fine-tuned NN+TS's and fine-tuned MC dropout's) / (angles counted).
3. Highest score wins; ties go to the lower mean UCI NLPD; a candidate missing any screened cell is not ranked (listed as incomplete).
4. Finalists: the paper's recipe plus the two best-scoring others."""

#: How :func:`decide` reads the rule where its words leave a choice open (also written 2026-11-25, before any record).
READING = """How the rule is read (written 2026-11-25 with the rule, before any screen record existed):
- A candidate is a recipe × far field (on/off); both far-field variants of a recipe are the same fit, scored with the residual and with it switched off.
- "Within one SE of NN's": the candidate's mean RMSE over the screened splits ≤ NN's mean over the same splits + NN's standard error there (std with ddof 1 / √n), as docs/results/uci.md's accuracy claim. NN = the `nn` records, NN+TS = `nn_ts`; both from the same splits.
- "NN's" 0° accuracy on rotated MNIST: the `nn` control; fine-tuned NN+TS and MC dropout: `nn_ts_ft` and `nn_dropout_ft`; means over the screened seeds. 1 point = 0.01 accuracy.
- Angles counted: 45°, 60°, …, 180° (ten); a tie in log-likelihood is not a win.
- Only complete, admissible candidates are ranked; incomplete ones are listed as incomplete, inadmissible ones as not admissible. "Lower mean UCI NLPD": the mean over the screened sets of (candidate's NLPD − NN+TS's), the figure's x axis; a further tie goes to the earlier candidate in the order paper, validation, elbo, floor (far field on before off).
- The choice is made once no screened cell of any candidate is missing (or the screen is declared closed with --screen-closed, when a cell can never be filled); until then the page says "not yet decidable".
- Finalists are recipes (a full-size run trains a recipe and scores it both ways): the paper's, plus the recipes of the two best-ranked candidates of other recipes, one per recipe."""

#: One amendment to :data:`READING`, written before the cells it could bear on existed. It cannot change any outcome:
#: it only stops a candidate that no further cell can make admissible from holding up the choice.
AMENDMENT = """Amendment (written 2026-11-26, when floor's UCI split-1 cells of concrete, energy and wine-quality-red and its rotated-MNIST cell did not exist yet):
- A candidate that already fails admissibility on the cells it has (RMSE misses on two or more screened sets whose splits are all recorded, or a recorded 0° accuracy more than 1 point below NN's) is not admissible, whatever its missing cells hold; its missing cells no longer hold up the choice. They are still listed, and still run for the figure."""


#: A follow-up to the rule, for one candidate the screen's records suggested. Written after the screen's choice and
#: before the records it reads (the rotated-MNIST controls of seeds 1 and 2) existed.
FOLLOW_UP_DATE = "2026-11-26"
FOLLOW_UP_SEEDS = (1, 2)
FOLLOW_UP = f"""Follow-up rule (written {FOLLOW_UP_DATE}, after the screen's choice and before the rotated-MNIST controls of seeds 1 and 2 existed):
- Candidate `by_likelihood`: the `validation` recipe for a Gaussian likelihood, the `paper` recipe for classification. It is post hoc, made of the screen's own cells (validation's UCI cells, paper's rotated-MNIST cell), on which the rule would score it 1.4, above every screened candidate. So it is judged only on records the screen did not read.
- It becomes `train_two_stage`'s default if, in each of rotated-MNIST seeds 1 and 2, the `paper` recipe's fine-tuned ADGP (docs/results/rotated_mnist_recipes/paper) has a test log-likelihood above the larger of fine-tuned NN+TS's and fine-tuned MC dropout's at every angle from 45° to 180°, and a 0° accuracy at most 1 point below NN's. Its regression half is the `validation` recipe, whose full-size UCI records already meet issue 36's UCI targets (docs/results/uci.md).
- Until both seeds' controls exist, the default stays the rule's choice."""


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


# ------------------------------------------------------------------------------------------------ reading records


def load_uci(path: Path) -> Dict[Tuple[str, str, int], Dict]:
    """The screen budget's UCI records at the current protocol version (older records carried over only where their
    method did not change: :func:`experiments.methods.upgrade_record`), by (method, dataset, split)."""
    from experiments.harness.study import load_records
    from experiments.methods import BUDGETS

    records = load_records("uci", path, protocol=BUDGETS[SCREEN_BUDGET].key())
    return {(r["method"], r["dataset"], r["split"]): r for r in records}


def load_rotated(path: Path) -> Dict[Tuple[str, int], Dict]:
    """A rotated-MNIST records file's records of its newest protocol, by (model, seed); {} when there is none."""
    from experiments.rotated_mnist import KEY as ROTATED_KEY
    from experiments.rotated_mnist import newest_protocol, upgrade

    if not Path(path).exists():
        return {}
    store = ResultStore(path, ROTATED_KEY, upgrade=upgrade, protocol=newest_protocol(path))
    return {(r["model"], r["seed"]): r for r in store.records()}


# ------------------------------------------------------------------------------------------------ the rule


@dataclass
class Evaluation:
    """One candidate's screened numbers: per UCI set, per shift angle, its admissibility and score (None where a
    screened cell is missing), and the cells it lacks."""

    candidate: str
    missing: List[str] = field(default_factory=list)
    uci: Dict[str, Dict] = field(default_factory=dict)  # dataset -> rmse, rmse_nn, rmse_nn_se, nlpd, nlpd_ts, per_split
    shift: Dict[int, Dict] = field(default_factory=dict)  # angle -> log_likelihood, control (the larger control's)
    accuracy_0: Optional[float] = None
    accuracy_0_nn: Optional[float] = None
    per_seed_shift: Dict[int, float] = field(default_factory=dict)  # seed -> mean log-likelihood over SHIFT_ANGLES

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def rmse_misses(self) -> List[str]:
        return [d for d, u in self.uci.items() if not u["rmse"] <= u["rmse_nn"] + u["rmse_nn_se"]]

    @property
    def admissible(self) -> Optional[bool]:
        """False as soon as the recorded cells settle it (:data:`AMENDMENT`), None while missing cells could still
        make it either, else True."""
        too_inaccurate = self.accuracy_0 is not None and self.accuracy_0 < self.accuracy_0_nn - ACCURACY_MARGIN
        if len(self.rmse_misses) > 1 or too_inaccurate:
            return False
        return None if not self.complete else True

    @property
    def uci_wins(self) -> int:
        return sum(u["nlpd"] < u["nlpd_ts"] for u in self.uci.values())

    @property
    def shift_wins(self) -> int:
        return sum(a["log_likelihood"] > a["control"] for a in self.shift.values())

    @property
    def score(self) -> Optional[float]:
        if not self.complete:
            return None
        return self.uci_wins / len(SCREEN_DATASETS) + self.shift_wins / len(SHIFT_ANGLES)

    @property
    def nlpd_gap(self) -> Optional[float]:
        """Mean over the screened sets of (NLPD − NN+TS's NLPD); None unless every set is there."""
        if len(self.uci) < len(SCREEN_DATASETS):
            return None
        return float(np.mean([u["nlpd"] - u["nlpd_ts"] for u in self.uci.values()]))


def _metric(record: Dict, far: str, name: str, rotated: bool = False):
    """``name`` of a record with the far field on, or of the same fit with it switched off (None when not recorded)."""
    if far == "on":
        return record.get(name)
    off = record.get("far_field_off") if rotated else (record.get("extra") or {}).get("far_field_off")
    return (off or {}).get(name)


def _at_angle(record: Dict, values, angle: int):
    angles = list(record.get("angles") or [])
    return values[angles.index(angle)] if values is not None and angle in angles and len(values) == len(angles) else None


def _angles_above(record: Dict, others: Sequence[Dict]) -> int:
    """The angles of :data:`SHIFT_ANGLES` at which ``record``'s test log-likelihood is above every one of ``others``'."""
    at = lambda r, a: _at_angle(r, r.get("log_likelihood"), a)  # noqa: E731
    return int(sum(at(record, a) > max(at(o, a) for o in others) for a in SHIFT_ANGLES))


def _shift_mean(record: Optional[Dict]) -> Optional[float]:
    """A rotated-MNIST record's test log-likelihood averaged over :data:`SHIFT_ANGLES` (None without all of them)."""
    values = [_at_angle(record, record.get("log_likelihood"), a) for a in SHIFT_ANGLES] if record else [None]
    return None if any(v is None for v in values) else float(np.mean(values))


def evaluate(candidate: str, uci: Dict, rotated: Dict[str, Dict], controls: Dict) -> Evaluation:
    """The candidate's screened numbers from the records (``uci``: :func:`load_uci`; ``rotated``: recipe ->
    :func:`load_rotated` of its folder; ``controls``: :func:`load_rotated` of the controls)."""
    recipe, far = candidate.split("/")
    method = UCI_METHOD[recipe]
    result = Evaluation(candidate)
    for dataset in SCREEN_DATASETS:
        rows = []
        for split in SCREEN_SPLITS:
            cells = {m: uci.get((m, dataset, split)) for m in (method, "nn", "nn_ts")}
            values = {
                "rmse": cells[method] and _metric(cells[method], far, "rmse"),
                "nlpd": cells[method] and _metric(cells[method], far, "nlpd"),
                "rmse_nn": cells["nn"] and cells["nn"].get("rmse"),
                "nlpd_ts": cells["nn_ts"] and cells["nn_ts"].get("nlpd"),
            }
            lacking = [m for m in (method, "nn", "nn_ts") if cells[m] is None]
            if not lacking and any(v is None for v in values.values()):
                lacking = [f"{method} far_field_off"]
            result.missing += [f"UCI {dataset} split {split}: {m}" for m in lacking]
            if not lacking:
                rows.append(values)
        if len(rows) == len(SCREEN_SPLITS):
            column = {k: np.array([r[k] for r in rows], dtype=np.float64) for k in rows[0]}
            result.uci[dataset] = {
                "rmse": float(column["rmse"].mean()), "rmse_nn": float(column["rmse_nn"].mean()),
                "rmse_nn_se": standard_error(column["rmse_nn"], single=0.0),
                "nlpd": float(column["nlpd"].mean()), "nlpd_ts": float(column["nlpd_ts"].mean()),
                "nlpd_gap_per_split": (column["nlpd"] - column["nlpd_ts"]).tolist(),
            }
    own = rotated.get(recipe, {})
    records = {}
    for seed in SCREEN_SEEDS:
        found = {"candidate": own.get((ROTATED_MODEL, seed)), **{m: controls.get((m, seed)) for m in CONTROLS}}
        lacking = [m for m, r in found.items() if r is None]
        result.missing += [f"rotated MNIST seed {seed}: {f'{ROTATED_MODEL} ({recipe})' if m == 'candidate' else m}" for m in lacking]
        if not lacking:
            records[seed] = found
    if len(records) == len(SCREEN_SEEDS):
        def series(seed, who, name, angle):
            record = records[seed][who]
            values = _metric(record, far, name, rotated=True) if who == "candidate" else record.get(name)
            return _at_angle(record, values, angle)

        table = {(seed, who, name, angle): series(seed, who, name, angle)
                 for seed in records for who in ("candidate", *CONTROLS) for name in ("log_likelihood", "accuracy")
                 for angle in (0, *SHIFT_ANGLES)}
        absent = sorted({f"rotated MNIST seed {s}: {w} {n} at {a}°" for (s, w, n, a), v in table.items()
                         if v is None and (n == "log_likelihood" and a > 0 and w != "nn" or n == "accuracy" and a == 0 and w in ("candidate", "nn"))})
        result.missing += absent
        if not absent:
            mean = lambda who, name, angle: float(np.mean([table[(s, who, name, angle)] for s in records]))  # noqa: E731
            result.accuracy_0, result.accuracy_0_nn = mean("candidate", "accuracy", 0), mean("nn", "accuracy", 0)
            result.shift = {a: {"log_likelihood": mean("candidate", "log_likelihood", a),
                                "control": max(mean("nn_ts_ft", "log_likelihood", a), mean("nn_dropout_ft", "log_likelihood", a))}
                            for a in SHIFT_ANGLES}
            result.per_seed_shift = {s: float(np.mean([table[(s, "candidate", "log_likelihood", a)] for a in SHIFT_ANGLES])) for s in records}
    return result


@dataclass
class Decision:
    """The rule applied: the ranking (complete, admissible candidates, best first), the winner, the finalist recipes,
    and why the others are not ranked; ``winner`` is None while the choice is not decidable."""

    evaluations: List[Evaluation]
    ranking: List[str]
    incomplete: List[str]
    not_admissible: List[str]
    missing_cells: int
    waiting_cells: int  # the missing cells of candidates that could still be admissible: they hold up the choice
    decidable: bool
    winner: Optional[str]
    finalists: List[str]


def decide(evaluations: Sequence[Evaluation], closed: bool = False) -> Decision:
    """:data:`RULE` as :data:`READING` and its :data:`AMENDMENT` read it."""
    order = {e.candidate: i for i, e in enumerate(evaluations)}
    incomplete = [e.candidate for e in evaluations if e.admissible is None]
    not_admissible = [e.candidate for e in evaluations if e.admissible is False]
    ranked = sorted((e for e in evaluations if e.admissible), key=lambda e: (-e.score, e.nlpd_gap, order[e.candidate]))
    ranking = [e.candidate for e in ranked]
    missing = len({cell for e in evaluations for cell in e.missing})
    waiting = len({cell for e in evaluations if e.admissible is None for cell in e.missing})
    decidable = bool(ranking) and (not incomplete or closed)
    finalists = ["paper"] if decidable else []
    for name in ranking if decidable else []:
        recipe = name.split("/")[0]
        if recipe not in finalists and len(finalists) < 3:
            finalists.append(recipe)
    return Decision(list(evaluations), ranking, incomplete, not_admissible, missing, waiting, decidable,
                    ranking[0] if decidable else None, finalists)


@dataclass
class FollowUp:
    """:data:`FOLLOW_UP` applied: per seed, the shifted angles where the paper recipe's ADGP beats both fine-tuned
    controls (of 10) and whether its 0° accuracy is within 1 point of NN's; ``verdict`` is "met", "not met" or
    "waiting" (a seed's records are missing)."""

    per_seed: Dict[int, Optional[Tuple[int, bool]]]
    verdict: str


def follow_up(rotated: Dict[str, Dict], controls: Dict) -> FollowUp:
    per_seed: Dict[int, Optional[Tuple[int, bool]]] = {}
    for seed in FOLLOW_UP_SEEDS:
        records = {"candidate": rotated.get("paper", {}).get((ROTATED_MODEL, seed)), **{m: controls.get((m, seed)) for m in CONTROLS}}
        if any(r is None for r in records.values()):
            per_seed[seed] = None
            continue
        wins = _angles_above(records["candidate"], [records["nn_ts_ft"], records["nn_dropout_ft"]])
        accuracy = _at_angle(records["candidate"], records["candidate"].get("accuracy"), 0)
        accurate = accuracy >= _at_angle(records["nn"], records["nn"].get("accuracy"), 0) - ACCURACY_MARGIN
        per_seed[seed] = (int(wins), bool(accurate))
    if any(v is None for v in per_seed.values()):
        verdict = "waiting"
    else:
        verdict = "met" if all(w == len(SHIFT_ANGLES) and ok for w, ok in per_seed.values()) else "not met"
    return FollowUp(per_seed, verdict)


def follow_up_markdown(result: FollowUp) -> str:
    cells = "; ".join(f"seed {s}: " + ("missing" if v is None else f"{v[0]} of {len(SHIFT_ANGLES)} angles, 0° accuracy {'within' if v[1] else 'more than'} 1 point of NN's")
                      for s, v in result.per_seed.items())
    outcome = {"met": "**met: `by_likelihood` should become the default.**", "not met": "**not met: the default stays the rule's choice.**",
               "waiting": "**not yet decidable: records missing.**"}[result.verdict]
    return "\n".join([FOLLOW_UP, "", f"Follow-up: {outcome} ({cells}.)"])


def load_all(options) -> Tuple[Dict, Dict[str, Dict], Dict]:
    """The screen's records: UCI (:func:`load_uci`), recipe -> its rotated-MNIST records, and the controls'."""
    rotated = {recipe: load_rotated(Path(options.rotated_root) / recipe / "records.jsonl") for recipe in RECIPES}
    return load_uci(Path(options.uci_out) / "records.jsonl"), rotated, load_rotated(Path(options.controls))


def evaluate_all(options, loaded=None) -> List[Evaluation]:
    uci, rotated, controls = loaded or load_all(options)
    return [evaluate(candidate, uci, rotated, controls) for candidate in CANDIDATES]


# ------------------------------------------------------------------------------------------------ the page


def _number(value, form="{:.3f}") -> str:
    return "missing" if value is None else form.format(value)


def markdown(decision: Decision, sources: str, shift: str = "", later: str = "") -> str:
    out = ["```text", RULE, "```", "", READING, "", AMENDMENT, ""]
    if decision.winner is not None:
        out += [f"**Chosen recipe: {decision.winner}** (finalists for the full-size runs: {', '.join(decision.finalists)})."]
    elif decision.waiting_cells:
        out += [f"**Chosen recipe: not yet decidable: {decision.missing_cells} cells missing, {decision.waiting_cells} of them "
                "from candidates that could still be admissible.**"]
    else:
        out += ["**Chosen recipe: none: no candidate is admissible.**"]
    if later:
        out += ["", later]
    out += ["", f"Records read: {sources}.", ""]
    out += ["**Scores** (UCI: sets where the candidate's mean NLPD < NN+TS's, of 5; rotated MNIST: angles 45°–180° where "
            "its mean test log-likelihood > max(fine-tuned NN+TS, fine-tuned MC dropout), of 10; ΔNLPD: mean over the sets "
            "of NLPD − NN+TS's, standardised; rank among complete admissible candidates)", "",
            "| candidate | UCI NLPD < NN+TS | angles LL > controls | score | ΔNLPD | admissible | rank | missing cells |",
            "|---|---|---|---|---|---|---|---|"]
    for e in decision.evaluations:
        rank = decision.ranking.index(e.candidate) + 1 if e.candidate in decision.ranking else (
            "not admissible" if e.admissible is False else "incomplete")
        out.append(
            f"| {e.candidate} | {e.uci_wins if len(e.uci) == len(SCREEN_DATASETS) else 'missing'} | "
            f"{e.shift_wins if e.shift else 'missing'} | {_number(e.score)} | {_number(e.nlpd_gap, '{:+.3f}')} | "
            f"{'—' if e.admissible is None else ('yes' if e.admissible else 'no')} | {rank} | {len(e.missing)} |")
    out += ["", "**Admissibility** (standardised RMSE, candidate / NN mean ± NN's SE over splits "
            f"{', '.join(map(str, SCREEN_SPLITS))}, ✓ within; rotated-MNIST 0° accuracy, candidate / NN, seeds "
            f"{', '.join(map(str, SCREEN_SEEDS))}, ✓ within 1 point)", "",
            "| candidate | " + " | ".join(SCREEN_DATASETS) + " | RMSE misses | 0° accuracy |",
            "|---|" + "---|" * (len(SCREEN_DATASETS) + 2)]
    for e in decision.evaluations:
        cells = []
        for d in SCREEN_DATASETS:
            u = e.uci.get(d)
            cells.append("missing" if u is None else
                         f"{u['rmse']:.3f} / {u['rmse_nn']:.3f} ± {u['rmse_nn_se']:.3f} {'✓' if d not in e.rmse_misses else '✗'}")
        misses = str(len(e.rmse_misses)) if len(e.uci) == len(SCREEN_DATASETS) else "missing"
        accuracy = "missing" if e.accuracy_0 is None else (
            f"{e.accuracy_0:.4f} / {e.accuracy_0_nn:.4f} {'✓' if e.accuracy_0 >= e.accuracy_0_nn - ACCURACY_MARGIN else '✗'}")
        out.append(f"| {e.candidate} | " + " | ".join(cells) + f" | {misses} | {accuracy} |")
    if shift:
        out += ["", f"**Rotated MNIST, test log-likelihood per angle** (seeds {', '.join(map(str, SCREEN_SEEDS))}; every control, "
                "those given the extra epochs (`*_ft`) and those without, and the deep ensemble, beside each recipe's "
                "fine-tuned ADGP with the far field on; read, not scored)", "", shift]
    lacking = sorted({cell for e in decision.evaluations for cell in e.missing})
    if lacking:
        groups: Dict[str, int] = {}
        for cell in lacking:
            head = cell.split(":")[0]
            groups[head] = groups.get(head, 0) + 1
        out += ["", f"**Missing cells** ({len(lacking)}; a cell is one record, or a far-field-off score a record lacks): "
                + "; ".join(f"{head} ({count})" for head, count in sorted(groups.items())) + "."]
    return "\n".join(out) + "\n"


#: The rotated-MNIST models beside the candidates in the per-angle table: the network controls with and without the
#: extra epochs, and the deep ensemble.
SHIFT_TABLE_CONTROLS = ("nn", "nn_ts", "nn_dropout", "nn_ts_ft", "nn_dropout_ft", "ensemble")


def shift_table(rotated: Dict[str, Dict], controls: Dict) -> str:
    """Test log-likelihood per angle on the screened seeds (mean over them): every control of
    :data:`SHIFT_TABLE_CONTROLS` and every recipe's ``adgp_ft`` (far field on), with the mean over 45°–180°; rows
    lacking a seed are left out. Read only, never scored: the rule's bar is :data:`CONTROLS`."""
    from experiments.rotated_mnist import LABELS

    rows = [(LABELS[m], [controls.get((m, s)) for s in SCREEN_SEEDS]) for m in SHIFT_TABLE_CONTROLS]
    rows += [(f"ADGP + conv fine-tuned, `{recipe}` recipe", [rotated.get(recipe, {}).get((ROTATED_MODEL, s)) for s in SCREEN_SEEDS])
             for recipe in RECIPES]
    angles = list(range(0, 181, 15))
    lines = ["| model | " + " | ".join(f"{a}°" for a in angles) + " | mean 45°–180° |", "|---|" + "---|" * (len(angles) + 1)]
    for label, records in rows:
        if any(r is None for r in records):
            continue
        values = [[_at_angle(r, r.get("log_likelihood"), a) for r in records] for a in angles]
        if any(v is None for column in values for v in column):
            continue
        means = [float(np.mean(column)) for column in values]
        shifted = float(np.mean([m for a, m in zip(angles, means) if a in SHIFT_ANGLES]))
        lines.append(f"| {label} | " + " | ".join(f"{m:.2f}" for m in means) + f" | {shifted:.3f} |")
    return "\n".join(lines)


def figure(decision: Decision, controls: Dict, path: Path) -> None:
    """In-distribution NLPD (UCI, mean over the screened sets of NLPD − NN+TS's; bars: range over splits) against the
    rotated-MNIST test log-likelihood averaged over 45°–180° (bars: range over seeds), one point per candidate that
    has both; the fine-tuned controls as horizontal lines, NN+TS at x = 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.axvline(0.0, color="grey", lw=0.8, ls=":", label="NN+TS (UCI)")
    for model, style in (("nn_ts_ft", "--"), ("nn_dropout_ft", "-.")):
        means = [m for m in (_shift_mean(controls.get((model, seed))) for seed in SCREEN_SEEDS) if m is not None]
        if len(means) == len(SCREEN_SEEDS):
            ax.axhline(float(np.mean(means)), color="grey", lw=0.8, ls=style, label=f"{model} (rotated MNIST)")
    plotted = 0
    for index, e in enumerate(decision.evaluations):
        if e.nlpd_gap is None or not e.per_seed_shift:
            continue
        splits = np.mean([u["nlpd_gap_per_split"] for u in e.uci.values()], axis=0)
        seeds = np.array(list(e.per_seed_shift.values()))
        x, y = e.nlpd_gap, float(seeds.mean())
        ax.errorbar(x, y, xerr=[[x - splits.min()], [splits.max() - x]], yerr=[[y - seeds.min()], [seeds.max() - y]],
                    fmt="o" if e.candidate.endswith("/on") else "s", color=f"C{index // 2}", capsize=3,
                    mfc=None if e.candidate.endswith("/on") else "none", label=e.candidate)
        plotted += 1
    found = {e.candidate: e for e in decision.evaluations}
    regression, classification = found.get("validation/on"), found.get("paper/on")
    if regression and classification and regression.nlpd_gap is not None and classification.per_seed_shift:
        # the follow-up rule's candidate (FOLLOW_UP): validation's UCI cells with paper's rotated-MNIST cells
        ax.plot(regression.nlpd_gap, float(np.mean(list(classification.per_seed_shift.values()))), "*", ms=14, color="k",
                label="by_likelihood (post hoc: validation's UCI, paper's rotated MNIST)")
    if not plotted:
        ax.text(0.5, 0.5, f"no candidate has all its screened cells yet\n({decision.missing_cells} cells missing)",
                ha="center", va="center", transform=ax.transAxes, fontsize=9)
    _save(fig, ax, path, "UCI: mean NLPD − NN+TS's over the 5 screened sets (lower is better)",
          "rotated MNIST: test log-likelihood, mean over 45°–180°",
          f"Stage-2 recipes: {plotted} of {len(decision.evaluations)} candidates plotted")


def _save(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    """Label, legend and write one of the page's figures."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ the full-size runs

#: Issue 36's full size for the finalists: UCI nine sets × five published splits (protein three) under the screen's
#: budget, rotated MNIST three seeds with the conv layers fine-tuned (``adgp_ft``) and frozen (``adgp``).
FULL_SIZE_DATASETS = tuple(UCI_DATASETS)  # the nine shared UCI sets
FULL_SIZE_SPLITS = {"protein-tertiary-structure": 3}  # every other set: 5
FULL_SIZE_SEEDS = (0, 1, 2)
FULL_SIZE_MODELS = (("adgp_ft", "fine-tuned"), ("adgp", "frozen"))
#: The controls each rotated model is held against: the same conv-layer training, i.e. the controls given the extra
#: epochs for the fine-tuned ADGP and those without them for the frozen one.
MATCHED_CONTROLS = {"adgp_ft": ("nn_ts_ft", "nn_dropout_ft"), "adgp": ("nn_ts", "nn_dropout")}


def _full_size_splits(dataset: str) -> int:
    """The published splits a finalist runs on ``dataset``: :data:`FULL_SIZE_SPLITS`, else five."""
    return FULL_SIZE_SPLITS.get(dataset, 5)


@dataclass
class FullSize:
    """One finalist recipe at full size (far field on): per UCI set, the splits it has and, over those, its mean NLPD
    minus NN+TS's and whether its mean RMSE is within one SE of NN's; per rotated model and seed, the test
    log-likelihood averaged over :data:`SHIFT_ANGLES`."""

    recipe: str
    uci: Dict[str, Dict] = field(default_factory=dict)  # dataset -> splits, nlpd_gap, rmse_within, per_split_gap
    rotated: Dict[str, Dict[int, float]] = field(default_factory=dict)  # model -> seed -> mean LL over SHIFT_ANGLES
    shift_wins: Dict[str, Dict[int, int]] = field(default_factory=dict)  # model -> seed -> angles above its matched controls

    @property
    def uci_cells(self) -> int:
        return sum(len(u["splits"]) for u in self.uci.values())

    def complete_sets(self) -> List[str]:
        return [d for d, u in self.uci.items() if len(u["splits"]) == _full_size_splits(d)]


def full_size(recipe: str, uci: Dict, rotated: Dict[Tuple[str, int], Dict], controls: Optional[Dict] = None) -> FullSize:
    """``recipe``'s full-size records: its UCI method's cells on :data:`FULL_SIZE_DATASETS` (paired with NN and
    NN+TS on the same splits) and its records folder's rotated-MNIST models on :data:`FULL_SIZE_SEEDS`; with the
    controls' records, per model and seed the angles of :data:`SHIFT_ANGLES` where its test log-likelihood is above
    both of its :data:`MATCHED_CONTROLS` of the same seed."""
    method, result = UCI_METHOD[recipe], FullSize(recipe)
    for dataset in FULL_SIZE_DATASETS:
        splits = [k for k in range(_full_size_splits(dataset))
                  if all((m, dataset, k) in uci for m in (method, "nn", "nn_ts"))]
        if not splits:
            continue
        pick = lambda m, name: np.array([uci[(m, dataset, k)][name] for k in splits])  # noqa: E731
        nn_rmse = pick("nn", "rmse")
        gaps = pick(method, "nlpd") - pick("nn_ts", "nlpd")
        result.uci[dataset] = {"splits": splits, "nlpd_gap": float(gaps.mean()), "per_split_gap": dict(zip(splits, gaps.tolist())),
                               "rmse_within": bool(pick(method, "rmse").mean() <= nn_rmse.mean() + standard_error(nn_rmse, single=0.0))}
    for model, _ in FULL_SIZE_MODELS:
        for seed in FULL_SIZE_SEEDS:
            record = rotated.get((model, seed))
            shifted = _shift_mean(record)
            if shifted is None:
                continue
            result.rotated.setdefault(model, {})[seed] = shifted
            matched = [(controls or {}).get((c, seed)) for c in MATCHED_CONTROLS[model]]
            if all(m is not None for m in matched):
                result.shift_wins.setdefault(model, {})[seed] = _angles_above(record, matched)
    return result


def full_size_markdown(results: Sequence[FullSize]) -> str:
    """The finalists' full-size table; every count says of how many, and what is missing is named."""
    expected = sum(map(_full_size_splits, FULL_SIZE_DATASETS))
    shared = [d for d in FULL_SIZE_DATASETS if all(d in r.complete_sets() for r in results)]  # a like-for-like mean
    out = [f"**The finalists at full size** (far field on; UCI: {len(FULL_SIZE_DATASETS)} sets × five published splits, "
           f"protein three, {expected} cells; counts over the sets whose splits are all recorded; rotated MNIST: test "
           f"log-likelihood averaged over 45°–180°, per seed {', '.join(map(str, FULL_SIZE_SEEDS))}; in brackets the "
           f"angles of {len(SHIFT_ANGLES)} from 45° where it is above both NN+TS and MC dropout trained like its conv "
           f"layers: with the extra epochs for fine-tuned, without them for frozen)", "",
           "| recipe | UCI cells | complete sets | NLPD < NN+TS | RMSE within 1 SE of NN | mean NLPD − NN+TS's | "
           f"the same mean on the {len(shared)} set{'' if len(shared) == 1 else 's'} complete for every finalist | "
           + " | ".join(f"rotated, {label}" for _, label in FULL_SIZE_MODELS) + " |",
           "|---|---|---|---|---|---|---|" + "---|" * len(FULL_SIZE_MODELS)]
    for r in results:
        done = r.complete_sets()
        wins = sum(r.uci[d]["nlpd_gap"] < 0 for d in done)
        within = sum(r.uci[d]["rmse_within"] for d in done)
        gap = f"{np.mean([r.uci[d]['nlpd_gap'] for d in done]):+.3f}" if done else "—"
        shared_gap = f"{np.mean([r.uci[d]['nlpd_gap'] for d in shared]):+.3f}" if shared else "—"
        seeds = []
        for model, _ in FULL_SIZE_MODELS:
            got, above = r.rotated.get(model, {}), r.shift_wins.get(model, {})
            seeds.append(", ".join((f"{got[s]:.3f}" + (f" ({above[s]})" if s in above else "")) if s in got else "missing"
                                   for s in FULL_SIZE_SEEDS))
        out.append(f"| {r.recipe} | {r.uci_cells} of {expected} | {len(done)} of {len(FULL_SIZE_DATASETS)} | "
                   f"{wins} of {len(done)} | {within} of {len(done)} | {gap} | {shared_gap} | " + " | ".join(seeds) + " |")
    return "\n".join(out) + "\n"


def full_size_figure(results: Sequence[FullSize], path: Path) -> None:
    """One point per finalist with at least one complete UCI set and one fine-tuned rotated seed: the mean over its
    complete sets of NLPD − NN+TS's (bars: range over the splits of the per-split mean over those sets) against the
    fine-tuned ADGP's test log-likelihood averaged over 45°–180° (bars: range over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.axvline(0.0, color="grey", lw=0.8, ls=":", label="NN+TS (UCI)")
    plotted = []
    for index, r in enumerate(results):
        done, seeds = r.complete_sets(), np.array(list(r.rotated.get("adgp_ft", {}).values()))
        if not done or not seeds.size:
            continue
        per_split = [np.mean([r.uci[d]["per_split_gap"][k] for d in done if k in r.uci[d]["per_split_gap"]])
                     for k in range(max(map(_full_size_splits, done))) if any(k in r.uci[d]["per_split_gap"] for d in done)]
        x, y = float(np.mean([r.uci[d]["nlpd_gap"] for d in done])), float(seeds.mean())
        ax.errorbar(x, y, xerr=[[x - min(per_split)], [max(per_split) - x]], yerr=[[y - seeds.min()], [seeds.max() - y]],
                    fmt="o", color=f"C{index}", capsize=3,
                    label=f"{r.recipe} ({len(done)} of {len(FULL_SIZE_DATASETS)} sets, {seeds.size} of {len(FULL_SIZE_SEEDS)} seeds)")
        plotted.append(r.recipe)
    if not plotted:
        ax.text(0.5, 0.5, "no finalist has a complete UCI set and a rotated seed yet", ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
    _save(fig, ax, path, "UCI: mean NLPD − NN+TS's over the complete sets (lower is better)",
          "rotated MNIST, fine-tuned: test LL, mean 45°–180°",
          f"Stage-2 finalists at full size: {len(plotted)} of {len(results)} plotted")


def report(records, options) -> None:
    """The page's generated block and the figure, from the screen's records alone."""
    from experiments.harness.store import portable_command

    loaded = load_all(options)
    _, rotated, controls = loaded
    decision = decide(evaluate_all(options, loaded), closed=options.screen_closed)
    shift = shift_table(rotated, controls)
    later = follow_up_markdown(follow_up(rotated, controls))
    finalists = [full_size(recipe, loaded[0], rotated.get(recipe, {}), controls) for recipe in decision.finalists]
    if finalists:
        later += "\n" + full_size_markdown(finalists)
        full_size_figure(finalists, Path(options.figure).with_name(Path(options.figure).stem + "_full_size.png"))
    sources = ", ".join(f"`{p}`" for p in (Path(options.uci_out) / "records.jsonl", Path(options.rotated_root) / "<recipe>/records.jsonl",
                                          Path(options.controls)))
    doc = Path(options.doc) if options.doc else page_path(options)
    command = portable_command("experiments", ["recipes"] + (["--screen-closed"] if options.screen_closed else []))
    write_block(doc, "recipes", markdown(decision, sources, shift, later), command, create=True)
    figure(decision, controls, Path(options.figure))
    if not options.quiet:
        print(markdown(decision, sources, shift, later))
