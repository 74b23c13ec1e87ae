"""Where stage 2 (the ELBO after converting a network) gains or loses accuracy: a diagnosis along training.

    python -m experiments stage2_diagnosis --dataset bostonHousing --split 0 --data-dir $ADGP_DATA_DIR --out runs/stage2
    python -m experiments stage2_diagnosis --dataset bostonHousing,energy,concrete,naval --splits 3 \\
        --variant all --data-dir $ADGP_DATA_DIR          # records in docs/results/stage2 (the default --out)
    python -m experiments stage2_diagnosis --report-only

One cell per (dataset, split, variant), on the harness (experiments/harness/study.py): finished cells are kept
and never rerun; the protocol key holds --nn-steps, --dgp-steps, --every and --samples, so records made with
other settings are never mixed in (the records made before the harness carry the page's settings, which are the
defaults here).

For each (dataset, split) one network twin is trained (early stopping on a 10 % validation part of the
training split, best weights restored: experiments/methods/protocol.py) and converted to an
activated DGP; each *variant* (a set of stage-2 options of :func:`activated_dgp.train_two_stage`) then
continues from the same network. At conversion, every ``--every`` steps and at the end the run records

* per layer: the residual fraction (Kff − Qff)/Kff on the inputs it sees (mean propagation), the kernel
  variance, and ‖W − W₀‖/‖W₀‖; the likelihood's noise variance;
* the ELBO on the training part, split into the expected log-likelihood and each layer's KL
  (:func:`activated_dgp.deep.diagnostics.elbo_terms`, fixed draws);
* RMSE and NLPD (standardised targets) on the training and test parts of: the network; the DGP's mean
  propagation with the likelihood noise (a single Gaussian); the DGP's sampled predictive mixture.

Records go to ``<out>/records.jsonl``; the report writes ``<out>/table.md`` and ``<out>/traces.png``. The
network of a (dataset, split) is trained once and shared by its variants through the harness' artifact cache.

The report also rewrites two generated blocks of the page ``<out>.md`` (docs/results/stage2.md) from the
committed records of two finished side studies whose runners are retired (their code is in the git history
before the harness migration): ``<out>/output_layer.jsonl`` (the output layer's variance at conversion:
NN+TS, v at fixed noise, v and noise jointly, plus the ELBO-optimal q(u)) and ``<out>/twin_weight_decay.jsonl``
(the twin trained with an L2 penalty λ chosen on the validation MSE, beside the classic DGP's RMSE from
docs/results/uci_long/records.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path
import sys
import time
from types import SimpleNamespace

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import train_network, train_two_stage
from activated_dgp.data import load_regression_dataset
from activated_dgp.deep.diagnostics import elbo_terms, layer_residual_fractions
from activated_dgp.deep.sampling import propagate_means
from activated_dgp.metrics import regression_metrics
from activated_dgp.training import split_validation, stage2_recipe
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, from_legacy, relabel
from experiments.harness.store import ResultStore
from experiments.harness.study import load_records
from experiments.methods import (BUDGETS, budget_protocol, build_twin_network, canonical_datasets, dgp_mixture,
                                 prepare_split, protocol_schedule, record_method_version)

# name → options of train_two_stage (plus "learning_rate" and "early_stopping" for the stage-2 schedule)
VARIANTS = {
    "baseline": dict(),
    "a_elbo_variance": dict(kernel_variance="elbo"),
    "a2_validation_variance": dict(kernel_variance="validation"),
    "b_warmup": dict(warmup_steps=300),
    "c_lr_1e-3": dict(learning_rate=1e-3),
    "d_validation_noise": dict(noise_variance="validation"),
    "e_early_stopping": dict(early_stopping=True),
    "ade": dict(kernel_variance="elbo", noise_variance="validation", early_stopping=True),
    "a2de": dict(kernel_variance="validation", noise_variance="validation", early_stopping=True),
}


def _metrics(y, means, variances):
    scores = regression_metrics(y, means, variances)
    return {"rmse": scores["rmse"], "nlpd": scores["nlpd"]}


class Diagnose(tf_keras.callbacks.Callback):
    """Records the diagnosis of the DGP (handed over by ``set_dgp`` at conversion) every ``every_steps``."""

    def __init__(self, data, every_steps: int, samples: int, elbo_rows: int = 2048):
        super().__init__()
        self.data, self.samples = data, samples
        self.per_epoch = int(np.ceil(len(data.X_fit) / 128))
        self.every_epochs = max(1, round(every_steps / self.per_epoch))
        self.trace, self.epoch = [], 0
        self.elbo_rows = np.random.default_rng(0).permutation(len(data.X_fit))[:elbo_rows]

    def set_dgp(self, dgp):
        self.dgp = dgp
        self.W0 = [layer.inducing_variable.inducing_variable.W.numpy().copy() for layer in dgp.f_layers]
        self.record(0)

    def on_epoch_end(self, epoch, logs=None):
        self.epoch = epoch + 1
        if self.epoch % self.every_epochs == 0:
            self.record(self.epoch * self.per_epoch)

    def record(self, step: int):
        d, dgp = self.data, self.dgp
        noise = float(dgp.likelihood_layer.likelihood.variance.numpy())
        terms = elbo_terms(dgp, d.X_fit[self.elbo_rows], d.y_fit[self.elbo_rows], num_samples=4, seed=0)
        entry = {
            "step": int(step),
            "noise_variance": noise,
            "kernel_variances": [float(layer.kernel.kernel.variance.numpy()) for layer in dgp.f_layers],
            "residual_fractions": layer_residual_fractions(dgp, d.X_fit[:1024]),
            "W_change": [
                float(np.linalg.norm(layer.inducing_variable.inducing_variable.W.numpy() - W0) / np.linalg.norm(W0))
                for layer, W0 in zip(dgp.f_layers, self.W0)
            ],
            "expected_log_likelihood": terms.expected_log_likelihood,
            "kl": terms.kl,
            "elbo": terms.elbo,
        }
        for part, X, y in (("train", d.X_fit[self.elbo_rows], d.y_fit[self.elbo_rows]), ("test", d.X_test, d.y_test)):
            mean = propagate_means(dgp, X)[-1].numpy()[:, 0]
            entry[f"{part}_mean"] = _metrics(y, mean[None], np.full((1, len(X)), noise))
            means, variances = dgp_mixture(dgp, X, self.samples, seed=1)
            entry[f"{part}_sampled"] = _metrics(y, means, variances)
        self.trace.append(entry)
        print(
            f"    step {step:5d}: ELBO {terms.elbo:10.1f} (ell {terms.expected_log_likelihood:9.1f}, KL {sum(terms.kl):9.1f}) "
            f"noise {noise:.3f} v {['%.3g' % v for v in entry['kernel_variances']]} resid {['%.2f' % r for r in entry['residual_fractions']]} "
            f"test RMSE mean {entry['test_mean']['rmse']:.3f} sampled {entry['test_sampled']['rmse']:.3f} NLPD {entry['test_sampled']['nlpd']:.3f}",
            flush=True,
        )


# ---------------------------------------------------------------- the study: one cell per (dataset, split, variant)

KEY = ("dataset", "split", "variant")
OUT = Path("docs") / "results" / "stage2"  # the page is docs/results/stage2.md
DEFAULTS = dict(nn_steps=10000, dgp_steps=1500, every=300, samples=16)  # the settings of the committed records
REPORT_COMMAND = "python -m experiments stage2_diagnosis --report-only"


def add_options(parser) -> None:
    """The study's own options (the harness adds --data-dir, --out, --seed, --report-only, --quiet)."""
    parser.add_argument("--dataset", default="bostonHousing", help="comma list of UCI folders (or boston-embedded)")
    parser.add_argument("--split", type=int, default=None, help="one split index (default: the first --splits)")
    parser.add_argument("--splits", type=int, default=1, help="splits 0..K−1 (ignored with --split)")
    parser.add_argument("--variant", default="baseline,a_elbo_variance,e_early_stopping,ade",
                        help=f"comma list from {', '.join(VARIANTS)} or 'all'")
    parser.add_argument("--nn-steps", type=int, default=DEFAULTS["nn_steps"], help="cap of network steps (early stopping decides)")
    parser.add_argument("--dgp-steps", type=int, default=DEFAULTS["dgp_steps"], help="stage-2 steps (a cap under early stopping)")
    parser.add_argument("--every", type=int, default=DEFAULTS["every"], help="diagnose every this many stage-2 steps")
    parser.add_argument("--samples", type=int, default=DEFAULTS["samples"], help="predictive samples for the metrics")


#: The options a cell's numbers depend on: (name, its prefix in older records' protocol strings, its type).
SETTINGS = (("nn_steps", "nn", int), ("dgp_steps", "dgp", int), ("every", "every", int), ("samples", "S", int))


def PROTOCOL(options) -> Protocol:
    """Every setting a cell's numbers depend on: records made with other settings are never mixed in."""
    return Protocol("1", {name: getattr(options, name) for name, _, _ in SETTINGS})


def upgrade(record: dict) -> dict:
    """Records made before the study declared a :class:`Protocol` carry ``v1:nn<…>:dgp<…>:every<…>:S<…>`` or, made
    before the harness, nothing: then they were made with :data:`DEFAULTS` (the page's command)."""
    made_under = Protocol("1", dict(DEFAULTS)) if "protocol" not in record else from_legacy(record["protocol"], SETTINGS)
    return relabel(record, made_under)


def variants(options) -> list:
    chosen = list(VARIANTS) if options.variant == "all" else [v.strip() for v in options.variant.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    return chosen


def cells(options) -> list:
    splits = [options.split] if options.split is not None else list(range(options.splits))
    return [{"dataset": name, "split": split, "variant": variant}
            for name in canonical_datasets(options.dataset.split(",")) for split in splits for variant in variants(options)]


def split_data(dataset_name: str, split: int, data_dir):
    """The split, standardised on its training part, with its seeded 10 % validation part."""
    dataset = load_regression_dataset(dataset_name, data_dir)
    data = prepare_split(dataset, split, SimpleNamespace(fixed_splits=bool(dataset.splits), seed=0))
    (X_fit, y_fit), (X_val, y_val) = split_validation(data.X_train, data.y_train, 0.1, data.seed)
    return data, SimpleNamespace(X_fit=X_fit, y_fit=y_fit, X_val=X_val, y_val=y_val, X_test=data.X_test, y_test=data.y_test)


def trained_network(cell, options, context, data, view):
    """The twin of (dataset, split), trained once and shared by the variants through the artifact cache:
    (network, history with steps_run / best_step)."""


    def build():
        tf_keras.backend.clear_session()
        tf.random.set_seed(data.seed)
        network = build_twin_network(view.X_fit.shape[1], data.seed)
        start = time.perf_counter()
        history = train_network(network, view.X_fit, view.y_fit, "gaussian", protocol_schedule(options.nn_steps, len(view.X_fit)),
                                validation_data=(view.X_val, view.y_val))
        context.progress(f"{cell['dataset']} split {cell['split']}: network {history['best_step']} best / "
                         f"{history['steps_run']} steps, {time.perf_counter() - start:.0f} s")
        return network.get_weights(), {"steps_run": history["steps_run"], "best_step": history["best_step"]}

    def save(artifact, path):
        weights, history = artifact
        np.savez(path, *weights, history=json.dumps(history))

    def load(path):
        with np.load(path) as saved:
            history = json.loads(str(saved["history"]))
            return [saved[f"arr_{i}"] for i in range(len(saved.files) - 1)], history

    key = {"dataset": cell["dataset"], "split": cell["split"], "nn_steps": options.nn_steps, "seed": data.seed}
    weights, history = context.artifacts.get_or_build("stage2_twin", key, ".npz", build, save, load)
    network = build_twin_network(view.X_fit.shape[1], data.seed)
    network.set_weights(weights)
    return network, history


def run_cell(cell, options, context) -> dict:
    data, view = split_data(cell["dataset"], cell["split"], options.data_dir)
    network, history = trained_network(cell, options, context, data, view)
    settings = dict(VARIANTS[cell["variant"]])
    learning_rate = settings.pop("learning_rate", 0.01)
    early = settings.pop("early_stopping", False)
    schedule = protocol_schedule(options.dgp_steps, len(view.X_fit), learning_rate=learning_rate, early_stopping=early)
    context.progress(f"  variant {cell['variant']}: {VARIANTS[cell['variant']]}")
    diagnose = Diagnose(view, options.every, options.samples)
    start = time.perf_counter()
    tf.random.set_seed(data.seed)
    result = train_two_stage(view.X_fit, view.y_fit, network=network, validation_data=(view.X_val, view.y_val), dgp_schedule=schedule,
                             seed=data.seed, callbacks=[diagnose],  # the variants are spelled out on the paper's recipe
                             recipe=stage2_recipe("paper", noise_variance=settings.pop("noise_variance", "train"), **settings))
    seconds = time.perf_counter() - start
    diagnose.record(result.dgp_history.get("best_step", diagnose.epoch * diagnose.per_epoch))
    diagnose.trace[-1]["final"] = True
    noise = float(np.mean((network(view.X_fit).numpy() - view.y_fit) ** 2))
    network_scores = {part: _metrics(y, network(X).numpy()[:, 0][None], np.full((1, len(X)), noise))
                      for part, X, y in (("train", view.X_fit, view.y_fit), ("test", view.X_test, view.y_test))}
    return {
        "options": VARIANTS[cell["variant"]],
        "network": network_scores,
        "network_steps": history["steps_run"],
        "network_best_step": history["best_step"],
        "dgp_steps_run": result.dgp_history.get("steps_run"),
        "dgp_best_step": result.dgp_history.get("best_step"),
        "trace": diagnose.trace,
        "seconds": round(seconds, 1),
        "num_fit": len(view.X_fit),
        "y_scale": data.y_scale,
        "command": options.command,
    }


def report(records, options) -> None:
    """``<out>/table.md``, ``<out>/traces.png`` and the page's two generated blocks of the retired side studies."""
    out = Path(options.out)
    if records:
        (out / "table.md").write_text(table(records))
        traces_figure(records, out / "traces.png")
    write_side_studies(out)


def table(records) -> str:
    lines = [
        "| dataset | split | variant | NN test RMSE / NLPD | DGP at conversion: mean RMSE, sampled RMSE / NLPD | DGP final: sampled RMSE / NLPD | final noise | final v per layer | residual fraction at conversion → final | ELBO conv → final (KL conv → final) | stage-2 steps (best / run) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        first, last = r["trace"][0], r["trace"][-1]
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['variant']} | {r['network']['test']['rmse']:.3f} / {r['network']['test']['nlpd']:.3f} "
            f"| {first['test_mean']['rmse']:.3f}, {first['test_sampled']['rmse']:.3f} / {first['test_sampled']['nlpd']:.3f} "
            f"| {last['test_sampled']['rmse']:.3f} / {last['test_sampled']['nlpd']:.3f} | {last['noise_variance']:.3f} "
            f"| {', '.join('%.3g' % v for v in last['kernel_variances'])} "
            f"| {', '.join('%.2f' % v for v in first['residual_fractions'])} → {', '.join('%.2f' % v for v in last['residual_fractions'])} "
            f"| {first['elbo']:.0f} → {last['elbo']:.0f} ({sum(first['kl']):.0f} → {sum(last['kl']):.0f}) "
            f"| {r['dgp_best_step']} / {r['dgp_steps_run']} |"
        )
    return "\n".join(lines) + "\n"


def traces_figure(records, path: Path) -> None:
    matplotlib.use("Agg")

    groups = sorted({(r["dataset"], r["split"]) for r in records})
    fig, axes = plt.subplots(2, len(groups), figsize=(3.6 * len(groups) + 1, 6), squeeze=False)
    for column, (dataset, split) in enumerate(groups):
        for r in (r for r in records if (r["dataset"], r["split"]) == (dataset, split)):
            trace = [t for t in r["trace"] if not t.get("final")]
            steps = [t["step"] for t in trace]
            for row, metric in enumerate(("rmse", "nlpd")):
                axes[row, column].plot(steps, [t["test_sampled"][metric] for t in trace], label=r["variant"], lw=1.2)
                axes[row, column].axhline(r["network"]["test"][metric], color="k", ls=":", lw=1)
        axes[0, column].set_title(f"{dataset} split {split}", fontsize=9)
        axes[1, column].set_xlabel("stage-2 step")
    axes[0, 0].set_ylabel("test RMSE (sampled)")
    axes[1, 0].set_ylabel("test NLPD (sampled)")
    axes[0, -1].legend(fontsize=7)
    fig.suptitle("Stage 2 along training; dotted: the network (standardised targets)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


OUTPUT_LAYER_STATES = ("nn_ts", "fixed_noise", "joint_noise", "joint_noise_optimal_q")


def output_layer_markdown(records) -> str:
    """Per (dataset, split) record of output_layer.jsonl: the test NLPD of each state at conversion, and the joint
    search's output-layer v and noise as a multiple of the validation MSE."""
    lines = [
        "| set, split (validation rows) | NN+TS | v at fixed σ² (v3) | v and σ² jointly (v4) | v4 + optimal q(u) | v4's output v, σ² / validation MSE |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        joint = r["joint_noise"]
        cells = " | ".join(f"{r[k]['nlpd']:.3f}" for k in OUTPUT_LAYER_STATES)
        lines.append(
            f"| {r['dataset']} {r['split']} ({r['num_validation']}) | {cells} | "
            f"{joint['kernel_variances'][-1]:.1e}, {joint['noise_variance'] / r['validation_mse']:.2f} |"
        )
    return "\n".join(lines)


def weight_decay_markdown(records, uci_records=()) -> str:
    """Per (dataset, split) of twin_weight_decay.jsonl: the unpenalised twin's test RMSE (standardised), the λ with
    the lowest validation MSE and its twin's test RMSE, and the classic DGP's from ``uci_records`` (the version
    of its definition in the header: :func:`experiments.methods.record_method_version`)."""
    cells = {}
    for record in records:
        cells.setdefault((record["dataset"], record["split"]), []).append(record)
    dgp = {(r["dataset"], r["split"]): r for r in uci_records if r.get("method") == "dgp"}
    shown = [dgp[cell] for cell in cells if cell in dgp]
    versions = sorted({f"v{record_method_version(r)}" for r in shown})
    header = f"classic DGP ({', '.join(versions)})" if versions else "classic DGP"
    lines = [f"| set, split | twin, λ = 0 | chosen λ | twin, chosen λ | {header} |",
             "|---|---|---|---|---|"]
    for (name, split), rows in sorted(cells.items()):
        plain = [r for r in rows if r["weight_decay"] == 0.0]
        if not plain:
            continue
        best = min(rows, key=lambda r: r["validation_mse"])
        reference = dgp.get((name, split))
        lines.append(f"| {name} {split} | {plain[0]['test_rmse']:.4f} | {best['weight_decay']:g} | {best['test_rmse']:.4f} | "
                     f"{'—' if reference is None else format(reference['rmse'], '.4f')} |")
    return "\n".join(lines)


def write_side_studies(out: Path, uci_out: Path = Path("docs") / "results" / "uci_long") -> None:
    """The two generated blocks of ``<out>.md`` made from the retired side studies' committed records."""
    page = Path(out).parent / f"{Path(out).name}.md"
    output_layer, weight_decay = Path(out) / "output_layer.jsonl", Path(out) / "twin_weight_decay.jsonl"
    if not page.exists():
        return
    if output_layer.exists():
        records = ResultStore(output_layer, ("dataset", "split")).records()
        write_block(page, "stage2_output_layer", output_layer_markdown(records), REPORT_COMMAND)
    if weight_decay.exists():
        records = ResultStore(weight_decay, ("dataset", "split", "weight_decay")).records()
        budgets = sorted({r.get("budget", "converged-long") for r in records})
        uci_records = [r for b in budgets for r in load_records("uci", uci_out, protocol=budget_protocol(BUDGETS[b]))]
        write_block(page, "twin_weight_decay", weight_decay_markdown(records, uci_records), REPORT_COMMAND)


def main(argv=None) -> list:
    return cli.main("stage2_diagnosis", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
