"""Stage 2 on a converted plain softplus network: does train_dgp / train_two_stage keep the network's fit?

The reported case: N = 300 inputs uniform on [−2, 2], y = sin(3x) + N(0, 0.1²) noise, the network
[Dense(64, softplus), Dense(1, no bias)] trained 1,000 epochs (Adam 5e-3, batch 16, MSE), converted with
``dgp_from_keras(net, num_data=N, X=X)`` and trained 100 epochs by stage 2. Per seed the record holds the network
(train RMSE, first-layer |kernel|), the converted model at the start (ELBO terms, the residual prior variance
k − Qff, the condition number of Kuu, the posterior-mean weights B), the train RMSE of the mean after one
Adam-sized sign step on each parameter group alone, and the end of stage 2 in four settings:

* ``old``: the previous default (no learning-rate ramp, no guard): ``TrainingSchedule(epochs=100, ramp_steps=0)``,
  ``guard=False``;
* ``ramp``: the learning-rate ramp alone (``guard=False``);
* ``default``: today's ``train_dgp`` defaults (ramp and guard);
* ``two_stage``: ``train_two_stage(X, Y, network=net, seed=seed, recipe="paper")``: the defaults when its records
  were made.

    python -m experiments stage2_divergence --seeds 0-9   # records: docs/results/stage2/divergence/records.jsonl
    python -m experiments stage2_divergence --report-only # docs/results/stage2/divergence.json
    nice -n 10 python -m experiments stage2_divergence --cost  # docs/results/stage2/divergence_cost.json

One cell per seed, on the harness (experiments/harness/study.py): finished seeds are kept, and a change of what a
cell computes gets a new :data:`PROTOCOL` (records of another protocol are never mixed into divergence.json). The
records made before the harness (one JSON per seed, with the guarded settings rerun after the guard's check
frequency was capped) are protocol v1, moved unchanged into records.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path
import sys
import time

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import TrainingSchedule, dgp_from_keras, propagate_means, train_dgp, train_two_stage
from activated_dgp.deep.diagnostics import elbo_terms, residual_fraction
from activated_dgp.deep.posterior_mean import posterior_mean_weights, set_posterior_mean_weights
from activated_dgp.training import GUARD_MIN_STEPS
from experiments.harness import cli
from experiments.harness.artifacts import atomic_write_text
from experiments.harness.protocol import PROTOCOL_FIELDS, Protocol, relabel

NUM_DATA, NOISE_SD, NET_EPOCHS, NET_LR, NET_BATCH, DGP_EPOCHS = 300, 0.1, 1000, 5e-3, 16, 100


def data(seed: int):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(NUM_DATA, 1))
    return X, np.sin(3.0 * X) + NOISE_SD * rng.normal(size=(NUM_DATA, 1))


def network(seed: int, X, Y, epochs: int = NET_EPOCHS):
    tf_keras.utils.set_random_seed(seed)
    net = tf_keras.Sequential([tf_keras.Input((1,)), tf_keras.layers.Dense(64, "softplus"), tf_keras.layers.Dense(1, use_bias=False)])
    net.compile(tf_keras.optimizers.Adam(NET_LR), loss="mse")
    net.fit(X, Y, epochs=epochs, batch_size=NET_BATCH, verbose=0)
    return net


def rmse(dgp, X, Y) -> float:
    return float(np.sqrt(np.mean((propagate_means(dgp, X)[-1].numpy() - Y) ** 2)))


def start_diagnosis(dgp, X, Y, learning_rate: float = 0.01) -> dict:
    """The converted model before stage 2, and the train RMSE after one step of ``learning_rate`` × sign(gradient)
    (Adam's first step) on each parameter group alone; for W also with the posterior-mean weights B held."""

    layer = dgp.f_layers[0]
    kernel, feature = layer.kernel.kernel, layer.inducing_variable.inducing_variable
    Kuu = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter()).numpy()
    eigen = np.linalg.eigvalsh(Kuu)
    terms = elbo_terms(dgp, X, Y, num_samples=1)
    _, f_var = layer.predict(X, full_cov=False)
    B = posterior_mean_weights(layer)
    with tf.GradientTape() as tape:
        loss = -dgp.elbo((X, Y))
    variables = dgp.trainable_variables
    gradients = tape.gradient(loss, variables)
    start = rmse(dgp, X, Y)
    steps = {}
    for variable, gradient in zip(variables, gradients):
        value = variable.numpy()
        variable.assign(value - learning_rate * np.sign(gradient.numpy()))
        name = "W" if variable is feature.W.unconstrained_variable else variable.name.split(":")[0]
        steps.setdefault(name, []).append({"gradient_norm": float(np.linalg.norm(gradient.numpy())), "rmse_after": rmse(dgp, X, Y)})
        if name == "W":
            set_posterior_mean_weights(layer, B)
            steps["W with B held"] = [{"rmse_after": rmse(dgp, X, Y)}]
        variable.assign(value)
        set_posterior_mean_weights(layer, B)
    return {
        "rmse": start,
        "expected_log_likelihood": terms.expected_log_likelihood,
        "kl": terms.kl[0],
        "mean_f_variance": float(np.mean(f_var.numpy())),
        "mean_residual_fraction": float(np.mean(residual_fraction(layer, X))),
        "noise_variance": float(dgp.likelihood_layer.likelihood.variance.numpy()),
        "kuu_condition": float(eigen[-1] / eigen[0]),
        "kuu_eigen_above_10_jitter": int(np.sum(eigen > 10 * gpflow.config.default_jitter())),
        "q_mu_norm": float(np.linalg.norm(layer.q_mu.numpy())),
        "B_norm": float(np.linalg.norm(B)),
        "W_abs_max": float(np.abs(feature.W.numpy()).max()),
        "sign_step": steps,
    }


def stage2(net, X, Y, seed: int, setting: str) -> dict:
    tf.random.set_seed(seed)
    if setting == "two_stage":
        result = train_two_stage(X, Y, network=net, seed=seed, recipe="paper")  # the default its records were made with
        dgp, history = result.dgp, result.dgp_history
    else:
        dgp = dgp_from_keras(net, num_data=len(X), X=X).dgp
        schedule = TrainingSchedule(epochs=DGP_EPOCHS, ramp_steps=0 if setting == "old" else TrainingSchedule.ramp_steps)
        history = train_dgp(dgp, X, Y, schedule, guard=setting == "default", seed=seed)
    return {
        "rmse": rmse(dgp, X, Y),
        "loss_first_epoch": float(history["loss"][0]),
        "loss_peak": float(max(history["loss"])),
        "loss_last": float(history["loss"][-1]),
        "restored": history.get("restored"),
        "restored_step": history.get("restored_step"),
        "best_step": history.get("best_step"),
        "steps_run": history.get("steps_run"),
    }


SETTINGS = ("old", "ramp", "default", "two_stage")


def run_seed(seed: int, settings=SETTINGS) -> dict:
    """One seed's record: the network, the converted model at the start, and stage 2 in each of ``settings``."""
    X, Y = data(seed)
    net = network(seed, X, Y)
    kernel = net.layers[0].kernel.numpy()
    network_rmse = float(np.sqrt(np.mean((net(X).numpy() - Y) ** 2)))
    record = {
        "seed": seed,
        "network_rmse": network_rmse,
        "first_kernel_abs_max": float(np.abs(kernel).max()),
        "first_kernel_abs_mean": float(np.abs(kernel).mean()),
        "start": start_diagnosis(dgp_from_keras(net, num_data=len(X), X=X).dgp, X, Y),
        "target_rmse": 1.5 * network_rmse + 0.05,
    }
    for setting in settings:
        record[setting] = stage2(net, X, Y, seed, setting)
    return record


def summary(records) -> dict:
    """divergence.json: per setting, how many seeds meet the target, the worst RMSE over the target, and the records."""
    records = sorted(records, key=lambda r: r["seed"])
    result = {
        "command": records[0].get("command", LEGACY_COMMAND) if records else LEGACY_COMMAND,
        "setup": {"num_data": NUM_DATA, "noise_sd": NOISE_SD, "network_epochs": NET_EPOCHS, "network_learning_rate": NET_LR,
                  "network_batch": NET_BATCH, "dgp_epochs": DGP_EPOCHS},
        "seeds": [r["seed"] for r in records],
        "target": "final train RMSE <= 1.5 x network's + 0.05",
    }
    for setting in SETTINGS:
        result[setting] = {
            "meets_target": sum(r[setting]["rmse"] <= r["target_rmse"] for r in records),
            "worst_rmse_over_target": max(r[setting]["rmse"] / r["target_rmse"] for r in records),
            "rmse": [r[setting]["rmse"] for r in records],
            "loss_peak": [r[setting]["loss_peak"] for r in records],
            "restored": [r[setting]["restored"] for r in records],
        }
    result["records"] = [{k: v for k, v in r.items() if k not in PROTOCOL_FIELDS} for r in records]
    return result


def guard_cost(sizes=(300, 20000), repeats: int = 3) -> dict:
    """Seconds of ``train_dgp`` without the guard, with it (the default frequency) and with a check every epoch, interleaved
    ``repeats`` times, on a one-layer DGP converted from seed 0's network, at N = each of ``sizes`` rows of the
    same problem; epochs chosen for about 600 steps (batch 128)."""


    X, Y = data(0)
    net = network(0, X, Y)
    default_min_steps = GUARD_MIN_STEPS
    result = {"guard_min_steps": default_min_steps}
    for size in sizes:
        rng = np.random.default_rng(1)
        Xn = rng.uniform(-2.0, 2.0, size=(size, 1))
        Yn = np.sin(3.0 * Xn) + NOISE_SD * rng.normal(size=(size, 1))
        epochs = max(1, round(600 / -(-size // 128)))
        times = {"guard": [], "guard_every_epoch": [], "no_guard": []}
        for _ in range(repeats):
            for label in times:
                tf.random.set_seed(0)
                dgp = dgp_from_keras(net, num_data=size, X=Xn[:2048]).dgp
                min_steps = 1 if label == "guard_every_epoch" else default_min_steps
                start = time.perf_counter()
                train_dgp(dgp, Xn, Yn, TrainingSchedule(epochs=epochs), guard=label != "no_guard", guard_min_steps=min_steps)
                times[label].append(time.perf_counter() - start)
        result[str(size)] = {"epochs": epochs, "steps_per_epoch": -(-size // 128), "seconds": times} | {
            f"median_ratio_{label}": float(np.median(times[label]) / np.median(times["no_guard"])) for label in ("guard", "guard_every_epoch")
        }
    return result


# ---------------------------------------------------------------- the study: one cell per seed

KEY = ("seed",)
OUT = Path("docs") / "results" / "stage2" / "divergence"  # records.jsonl; the summary goes next to the folder
PROTOCOL = Protocol("1")  # change the version when what a cell computes changes
LEGACY_COMMAND = "python -m experiments.stage2_divergence --seeds 0-9 --out docs/results/stage2"  # made the v1 records


def upgrade(record: dict) -> dict:
    """Records made before the study declared a :class:`Protocol` carry "v1" or, made before the harness, nothing:
    version 1."""
    return relabel(record, PROTOCOL if record.get("protocol") in (None, "v1") else None)


def add_options(parser) -> None:
    parser.add_argument("--seeds", default="0-9", help="seeds as a range 0-9 or a comma list")
    parser.add_argument("--cost", action="store_true",
                        help="only time train_dgp with and without the guard (divergence_cost.json next to --out)")


def _seeds(text: str):
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def cells(options) -> list:
    return [] if options.cost else [{"seed": seed} for seed in _seeds(options.seeds)]


def prepare(options, context) -> None:
    """With ``--cost``: the guard's cost (a timing, not a cell), written to divergence_cost.json."""
    if options.cost:
        cost = {"command": options.command} | guard_cost()
        atomic_write_text(Path(options.out).parent / "divergence_cost.json", json.dumps(cost, indent=1) + "\n")
        context.progress(json.dumps(cost))


def run_cell(cell, options, context) -> dict:
    record = run_seed(cell["seed"])
    context.progress(json.dumps({k: record[k]["rmse"] for k in SETTINGS} | {"seed": cell["seed"], "target": record["target_rmse"]}))
    return {**record, "command": options.command}


def report(records, options) -> None:
    if not records:
        return

    path, text = Path(options.out).parent / "divergence.json", json.dumps(summary(records), indent=1) + "\n"
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)


def main(argv=None) -> list:
    return cli.main("stage2_divergence", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
