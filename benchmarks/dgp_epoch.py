"""Epoch time of a three-layer activated DGP against GPflux's standard DGP and the network twin (issue 3).

Data: a 10,000 × 8 synthetic regression set; minibatch 128 (79 steps per epoch); three layers, 128 units /
inducing variables each, float64. Models, all trained with ``keras.Model.fit`` and Adam in the same process:

* activated DGP — :func:`activated_dgp.build_activated_dgp` (ZonalArcCosine + Softplus ActivationFeature, Ñ = 20);
  also with the whole step XLA-compiled (``TrainingSchedule(jit_compile=True)``; on CPU XLA's Cholesky and
  triangular solves replace LAPACK's);
* GPflux DGP — ``gpflux.architectures.build_constant_input_dim_deep_gp`` (SquaredExponential, 128 inducing points);
* network twin — :func:`activated_dgp.build_activated_nn` on MSE (the DGP's mean forward pass as a network);
* plain MLP — tf-keras Dense(128, softplus) → Dense(8) ×2 → Dense(128, softplus) → Dense(1), for scale.

Each epoch is timed by a callback; the first epoch (tracing, XLA compilation) is reported separately and
the per-epoch figure is the median of the remaining ones. The models take turns (round-robin over
``--rounds``) so that slow drifts of a shared machine hit all of them alike.

Run:  python -m benchmarks.dgp_epoch            (writes the "dgp_epoch" section of docs/benchmarks.md)
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

NUM_DATA, INPUT_DIM, NUM_LAYERS, NUM_UNITS, BATCH = 10_000, 8, 3, 128, 128
#: The zonal Softplus, named: the committed timings were measured with it, the library default then (the Swish since).
ACTIVATION = "softplus"


class EpochTimer(tf_keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self._start)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((NUM_DATA, INPUT_DIM))
    Y = np.sin(X[:, :1] * 2.0) + 0.5 * X[:, 1:2] * X[:, 2:3] + 0.1 * rng.standard_normal((NUM_DATA, 1))
    return X, Y


def _plain_mlp():
    layers = [tf_keras.Input((INPUT_DIM,), dtype=tf.float64)]
    for _ in range(NUM_LAYERS - 1):
        layers += [tf_keras.layers.Dense(NUM_UNITS, "softplus", dtype=tf.float64), tf_keras.layers.Dense(INPUT_DIM, use_bias=False, dtype=tf.float64)]
    layers += [tf_keras.layers.Dense(NUM_UNITS, "softplus", dtype=tf.float64), tf_keras.layers.Dense(1, use_bias=False, dtype=tf.float64)]
    return tf_keras.Sequential(layers)


def activated_dgp_model():
    """The benchmark's activated DGP (3 layers of 128 units, D = 8, seeded)."""
    from activated_dgp import build_activated_dgp

    return build_activated_dgp(INPUT_DIM, NUM_DATA, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)


def gpflux_dgp_model(X):
    """GPflux's standard DGP of the same shape (SE kernels, 128 inducing points, whitened)."""
    import gpflux
    from gpflux.architectures import Config, build_constant_input_dim_deep_gp

    config = Config(num_inducing=NUM_UNITS, inner_layer_qsqrt_factor=1e-5, likelihood_noise_variance=1e-2, whiten=True)
    dgp = build_constant_input_dim_deep_gp(X, num_layers=NUM_LAYERS, config=config)
    assert isinstance(dgp, gpflux.models.DeepGP)
    return dgp


def build_trainers(X, Y):
    """name → (fit(epochs, callback)) closures over compiled keras models."""
    from activated_dgp import build_activated_nn

    def dgp_trainer(dgp, jit_compile=False):
        model = dgp.as_training_model()
        model.compile(tf_keras.optimizers.Adam(0.01), jit_compile=jit_compile)
        return lambda epochs, timer: model.fit({"inputs": X, "targets": Y}, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[timer])

    def network_trainer(network):
        network.compile(tf_keras.optimizers.Adam(0.01), loss="mse")
        return lambda epochs, timer: network.fit(X, Y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[timer])

    twin = build_activated_nn(INPUT_DIM, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)
    return {
        "activated DGP": dgp_trainer(activated_dgp_model()),
        "activated DGP, XLA step (jit_compile=True)": dgp_trainer(activated_dgp_model(), jit_compile=True),
        "GPflux DGP (SE, 128 inducing points)": dgp_trainer(gpflux_dgp_model(X)),
        "network twin": network_trainer(twin),
        "plain MLP (Dense softplus)": network_trainer(_plain_mlp()),
    }


def main(rounds: int, epochs_per_round: int, write: bool) -> str:
    from benchmarks._report import write_section

    X, Y = _data()
    trainers = build_trainers(X, Y)
    first, steady = {}, {name: [] for name in trainers}
    for round_index in range(rounds):
        for name, fit in trainers.items():
            timer = EpochTimer()
            fit(epochs_per_round, timer)
            if round_index == 0:
                first[name] = timer.times[0]
                steady[name] += timer.times[1:]
            else:
                steady[name] += timer.times
            print(f"round {round_index + 1}/{rounds} {name:40s} epochs (s): " + ", ".join(f"{t:.2f}" for t in timer.times), flush=True)

    per_epoch = {name: statistics.median(times) for name, times in steady.items()}
    reference = "GPflux DGP (SE, 128 inducing points)"
    rows = "\n".join(
        f"| {name} | {per_epoch[name]:.2f} | {per_epoch[name] / per_epoch[reference]:.2f} | {first[name]:.1f} | {len(steady[name])} |"
        for name in trainers
    )
    ratio = per_epoch["activated DGP"] / per_epoch[reference]
    twin_ratio = per_epoch["activated DGP"] / per_epoch["network twin"]
    doc = f"""Command: `python -m benchmarks.dgp_epoch` ({NUM_DATA:,} × {INPUT_DIM} regression data, minibatch {BATCH}, {NUM_LAYERS} layers of {NUM_UNITS}
units / inducing variables, float64, Adam through `keras.Model.fit`; {rounds} rounds × {epochs_per_round} epochs per model, taking turns).

| model | median epoch (s) | / GPflux DGP | first epoch incl. compilation (s) | epochs timed |
|---|---|---|---|---|
{rows}

- The activated DGP takes {ratio:.2f}× the epoch time of GPflux's standard DGP (issue 15's target ≤ 0.5×) and {twin_ratio:.1f}× that of its
  network twin, which computes the same basis functions without the GP's covariance algebra.
"""
    if write:
        write_section("dgp_epoch", doc, "python -m benchmarks.dgp_epoch")
    return doc


if __name__ == "__main__":
    from experiments.harness.cli import make_parser

    parser = make_parser("python -m benchmarks.dgp_epoch", __doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs-per-round", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    print(main(args.rounds, args.epochs_per_round, write=not args.no_write))
