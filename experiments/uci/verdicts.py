"""The paper's claims checked on the UCI records, and the other verdicts a page states (every comparison over the
splits both methods share)."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Sequence

import numpy as np

from activated_dgp.metrics import homoscedastic_gaussian_nlpd
from experiments.harness.statistics import standard_error
from experiments.methods import LABELS
from experiments.methods.data import in_order
from experiments.uci.summary import by_split, geometric_means, paired, shared_splits


def claims(records: Sequence[Dict]) -> List[str]:
    """The paper's Sec. 5.2 claims, checked on split means (lower is better for both metrics). Each comparison
    averages both methods over the splits they share, so a method with fewer splits so far is never compared
    with another's mean over other splits."""
    datasets = in_order({r["dataset"] for r in records})
    lines = []
    for metric, method, other, text in (
        ("rmse", "adgp", "nn", "ADGP RMSE ≤ its NN initialisation (NN)"),
        ("nlpd", "adgp", "nn", "ADGP NLPD < NN"),
        ("nlpd", "adgp", "dgp", "ADGP NLPD < classic DGP"),
        ("nlpd", "adgp", "nn_ts", "ADGP NLPD < NN+TS (beyond a recalibrated network; not a target)"),
        ("nlpd", "adgp", "dropout", "ADGP NLPD < MC dropout (not a target)"),
        ("nlpd", "adgp", "ensemble", "ADGP NLPD < the ensemble of 5 twins (not a target)"),
        ("rmse", "adgp", "ensemble", "ADGP RMSE ≤ the ensemble of 5 twins (not a target)"),
        ("rmse", "plain_adgp", "plain", "plain→ADGP RMSE ≤ the plain network's (the approximate conversion; not a target)"),
        ("nlpd", "plain_adgp", "plain", "plain→ADGP NLPD < the plain network's (not a target)"),
        ("nlpd", "plain_adgp", "dgp", "plain→ADGP NLPD < classic DGP (not a target)"),
        ("nlpd", "plain_adgp", "adgp", "plain→ADGP NLPD < ADGP (converting the plain network instead of the twin)"),
        ("nlpd", "adgp_ensemble", "ensemble", "ADGP ensemble NLPD < the network ensemble (target: ≥ 6 of 9)"),
        ("nlpd", "adgp_ensemble", "dgp", "ADGP ensemble NLPD < classic DGP (target: ≥ 5 of 9)"),
        ("nlpd", "lla_neuralef", "nn", "LLA NeuralEF NLPD < NN, its MAP network (the direction of the NeuralEF paper's Table 2)"),
        ("nlpd", "lla_neuralef", "nn_ts", "LLA NeuralEF NLPD < NN+TS (not a target)"),
        ("nlpd", "lla_neuralef", "lla_last_layer", "LLA NeuralEF NLPD < LLA last layer (not a target)"),
        ("nlpd", "lla_neuralef", "adgp", "LLA NeuralEF NLPD < ADGP (reported as measured)"),
        ("nlpd", "lla_neuralef_evidence", "lla_neuralef", "LLA NeuralEF, δ by evidence, NLPD < δ by validation (not a target)"),
        ("nlpd", "lla_neuralef_evidence", "nn", "LLA NeuralEF, δ by evidence, NLPD < NN (not a target)"),
        ("nlpd", "lla_last_layer", "nn", "LLA last layer NLPD < NN (not a target)"),
        ("nlpd", "relu_adgp", "relu_ts", "ReLU→ADGP (made convertible) NLPD < ReLU NN+TS, the same network temperature-scaled (target: ≥ 6 of 9)"),
        ("nlpd", "relu_adgp", "relu_tuned_ts", "ReLU→ADGP NLPD < ReLU NN+TS after the same extra training (its control)"),
        ("nlpd", "relu_bare", "relu_ts", "ReLU→ADGP as is NLPD < ReLU NN+TS (not a target)"),
        ("nlpd", "relu_lla_kron", "relu_ts", "ReLU LLA KFAC NLPD < ReLU NN+TS, the same network (not a target)"),
        ("nlpd", "relu_adgp", "relu_lla_kron", "ReLU→ADGP NLPD < ReLU LLA KFAC (not a target)"),
        ("nlpd", "adgp_slab", "nn_ts", "ADGP slab-v NLPD < NN+TS (the slab recipe's confirmation; the default's target: ≥ 7 of 9)"),
        ("nlpd", "adgp_mixed", "nn_ts", "ADGP mixed-v NLPD < NN+TS (the half-shifted screen's (b), then its confirmation; the default's target: ≥ 7 of 9)"),
        ("nlpd", "relu_adgp_kl", "relu_adgp", "ReLU→ADGP KL-penalised NLPD < ReLU→ADGP (the kl_weight rule's (b): ≥ 3 of the 5 small sets)"),
        ("nlpd", "relu_adgp_kl", "relu_ts", "ReLU→ADGP KL-penalised NLPD < ReLU NN+TS (not a target)"),
    ):
        pairs = []
        for d in datasets:
            rows = paired(records, d, (method, other))
            if method in rows and other in rows:
                pairs.append((d, rows[method][f"{metric}_mean"], rows[other][f"{metric}_mean"], rows[method]["splits"]))
        if not pairs:
            continue
        wins = [d for d, a, b, _ in pairs if a <= b]
        losses = [d for d, a, b, _ in pairs if a > b]
        counts = ", ".join(f"{d} {k}" for d, _, _, k in pairs)
        lines.append(
            f"- {text}: {len(wins)} of {len(pairs)} datasets" + (f" (not on: {', '.join(losses)})" if losses else "")
            + f"; shared splits: {counts}"
        )
    for other in ("nn", "dgp", "nn_ts"):
        line = _calibration_claim(records, datasets, other)
        if line:
            lines.append(line)
    # accuracy targets: ADGP's RMSE against its network's (the stage-2 issue), the twin's against the plain network's
    # (the twin's target): better, or within one standard error (over the shared splits) of the other's mean RMSE
    for method, other, text in (
        ("adgp", "nn", "ADGP RMSE better than NN or within one standard error of NN's mean"),
        ("nn", "plain", "The twin (NN) RMSE better than the plain network's or within one standard error of its mean"),
        ("relu_adgp", "relu", "ReLU→ADGP (made convertible) RMSE better than its ReLU network's or within one standard error of its mean (target: ≥ 8 of 9)"),
        ("adgp_slab", "nn", "ADGP slab-v RMSE better than NN or within one standard error of NN's mean (the slab recipe's confirmation; the default's target: 9 of 9)"),
        ("adgp_mixed", "nn", "ADGP mixed-v RMSE better than NN or within one standard error of NN's mean (the half-shifted screen's (c), then its confirmation; the default's target: 9 of 9)"),
    ):
        line = within_one_se_claim(records, datasets, method, other, text)
        if line:
            lines.append(line)
    for method in ("relu_adgp", "relu_adgp_kl"):
        line = _conversion_kl_claim(records, datasets, method)
        if line:
            lines.append(line)
    line = _rmse_ratio_claim(records, datasets, "relu_adgp_kl", "relu_adgp", 1.05,
                             "ReLU→ADGP KL-penalised RMSE at most 5 % above ReLU→ADGP's (the kl_weight rule's (c): every set)")
    if line:
        lines.append(line)
    line = _best_step_claim(records, datasets)
    if line:
        lines.append(line)
    for method in PRIOR_PRECISION_RANGES:
        line = _prior_precision_edge_claim(records, method)
        if line:
            lines.append(line)
    line = _mean_gain_claim(records, datasets, "lla_neuralef", "nn", "LLA NeuralEF's NLPD gain over NN (NN's mean NLPD − LLA NeuralEF's, shared splits)")
    if line:
        lines.append(line)
    for method in ("adgp", "relu_adgp"):
        line = _kept_start_claim(records, datasets, method)
        if line:
            lines.append(line)
    chosen = [f"{d} {geometric_means(v)}" for d in datasets
              if (v := [r["extra"]["kernel_variances"] for r in records if r["dataset"] == d and r["method"] == "adgp"
                        and r.get("extra", {}).get("kernel_variances")])]
    if chosen:
        lines.append("- ADGP's kernel variance v chosen per layer on the validation part (geometric mean over splits; "
                     "the GP's prior variance in a layer is v times its kernel's, the noise's σ² is chosen with it): " + "; ".join(chosen))
    return lines + paired_difference_lines(records, datasets)


def _conversion_kl_claim(records: Sequence[Dict], datasets: Sequence[str], method: str = "relu_adgp", bound: float = 10.0) -> Optional[str]:
    """Per dataset, the largest KL per data point (nats) that ``method``'s converted means carry into the ELBO at
    conversion (before v is chosen), over the splits that recorded it, against ``bound`` (the target: every set)."""
    worst = {}
    for r in records:
        value = r.get("extra", {}).get("conversion_kl_per_point") if r["method"] == method else None
        if value is not None:
            worst[r["dataset"]] = max(worst.get(r["dataset"], 0.0), float(value))
    if not worst:
        return None
    over = [d for d in datasets if d in worst and worst[d] > bound]
    return (f"- {LABELS[method]}: the converted means' KL per data point ≤ {bound:g} nats on {len(worst) - len(over)} of "
            f"{len(worst)} datasets with the record (largest over splits: " + ", ".join(f"{d} {worst[d]:.3g}" for d in datasets if d in worst)
            + "; target: every set)")


def _rmse_ratio_claim(records: Sequence[Dict], datasets: Sequence[str], method: str, other: str, ratio: float, text: str) -> Optional[str]:
    """Per dataset, ``method``'s mean RMSE over the splits it shares with ``other`` at most ``ratio`` times ``other``'s."""
    pairs = []
    for d in datasets:
        rows = paired(records, d, (method, other))
        if method in rows and other in rows:
            pairs.append((d, rows[method]["rmse_mean"] / rows[other]["rmse_mean"], rows[method]["splits"]))
    if not pairs:
        return None
    over = [f"{d} {r:.2f}×" for d, r, _ in pairs if r > ratio]
    return (f"- {text}: {len(pairs) - len(over)} of {len(pairs)} datasets" + (f" (not on: {', '.join(over)})" if over else "")
            + "; shared splits: " + ", ".join(f"{d} {k}" for d, _, k in pairs))


#: The converted models against the networks they start from (and the ensemble against the classic DGP), split by
#: split: (method, other, the line's text). A paired NLPD difference is the same in standardised and original units.
PAIRED_DIFFERENCES = (
    ("adgp", "nn_ts", "ADGP NLPD − NN+TS's (how large the default's wins over temperature scaling are)"),
    ("relu_adgp", "relu_ts", "ReLU→ADGP (made convertible) NLPD − ReLU NN+TS's"),
    ("adgp_ensemble", "ensemble", "ADGP ensemble NLPD − the network ensemble's"),
    ("adgp_ensemble", "dgp", "ADGP ensemble NLPD − classic DGP's"),
)


def paired_difference_lines(records: Sequence[Dict], datasets: Sequence[str]) -> List[str]:
    """One :func:`paired_difference_claim` line per pair of :data:`PAIRED_DIFFERENCES` that has records."""
    return [line for method, other, text in PAIRED_DIFFERENCES
            if (line := paired_difference_claim(records, datasets, method, other, text))]


def paired_difference_claim(records: Sequence[Dict], datasets: Sequence[str], method: str, other: str, text: str) -> Optional[str]:
    """Whether a win is larger than the split-to-split noise. Per dataset, over the k splits both methods have, the
    mean of the per-split differences Δ_s = NLPD_method,s − NLPD_other,s and its paired standard error
    sd(Δ)/√k (ddof 1; none for k = 1). The datasets are then sorted by whether the mean difference lies more than one
    paired SE below zero (``method`` better), more than one above (``other`` better), or within one SE."""
    parts, below, above, within = [], [], [], []
    for d in datasets:
        shared = sorted(shared_splits(records, d, (method, other)))
        if not shared:
            continue
        nlpd = {(r["method"], r["split"]): r["nlpd"] for r in records if r["dataset"] == d and r["method"] in (method, other)}
        deltas = np.array([nlpd[method, s] - nlpd[other, s] for s in shared])
        mean = float(deltas.mean())
        if len(shared) < 2:
            parts.append(f"{d} {mean:+.4f} (1 split, no SE)")
            continue
        se = standard_error(deltas)
        parts.append(f"{d} {mean:+.4f} ± {se:.4f} ({len(shared)})")
        (below if mean < -se else above if mean > se else within).append(d)
    if not parts:
        return None
    groups = "; ".join(f"{label}: {', '.join(names) if names else 'none'}" for label, names in (
        ("more than one paired SE below", below), ("more than one paired SE above", above), ("within one SE", within)))
    return f"- {text} (mean of paired split differences ± paired SE, shared splits): " + ", ".join(parts) + f". {groups}"


def _kept_start_claim(records: Sequence[Dict], datasets: Sequence[str], method: str = "adgp") -> Optional[str]:
    """On how many of ``method``'s cells early-stopped stage 2 restored its start (best validation check at step 0,
    ``extra.dgp.best_step``): there the fit is the converted network with the v and noise chosen before stage 2."""
    kept, total, per_set = 0, 0, []
    for d in datasets:
        steps = [r["extra"]["dgp"]["best_step"] for r in records if r["dataset"] == d and r["method"] == method
                 and r.get("extra", {}).get("dgp", {}).get("best_step") is not None]
        if steps:
            kept, total = kept + sum(s == 0 for s in steps), total + len(steps)
            per_set.append(f"{d} {sum(s == 0 for s in steps)} of {len(steps)}")
    if not total:
        return None
    return (f"- {LABELS[method]}'s stage 2 kept its start (best validation check at step 0, so the fit is the converted "
            f"network with the v and noise chosen before stage 2) on {kept} of {total} cells: " + ", ".join(per_set))


def _mean_gain_claim(records: Sequence[Dict], datasets: Sequence[str], method: str, other: str, text: str) -> Optional[str]:
    """"text: d₁ g₁ (k₁), …": per dataset, ``other``'s mean NLPD minus ``method``'s over the splits both have (positive:
    ``method`` is better), so that the size of a win, not only its sign, is read from the records."""
    gains = []
    for d in datasets:
        rows = paired(records, d, (method, other))
        if method in rows and other in rows:
            gains.append(f"{d} {rows[other]['nlpd_mean'] - rows[method]['nlpd_mean']:+.5f} ({rows[method]['splits']})")
    return f"- {text}: " + ", ".join(gains) if gains else None


#: where each NeuralEF LLA method searches δ: LinearisedLaplace's default validation grid, and the evidence's range
PRIOR_PRECISION_RANGES = {"lla_neuralef": ("validation", 1e-4, 1e4, "grid"),
                          "lla_neuralef_evidence": ("marginal_likelihood", 1e-8, 1e8, "search range")}


def _prior_precision_edge_claim(records: Sequence[Dict], method: str = "lla_neuralef") -> Optional[str]:
    """On how many cells the prior precision δ of ``method`` is the smallest or largest value it could take
    (:data:`PRIOR_PRECISION_RANGES`): the validation-chosen δ of ``lla_neuralef`` on LinearisedLaplace's default grid
    (10^−4 … 10^4), the evidence's δ of ``lla_neuralef_evidence`` in [10^−8, 10^8] (an edge: within 1 % of it). At the lower
    edge the score still improves beyond it: as δ → 0 eq. 22's covariance rises to Ψ̃ (Σ_i Ψ̃_iᵀ Λ_i Ψ̃_i)⁻¹ Ψ̃ᵀ, the most
    variance the k eigenfunctions can carry; as δ grows the LLA's variance is switched off."""
    by, low, high, what = PRIOR_PRECISION_RANGES[method]
    cells = [(r["dataset"], r["extra"]["prior_precision"]) for r in records
             if r["method"] == method and r["extra"].get("prior_precision_by") == by]
    if not cells:
        return None

    def at(edge):  # within 1 %: the grid's neighbours are 10^(1/4) apart, the search stops well inside 1 %
        where = Counter(d for d, v in cells if np.isclose(v, edge, rtol=1e-2, atol=0.0))
        return f"{sum(where.values())}" + (" (" + ", ".join(f"{d} {k}" for d, k in sorted(where.items())) + ")" if where else "")

    chosen = "validation-chosen" if by == "validation" else "evidence-chosen"
    return (f"- {LABELS[method]}: the {chosen} prior precision δ is at the lower edge of its {what} (10^{int(np.log10(low))}) on "
            f"{at(low)} of {len(cells)} cells and at the upper edge (10^{int(np.log10(high))}) on {at(high)}").replace("10^-", "10^−")


def within_one_se(mean: float, other_mean: float, other_se: float) -> bool:
    """Whether a mean RMSE is below ``other``'s or above it by at most ``other``'s standard error (a NaN SE, one split,
    admits only "below")."""
    return bool(mean <= other_mean or (np.isfinite(other_se) and mean - other_mean <= other_se))


def within_one_se_claim(records: Sequence[Dict], datasets: Sequence[str], method: str, other: str, text: str) -> Optional[str]:
    """"text: k of n datasets": ``method``'s mean RMSE ≤ ``other``'s, or above it by at most ``other``'s standard error."""
    within, unknown, missed = [], [], []
    for d in datasets:
        rows = paired(records, d, (method, other))
        if method not in rows or other not in rows:
            continue
        a, n = rows[method], rows[other]
        if within_one_se(a["rmse_mean"], n["rmse_mean"], n["rmse_se"]):
            within.append(d)
        elif not np.isfinite(n["rmse_se"]):
            unknown.append(d)
        else:
            missed.append(d)
    total = len(within) + len(unknown) + len(missed)
    if not total:
        return None
    return (
        f"- {text}: {len(within)} of {total} datasets"
        + (f" (not on: {', '.join(missed)})" if missed else "")
        + (f" (one split only, no standard error: {', '.join(unknown)})" if unknown else "")
    )


def _best_step_claim(records: Sequence[Dict], datasets: Sequence[str], method: str = "nn", fraction: float = 0.8,
                     control: str = "plain") -> Optional[str]:
    """Whether the twin's early stopping found its best step within ``fraction`` of the network cap on every split
    (the twin's "still improving when stopped" check), per dataset: the largest best step over splits. Where it
    did not, the plain network of the same shape (``control``) on the same splits says whether the cap binds the twin
    alone or any network: its largest best step, and on how many shared splits it stopped later than the twin."""
    best = {}  # (method, dataset) -> {split: (best step, cap)}
    for r in records:
        network = r.get("extra", {}).get("network")
        cap = r.get("budget", {}).get("nn_steps")
        if r["method"] not in (method, control) or not isinstance(network, dict) or network.get("best_step") is None or not cap:
            continue
        best.setdefault((r["method"], r["dataset"]), {})[r.get("split")] = (int(network["best_step"]), int(cap))
    twin = {d: steps for (m, d), steps in best.items() if m == method}
    if not twin:
        return None
    late = []
    for d in datasets:
        if d not in twin:
            continue
        step, cap = max(twin[d].values())
        if step <= fraction * cap:
            continue
        text = f"{d} {step:,} of {cap:,}"
        plain = best.get((control, d), {})
        shared = sorted(set(plain) & set(twin[d]))
        if shared:
            later = sum(plain[s][0] > twin[d][s][0] for s in shared)
            text += (f"; the plain network on the same splits: largest best step {max(plain[s][0] for s in shared):,}, "
                     f"later than the twin's on {later} of {len(shared)} splits")
        late.append(text)
    return (
        f"- The twin's best step ≤ {fraction:.0%} of the network cap on every split: {len(twin) - len(late)} of {len(twin)} datasets"
        + (f" (not on: {'; '.join(late)}; largest best step over the splits)" if late else "")
    )


def _calibration_claim(records: Sequence[Dict], datasets: Sequence[str], other: str) -> Optional[str]:
    """ADGP's PIT calibration error against ``other``'s, per dataset over the splits where both records have it."""
    pairs = []
    for d in datasets:
        splits_of = {m: by_split(records, d, m, "calibration_error") for m in ("adgp", other)}
        shared = sorted(set(splits_of["adgp"]) & set(splits_of[other]))
        if shared:
            pairs.append((d, *(np.mean([splits_of[m][k]["calibration_error"] for k in shared]) for m in ("adgp", other)), len(shared)))
    if not pairs:
        return None
    losses = [d for d, a, b, _ in pairs if a > b]
    return (
        f"- ADGP calibration error (PIT) < {LABELS[other]}'s: {len(pairs) - len(losses)} of {len(pairs)} datasets"
        + (f" (not on: {', '.join(losses)})" if losses else "")
        + "; " + ", ".join(f"{d} {a:.3f} vs {b:.3f} ({k})" for d, a, b, k in pairs)
    )


def nlpd_gap(records: Sequence[Dict], method: str = "adgp", other: str = "dgp") -> List[Dict]:
    """Per dataset, ``method``'s NLPD minus ``other``'s (standardised, mean over the splits both have), split into
    accuracy, the mean of log(RMSE_method / RMSE_other), and the rest: the difference of each one's NLPD above
    :func:`activated_dgp.metrics.homoscedastic_gaussian_nlpd` of its own RMSE."""
    out = []
    for d in in_order({r["dataset"] for r in records}):
        splits_of = {m: by_split(records, d, m) for m in (method, other)}
        shared = sorted(shared_splits(records, d, (method, other)))
        if not shared:
            continue
        a = [splits_of[method][k] for k in shared]
        b = [splits_of[other][k] for k in shared]
        excess = [
            float(np.mean([r["nlpd"] - homoscedastic_gaussian_nlpd(r["rmse"]) for r in rows])) for rows in (a, b)
        ]
        out.append({
            "dataset": d,
            "splits": len(shared),
            "gap": float(np.mean([x["nlpd"] - y["nlpd"] for x, y in zip(a, b)])),
            "accuracy": float(np.mean([np.log(x["rmse"] / y["rmse"]) for x, y in zip(a, b)])),
            "excess": excess,
        })
    return out
