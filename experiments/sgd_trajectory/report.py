"""The SGD-trajectory study's page block and figure, from the records alone: the table of test NLL, accuracy and ECE
(in distribution and averaged over the rotations), the verdict per claim of the NeuralEF paper's appendix C.3 by the
rule :data:`RULE`, the spectrum NeuralEF recovered, and the storage of each method; the rotated-MNIST study's ADGP
and deep ensemble are shown beside them for reference (read through the harness, never re-run)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from experiments.harness.blocks import write_block
from experiments.harness.statistics import standard_error
from experiments.harness.study import load_records, newest_protocol, page_path
from experiments.harness.rotation_figures import plot_seed_mean, style_rotation_axis
from experiments.sgd_trajectory.cells import LABELS, METHODS

BLOCK = "sgd_trajectory"
#: metric -> (label, sign: +1 when higher is better)
METRICS = {"nll": ("test NLL", -1), "accuracy": ("accuracy", +1), "ece": ("ECE (15 bins)", -1)}
REFERENCE_MODELS = {"nn": "NN †", "ensemble": "Deep ensemble †", "adgp": "ADGP †"}
RULE = ("Rule (fixed before the records): a paired difference over seeds, d = mean(better-oriented score of SWA + NeuralEF "
        "− that of the other method), with its standard error s; 'better' when d > 2s, 'worse' when d < −2s, else 'on par'. "
        "Scored in distribution (0°) and under shift (the mean over all angles 0°–180°). Claim 1 is reproduced when no "
        "metric is 'worse' than SWAG in either setting; claim 2 when the ECE is 'better' than SWA's in both settings and "
        "the NLL is not 'worse'.")


def _scores(record: Dict) -> Dict[str, np.ndarray]:
    return {"nll": -np.asarray(record["log_likelihood"]), "accuracy": np.asarray(record["accuracy"]), "ece": np.asarray(record["ece"])}


def table_of(records: List[Dict], field: str, names) -> Dict[str, Dict]:
    """method → {"seeds": [...], metric: [seeds, angles]} for the records of each name in ``names`` (field ``field``)."""
    table = {}
    for name in names:
        rows = sorted((r for r in records if r[field] == name), key=lambda r: r["seed"])
        if rows:
            scores = [_scores(r) for r in rows]
            table[name] = {"seeds": [r["seed"] for r in rows], "records": rows, "angles": list(rows[0]["angles"]),
                           **{m: np.array([s[m] for s in scores]) for m in METRICS}}
    return table


def reference_records(folder) -> List[Dict]:
    """The rotated-MNIST study's records (newest protocol) of the reference models, [] when there are none."""
    if folder is None or not (Path(folder) / "records.jsonl").exists():
        return []
    records = load_records("rotated_mnist", folder, protocol=newest_protocol("rotated_mnist", folder))
    return [r for r in records if r["model"] in REFERENCE_MODELS]


def _summary(values: np.ndarray) -> Tuple[float, float]:
    return float(values.mean()), standard_error(values)


def _cell(values: np.ndarray, digits: int = 3) -> str:
    mean, se = _summary(values)
    return f"{mean:.{digits}f}" + ("" if np.isnan(se) else f" ± {se:.{digits}f}")


def _paired(table, method: str, other: str, metric: str, setting: str) -> Optional[Tuple[float, float, str]]:
    """(d, s, verdict) of SWA + NeuralEF against ``other`` on the seeds both have (None when none)."""
    if method not in table or other not in table:
        return None
    a, b = table[method], table[other]
    common = sorted(set(a["seeds"]) & set(b["seeds"]))
    if not common:
        return None
    pick = lambda t: np.array([t[metric][t["seeds"].index(s)] for s in common])  # noqa: E731
    va, vb = pick(a), pick(b)
    reduce = (lambda v: v[:, 0]) if setting == "0°" else (lambda v: v.mean(1))
    d = METRICS[metric][1] * (reduce(va) - reduce(vb))
    mean, se = float(d.mean()), standard_error(d, single=0.0)
    verdict = "better" if mean > 2 * se else ("worse" if mean < -2 * se else "on par")
    return mean, se, verdict


def verdicts(table) -> List[str]:
    lines = []
    for number, (other, claim) in enumerate((("swag", "SWA + NeuralEF is on par with or better than SWAG on NLL, accuracy and ECE"),
                                             ("swa", "SWA + NeuralEF beats SWA, especially in ECE")), 1):
        results = {(m, s): _paired(table, "neuralef", other, m, s) for m in METRICS for s in ("0°", "0°–180°")}
        if any(v is None for v in results.values()):
            lines.append(f"- **Claim {number}** ({claim}): records missing.")
            continue
        if other == "swag":
            held = all(v[2] != "worse" for v in results.values())
        else:
            held = all(results[("ece", s)][2] == "better" and results[("nll", s)][2] != "worse" for s in ("0°", "0°–180°"))
        detail = "; ".join(f"{METRICS[m][0]} {s}: d = {v[0]:+.4f} ± {v[1]:.4f} ({v[2]})" for (m, s), v in results.items())
        seeds = len(set(table["neuralef"]["seeds"]) & set(table[other]["seeds"]))
        lines.append(f"- **Claim {number}** ({claim}): **{'reproduced' if held else 'refuted'}** at this scale "
                     f"({seeds} paired seed{'s' if seeds > 1 else ''}; {detail}).")
    return lines


def plot(table, reference, path: Path) -> Path:
    matplotlib.use("Agg")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for axis, (metric, (label, _)) in zip(axes, METRICS.items()):
        for rows, labels, style in ((table, LABELS, "-"), (reference, REFERENCE_MODELS, "--")):
            for name, values in rows.items():
                plot_seed_mean(axis, values["angles"], values[metric], f"{labels[name]} ({len(values['seeds'])} seeds)", style)
        style_rotation_axis(axis, label)
    axes[0].legend(fontsize=7)
    fig.suptitle("Rotated MNIST: the SGD trajectory's posteriors (mean ± SE over seeds; † the rotated-MNIST study's CNN)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(records: List[Dict], reference: List[Dict], figure: Optional[Path]) -> str:
    if not records:
        return "No records yet."
    table = table_of(records, "method", METHODS)
    refs = table_of(reference, "model", REFERENCE_MODELS)
    first = records[0]
    config = first["config"]
    out = [f"Generated from {len(records)} records ("
           + ", ".join(f"{LABELS[m]}: seeds {v['seeds']}" for m, v in table.items()) + ").", "",
           f"- training digits: {first['train_size']} (source: {first['train_source']}); test digits per angle: "
           f"{first['test_size']} (source: {first['test_source']}); angles {config['angles'][0]}°…{config['angles'][-1]}°",
           f"- configuration: `{ {k: v for k, v in config.items() if k != 'angles'} }`"]
    traj = next((r for r in records if r["method"] == "neuralef"), None)
    if traj is not None:
        out.append(f"- SGD trajectory: {traj['steps']} steps after the MAP fit; {traj['snapshots']} SWAG snapshots (one per "
                   f"epoch, K = {config['max_rank']}); κ_SGD from the logits of **{traj['iterates']} iterates** on every "
                   f"training digit, all {len(traj['eigenvalues'])} classes; {traj['parameters']} network weights")
    if figure is not None:
        out += ["", f"![SGD trajectory]({figure.name})"]
    header = ["method"] + [f"{METRICS[m][0]} {s}" for s in ("0°", "mean 0°–180°") for m in METRICS]
    out += ["", "Mean ± standard error over seeds (NLL and ECE: lower is better). † the rotated-MNIST study's larger CNN "
            "and ADGP (Adam, 40 epochs, 4,500 of the same 5,000 digits), read from its records for reference.", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rows, labels in ((table, LABELS), (refs, REFERENCE_MODELS)):
        for name, values in rows.items():
            cells = [_cell(values[m][:, 0], 4 if m != "nll" else 3) for m in METRICS]
            cells += [_cell(values[m].mean(1), 4 if m != "nll" else 3) for m in METRICS]
            out.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    out += ["", RULE, ""] + verdicts(table)
    if "neuralef" in table:
        rows = table["neuralef"]["records"]
        ratios = np.array([[np.array(l) / np.array(e) for l, e in zip(r["eigenvalues"], r["exact_eigenvalues"])] for r in rows])
        captured = np.array([r["variance_captured"] for r in rows])
        per_pair = ", ".join(f"{v:.2f}" for v in ratios.mean(axis=(0, 1)))
        # the trace of K / N per class, from the learnt eigenvalues and the share of it they sum to
        share = np.array([[e[0] * c / np.sum(l) for l, e, c in zip(r["eigenvalues"], r["exact_eigenvalues"], r["variance_captured"])]
                          for r in rows])
        out += ["", f"NeuralEF's eigenvalues against the dense κ_SGD's (SVD of the centred function values): the ratio "
                f"learnt / exact for j = 1…{ratios.shape[2]}, mean over classes and seeds: {per_pair} (λ_1's smallest "
                f"{ratios[:, :, 0].min():.3f}); the {ratios.shape[2]} learnt eigenvalues sum to {captured.mean():.3f} of "
                f"the kernel's trace (smallest {captured.min():.3f}); the exact λ_1 alone is {share.mean():.2f} of it "
                f"({share.min():.2f}–{share.max():.2f} over classes and seeds)."]
    stored = {m: table[m]["records"][0].get("stored_floats") for m in ("swag", "neuralef") if m in table}
    if len(stored) == 2 and traj is not None:
        dense = traj["iterates"] * first["train_size"] * len(traj["eigenvalues"])
        out += ["", f"- **Claim 3** (the storage of SWA + NeuralEF does not grow with M): **reproduced, by construction**: "
                f"it keeps the SWA weights and the eigenfunction networks, {stored['neuralef']:,} floats whatever M, where "
                f"κ_SGD was built from {dense:,} function values (M = {traj['iterates']}). SWAG keeps P (K + 2) = "
                f"{stored['swag']:,} floats for K = {config['max_rank']} columns (its low rank caps what it keeps, not M). "
                f"At this scale the eigenfunction networks are the larger store: "
                f"{stored['neuralef'] / stored['swag']:.0f} times SWAG's."]
    return "\n".join(out)


def report(records: List[Dict], options) -> None:
    page = page_path(options)
    figure = Path(options.figure) if getattr(options, "figure", None) else page.with_suffix(".png")
    reference = reference_records(getattr(options, "reference", None))
    drawn = None
    if records:
        table = table_of(records, "method", METHODS)
        drawn = plot(table, table_of(reference, "model", REFERENCE_MODELS), figure)
    write_block(page, BLOCK, markdown(records, reference, drawn), options.report_command, create=True)
