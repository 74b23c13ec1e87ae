"""The shifted-validation screen on the gap splits: does choosing ADGP's kernel variances and noise (and stopping its
twin) on a covariate-shifted slab of the training split, instead of a random part, keep the GP on in the gaps?

The rule, fixed before any of its records (:data:`SCREEN_SETS`, :data:`SCREEN_SPLITS`): on gap splits 0–3 of yacht,
bostonHousing and energy, ``adgp_slab`` passes on a set when, over the splits that ``adgp``, ``adgp_slab`` and
``nn_slab_ts`` all have there,

(a) its mean standardised NLPD is below ``adgp``'s,
(b) its mean standardised NLPD is below ``nn_slab_ts``'s (the same network and slab, temperature scaling instead of
    the GP: the control that tells the slab's effect from the GP's), and
(c) its mean RMSE exceeds ``adgp``'s by less than one paired standard error (or is lower).

It passes the screen when it passes on at least 2 of the 3 sets; then it becomes the candidate for the confirmation
runs (every gap split, the published splits, rotated MNIST), and otherwise the default stays.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from experiments.harness.statistics import standard_error
from experiments.methods import LABELS
from experiments.uci.summary import by_split, shared_splits

SCREEN_SETS = ("yacht", "bostonHousing", "energy")
SCREEN_SPLITS = 4  # gap splits 0..3 of each screened set
SCREEN_METHODS = ("adgp", "adgp_slab", "nn_slab_ts")
PASSES_NEEDED = 2


def _set_verdict(records: Sequence[Dict], dataset: str) -> Dict:
    splits = sorted(k for k in shared_splits(records, dataset, SCREEN_METHODS) if k < SCREEN_SPLITS)
    if not splits:
        return {"splits": []}
    cells = {m: by_split(records, dataset, m) for m in SCREEN_METHODS + ("nn_ts",)}
    nlpd = {m: np.array([cells[m][k]["nlpd"] for k in splits]) for m in SCREEN_METHODS}
    rmse_delta = np.array([cells["adgp_slab"][k]["rmse"] - cells["adgp"][k]["rmse"] for k in splits])
    se = standard_error(rmse_delta)
    slab = [cells["adgp_slab"][k] for k in splits]
    ratio = [r["test_std"] / r["extra"]["train_std"] for r in slab if "train_std" in r.get("extra", {})]
    checks = {
        "a": nlpd["adgp_slab"].mean() < nlpd["adgp"].mean(),
        "b": nlpd["adgp_slab"].mean() < nlpd["nn_slab_ts"].mean(),
        "c": rmse_delta.mean() < (se if np.isfinite(se) else 0.0),
    }
    return {"splits": splits, "nlpd": {m: float(v.mean()) for m, v in nlpd.items()}, "rmse_delta": float(rmse_delta.mean()),
            "rmse_se": float(se), "ratio": float(np.mean(ratio)) if ratio else float("nan"),
            "z3": float(np.mean([r["z_above_3"] for r in slab])), "checks": checks, "complete": len(splits) == SCREEN_SPLITS}


def slab_screen_markdown(records: Sequence[Dict]) -> List[str]:
    """The screen's table and verdict (module docstring), or nothing before its first record."""
    if not any(r["method"] in ("adgp_slab", "nn_slab_ts") for r in records):
        return []
    out = ["**Shifted-validation screen** (standardised units; gap splits 0–3 of each set that all three methods have): "
           f"mean NLPD of {LABELS['adgp']}, {LABELS['adgp_slab']} and {LABELS['nn_slab_ts']}, {LABELS['adgp_slab']}'s RMSE "
           f"minus {LABELS['adgp']}'s (paired mean ± SE), its σ test / σ train and share |z| > 3, and the rule's checks "
           "(a) NLPD below ADGP's, (b) below NN+TS slab's, (c) RMSE within one paired SE", "",
           f"| dataset | splits | NLPD {LABELS['adgp']} | NLPD {LABELS['adgp_slab']} | NLPD {LABELS['nn_slab_ts']} | ΔRMSE ± SE | "
           "σ test / σ train | share |z| > 3 | checks |", "|---|---|---|---|---|---|---|---|---|"]
    verdicts = {}
    for d in SCREEN_SETS:
        v = verdicts[d] = _set_verdict(records, d)
        if not v["splits"]:
            out.append(f"| {d} | 0 | — | — | — | — | — | — | — |")
            continue
        checks = " ".join(f"({k}) {'✓' if ok else '✗'}" for k, ok in v["checks"].items())
        out.append(f"| {d} | {len(v['splits'])} | {v['nlpd']['adgp']:.3f} | {v['nlpd']['adgp_slab']:.3f} | {v['nlpd']['nn_slab_ts']:.3f} | "
                   f"{v['rmse_delta']:+.3f} ± {v['rmse_se']:.3f} | {v['ratio']:.2f} | {v['z3']:.3f} | {checks} |")
    complete = [d for d in SCREEN_SETS if verdicts[d].get("complete")]
    passed = [d for d in complete if all(verdicts[d]["checks"].values())]
    out.append("")
    if len(complete) < len(SCREEN_SETS):
        out.append(f"Verdict: not drawn yet; {len(complete)} of {len(SCREEN_SETS)} sets have all {SCREEN_SPLITS} screen splits "
                   f"(sets passing so far: {', '.join(passed) or 'none'}).")
    else:
        met = len(passed) >= PASSES_NEEDED
        out.append(f"Verdict: {LABELS['adgp_slab']} passes on {len(passed)} of {len(SCREEN_SETS)} sets ({', '.join(passed) or 'none'}); "
                   f"the rule needs {PASSES_NEEDED}: **{'passed' if met else 'failed'}**"
                   + (": the candidate for the confirmation runs." if met else ": the default recipe stays."))
    return out + [""]
