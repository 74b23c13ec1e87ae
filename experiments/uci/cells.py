"""What the UCI study runs: datasets × methods × splits under one protocol, as cells of the harness.

A cell is (dataset, method, split): :func:`cells` lists them for the command line's options (split by split, datasets
small to large, all methods per split), :func:`run_cell` fits and scores one method on one split through
:func:`experiments.methods.run_method` with the run's saved networks, and :func:`rescore` amends existing records from
those networks (``--rescore``). The run's :func:`PROTOCOL` is :func:`experiments.methods.budget_protocol` of its budget
and splits: the store stamps it on every record, and a record counts for as long as its method's version is unchanged
(the harness's carry-over rule); :func:`upgrade` names the protocol of a record made before the study declared one.
The methods and their versions are :mod:`experiments.methods`'.
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

import numpy as np

from activated_dgp.data import EMBEDDED_DATASET, load_regression_dataset, uci_folder_name
from experiments.harness.artifacts import ArtifactCache, atomic_write_text
from experiments.harness.protocol import Protocol
from experiments.harness.study import records_path
from experiments.harness.store import record_files
import experiments.methods as methods
from experiments.methods.data import DATASET_ORDER, canonical_datasets, prepare_split, use_fixed
from experiments.methods.versions import RELU_METHODS as RELU_PROTOCOL_METHODS, SHIFTED_VALIDATION_METHODS, record_settings

KEY = ("dataset", "method", "split")
METRICS = ("rmse", "nlpd", "rmse_original", "nlpd_original")
CALIBRATION_METRICS = ("coverage_90", "calibration_error")
DEFAULT_METHODS = ("nn", "dropout", "ensemble", "nn_ts", "dgp", "adgp", "plain", "plain_adgp")  # "all"
#: the linearised Laplace rows, run when named (``--method lla_last_layer,…``); tabled when recorded
LLA_METHODS = ("lla_last_layer", "lla_exact", "lla_neuralef", "lla_neuralef_evidence", "relu_lla_kron")
#: the stage-2 recipe candidates (experiments/recipes/ reads them), run when named; tabled when recorded
RECIPE_METHODS = ("adgp_paper", "adgp_elbo", "adgp_floor")
ENSEMBLE_METHODS = ("adgp_ensemble",)  # run when named
#: the network most users have (a plain ReLU MLP), its temperature scaling and its conversions; run when named
RELU_METHODS = RELU_PROTOCOL_METHODS
#: baselines trained as their papers train them, run when named: the deep ensemble on the Gaussian NLL
PAPER_BASELINES = ("ensemble_nll",)
METHOD_ORDER = DEFAULT_METHODS + PAPER_BASELINES + LLA_METHODS + RECIPE_METHODS + ENSEMBLE_METHODS + RELU_METHODS + SHIFTED_VALIDATION_METHODS
#: The split protocols of ``--splits-kind`` (activated_dgp.data.uci.SPLIT_PROTOCOLS): "published", the fixed 90/10
#: splits (random ones where a set has none); "gap", one split per input feature (the middle third held out).
SPLITS_KINDS = ("published", "gap")
DEFAULT_OUT = Path("runs") / "uci"  # a new run never meets the committed records of another setting
GAP_OUT = Path("docs") / "results" / "uci_gap"  # --splits-kind gap's default --out (page: GAP_OUT.md)
#: The gap protocol's default methods: the baselines (the ADGP ensemble and the LLA rows run when named).
GAP_METHODS = ("nn", "dropout", "ensemble", "nn_ts", "dgp", "adgp")
#: The gap splits run by default on the two largest sets, fixed by a rule before any record: their first four
#: features' splits (naval has 16 features, protein 9 and 45,730 rows). ``--max-splits naval=16`` runs them all.
GAP_DEFAULT_MAX_SPLITS = {"naval-propulsion-plant": 4, "protein-tertiary-structure": 4}


def _split_list(values: Optional[Sequence[str]], everything: Sequence[str]) -> List[str]:
    items = [item.strip() for value in (values or []) for item in value.split(",") if item.strip()]
    if any(item.lower() == "all" for item in items):
        return list(everything)
    return items


def add_options(parser) -> None:
    """The benchmark's options (the harness adds --data-dir, --out, --artifacts, --seed, --report-only, --quiet)."""
    parser.set_defaults(out=DEFAULT_OUT)
    parser.add_argument("--splits-kind", choices=SPLITS_KINDS, default="published", action=_SplitsKind,
                        help="published: the fixed 90/10 splits (default); gap: one split per input feature, the middle third "
                             f"of the rows sorted by it held out (default --out {GAP_OUT.as_posix()}, page <out>.md; "
                             "naval and protein: their first four splits unless --max-splits says otherwise)")
    parser.add_argument("--dataset", action="append", help="name(s), repeatable or comma list; 'all' = the nine UCI sets; default boston-embedded (published splits only)")
    parser.add_argument("--method", action="append", help=f"method(s) from {', '.join(METHOD_ORDER)}, or 'all' (default: {', '.join(DEFAULT_METHODS)}; gap: {', '.join(GAP_METHODS)})")
    parser.add_argument("--splits", type=int, default=None, help="number of splits per dataset (default 5; gap: every split of the set)")
    parser.add_argument("--first-split", type=int, default=0, metavar="K",
                        help="run splits K..splits-1 only, e.g. to share one dataset's splits between machines (default 0)")
    parser.add_argument("--fixed-splits", action="store_true", help="(the default where the data has them) use the published splits index_train_k/index_test_k")
    parser.add_argument("--random-splits", action="store_true", help="seeded random 90/10 splits even where published splits exist")
    parser.add_argument("--budget", choices=sorted(methods.BUDGETS), default="small", help="iteration budget (experiments/methods/protocol.py BUDGETS); 'converged' stops every fit on a validation part")
    parser.add_argument("--nn-steps", type=int, help="override the budget's gradient steps per network fit")
    parser.add_argument("--dgp-steps", type=int, help="override the budget's ELBO steps")
    parser.add_argument("--mc-samples", type=int, help="override the budget's MC samples at test time")
    parser.add_argument("--max-splits", action="append", default=[], metavar="DATASET=K", help="fewer splits for one dataset, e.g. protein=3")
    parser.add_argument("--doc", default=None, help="Markdown page whose generated block is replaced by the table")
    parser.add_argument("--part", choices=("all", "tables", "analysis"), default="all",
                        help="with --doc: the part of the report the page's block holds (the metric tables, or the claims and the sections after them)")
    parser.add_argument("--as-recorded", action="store_true",
                        help="with --report-only: every record under its method's own version (the version that last changed it when it was made), carried over to no later version")
    parser.add_argument("--only-version", metavar="vK", default=None,
                        help="with --report-only: the records of this protocol version only (after carry-over), e.g. v5's complete tables")
    parser.add_argument("--rescore", action="store_true",
                        help="add the calibration metrics to records of nn, plain (and nn_ts under a converged budget) that lack them, "
                             "from their saved networks (nothing is trained); rewrites records.jsonl: run it while no runner writes there")


class _SplitsKind(argparse.Action):
    """``--splits-kind``: stores the kind; ``gap`` also moves ``--out`` to :data:`GAP_OUT` while it is still the
    default (an ``--out`` given anywhere on the command line wins)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        if values == "gap" and getattr(namespace, "out", None) is DEFAULT_OUT:
            namespace.out = GAP_OUT


def splits_kind(options) -> str:
    """The run's split protocol (:data:`SPLITS_KINDS`); callers that build options by hand get "published"."""
    return getattr(options, "splits_kind", None) or "published"


def PROTOCOL(options) -> Protocol:
    """The run's protocol: its budget's settings on its splits (published or gap), each method's own version
    (:func:`experiments.methods.budget_protocol`). Gap and published records never share a protocol."""
    return methods.budget_protocol(_budget(options), splits_kind(options))


def record_kind(record: Dict) -> Optional[str]:
    """The splits a stamped record was made on ("published" or "gap"); None for an unstamped record."""
    settings = record_settings(record)
    return None if settings is None else settings["splits"]


def _budget(args):
    budget = methods.BUDGETS[args.budget]
    overrides = {name: getattr(args, name) for name in ("nn_steps", "dgp_steps", "mc_samples") if getattr(args, name) is not None}
    if overrides:
        budget = replace(budget, name=f"{budget.name}+custom", **overrides)
    return budget


def _max_splits(entries: Sequence[str]) -> Dict[str, int]:
    limits = {}
    for entry in entries:
        name, _, count = entry.partition("=")
        if not count.isdigit():
            raise ValueError(f"--max-splits wants DATASET=K, got {entry!r}")
        key = EMBEDDED_DATASET if name.strip().lower() == EMBEDDED_DATASET else uci_folder_name(name)
        limits[key] = int(count)
    return limits


def upgrade(record: Dict) -> Dict:
    """A record made before the study declared its :func:`PROTOCOL`, which carries its protocol as a line
    (``[gap:]<budget>:nn…:dgp…:mc…:<stopping>:v<version>``), stamped with the protocol it was made under
    (:func:`experiments.methods.relabel_record`); the carry-over rule then counts it for as long as its method is
    unchanged."""
    return methods.relabel_record(record)


def artifact_cache(options):
    """The run's stage-1 networks: ``<out>/networks`` (or ``--artifacts``); ``--rescore`` only reads them."""
    root = Path(options.artifacts) if options.artifacts else Path(options.out) / "networks"
    return methods.NetworkCache(root, saved_only=options.rescore)


def _check_gap_options(options, names: Sequence[str]) -> None:
    """--splits-kind gap needs UCI sets (no embedded Boston) and their fixed splits (no --random/--fixed-splits)."""
    if not options.dataset:
        raise ValueError("--splits-kind gap needs --dataset (UCI set names or 'all'); the default boston-embedded has no gap splits")
    if EMBEDDED_DATASET in names:
        raise ValueError(f"{EMBEDDED_DATASET!r} has no gap splits; name UCI sets from the data directory")
    if getattr(options, "random_splits", False) or getattr(options, "fixed_splits", False):
        raise ValueError("--random-splits and --fixed-splits are options of the published splits, not of --splits-kind gap")


def split_counts(options, datasets: Sequence[str]) -> Dict[str, int]:
    """The splits each dataset runs: published, ``--splits`` (default 5) or its ``--max-splits``; gap, every split
    of the set, capped by ``--splits`` when given and by ``--max-splits`` (default :data:`GAP_DEFAULT_MAX_SPLITS`)."""
    limits = _max_splits(options.max_splits)
    if splits_kind(options) != "gap":
        splits = 5 if options.splits is None else options.splits
        return {name: min(splits, limits.get(name, splits)) for name in datasets}
    counts = {}
    for name in datasets:
        count = len(load_dataset(name, options.data_dir, "gap").splits)
        cap = limits.get(name, GAP_DEFAULT_MAX_SPLITS.get(name, count))
        counts[name] = min(count, cap, count if options.splits is None else options.splits)
    return counts


def cells(options) -> List[Dict]:
    """Split by split, datasets small to large, all methods per split (those applicable to the dataset:
    :func:`experiments.methods.applicable`): partial results cover every dataset."""
    gap = splits_kind(options) == "gap"
    datasets = canonical_datasets(_split_list(options.dataset, DATASET_ORDER[1:]))
    defaults = GAP_METHODS if gap else DEFAULT_METHODS
    names = _split_list(options.method, defaults) or list(defaults)
    unknown = [m for m in names if m not in methods.METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHOD_ORDER)}")
    if gap:
        _check_gap_options(options, datasets)
    first = options.first_split
    if options.splits is not None or not gap:
        splits = 5 if options.splits is None else options.splits
        if not 0 <= first < splits:
            raise ValueError(f"--first-split {first} is outside the splits 0..{splits - 1} that --splits {splits} runs")
    if options.rescore:
        return []
    counts = split_counts(options, datasets)  # gap: reads every set's split files first (fails early on bad data)
    if gap and options.splits is None and not 0 <= first < max(counts.values()):
        raise ValueError(f"--first-split {first} is outside the gap splits 0..{max(counts.values()) - 1} of "
                         f"{', '.join(datasets)} (per set: {', '.join(f'{d} {k}' for d, k in counts.items())})")
    dims = {name: load_dataset(name, options.data_dir, splits_kind(options)).input_dim for name in datasets}  # fail early on bad data
    return [
        {"dataset": name, "method": method, "split": split}
        for split in range(first, max(counts.values(), default=0))
        for name in datasets
        if split < counts[name]
        for method in names
        if methods.applicable(method, dims[name])
    ]


def load_dataset(name: str, data_dir: Optional[str], splits: str = "published", cache: Optional[ArtifactCache] = None):
    """The data set ``name`` with its ``splits`` (published or gap); read once per run when the run's ``cache`` is
    given (:meth:`experiments.harness.artifacts.ArtifactCache.in_memory`)."""
    if cache is None:
        return load_regression_dataset(name, data_dir, splits)
    return cache.in_memory("dataset", [name, data_dir, splits], lambda: load_regression_dataset(name, data_dir, splits))


def run_cell(cell: Dict, options, context) -> Dict:
    """Fit and score one method on one split (:func:`experiments.methods.run_method`) with the run's networks."""
    dataset = load_dataset(cell["dataset"], options.data_dir, splits_kind(options), context.artifacts)
    data = prepare_split(dataset, cell["split"], options)
    result = methods.run_method(cell["method"], data, _budget(options), context.artifacts)
    context.progress(f"{cell['dataset']} {cell['method']} split {cell['split']}: RMSE {result['rmse']:.3f} NLPD {result['nlpd']:.3f}")
    return {
        **result,
        "num_train": len(data.X_train),
        "num_test": len(data.X_test),
        "input_dim": dataset.input_dim,
        "split_kind": "gap" if splits_kind(options) == "gap" else "fixed" if use_fixed(dataset, options) else "random",
        "seed": options.seed,
    }


def prepare(options, context) -> None:
    """``--rescore``: amend the records from the saved networks before (no) cells run."""
    if options.rescore:
        rescore(options, context.artifacts, context.progress)


def _rescorable(record: Dict) -> bool:
    """A method whose prediction is a deterministic function of its saved stage-1 network."""
    converged = bool(record.get("budget", {}).get("converged"))
    return record["method"] in ("nn", "plain", "relu") or (record["method"] in ("nn_ts", "relu_ts") and converged)


def rescore(options, networks, log=print) -> int:
    """Add the calibration metrics (``CALIBRATION_METRICS``) to the records that lack them, for methods whose
    prediction is a function of the saved network (:func:`_rescorable`): the split is rebuilt as the record
    says, the network read from ``networks`` (a ``saved_only`` :class:`experiments.methods.NetworkCache`: a
    missing one is not retrained, the record is left as it is), and the record is amended only if the recomputed
    RMSE and NLPD equal the recorded ones to 1e-9 — the check that it is the same network. Each records file
    (and shard, :func:`~experiments.harness.store.record_files`) is rewritten atomically; returns the number amended."""
    if not networks.saved_only:
        raise ValueError("rescore reads saved networks only: give it a NetworkCache with saved_only=True")
    amended = 0
    for path in record_files(records_path(options)):  # each shard rewritten in place, so none outgrows its size
        lines, count = _rescored_lines(path, options, networks, log)
        if count:
            atomic_write_text(path, "".join(f"{line}\n" for line in lines))
        amended += count
        log(f"amended {count} records in {path}")
    return amended


def _rescored_lines(path, options, networks, log):
    """(the lines of one records file with the rescorable records amended, the number amended): :func:`rescore`."""
    lines, amended = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from an interrupted write
        if all(m in record for m in CALIBRATION_METRICS) or not _rescorable(record):
            lines.append(line)
            continue
        name = record["dataset"]
        split_options = SimpleNamespace(fixed_splits=record["split_kind"] == "fixed", random_splits=record["split_kind"] == "random", seed=record["seed"])
        data = prepare_split(load_dataset(name, options.data_dir, "gap" if record["split_kind"] == "gap" else "published", networks),
                             record["split"], split_options)
        budget = methods.Budget(**{f.name: record["budget"][f.name] for f in fields(methods.Budget) if f.name in record["budget"]})
        cell = f"{name} {record['method']} split {record['split']}"
        try:
            result = methods.run_method(record["method"], data, budget, networks)
        except methods.NetworkMissing:
            log(f"{cell}: no saved network, left as recorded")
            lines.append(line)
            continue
        if not (np.isclose(result["rmse"], record["rmse"], rtol=1e-9, atol=0) and np.isclose(result["nlpd"], record["nlpd"], rtol=1e-9, atol=1e-12)):
            log(f"{cell}: recomputed RMSE/NLPD {result['rmse']:.6g}/{result['nlpd']:.6g} differ from the record's, left as recorded")
            lines.append(line)
            continue
        record.update({m: result[m] for m in CALIBRATION_METRICS})
        lines.append(json.dumps(record, sort_keys=True))
        amended += 1
        log(f"{cell}: coverage {result['coverage_90']:.3f}, calibration error {result['calibration_error']:.3f}")
    return lines, amended
