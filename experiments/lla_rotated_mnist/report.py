"""The rotated-MNIST LLA study's page block and figure, from the records alone: test NLL and ECE per method in
distribution (0°) and averaged over the rotations, the verdict on the NeuralEF paper's Table 2 claim by the rule
:data:`RULE`, and NLL and ECE against the angle."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from experiments.harness.blocks import write_block
from experiments.harness.statistics import standard_error
from experiments.harness.study import page_path
from experiments.harness.rotation_figures import plot_seed_mean, style_rotation_axis
from experiments.lla_rotated_mnist.cells import LABELS, METHODS, NEURALEF_SIZES

BLOCK = "lla_rotated_mnist"
#: metric -> (label, decimals); lower is better for both
METRICS = {"nll": ("test NLL", 3), "ece": ("ECE (15 bins)", 4)}
BASELINES = ("map", "last_layer", "kron", "diagonal")
RULE = ("Rule (fixed before the records): for each NeuralEF LLA and each baseline, the paired difference over seeds "
        "d = mean(baseline's score − NeuralEF's), with its standard error s; NeuralEF is 'better' when d > 2s, 'worse' "
        "when d < −2s, else 'on par'; scored in distribution (0°) and under shift (the mean over the angles). The paper's "
        "claim (Table 2: LLA with NeuralEF is better calibrated than every baseline, its NLL better than or on par with "
        "theirs) is reproduced for a k when its ECE is 'better' than every baseline's and its NLL never 'worse', in both "
        "settings.")


def table_of(records: List[Dict]) -> Dict[str, Dict]:
    """method → {"seeds": [...], "angles": [...], metric: [seeds, angles]}, for the methods with records."""
    table = {}
    for method in METHODS:
        rows = sorted((r for r in records if r["method"] == method), key=lambda r: r["seed"])
        if rows:
            table[method] = {"seeds": [r["seed"] for r in rows], "angles": list(rows[0]["angles"]),
                             "nll": np.array([-np.asarray(r["log_likelihood"]) for r in rows]),
                             "ece": np.array([np.asarray(r["ece"]) for r in rows])}
    return table


def _cell(values: np.ndarray, digits: int) -> str:
    se = standard_error(values)
    return f"{values.mean():.{digits}f}" + ("" if np.isnan(se) else f" ± {se:.{digits}f}")


def _paired(table, method: str, other: str, metric: str, setting: str) -> Optional[tuple]:
    """(d, s, verdict) of ``method`` against ``other`` on the seeds both have, None when there are none."""
    if method not in table or other not in table:
        return None
    common = sorted(set(table[method]["seeds"]) & set(table[other]["seeds"]))
    if not common:
        return None
    pick = lambda t: np.array([t[metric][t["seeds"].index(s)] for s in common])  # noqa: E731
    reduce = (lambda v: v[:, 0]) if setting == "0°" else (lambda v: v.mean(1))
    d = reduce(pick(table[other])) - reduce(pick(table[method]))
    mean, se = float(d.mean()), standard_error(d, single=0.0)
    return mean, se, "better" if mean > 2 * se else ("worse" if mean < -2 * se else "on par")


def _against_last_layer(table, method: str) -> str:
    """Per seed, whether ``method``'s test NLL averaged over the angles is below the last-layer LLA's."""
    seeds = sorted(set(table[method]["seeds"]) & set(table["last_layer"]["seeds"]))
    mean = lambda m, s: float(table[m]["nll"][table[m]["seeds"].index(s)].mean())  # noqa: E731
    below = [s for s in seeds if mean(method, s) < mean("last_layer", s)]
    return (f"mean test NLL over the angles below the last-layer LLA's in {len(below)} of {len(seeds)} seeds ("
            + ", ".join(f"seed {s}: {mean(method, s):.3f} against {mean('last_layer', s):.3f}" for s in seeds) + ")")


def verdicts(table) -> List[str]:
    lines = []
    baseline_seeds = sorted(set.intersection(*(set(table[o]["seeds"]) for o in BASELINES))) if all(o in table for o in BASELINES) else []
    for k in NEURALEF_SIZES:
        method = f"neuralef_{k}"
        if method not in table:
            lines.append(f"- **{LABELS[method]}**: records missing.")
            continue
        missing = sorted(set(baseline_seeds) - set(table[method]["seeds"]))
        if missing or len(baseline_seeds) < 2:  # the rule's standard error needs every seed the baselines have (two at least)
            lines.append(f"- **{LABELS[method]}**: no verdict yet: seeds {table[method]['seeds']} recorded, {missing or 'two at least'} missing; "
                         + (_against_last_layer(table, method) if "last_layer" in table else "no last-layer LLA record") + ".")
            continue
        results = {(o, m, s): _paired(table, method, o, m, s) for o in BASELINES for m in METRICS for s in ("0°", "0°–180°")}
        held = all(v[2] == "better" if m == "ece" else v[2] != "worse" for (_, m, _), v in results.items())
        worst = [f"{LABELS[o]} {METRICS[m][0]} {s}: d = {v[0]:+.4f} ± {v[1]:.4f} ({v[2]})"
                 for (o, m, s), v in results.items() if (v[2] != "better" if m == "ece" else v[2] == "worse")]
        lines.append(f"- **{LABELS[method]}**: **{'reproduced' if held else 'refuted'}** at this scale"
                     + ("" if held else " (" + "; ".join(worst) + ")") + "; " + _against_last_layer(table, method) + ".")
    return lines


def plot(table, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, (metric, (label, _)) in zip(axes, METRICS.items()):
        for method, values in table.items():
            seeds = len(values["seeds"])
            plot_seed_mean(axis, values["angles"], values[metric], f"{LABELS[method]} ({seeds} seed{'s' if seeds > 1 else ''})")
        style_rotation_axis(axis, label)
    axes[0].legend(fontsize=7)
    fig.suptitle("Rotated MNIST: linearised Laplace approximations of the CNN (mean ± SE over seeds)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(records: List[Dict], figure: Optional[Path]) -> str:
    if not records:
        return "No records yet."
    table = table_of(records)
    first = records[0]
    config = first["config"]
    out = [f"Generated from {len(records)} records (" + ", ".join(f"{LABELS[m]}: seeds {v['seeds']}" for m, v in table.items()) + ").", "",
           f"- training digits: {first['train_size']} (source: {first['train_source']}); test digits per angle: "
           f"{first['test_size']} (source: {first['test_source']}); angles {config['angles'][0]}°…{config['angles'][-1]}°",
           f"- the CNN: {first['parameters']:,} weights; configuration: `{ {k: v for k, v in config.items() if k != 'angles'} }`"]
    if figure is not None:
        out += ["", f"![LLA on rotated MNIST]({figure.name})"]
    header = ["method"] + [f"{METRICS[m][0]} {s}" for s in ("0°", "mean 0°–180°") for m in METRICS] + ["δ (evidence)"]
    out += ["", "Mean ± standard error over seeds (lower is better).", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, values in table.items():
        cells = [_cell(values[m][:, 0], METRICS[m][1]) for m in METRICS] + [_cell(values[m].mean(1), METRICS[m][1]) for m in METRICS]
        deltas = [r["prior_precision"] for r in records if r["method"] == method and "prior_precision" in r]
        cells.append(", ".join(f"{d:.3g}" for d in deltas) if deltas else "—")
        out.append(f"| {LABELS[method]} | " + " | ".join(cells) + " |")
    out += ["", RULE, ""] + verdicts(table)
    return "\n".join(out)


def report(records: List[Dict], options) -> None:
    page = page_path(options)
    figure = Path(options.figure) if getattr(options, "figure", None) else page.with_suffix(".png")
    drawn = plot(table_of(records), figure) if records else None
    write_block(page, BLOCK, markdown(records, drawn), options.report_command, create=True)
