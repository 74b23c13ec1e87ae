"""The recipe screen's page and figures, from the records alone: the rule with its reading, the choice, the scores and
admissibility per candidate, the rotated-MNIST table per angle, the follow-up's verdict and the finalists at full
size (generated block ``recipes``), and the figures of in-distribution NLPD against test log-likelihood under shift."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from experiments.harness.blocks import write_block
from experiments.harness.store import portable_command
from experiments.harness.study import page_path, record_labels
from experiments.recipes.cells import evaluate_all, load_all
from experiments.recipes.rule import (ACCURACY_MARGIN, AMENDMENT, FOLLOW_UP, FULL_SIZE_DATASETS, FULL_SIZE_MODELS,
                                      FULL_SIZE_SEEDS, READING, RECIPES, ROTATED_MODEL, RULE, SCREEN_DATASETS, SCREEN_SEEDS,
                                      SCREEN_SPLITS, SHIFT_ANGLES, Decision, FollowUp, FullSize, _at_angle,
                                      _full_size_splits, _shift_mean, decide, follow_up, full_size)


def follow_up_markdown(result: FollowUp) -> str:
    cells = "; ".join(f"seed {s}: " + ("missing" if v is None else f"{v[0]} of {len(SHIFT_ANGLES)} angles, 0° accuracy {'within' if v[1] else 'more than'} 1 point of NN's")
                      for s, v in result.per_seed.items())
    outcome = {"met": "**met: `by_likelihood` should become the default.**", "not met": "**not met: the default stays the rule's choice.**",
               "waiting": "**not yet decidable: records missing.**"}[result.verdict]
    return "\n".join([FOLLOW_UP, "", f"Follow-up: {outcome} ({cells}.)"])


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
    labels = record_labels("rotated_mnist")
    rows = [(labels[m], [controls.get((m, s)) for s in SCREEN_SEEDS]) for m in SHIFT_TABLE_CONTROLS]
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
    matplotlib.use("Agg")

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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    matplotlib.use("Agg")

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
