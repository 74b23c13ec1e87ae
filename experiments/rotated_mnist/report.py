"""The rotated-MNIST study's report, from the records alone: the page's generated block (tables per angle, the
stage-2 settings, the checks of the paper's claims and of the far-field, LLA and ensemble rows), its figure, and
``--compare``'s tables of several runs side by side; :data:`REPORT_RUNS` are the pages ``python -m experiments
report`` rewrites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from experiments.harness.blocks import write_block
from experiments.harness.store import ResultStore
from experiments.harness.study import page_path
from experiments.rotated_mnist.config import (ALL_MODELS, KEY, LABELS, LATER_DEFAULTS, LLA_MODELS, METRIC_LABELS, METRICS,
                                              log, newest_protocol, upgrade)

REPO = Path(__file__).resolve().parents[2]
FIGURE = REPO / "docs" / "figures" / "rotated_mnist.png"  # the results page's figure (Ñ = 8); the runner writes it only when named
BLOCK_COMMAND = "python -m experiments rotated_mnist --report-only"  # the marker's command when no report run names the page


def aggregate(records: List[Dict], dataset: str) -> Dict[str, Dict[str, np.ndarray]]:
    """model → metric → [seeds, angles] array."""
    table: Dict[str, Dict[str, np.ndarray]] = {}
    for model in ALL_MODELS:  # only the models that have records: the controls appear once they are run
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        if rows:
            table[model] = {metric: np.array([r[metric] for r in rows]) for metric in METRICS}
            table[model]["seeds"] = np.array([r["seed"] for r in rows])
    return table


def _style_axis(axis, angles, title: str) -> None:
    axis.set_xlabel("rotation (degrees)")
    axis.set_title(title, fontsize=10)
    axis.set_xticks(angles[::2])
    axis.grid(alpha=0.3)


def plot(table, angles, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for axis, metric in zip(axes, METRICS):
        for model, values in table.items():
            mean, std = values[metric].mean(0), values[metric].std(0)
            axis.plot(angles, mean, marker="o", markersize=3, label=f"{LABELS[model]} ({len(values['seeds'])} seeds)")
            axis.fill_between(angles, mean - std, mean + std, alpha=0.2)
        _style_axis(axis, angles, METRIC_LABELS[metric])
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cell(values: np.ndarray, digits: int) -> str:
    return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}" if len(values) > 1 else f"{values.mean():.{digits}f}"


def report_markdown(records: List[Dict], dataset: str, figure: Path) -> str:
    table = aggregate(records, dataset)
    if not table:
        return "No finished records yet.\n"
    first = next(r for r in records if r["dataset"] == dataset)
    angles = first["angles"]
    config = first["config"]
    seeds = ", ".join(f"{LABELS[m]}: seeds {sorted(v['seeds'].tolist())}" for m, v in table.items())
    lines = [
        f"Generated from {sum(len(v['seeds']) for v in table.values())} records ({seeds}).",
        "",
        f"- command: `{first.get('command', '?')}`",
        f"- training images: {first['train_size']} (+ {first['validation_size']} held out for validation; "
        f"source: {first.get('train_source', '?')})",
        f"- test images per angle: {first['num_test']} (source: {first.get('test_source', '?')}), "
        f"angles {angles[0]}°…{angles[-1]}° every {angles[1] - angles[0]}°",
        f"- configuration: `{json.dumps({k: v for k, v in config.items() if k != 'angles'})}`",
        "",
        f"![rotated {dataset}](../figures/{figure.name})",
        "",
        "Mean ± standard deviation over seeds (population std).",
        "",
        "**Averaged over all angles**",
        "",
        "| model | accuracy | test log-likelihood | ECE | entropy | train s (per seed) | eval s (per seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, values in table.items():
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        lines.append(
            f"| {LABELS[model]} | "
            + " | ".join(_cell(values[m].mean(1), 3) for m in METRICS)
            + f" | {np.mean([r.get('train_seconds', np.nan) for r in rows]):.0f} | {np.mean([r['eval_seconds'] for r in rows]):.0f} |"
        )
    stage2 = [r for r in records if r["dataset"] == dataset and ("best_epoch" in r or "variance_selection" in r)]
    if stage2:
        lines += ["", "**Stage 2** (kernel variances per GP layer after conversion; early stopping: best epoch restored / epochs run)", ""]
        for r in sorted(stage2, key=lambda r: (r["model"], r["seed"])):
            stop = f"epoch {r['best_epoch']} of {r['epochs_run']}" if "best_epoch" in r else "no early stopping"
            lines.append(f"- {LABELS[r['model']]}, seed {r['seed']}: v = {', '.join(f'{v:.3g}' for v in r['kernel_variances'])}; {stop}")
    for metric in METRICS:
        lines += ["", f"**{METRIC_LABELS[metric]}**", "", "| angle | " + " | ".join(LABELS[m] for m in table) + " |",
                  "|---" * (len(table) + 1) + "|"]
        for index, angle in enumerate(angles):
            lines.append(f"| {angle}° | " + " | ".join(_cell(v[metric][:, index], 3) for v in table.values()) + " |")
    lines += far_field_lines(records, dataset, angles)
    if "adgp" in table and len(table) > 1:
        others = [m for m in table if m != "adgp"]
        best_other = np.max([table[m]["log_likelihood"].mean(0) for m in others], axis=0)
        adgp = table["adgp"]["log_likelihood"].mean(0)
        spread = np.ptp([table[m]["accuracy"].mean(0) for m in table], axis=0)
        lines += [
            "",
            "**Checks of the paper's claims** (on seed means)",
            "",
            f"- accuracy spread across models (max − min of the means) per angle: median {np.median(spread):.3f}, "
            f"largest {spread.max():.3f} (at {angles[int(np.argmax(spread))]}°).",
            f"- ADGP has the best test log-likelihood at {int(np.sum(adgp > best_other))} of {len(angles)} angles; "
            f"ADGP − best other model: " + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - best_other)) + ".",
        ]
        nn = table.get("nn")
        if nn is not None:
            lines.append(
                "- ADGP − NN (its initialisation) test log-likelihood: "
                + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - nn["log_likelihood"].mean(0)))
                + "."
            )
    lines += lla_check_lines(table, angles)
    lines += ensemble_check_lines(table, angles)
    return "\n".join(lines) + "\n"


SHIFT_ANGLES = (120, 135, 150, 165, 180)  # the far-field target: the residual helps at 120°–180° in each seed


def far_field_lines(records: List[Dict], dataset: str, angles) -> List[str]:
    """The paired far-field table: per model with ``far_field_off`` scores, the test log-likelihood with
    the residual and without it (the same fit), seed means per angle, and in how many seeds it is better at every
    angle of :data:`SHIFT_ANGLES`."""
    lines: List[str] = []
    shift = [i for i, a in enumerate(angles) if a in SHIFT_ANGLES]
    for model in ALL_MODELS:
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model and "far_field_off" in r]
        if not rows:
            continue
        on = np.array([r["log_likelihood"] for r in rows])
        off = np.array([r["far_field_off"]["log_likelihood"] for r in rows])
        better = sum(bool(np.all(a[shift] > b[shift])) for a, b in zip(on, off)) if shift else 0
        lines += ["", f"**{LABELS[model]}: far-field residual on against off** (the same fit; test log-likelihood, seed means; "
                  f"seeds {sorted(r['seed'] for r in rows)})", "",
                  "| angle | on | off | on − off |", "|---|---|---|---|"]
        lines += [f"| {a}° | {on[:, i].mean():.3f} | {off[:, i].mean():.3f} | {on[:, i].mean() - off[:, i].mean():+.2e} |"
                  for i, a in enumerate(angles)]
        if shift:
            lines += ["", f"On better than off at every angle of {SHIFT_ANGLES[0]}°–{SHIFT_ANGLES[-1]}° in {better} of {len(rows)} seeds."]
    return lines


def lla_check_lines(table, angles) -> List[str]:
    """The LLA rows' target, per seed (rows paired with ``nn`` by seed): the angles at which the LLA's
    test NLL and ECE are both at or below the MAP network's (``nn``)."""
    if "nn" not in table or not any(m in table for m in LLA_MODELS):
        return []
    nn = table["nn"]
    lines = ["", "**LLA against its MAP network (NN), per seed**: angles where the LLA's test NLL and ECE are both at or below NN's", ""]
    for model in (m for m in LLA_MODELS if m in table):
        values, parts = table[model], []
        for seed, row, match in _paired_by_seed(table, model, "nn"):
            better = (values["log_likelihood"][row] >= nn["log_likelihood"][match]) & (values["ece"][row] <= nn["ece"][match])
            parts.append(f"seed {seed}: {int(better.sum())} of {len(angles)}")
        lines.append(f"- {LABELS[model]}: " + ("; ".join(parts) if parts else "no seed paired with NN") + ".")
    return lines


def _paired_by_seed(table, model: str, other: str) -> List[Tuple[int, int, int]]:
    """(seed, ``model``'s row, ``other``'s row) in :func:`aggregate`'s table for every seed both models have."""
    rows = []
    for row, seed in enumerate(table[model]["seeds"]):
        match = np.flatnonzero(table[other]["seeds"] == seed)
        if match.size:
            rows.append((int(seed), row, int(match[0])))
    return rows


def ensemble_check_lines(table, angles) -> List[str]:
    """The ADGP ensemble paired by seed with its own first member (``adgp``: member 0 is that seed's frozen
    ADGP), with one fine-tuned ADGP and with the deep ensemble of the same networks: the angles at which the
    ensemble's test log-likelihood is above each."""
    if "adgp_ensemble" not in table:
        return []
    ensemble = table["adgp_ensemble"]["log_likelihood"]
    lines = ["", "**ADGP ensemble against single models, per seed**: angles where its test log-likelihood is above theirs", ""]
    for other in (m for m in ("adgp", "adgp_ft", "ensemble") if m in table):
        parts = [f"seed {seed}: {int(np.sum(ensemble[row] > table[other]['log_likelihood'][match]))} of {len(angles)}"
                 for seed, row, match in _paired_by_seed(table, "adgp_ensemble", other)]
        lines.append(f"- above {LABELS[other]}: " + ("; ".join(parts) if parts else "no seed paired") + ".")
    return lines


def write_report(records: List[Dict], dataset: str, doc: Path, figure: Path, command: str = BLOCK_COMMAND) -> None:
    table = aggregate(records, dataset)
    if table:
        angles = next(r for r in records if r["dataset"] == dataset)["angles"]
        plot(table, angles, figure, f"Rotated {dataset.replace('_', '-').upper() if dataset == 'mnist' else 'Fashion-MNIST'}: mean ± std over seeds")
        log(f"wrote {figure}")
    if not doc.is_file():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# Rotated {dataset}\n")
    write_block(doc, "rotated_mnist", report_markdown(records, dataset, figure), command, create=True)
    log(f"wrote {doc}")


def run_label(config: Dict) -> str:
    """A short name for a run's configuration: its truncation level and stage-2 options."""
    variance = config.get("kernel_variance", LATER_DEFAULTS["kernel_variance"])
    patience = config.get("dgp_patience", LATER_DEFAULTS["dgp_patience"])
    label = f"Ñ = {config['truncation_level']}, v {variance if isinstance(variance, str) else f'= {variance:g}'}"
    if config.get("kernel_variance_floor") is not None:
        label += f" ≥ {config['kernel_variance_floor']:g}"
    label += ", far field" if config.get("far_field") else ""
    return label + (f", stop after {patience}" if patience is not None else "")


def compare_runs(runs: Sequence[Tuple[List[Dict], Optional[Sequence[str]]]], dataset: str, figure: Optional[Path] = None,
                 agreement: bool = False) -> str:
    """Markdown (and optionally a figure) setting several runs' records side by side — e.g. Ñ = 8 against
    Ñ = 20 with and without the stage-2 remedies. ``runs``: (records, models to show or None for all). Per
    angle, the seed mean of the test log-likelihood and of the accuracy of every shown (run, model); the
    columns are named by :func:`run_label` and say how many seeds each mean has. ``agreement`` (two runs of the same
    models, a rerun): :func:`agreement_lines` below the tables."""
    columns, tables, labels = [], [], []  # (name, table entry); each run's shown models' entries; each run's label
    for records, models in runs:
        rows = [r for r in records if r["dataset"] == dataset]
        if not rows:
            continue
        tables.append(({model: values for model, values in aggregate(rows, dataset).items() if models is None or model in models},
                       rows[0]["angles"]))
        labels.append(run_label(rows[0]["config"]))
    for index, ((table, run_angles), label) in enumerate(zip(tables, labels)):
        if labels.count(label) > 1:  # runs of the same configuration (a rerun): named by their order
            label = f"{label}, run {index + 1}"
        for model, values in table.items():
            columns.append((f"{LABELS[model]} ({label}; {len(values['seeds'])} seeds)", values, run_angles))
    tables = [table for table, _ in tables]
    if not columns:
        return "No finished records yet.\n"
    angles = columns[0][2]
    mismatched = [name for name, _, other in columns if list(other) != list(angles)]
    if mismatched:
        raise ValueError(f"runs evaluated at other angles than {angles} cannot share a table: {mismatched}")
    lines = []
    for metric in ("log_likelihood", "accuracy"):
        lines += ["", f"**{METRIC_LABELS[metric]}** (seed means)", "", "| angle | " + " | ".join(name for name, _, _ in columns) + " |",
                  "|---" * (len(columns) + 1) + "|"]
        for index, angle in enumerate(angles):
            lines.append(f"| {angle}° | " + " | ".join(f"{values[metric][:, index].mean():.3f}" for _, values, _ in columns) + " |")
        lines.append("| mean | " + " | ".join(f"{values[metric].mean():.3f}" for _, values, _ in columns) + " |")
    if agreement:
        if len(tables) != 2:
            raise ValueError(f"the agreement of runs compares two runs, got {len(tables)} with records")
        lines += agreement_lines(*tables, angles)
    if figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        for axis, metric in zip(axes, ("log_likelihood", "accuracy")):
            for name, values, _ in columns:
                axis.plot(angles, values[metric].mean(0), marker="o", markersize=3, label=name)
            _style_axis(axis, angles, METRIC_LABELS[metric] + " (seed means)")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure, dpi=120)
        plt.close(fig)
    return "\n".join(lines).lstrip("\n") + "\n"




def agreement_lines(first: Dict, second: Dict, angles: Sequence[int]) -> List[str]:
    """For every model in both runs (``aggregate`` entries with ≥ 2 seeds each), whether the second run's seed mean
    agrees with the first's within the seed spread: per angle and metric, |mean₂ − mean₁| against the larger of the
    two runs' sample standard deviations over seeds; the lines count the angles where it does."""
    lines = []
    for model in (m for m in first if m in second):
        a, b = first[model], second[model]
        if len(a["seeds"]) < 2 or len(b["seeds"]) < 2:
            continue
        parts = []
        for metric in ("log_likelihood", "accuracy"):
            delta = b[metric].mean(0) - a[metric].mean(0)
            spread = np.maximum(a[metric].std(0, ddof=1), b[metric].std(0, ddof=1))
            within = int(np.sum(np.abs(delta) <= spread))
            parts.append(f"{METRIC_LABELS[metric]} Δ from {delta.min():+.3f} to {delta.max():+.3f}, within the larger seed "
                         f"standard deviation at {within} of {len(angles)} angles")
        lines.append(f"- {LABELS[model]}: " + "; ".join(parts))
    if lines:
        lines = ["", "**Agreement of the two runs** (same models, seed means, run 2 − run 1; the seed standard deviation is each "
                 "run's own over its seeds)", ""] + lines
    return lines


#: the pages ``python -m experiments report`` rewrites (the committed runs that have a page), then the comparison
#: tables of the Ñ = 20 and Ñ = 8 pages (``--compare`` into a generated block)
REPORT_RUNS = [["--out", f"docs/results/{run}", "--doc", f"docs/results/{page}.md", "--figure", f"docs/figures/{run}.png"]
               for run, page in (("rotated_mnist", "rotated_mnist_n8"), ("rotated_mnist_n20_full", "rotated_mnist_n20_full"),
                                 ("rotated_mnist_n20_remedies", "rotated_mnist_n20_remedies"),
                                 ("rotated_mnist_controls", "rotated_mnist_controls"))]
#: the stage-2 recipe screen's runs (one records folder per recipe, experiments.recipes), those that have records
REPORT_RUNS += [["--out", f"docs/results/rotated_mnist_recipes/{recipe}", "--doc", f"docs/results/rotated_mnist_recipes_{recipe}.md",
                 "--figure", f"docs/figures/rotated_mnist_recipes_{recipe}.png"]
                for recipe in ("paper", "validation", "elbo", "floor")
                if (REPO / f"docs/results/rotated_mnist_recipes/{recipe}/records.jsonl").exists()]
_RUNS = "docs/results/rotated_mnist"
_COMPARE_PAGES = {"compare_n20": "rotated_mnist_n20", "compare_remedies": "rotated_mnist_remedies",
                  "compare_elbo": "rotated_mnist_remedies", "compare_n20_reduced": "rotated_mnist_n8"}
REPORT_RUNS += [["--doc", f"docs/results/{_COMPARE_PAGES[block]}.md", "--block", block, "--compare", *compare]
                for block, compare in (
                    ("compare_n20", [f"{_RUNS}_n20_remedies:nn,nn_dropout,nn_ts", f"{_RUNS}:adgp", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                     "--seeds", "0", "1", "2", "--figure", "docs/figures/rotated_mnist_n20_compare.png"]),
                    ("compare_remedies", [f"{_RUNS}_n20_remedies:nn_dropout,adgp,adgp_ft", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                          "--seeds", "0", "1", "2"]),
                    ("compare_elbo", [f"{_RUNS}_n20_remedies:nn_dropout", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                      f"{_RUNS}_n20_elbo:adgp,adgp_ft", "--seeds", "0"]),
                    ("compare_n20_reduced", [f"{_RUNS}_n20", "--seeds", "0"]))]
#: the rerun of the fine-tuned ADGP and its controls with their stage 2 through the library, its page and its
#: per-angle agreement with the records it repeats (once its records exist)
_LIBRARY_STAGE2 = "rotated_mnist_library_stage2"
_RERUN_MODELS = "nn,nn_ts,adgp_ft,nn_ft,nn_ts_ft,nn_dropout_ft"
if (REPO / f"docs/results/{_LIBRARY_STAGE2}/records.jsonl").exists():
    REPORT_RUNS += [["--out", f"docs/results/{_LIBRARY_STAGE2}", "--doc", f"docs/results/{_LIBRARY_STAGE2}.md",
                     "--figure", f"docs/figures/{_LIBRARY_STAGE2}.png"],
                    ["--doc", f"docs/results/{_LIBRARY_STAGE2}.md", "--block", "compare_library_stage2", "--compare",
                     f"{_RUNS}_controls:{_RERUN_MODELS}", f"docs/results/{_LIBRARY_STAGE2}:{_RERUN_MODELS}",
                     "--seeds", "0", "1", "2", "--agreement"]]


def report(records: List[Dict], options) -> None:
    """The page's generated block and figure from the records (of one protocol); with ``--compare`` the table of
    several records folders side by side instead."""
    if options.compare:
        text = compare_runs(_compared(options), options.dataset, Path(options.figure) if options.figure else None,
                            agreement=options.agreement)
        if options.block and options.doc:  # the marker names this command, less --quiet
            write_block(options.doc, options.block, text, " ".join(a for a in options.command.split(" ") if a != "--quiet"))
        elif not options.quiet or not options.block:
            print(text, end="")
        return
    out = Path(options.out)
    write_report(records, options.dataset, Path(options.doc) if options.doc else page_path(options),
                 Path(options.figure) if options.figure else out / "rotated_mnist.png",
                 getattr(options, "report_command", None) or BLOCK_COMMAND)


def _compared(options) -> List[Tuple[List[Dict], Optional[Sequence[str]]]]:
    runs = []
    for entry in options.compare:
        folder, _, models = entry.partition(":")
        unknown = [m for m in models.split(",") if models and m not in ALL_MODELS]
        if unknown:
            raise SystemExit(f"--compare {entry!r}: unknown models {unknown}; choose from {', '.join(ALL_MODELS)}")
        path = Path(folder) / "records.jsonl"
        if not path.exists():
            raise SystemExit(f"--compare: no records at {path}")
        store = ResultStore(path, KEY, upgrade=upgrade, protocol=newest_protocol(path))
        runs.append(([r for r in store.records() if r["seed"] in options.seeds], models.split(",") if models else None))
    return runs
