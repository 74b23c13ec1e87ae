"""The IKA-patches page from the records alone: the table of errors (mean ± standard error over trials), one verdict per
claim of IKA §4 with the paper's number beside ours, the cost, and the figure (error against S; error against m)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from experiments.harness.blocks import write_block
from experiments.harness.statistics import standard_error
from experiments.harness.study import page_path

#: The paper's numbers (IKA §4.2, §4.3.1, §4.3.2; STL-10 patches, n = 128 filters).
PAPER = {"samples_5000": 9.4, "samples_15000": 10.4, "random": 18.6, "k-means": 9.1}
#: How a claimed direction is judged: the mean over trials must be more than this many standard errors from zero.
MARGIN_SE = 2.0


def _group(records: Sequence[Dict]) -> Dict[Tuple[str, int], Dict[int, Dict]]:
    """(filters, S) -> trial -> record."""
    out: Dict[Tuple[str, int], Dict[int, Dict]] = {}
    for r in records:
        out.setdefault((r["filters"], r["samples"]), {})[r["trial"]] = r
    return out


def _error(record: Dict, method: str, m: int) -> float:
    return record[f"{method}_error"][record["ranks"].index(m)]


def _stat(values: Sequence[float], scale: float = 1.0, form: str = "{:.5f}") -> str:
    values = np.asarray(values, dtype=np.float64) * scale
    return f"{form.format(values.mean())} ± {form.format(standard_error(values))}"


def _paired(a: Dict[int, Dict], b: Dict[int, Dict], value) -> np.ndarray:
    """value(record_a, record_b) for every trial both hold."""
    return np.array([value(a[t], b[t]) for t in sorted(set(a) & set(b))], dtype=np.float64)


def direction(values: np.ndarray) -> str:
    """'reproduced' when the mean is more than MARGIN_SE standard errors above zero, 'refuted' when as far below,
    else 'not resolved' (a single trial has no standard error: 'not resolved')."""
    if len(values) < 2:
        return "not resolved (one trial)"
    mean, se = values.mean(), standard_error(values)
    if mean - MARGIN_SE * se > 0:
        return "reproduced"
    if mean + MARGIN_SE * se < 0:
        return "refuted"
    return f"not resolved (within {MARGIN_SE:g} SE of zero)"


def _percent(values: np.ndarray) -> str:
    return f"{100 * values.mean():+.1f} % ± {100 * standard_error(values):.1f}"


def _size(values: np.ndarray, paper: float) -> str:
    ratio = 100 * values.mean() / paper  # ours in per cent over the paper's in per cent
    relation = "within a factor of 2 of" if 0.5 <= ratio <= 2 else ("larger than" if ratio > 2 else "smaller than")
    return f"ours is {ratio:.2f} times the paper's, {relation} it"


def summary(records: Sequence[Dict]) -> Optional[Dict]:
    """The numbers the table, verdicts and figure show; None without records."""
    if not records:
        return None
    groups = _group(records)
    random_sizes = sorted(S for f, S in groups if f == "random")
    largest = max(S for _, S in groups)
    n = max(records[0]["ranks"])
    ranks = records[0]["ranks"]
    return {"groups": groups, "random_sizes": random_sizes, "largest": largest, "n": n, "ranks": ranks,
            "trials": sorted({r["trial"] for r in records})}


def table(s: Dict) -> str:
    groups, n, largest = s["groups"], s["n"], s["largest"]
    rows = [(f, S, n) for f, S in sorted(groups) if f == "random" and S != largest]
    rows += [(f, largest, m) for f in ("random", "k-means") if (f, largest) in groups for m in s["ranks"]]
    lines = ["| filters | S | m | IKA error | Nyström error | reduction 1 − IKA/Nyström | trials |", "|---|---|---|---|---|---|---|"]
    for f, S, m in rows:
        got = groups[(f, S)]
        ika = [_error(r, "ika", m) for r in got.values()]
        nys = [_error(r, "nystrom", m) for r in got.values()]
        reduction = np.array([1 - _error(r, "ika", m) / _error(r, "nystrom", m) for r in got.values()])
        lines.append(f"| {f} | {S:,} | {m} | {_stat(ika)} | {_stat(nys)} | {_percent(reduction)} | {len(got)} |")
    return "\n".join(lines)


def verdicts(s: Dict) -> List[str]:
    groups, n, largest = s["groups"], s["n"], s["largest"]
    out = []
    sizes = s["random_sizes"]
    if len(sizes) >= 2:
        base = groups[("random", sizes[0])]
        for S in sizes[1:]:
            drop = _paired(base, groups[("random", S)], lambda a, b: 1 - _error(b, "ika", n) / _error(a, "ika", n))
            paper = PAPER.get(f"samples_{S}")
            versus = f" (paper: {paper} %; {_size(drop, paper)})" if paper else ""
            out.append(f"**§4.2, a larger S lowers IKA's error**, S = {sizes[0]:,} → {S:,}: **{direction(drop)}**, "
                       f"error reduction 1 − E(S = {S:,}) / E(S = {sizes[0]:,}) = {_percent(drop)}{versus}.")
    if len(sizes) >= 3:
        base, middle, last = (groups[("random", S)] for S in sizes[:3])
        reached = _paired(base, middle, lambda a, b: 1 - _error(b, "ika", n) / _error(a, "ika", n)).mean() / _paired(
            base, last, lambda a, b: 1 - _error(b, "ika", n) / _error(a, "ika", n)).mean()
        paper = PAPER.get(f"samples_{sizes[1]}", 0) / PAPER.get(f"samples_{sizes[2]}", 1)
        out.append(f"**§4.2, diminishing returns**: the reduction reached at S = {sizes[1]:,} is {reached:.2f} of that at "
                   f"S = {sizes[2]:,} (paper: {paper:.2f}), for {(sizes[1] / sizes[0]) ** 2:.0f} against "
                   f"{(sizes[2] / sizes[0]) ** 2:.0f} times the O(S²) operations of S = {sizes[0]:,}.")
    for f, section in (("random", "§4.3.1"), ("k-means", "§4.3.2")):
        if (f, largest) not in groups:
            continue
        got = groups[(f, largest)]
        reduction = np.array([1 - _error(r, "ika", n) / _error(r, "nystrom", n) for r in got.values()])
        out.append(f"**{section}, IKA's error below Nyström's with {f} filters** (S = {largest:,}, m = n = {n}): "
                   f"**{direction(reduction)}**, {_percent(reduction)} (paper: {PAPER[f]} %; {_size(reduction, PAPER[f])}).")
    if ("random", largest) in groups and ("k-means", largest) in groups:
        rand, km = groups[("random", largest)], groups[("k-means", largest)]
        gain = {method: _paired(rand, km, lambda a, b, method=method: 1 - _error(b, method, n) / _error(a, method, n))
                for method in ("ika", "nystrom")}
        difference = gain["nystrom"] - gain["ika"]
        out.append(f"**§4.3.2, k-means filters help Nyström more than IKA** (error reduction from random to k-means "
                   f"filters, S = {largest:,}, m = {n}): **{direction(difference)}**: Nyström {_percent(gain['nystrom'])}, "
                   f"IKA {_percent(gain['ika'])}, difference {_percent(difference)} (the paper gives no number).")
    for f in ("random", "k-means"):
        if (f, largest) not in groups:
            continue
        got = groups[(f, largest)]
        below = [sum(_error(r, "ika", m) < _error(r, "nystrom", m) for r in got.values()) for m in s["ranks"]]
        falls = all(np.mean([_error(r, method, a) for r in got.values()]) > np.mean([_error(r, method, b) for r in got.values()])
                    for method in ("ika", "nystrom") for a, b in zip(s["ranks"], s["ranks"][1:]))
        out.append(f"**§4.3.3, m < n eigenfunctions** ({f} filters; the paper shows a figure and gives no number): IKA "
                   f"below Nyström in " + ", ".join(f"{c}/{len(got)} trials at m = {m}" for c, m in zip(below, s["ranks"]))
                   + f"; the mean error of both {'falls' if falls else 'does not fall'} at every step of m.")
    return out


def notes(s: Dict) -> List[str]:
    records = [r for group in s["groups"].values() for r in group.values()]
    first = records[0]
    zero = [r["nystrom_zero_eigenvalues"] for r in records if r["filters"] == "random"]
    zero_km = [r["nystrom_zero_eigenvalues"] for r in records if r["filters"] == "k-means"]
    jitter = {f: sum(r["ika_jitter_warning"] for r in records if r["filters"] == f) for f in ("random", "k-means")}
    counts = {f: sum(r["filters"] == f for r in records) for f in ("random", "k-means")}
    def span(values):
        low, high = min(values, default=0), max(values, default=0)
        return "none" if high == 0 else (f"{low}" if low == high else f"{low}–{high}")

    out = [f"Data: {first['num_train'] + first['num_test_pool']:,} random 7×7 patches of the {first['num_images']:,} MNIST "
           f"test images (the paper: 1,000,000 of STL-10), {first['num_train']:,} for training (the samples and filters "
           f"are drawn from these) and {first['num_test_pool']:,} held out; errors over all pairs of "
           f"{first['num_test']:,} test patches of each trial; σ² = {first['sigma2']:.4f}; "
           f"{100 * first['duplicates']:.1f} % of the training patches repeat another exactly (blank background).",
           f"Numerics: κ(W, W) has {span(zero)} numerically zero eigenvalues (≤ 1e-10 λ_max) with random filters "
           f"(Nyström then drops those directions at m = n) and {span(zero_km)} with k-means filters; IKA's P̃ needed jitter that changed the kept eigenpairs in {jitter['random']} of "
           f"{counts['random']} random-filter cells and {jitter['k-means']} of {counts['k-means']} k-means cells."]
    cost = {}
    for r in records:
        cost.setdefault((r["filters"], r["samples"]), []).append(r["cpu_seconds"])
    out.append("Cost (CPU seconds per cell, mean over trials; patch preprocessing, both fits and the scoring, on a shared "
               "machine): " + ", ".join(f"{f} S = {S:,}: {np.mean(v):.0f} s" for (f, S), v in sorted(cost.items()))
               + f"; {sum(r['cpu_seconds'] for r in records) / 60:.1f} CPU minutes in all.")
    return out


def markdown(records: Sequence[Dict], figure: str) -> str:
    s = summary(records)
    if s is None:
        return ("**No record yet.** Run `nice -n 10 python -m experiments ika_patches --data-dir ../shared/data` to make "
                "`docs/results/ika_patches/records.jsonl` and this section.\n")
    out = [f"Records: `ika_patches/records.jsonl` (next to this page); command `{records[0]['command']}`; "
           f"{len(s['trials'])} trials, mean ± standard error over trials; reductions are per trial, then averaged.", "",
           f"![IKA against Nyström on MNIST patches]({figure})", "", table(s), "", "**Verdicts**", ""]
    out += [f"- {line}" for line in verdicts(s)]
    out += ["", *notes(s)]
    return "\n".join(out) + "\n"


def figure(records: Sequence[Dict], path: Path) -> None:
    """Left: IKA's error (m = n, random filters) against S, Nyström's as a reference line. Right: both methods' error
    against m at the largest S, random and k-means filters. Bars: standard error over trials."""
    matplotlib.use("Agg")

    s = summary(records)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if s is not None:
        groups, n = s["groups"], s["n"]
        sizes = s["random_sizes"]

        def mean_se(group, method, m):
            values = [_error(r, method, m) for r in group.values()]
            return np.mean(values), standard_error(values, single=0.0)

        ika = np.array([mean_se(groups[("random", S)], "ika", n) for S in sizes])
        left.errorbar(sizes, ika[:, 0], yerr=ika[:, 1], fmt="o-", capsize=3, color="C0", label="IKA, random filters")
        nys = mean_se(groups[("random", sizes[-1])], "nystrom", n)
        left.axhline(nys[0], color="C1", ls="--", label="Nyström, the same filters")
        left.axhspan(nys[0] - nys[1], nys[0] + nys[1], color="C1", alpha=0.15)
        left.set_xscale("log")
        left.set_xlabel("IKA sample size S")
        left.set_title(f"§4.2: n = m = {n}", fontsize=9)
        for f, style in (("random", "-"), ("k-means", "--")):
            if (f, s["largest"]) not in groups:
                continue
            for method, color, label in (("ika", "C0", "IKA"), ("nystrom", "C1", "Nyström")):
                values = np.array([mean_se(groups[(f, s["largest"])], method, m) for m in s["ranks"]])
                right.errorbar(s["ranks"], values[:, 0], yerr=values[:, 1], fmt="o" + style, capsize=3, color=color,
                               mfc=None if f == "random" else "none", label=f"{label}, {f} filters")
        right.set_xscale("log", base=2)
        right.set_yscale("log")
        right.set_xlabel("eigenfunctions m")
        right.set_title(f"§4.3: S = {s['largest']:,}, n = {n}", fontsize=9)
    for ax in (left, right):
        ax.set_ylabel("mean |κ − φ·φ| over test pairs")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(records, options) -> None:
    """The generated block ``ika_patches`` of the page and its figure ``<page>.png``, from the records alone."""
    page = page_path(options)
    picture = page.with_suffix(".png")
    text = markdown(records, picture.name)
    write_block(page, "ika_patches", text, options.report_command, create=True)
    if records:
        figure(records, picture)
    if not options.quiet:
        print(text)
