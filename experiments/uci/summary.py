"""The UCI records summarised: how a report shows them (:func:`view`: each under the newest protocol version it
counts under), which it reads (one budget, each method at its newest version), and per (dataset, method) the mean,
standard error and quantiles of every metric."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from experiments.harness.statistics import standard_error
from experiments.methods import LABELS, counted_version, protocol_label, record_method_version
from experiments.methods.data import DATASET_ORDER
from experiments.uci.cells import CALIBRATION_METRICS, METHOD_ORDER, METRICS


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


def view(records: Sequence[Dict], as_recorded: bool = False) -> List[Dict]:
    """The stamped records as a report shows them, each with ``shown_version``, the newest protocol version it counts
    under (:func:`experiments.methods.counted_version`; with ``as_recorded``, its method's own version, carried to
    no later one), and ``shown_protocol``, its settings at that version
    (:func:`experiments.methods.protocol_label`); the first record per (shown protocol, dataset, method, split)
    (records of the same cell made under versions that counted the same are one cell). Unstamped records are left
    out."""
    seen, shown = set(), []
    for record in records:
        version = record_method_version(record) if as_recorded else counted_version(record)
        if version is None:
            continue
        label = protocol_label(record, version)
        identity = (label, record["dataset"], record["method"], record["split"])
        if identity not in seen:
            seen.add(identity)
            shown.append({**record, "shown_version": version, "shown_protocol": label})
    return shown


def select_records(everything: Sequence[Dict], where="the records", version: Optional[str] = None) -> List[Dict]:
    """Of the records of :func:`view`, those of one budget: the one with the most records.

    With ``version`` ("v5"), the records shown under that protocol version only, e.g. the complete tables of a
    version while its successor is being run.

    Otherwise, per (dataset, method), the records of the newest protocol version that has any for it: methods the
    current version did not change count under it, and a changed method that has not been rerun yet keeps its older
    records, which :func:`older_versions` names in the report."""
    if not everything:
        raise FileNotFoundError(f"no records in {where}; run the benchmark first")
    heads: Dict[str, int] = {}
    for r in everything:
        head = r["shown_protocol"].rpartition(":")[0]
        heads[head] = heads.get(head, 0) + 1
    head = max(heads, key=heads.get)
    ours = [r for r in everything if r["shown_protocol"].rpartition(":")[0] == head]
    if version is not None:
        chosen = [r for r in ours if f"v{r['shown_version']}" == version]
        if not chosen:
            raise ValueError(f"no records of version {version!r} in {where}")
        return chosen
    newest: Dict[tuple, int] = {}
    for r in ours:
        key = (r["dataset"], r["method"])
        newest[key] = max(newest.get(key, -1), r["shown_version"])
    return [r for r in ours if r["shown_version"] == newest[(r["dataset"], r["method"])]]


def older_versions(records: Sequence[Dict]) -> List[str]:
    """"method (vK): datasets" for every (dataset, method) whose records predate the newest version present."""
    current = max(r["shown_version"] for r in records)
    every = {r["dataset"] for r in records}
    older: Dict[tuple, List[str]] = {}
    for r in records:
        version = r["shown_version"]
        if version < current and r["dataset"] not in older.setdefault((r["method"], version), []):
            older[(r["method"], version)].append(r["dataset"])
    return [f"{LABELS[m]} (v{v}): " + ("every set" if set(d) == every else ", ".join(sorted(d))) for (m, v), d in sorted(older.items())]


def geometric_means(lists: Sequence[Sequence[float]]) -> str:
    """Per layer, the geometric mean over splits of the chosen kernel variances (lists of equal length)."""
    array = np.array([list(v) for v in lists], dtype=np.float64)
    return ", ".join(f"{np.exp(np.mean(np.log(column))):.2g}" for column in array.T)
