"""The UCI records summarised: which records a report reads (one budget, each method at its newest protocol
version), and per (dataset, method) the mean, standard error and quantiles of every metric."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from experiments.harness.statistics import standard_error
from experiments.harness.store import ResultStore
from experiments.methods import LABELS, version_number
from experiments.methods.data import DATASET_ORDER
from experiments.uci.cells import CALIBRATION_METRICS, KEY, METHOD_ORDER, METRICS, upgrade


def summarise(records: Sequence[Dict]) -> List[Dict]:
    """Per (dataset, method): splits, mean and standard error (std/√n, ddof 1) of every metric, and the
    median and 25/75 % quantiles of rmse and nlpd (the error bars of Fig. 7)."""
    groups: Dict[tuple, List[Dict]] = {}
    for record in records:
        groups.setdefault((record["dataset"], record["method"]), []).append(record)
    rows = []
    for (dataset, method), group in groups.items():
        row = {"dataset": dataset, "method": method, "splits": len(group), "num_data": group[0]["num_train"] + group[0]["num_test"], "input_dim": group[0]["input_dim"]}
        for metric in METRICS:
            values = np.array([r[metric] for r in group], dtype=np.float64)
            row[f"{metric}_mean"] = float(values.mean())
            row[f"{metric}_se"] = standard_error(values)
        for metric in ("rmse", "nlpd"):
            values = np.array([r[metric] for r in group])
            row[f"{metric}_q25"], row[f"{metric}_median"], row[f"{metric}_q75"] = (float(q) for q in np.quantile(values, [0.25, 0.5, 0.75]))
        for metric in CALIBRATION_METRICS:  # recorded since 2026-11-23; older records lack them
            values = [r[metric] for r in group if metric in r]
            row[f"{metric}_mean"], row[f"{metric}_splits"] = (float(np.mean(values)) if values else float("nan")), len(values)
        row["seconds_mean"] = float(np.mean([r["seconds"] for r in group]))
        row["budgets"] = sorted({r["budget"]["name"] for r in group})
        rows.append(row)
    order = lambda r: (DATASET_ORDER.index(r["dataset"]) if r["dataset"] in DATASET_ORDER else 99, METHOD_ORDER.index(r["method"]))  # noqa: E731
    return sorted(rows, key=order)


def shared_splits(records: Sequence[Dict], dataset: str, methods: Sequence[str]) -> set:
    """The splits of ``dataset`` that every one of ``methods`` has a record for."""
    splits = [{r["split"] for r in records if r["dataset"] == dataset and r["method"] == m} for m in methods]
    return set.intersection(*splits) if splits else set()


def by_split(records: Sequence[Dict], dataset: str, method: str, field: Optional[str] = None) -> Dict[int, Dict]:
    """``method``'s records on ``dataset`` by split (only those that have ``field``, when given)."""
    return {r["split"]: r for r in records if r["dataset"] == dataset and r["method"] == method and (field is None or field in r)}


def paired(records: Sequence[Dict], dataset: str, methods: Sequence[str]) -> Dict[str, Dict]:
    """:func:`summarise` rows of ``methods`` on ``dataset``, over only the splits that all of them have."""
    common = shared_splits(records, dataset, methods)
    subset = [r for r in records if r["dataset"] == dataset and r["method"] in methods and r["split"] in common]
    return {row["method"]: row for row in summarise(subset)}


def load_records(out: Path, protocol: Optional[str] = None, as_recorded: bool = False) -> List[Dict]:
    """The records in ``out``/records.jsonl of one budget (:func:`select_records`); ``as_recorded``: each under
    the protocol version it was made with (no :func:`upgrade`)."""
    store = ResultStore(Path(out) / "records.jsonl", KEY, upgrade=None if as_recorded else upgrade)
    return select_records(store.records(), protocol, store.path)


def select_records(everything: Sequence[Dict], protocol: Optional[str] = None, where="the records", version: Optional[str] = None) -> List[Dict]:
    """The records of one budget (default: the one with the most records).

    With ``version`` ("v5"), the records of that protocol version only (after carry-over), e.g. the complete tables
    of a version while its successor is being run.

    With ``protocol`` given, exactly the records under that key. Otherwise, per (dataset, method), the records
    of the newest protocol version that has any for it: methods the current version did not change count
    under it (if the records were read through :func:`upgrade`), and a changed method that has not been rerun
    yet keeps its older records, which :func:`older_versions` names in the report."""
    if not everything:
        raise FileNotFoundError(f"no records in {where}; run the benchmark first")
    if protocol is not None:
        records = [r for r in everything if r["protocol"] == protocol]
        if not records:
            raise ValueError(f"no records of protocol {protocol!r} in {where}; it has {sorted({r['protocol'] for r in everything})}")
        return records
    heads: Dict[str, int] = {}
    for r in everything:
        head = r["protocol"].rpartition(":")[0]
        heads[head] = heads.get(head, 0) + 1
    head = max(heads, key=heads.get)
    ours = [r for r in everything if r["protocol"].rpartition(":")[0] == head]
    if version is not None:
        chosen = [r for r in ours if r["protocol"].rpartition(":")[2] == version]
        if not chosen:
            raise ValueError(f"no records of version {version!r} in {where}")
        return chosen
    newest: Dict[tuple, int] = {}
    for r in ours:
        key = (r["dataset"], r["method"])
        newest[key] = max(newest.get(key, -1), version_number(r["protocol"]))
    return [r for r in ours if version_number(r["protocol"]) == newest[(r["dataset"], r["method"])]]


def older_versions(records: Sequence[Dict]) -> List[str]:
    """"method (vK): datasets" for every (dataset, method) whose records predate the newest version present."""
    current = max(version_number(r["protocol"]) for r in records)
    every = {r["dataset"] for r in records}
    older: Dict[tuple, List[str]] = {}
    for r in records:
        version = version_number(r["protocol"])
        if version < current and r["dataset"] not in older.setdefault((r["method"], version), []):
            older[(r["method"], version)].append(r["dataset"])
    return [f"{LABELS[m]} (v{v}): " + ("every set" if set(d) == every else ", ".join(sorted(d))) for (m, v), d in sorted(older.items())]
