"""The gap page (``--splits-kind gap``): the best method per set, the metric tables, the shift diagnosis and the
DUN paper's published gap-split columns."""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from experiments.harness.statistics import standard_error
from experiments.methods import LABELS
from experiments.methods.data import in_order
from experiments.methods.versions import MIXED_METHODS
from experiments.uci.cells import GAP_DEFAULT_MAX_SPLITS, METHOD_ORDER, SHIFTED_VALIDATION_METHODS
from experiments.uci.sections import method_columns, metric_table, protocol_lines, seconds_table
from experiments.uci.mixed_screen import mixed_screen_markdown, published_records
from experiments.uci.slab_screen import slab_screen_markdown
from experiments.uci.summary import by_split, geometric_means, paired, shared_splits
from experiments.uci.verdicts import paired_difference_lines, within_one_se_claim


#: The DUN paper's gap-split results (Antorán, Allingham & Hernández-Lobato 2020; their repository cambridge-mlg/DUN,
#: experiments/regression_and_image_PLOTS.ipynb, the appendix table printed by ``make_uci_appendix_tables(reg_df,
#: gap=True)``, ResNet columns): dataset folder → method → (test log-likelihood mean, its standard deviation over
#: the set's gap splits, test RMSE mean, its standard deviation), original units, as published (standard
#: deviations, not standard errors). Their protocol: training-split standardisation, 15 % of each training split
#: held out for validation, width-100 networks, 5-member ensembles, 10 dropout samples. Displayed beside this
#: study's records; never used to test anything.
PUBLISHED_GAP: Dict[str, Dict[str, tuple]] = {
    'bostonHousing': {
        'NN (SGD)': (-4.217, 1.876, 4.593, 2.927),
        'MC dropout': (-4.001, 1.814, 3.597, 0.684),
        'deep ensemble': (-3.106, 1.481, 3.512, 0.573),
        'MFVI': (-2.703, 0.072, 3.756, 0.418),
        'DUN': (-3.107, 0.593, 3.636, 0.493),
    },
    'concrete': {
        'NN (SGD)': (-4.839, 1.585, 7.367, 0.866),
        'MC dropout': (-5.170, 1.376, 7.064, 0.921),
        'deep ensemble': (-3.631, 0.523, 6.853, 0.796),
        'MFVI': (-3.460, 0.177, 7.548, 0.865),
        'DUN': (-4.222, 0.818, 7.196, 0.821),
    },
    'energy': {
        'NN (SGD)': (-15.295, 26.058, 3.061, 2.880),
        'MC dropout': (-8.102, 13.796, 2.874, 2.254),
        'deep ensemble': (-5.423, 7.290, 3.364, 3.696),
        'MFVI': (-9.093, 10.573, 8.614, 9.390),
        'DUN': (-10.730, 13.477, 2.938, 3.017),
    },
    'kin8nm': {
        'NN (SGD)': (0.991, 0.131, 0.085, 0.007),
        'MC dropout': (1.215, 0.049, 0.071, 0.003),
        'deep ensemble': (0.315, 2.397, 1.632, 4.418),
        'MFVI': (0.942, 0.240, 0.095, 0.025),
        'DUN': (1.029, 0.133, 0.080, 0.006),
    },
    'naval-propulsion-plant': {
        'NN (SGD)': (-60.470, 53.213, 0.020, 0.009),
        'MC dropout': (-523.856, 570.116, 0.034, 0.018),
        'deep ensemble': (-4.573, 7.496, 0.018, 0.009),
        'MFVI': (-15.208, 43.758, 0.033, 0.041),
        'DUN': (-16.279, 19.437, 0.022, 0.014),
    },
    'power-plant': {
        'NN (SGD)': (-3.022, 0.141, 4.621, 0.339),
        'MC dropout': (-3.178, 0.224, 4.688, 0.335),
        'deep ensemble': (-2.904, 0.110, 4.369, 0.383),
        'MFVI': (-2.980, 0.184, 4.680, 0.703),
        'DUN': (-2.998, 0.325, 4.299, 0.416),
    },
    'protein-tertiary-structure': {
        'NN (SGD)': (-3.554, 0.408, 5.171, 0.632),
        'MC dropout': (-3.459, 0.444, 5.133, 0.636),
        'deep ensemble': (-3.071, 0.261, 4.801, 0.599),
        'MFVI': (-3.083, 0.086, 5.115, 0.298),
        'DUN': (-3.835, 0.998, 5.206, 0.780),
    },
    'wine-quality-red': {
        'NN (SGD)': (-2.026, 1.130, 0.731, 0.070),
        'MC dropout': (-1.267, 0.677, 0.660, 0.040),
        'deep ensemble': (-1.126, 0.137, 0.673, 0.039),
        'MFVI': (-0.965, 0.033, 0.632, 0.029),
        'DUN': (-1.417, 0.474, 0.697, 0.043),
    },
    'yacht': {
        'NN (SGD)': (-2.442, 0.520, 2.214, 0.793),
        'MC dropout': (-2.344, 0.995, 2.290, 2.108),
        'deep ensemble': (-2.568, 1.250, 1.841, 0.836),
        'MFVI': (-2.114, 0.399, 1.836, 0.712),
        'DUN': (-2.122, 0.584, 1.851, 0.750),
    },
}
PUBLISHED_GAP_METHODS = ('NN (SGD)', 'MC dropout', 'deep ensemble', 'MFVI', 'DUN')


def _best_by_set(records: Sequence[Dict], datasets: Sequence[str], metric: str) -> List[str]:
    """Per dataset, over the splits that every method with the set's full count of splits has: the method with the lowest mean ``metric`` and, for
    the runner-up, the mean paired split difference (runner-up − best) ± its paired standard error; after the table,
    how often each method is the best and the default ADGP's rank on each set."""
    lines, best_of, ranks = [], {}, []
    for d in datasets:
        counts = {m: len({r["split"] for r in records if r["dataset"] == d and r["method"] == m}) for m in METHOD_ORDER}
        # the methods with as many splits as the set's most complete one: one still running does not shrink the comparison
        methods = [m for m in METHOD_ORDER if counts[m] and counts[m] == max(counts.values())]
        shared = sorted(shared_splits(records, d, methods))
        if not shared:
            lines.append(f"| {d} | 0 | — | — |")
            continue
        values = {m: np.array([by_split(records, d, m)[k][metric] for k in shared]) for m in methods}
        ranked = sorted(methods, key=lambda m: float(values[m].mean()))
        best = ranked[0]
        best_of.setdefault(best, []).append(d)
        if "adgp" in ranked:
            ranks.append(f"{d} {ranked.index('adgp') + 1} of {len(ranked)}")
        text = "—"
        if len(ranked) > 1:
            delta = values[ranked[1]] - values[best]
            se = standard_error(delta)
            text = f"{LABELS[ranked[1]]} (+{delta.mean():.3f}" + (f" ± {se:.3f})" if np.isfinite(se) else ")")
        lines.append(f"| {d} | {len(shared)} | **{LABELS[best]}** {values[best].mean():.3f} | {text} |")
    if best_of:
        tally = "; ".join(f"{LABELS[m]} on {len(sets)}" for m, sets in sorted(best_of.items(), key=lambda item: -len(item[1])))
        lines += ["", f"Best on {sum(map(len, best_of.values()))} sets: {tally}."
                  + (f" {LABELS['adgp']}'s rank among the methods compared: {', '.join(ranks)}." if ranks else "")]
    return lines


def gap_diagnosis_markdown(records: Sequence[Dict], datasets: Sequence[str], methods: Sequence[str]) -> List[str]:
    """The shift diagnosis: per method, the mean test predictive σ and the share of test points with |z| > 3,
    z = (y − μ)/σ of the predictive mixture; for ADGP also the kernel variance v chosen per layer (geometric mean over
    splits), and the mean predictive σ on the held-out middle third against that on the training rows."""
    out = []
    if any("z_above_3" in r for r in records):
        out += ["**Overconfidence under shift**: mean predictive σ on the test (gap) points (standardised units) / share of "
                "test points with |z| = |y − μ|/σ > 3 (a calibrated Gaussian has 0.0027); mean over the splits whose records "
                "have them (their number in brackets)", ""]
        def shift(d, m):
            have = [r for r in records if r["dataset"] == d and r["method"] == m and "z_above_3" in r]
            return (f"{np.mean([r['test_std'] for r in have]):.3f} / {np.mean([r['z_above_3'] for r in have]):.3f} ({len(have)})"
                    if have else "—")

        out += method_columns(datasets, methods, shift)
    adgp = [r for r in records if r["method"] == "adgp" and "train_std" in r.get("extra", {})]
    if adgp:
        out += ["**ADGP's diagnosis** (standardised units; mean over splits): the kernel variance v chosen per layer "
                "(geometric mean over splits, first layer first), the mean predictive σ on the test (gap) points and on "
                "training rows (up to 1,000 of the training split, seeded), their ratio, and the share of test points with |z| > 3", ""]
        out += ["| dataset | splits | v per layer | σ test | σ train | σ test / σ train | share |z| > 3 |", "|---|---|---|---|---|---|---|"]
        for d in datasets:
            have = [r for r in adgp if r["dataset"] == d]
            if not have:
                continue
            test, train = np.array([r["test_std"] for r in have]), np.array([r["extra"]["train_std"] for r in have])
            out.append(f"| {d} | {len(have)} | {geometric_means([r['extra']['kernel_variances'] for r in have])} | "
                       f"{test.mean():.3f} | {train.mean():.3f} | {np.mean(test / train):.2f} | "
                       f"{np.mean([r['z_above_3'] for r in have]):.3f} |")
        out.append("")
    return out


#: where the gap report's second part begins (``--part analysis``: the published columns and the comparison with them)
PUBLISHED_GAP_HEADING = "**Published (DUN paper"


def published_gap_markdown(datasets: Sequence[str]) -> List[str]:
    """The DUN paper's gap-split columns (:data:`PUBLISHED_GAP`), or a marked row of gaps where they are missing."""
    out = [PUBLISHED_GAP_HEADING + ", Antorán et al. 2020; original units, 15 % of each training split held out for "
           "validation)**: test log-likelihood (= −NLPD) / RMSE, mean ± standard deviation (not SE) over the set's gap "
           "splits, as published", ""]
    if not PUBLISHED_GAP:
        out += ["> **MISSING**: the published columns are not in this project yet (their repository, cambridge-mlg/DUN, "
                "was out of reach). Fill `PUBLISHED_GAP` in experiments/uci/gap.py from the results notebook; the table below "
                "then shows them.", ""]
    out.append("| dataset | " + " | ".join(PUBLISHED_GAP_METHODS) + " |")
    out.append("|---|" + "---|" * len(PUBLISHED_GAP_METHODS))
    for d in datasets:
        cells = []
        for m in PUBLISHED_GAP_METHODS:
            value = PUBLISHED_GAP.get(d, {}).get(m)
            cells.append(f"{value[0]:.3f} ± {value[1]:.3f} / {value[2]:.3g} ± {value[3]:.2g}" if value else "missing")
        out.append(f"| {d} | " + " | ".join(cells) + " |")
    return out + [""]


#: The methods a set needs on every one of its gap splits before the targets are judged on it.
TARGET_METHODS = ("nn", "nn_ts", "dropout", "adgp")


def complete_sets(records: Sequence[Dict], datasets: Sequence[str], method: str = "adgp") -> List[str]:
    """The sets whose every default gap split (one per input feature, or the first :data:`GAP_DEFAULT_MAX_SPLITS`) has
    a record of ``method`` and of each of the other :data:`TARGET_METHODS`."""
    done = []
    for d in datasets:
        have = [r for r in records if r["dataset"] == d]
        expected = min(have[0]["input_dim"], GAP_DEFAULT_MAX_SPLITS.get(d, have[0]["input_dim"]))
        needed = TARGET_METHODS[:-1] + (method,)
        if all({r["split"] for r in have if r["method"] == m} >= set(range(expected)) for m in needed):
            done.append(d)
    return done


def gap_targets_markdown(records: Sequence[Dict], datasets: Sequence[str], method: str = "adgp") -> List[str]:
    """``method``'s targets on the gap splits (the default ADGP's, or a candidate recipe's confirmation), judged only on
    the sets with every split of it and of the other target methods: mean NLPD below NN+TS's (target ≥ 6 of 9 sets)
    and below MC dropout's (≥ 5 of 9); RMSE better than the NN's or above it by at most its standard error (≥ 8 of 9)."""
    done = complete_sets(records, datasets, method)
    if method != "adgp" and not done:
        return []
    name = LABELS[method]
    out = [f"**Targets of {'the default ADGP' if method == 'adgp' else name}** (judged on the {len(done)} of 9 sets with every "
           f"split of {', '.join(LABELS[m] for m in TARGET_METHODS[:-1] + (method,))}: {', '.join(done) or 'none yet'})", ""]
    subset = [r for r in records if r["dataset"] in done]
    for other, need in (("nn_ts", 6), ("dropout", 5)):
        wins = [d for d in done if (lambda rows: rows[method]["nlpd_mean"] < rows[other]["nlpd_mean"])(paired(subset, d, (method, other)))]
        out.append(f"- {name} NLPD < {LABELS[other]}: {len(wins)} of {len(done)} complete sets so far"
                   + (f" (on: {', '.join(wins)})" if wins else "") + f"; target ≥ {need} of 9")
    line = within_one_se_claim(subset, done, method, "nn", f"{name} RMSE better than NN or within one standard error of NN's mean")
    if line:
        out.append(line + "; target ≥ 8 of 9")
    return out + [""]


def paired_differences_markdown(records: Sequence[Dict], datasets: Sequence[str]) -> List[str]:
    """The converted models against the networks they start from, split by split on the splits both have
    (:data:`~experiments.uci.verdicts.PAIRED_DIFFERENCES`, the lines the published-split analysis states too)."""
    lines = paired_difference_lines(records, datasets)
    return lines + [""] if lines else []


#: Our baselines beside the published ones they correspond to (PUBLISHED_GAP_METHODS).
BASELINE_PAIRS = (("dropout", "MC dropout"), ("ensemble", "deep ensemble"), ("ensemble_nll", "deep ensemble"), ("nn", "NN (SGD)"))


def published_baselines_markdown(records: Sequence[Dict], datasets: Sequence[str]) -> List[str]:
    """Per set with every split of the baseline, our MC dropout's, deep ensemble's and NN's mean test log-likelihood
    (= −NLPD, original units) beside the published method's (:data:`PUBLISHED_GAP`), and how many of those sets ours
    is the higher on: whether the baselines are straw men."""
    lines, tally = [], {m: [] for m, _ in BASELINE_PAIRS}
    for d in datasets:
        have = [r for r in records if r["dataset"] == d]
        expected = min(have[0]["input_dim"], GAP_DEFAULT_MAX_SPLITS.get(d, have[0]["input_dim"]))
        cells = []
        for method, published in BASELINE_PAIRS:
            ours = [r["nlpd_original"] for r in have if r["method"] == method and r["split"] < expected]
            theirs = PUBLISHED_GAP.get(d, {}).get(published)
            if len(ours) < expected or theirs is None:
                cells.append("—")
                continue
            mine = -float(np.mean(ours))
            tally[method].append(mine >= theirs[0])
            cells.append(f"{mine:.3f} vs {theirs[0]:.3f}")
        if any(c != "—" for c in cells):
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    head = " | ".join(f"{LABELS[m]} (ours vs {p})" for m, p in BASELINE_PAIRS)
    out = ["**Our baselines against the published ones** (test log-likelihood = −NLPD, original units, mean over every "
           "gap split of the set; higher is better; the protocols differ as stated above)", "",
           f"| dataset | {head} |", "|---|" + "---|" * len(BASELINE_PAIRS)] + lines + [""]
    out.append("Ours at or above the published: " + "; ".join(
        f"{LABELS[m]} {sum(v)} of {len(v)} sets" for m, v in tally.items() if v) + ".")
    return out + [""]


def gap_markdown(rows: Sequence[Dict], records: Sequence[Dict]) -> str:
    """The gap page's block: the best method per set first (NLPD and RMSE in original units, over the splits every
    method shares), then each metric's table, the shift diagnosis, the published columns and the seconds."""
    screen = records
    records = [r for r in records if r["method"] not in SHIFTED_VALIDATION_METHODS]  # the screens' methods: their own tables
    rows = [r for r in rows if r["method"] not in SHIFTED_VALIDATION_METHODS]
    datasets = in_order({r["dataset"] for r in rows})
    methods = [m for m in METHOD_ORDER if any(r["method"] == m for r in rows)]
    table = {(r["dataset"], r["method"]): r for r in rows}
    out = []
    for metric, title in (("nlpd_original", "test NLPD"), ("rmse_original", "test RMSE")):
        out += [f"**Best {title} per set** (original units, lower is better; mean over the splits every method on the set "
                "has; the runner-up's mean paired difference from the best ± its paired SE)", ""]
        out += ["| dataset | shared splits | best | runner-up (+difference ± SE) |", "|---|---|---|---|"]
        out += _best_by_set(records, datasets, metric) + [""]
    for metric, title in (
        ("nlpd_original", "NLPD (original units)"),
        ("rmse_original", "RMSE (original units)"),
        ("nlpd", "NLPD (standardised targets)"),
    ):
        out += metric_table(table, datasets, methods, metric, title)
    out += gap_targets_markdown(records, datasets)
    out += paired_differences_markdown(records, datasets)
    out += gap_diagnosis_markdown(records, datasets, methods)
    out += slab_screen_markdown(screen)
    out += gap_targets_markdown(screen, datasets, "adgp_slab")
    if any(r["method"] in MIXED_METHODS for r in screen):  # the half-shifted screen also reads the published splits
        out += mixed_screen_markdown(screen, published_records())
    out += gap_targets_markdown(screen, datasets, "adgp_mixed")
    out += published_gap_markdown(in_order(set(PUBLISHED_GAP) | set(datasets)))
    out += published_baselines_markdown(records, datasets)
    out += seconds_table(table, datasets, methods)
    subset = ", ".join(f"{d} splits 0–{k - 1}" for d, k in GAP_DEFAULT_MAX_SPLITS.items())
    out += [f"Splits run by default: every gap split of each set (one per input feature), except {subset}: the splits of "
            "their first features, a rule fixed before any record.", ""]
    out += protocol_lines(screen)
    return "\n".join(out) + "\n"


def no_gap_records_markdown() -> str:
    """The gap page's block before any gap record exists."""
    return ("No gap-split records yet. Run, for example, `python -m experiments uci --splits-kind gap --dataset yacht "
            "--method nn --budget converged --data-dir DIR`; this block is rewritten from the records.\n")
