"""Epoch time of a three-layer activated DGP against GPflux's standard DGP and the network twin.

Data: a 10,000 × 8 synthetic regression set; minibatch 128 (79 steps per epoch); three layers, 128 units /
inducing variables each, float64. Models, all trained with ``keras.Model.fit`` and Adam in the same process:

* activated DGP — :func:`activated_dgp.build_activated_dgp` (ZonalArcCosine + Softplus ActivationFeature, Ñ = 20),
  whose layers own their training step (:class:`activated_dgp.deep.layers.ActivatedGPLayer`: q_sqrt read once, no
  ``fill_triangular``, the q_sqrt products over the lower triangle); also with gpflux's own ``GPLayer`` step
  (traced inside :func:`activated_dgp.deep.layers.gpflux_step`: q_sqrt transformed in the conditional and again in
  the KL, the batched conditional of :mod:`activated_dgp.zonal.conditionals`), and with the whole step XLA-compiled (``TrainingSchedule(jit_compile=True)``; on CPU XLA's Cholesky and
  triangular solves replace LAPACK's);
* GPflux DGP — ``gpflux.architectures.build_constant_input_dim_deep_gp`` (SquaredExponential, 128 inducing points);
* network twin — :func:`activated_dgp.build_activated_nn` on MSE (the DGP's mean forward pass as a network);
* plain MLP — tf-keras Dense(128, softplus) → Dense(8) ×2 → Dense(128, softplus) → Dense(1), for scale.

Each epoch is timed by a callback; the first epoch (tracing, XLA compilation) is reported separately and
the per-epoch figure is the median of the remaining ones. The models take turns (round-robin over
``--rounds``) so that slow drifts of a shared machine hit all of them alike.

Run:  python -m benchmarks.dgp_epoch            (writes docs/results/dgp_epoch.json and the "dgp_epoch" block of
                                                docs/benchmarks*.md; ``--report-only`` rewrites the block from the
                                                record, timing nothing)
      python -m benchmarks.dgp_epoch --output docs/results/dgp_epoch_owned.json --skip-xla --rounds 2
                                               (a record elsewhere, e.g. under load: docs/benchmarks*.md is left as it
                                                is and the block is printed; ``--skip-xla`` leaves out the slow
                                                XLA-step model)
"""

from __future__ import annotations

import contextlib
from pathlib import Path
import statistics
import time

import gpflux
from gpflux.architectures import Config, build_constant_input_dim_deep_gp
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import build_activated_dgp, build_activated_nn
from activated_dgp.deep.layers import gpflux_step
from benchmarks._report import command_line, load_average_line, machine_state, record_line, report_block, write_record

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
    return build_activated_dgp(INPUT_DIM, NUM_DATA, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)


def gpflux_dgp_model(X):
    """GPflux's standard DGP of the same shape (SE kernels, 128 inducing points, whitened)."""
    config = Config(num_inducing=NUM_UNITS, inner_layer_qsqrt_factor=1e-5, likelihood_noise_variance=1e-2, whiten=True)
    dgp = build_constant_input_dim_deep_gp(X, num_layers=NUM_LAYERS, config=config)
    assert isinstance(dgp, gpflux.models.DeepGP)
    return dgp


OWNED, GPFLUX_STEP, XLA = "activated DGP", "activated DGP, gpflux's GPLayer step", "activated DGP, XLA step (jit_compile=True)"


def build_trainers(X, Y, skip_xla: bool = False):
    """name → (fit(epochs, callback)) closures over compiled keras models."""

    def dgp_trainer(dgp, jit_compile=False, context=contextlib.nullcontext):
        model = dgp.as_training_model()
        model.compile(tf_keras.optimizers.Adam(0.01), jit_compile=jit_compile)

        def fit(epochs, timer):
            with context():  # acts when the train function is traced, in the first fit
                return model.fit({"inputs": X, "targets": Y}, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[timer])

        return fit

    def network_trainer(network):
        network.compile(tf_keras.optimizers.Adam(0.01), loss="mse")
        return lambda epochs, timer: network.fit(X, Y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[timer])

    twin = build_activated_nn(INPUT_DIM, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)
    trainers = {
        OWNED: dgp_trainer(activated_dgp_model()),
        GPFLUX_STEP: dgp_trainer(activated_dgp_model(), context=gpflux_step),
        XLA: dgp_trainer(activated_dgp_model(), jit_compile=True),
        "GPflux DGP (SE, 128 inducing points)": dgp_trainer(gpflux_dgp_model(X)),
        "network twin": network_trainer(twin),
        "plain MLP (Dense softplus)": network_trainer(_plain_mlp()),
    }
    if skip_xla:
        del trainers[XLA]
    return trainers


OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "dgp_epoch.json"
REPORT_COMMAND = "python -m benchmarks.dgp_epoch --report-only"
REPORT_BLOCKS = [("docs/benchmarks_training.md", "dgp_epoch")]
REFERENCE = "GPflux DGP (SE, 128 inducing points)"
DEFAULTS = {"rounds": 2, "epochs_per_round": 3}


def measure(rounds: int, epochs_per_round: int, output=OUTPUT, skip_xla: bool = False, command_options: dict | None = None) -> dict:
    """Seconds of every epoch of every model, the models taking turns for ``rounds`` rounds of ``epochs_per_round``
    epochs; the record, written to ``output`` (None: not written)."""
    X, Y = _data()
    trainers = build_trainers(X, Y, skip_xla)
    epochs = {name: [] for name in trainers}  # per model, per round, the seconds of each epoch
    for round_index in range(rounds):
        for name, fit in trainers.items():
            timer = EpochTimer()
            fit(epochs_per_round, timer)
            epochs[name].append([round(t, 4) for t in timer.times])
            print(f"round {round_index + 1}/{rounds} {name:40s} epochs (s): " + ", ".join(f"{t:.2f}" for t in timer.times), flush=True)
    given = {"rounds": rounds, "epochs_per_round": epochs_per_round}
    command = command_line("python -m benchmarks.dgp_epoch", given, DEFAULTS) + "".join(f" {option}" for option in (command_options or {}).values() if option)
    record = {"command": command, "N": len(X), "D": INPUT_DIM,
              "layers": NUM_LAYERS, "units": NUM_UNITS, "batch": BATCH, "activation": ACTIVATION, **given,
              "models": [{"model": name, "epoch_seconds_per_round": times} for name, times in epochs.items()], **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def first_and_steady(model: dict) -> tuple:
    """A model's first epoch (tracing, compilation) and the seconds of every later one."""
    seconds = [t for times in model["epoch_seconds_per_round"] for t in times]
    return seconds[0], seconds[1:]


def markdown(record: dict, output: Path = OUTPUT) -> str:
    """The "dgp_epoch" block of docs/benchmarks*.md from its record (at ``output``): median epoch after the first, per model."""
    first = {model["model"]: first_and_steady(model)[0] for model in record["models"]}
    steady = {model["model"]: first_and_steady(model)[1] for model in record["models"]}
    per_epoch = {name: statistics.median(times) for name, times in steady.items()}
    rows = "\n".join(
        f"| {name} | {per_epoch[name]:.2f} | {per_epoch[name] / per_epoch[REFERENCE]:.2f} | {first[name]:.1f} | {len(steady[name])} |"
        for name in per_epoch
    )
    ratio = per_epoch[OWNED] / per_epoch[REFERENCE]
    twin_ratio = per_epoch[OWNED] / per_epoch["network twin"]
    step_line = (
        f"\n- The owned step takes {per_epoch[OWNED] / per_epoch[GPFLUX_STEP]:.2f}× the epoch time of the same model with gpflux's GPLayer step."
        if GPFLUX_STEP in per_epoch else ""
    )
    return f"""{record_line(output, record["command"])}

Command: `{record["command"]}` ({record["N"]:,} × {record["D"]} regression data, minibatch {record["batch"]}, {record["layers"]} layers of {record["units"]}
units / inducing variables, float64, Adam through `keras.Model.fit`; {record["rounds"]} rounds × {record["epochs_per_round"]} epochs per model, taking turns).

| model | median epoch (s) | / GPflux DGP | first epoch incl. compilation (s) | epochs timed |
|---|---|---|---|---|
{rows}

- The activated DGP takes {ratio:.2f}× the epoch time of GPflux's standard DGP (the target: ≤ 0.5×; and ≤ 3× the twin) and {twin_ratio:.1f}× that of its
  network twin, which computes the same basis functions without the GP's covariance algebra.{step_line}
{load_average_line(record)}"""


def report_from_records() -> str:
    """The "dgp_epoch" block of docs/benchmarks*.md from its record (``--report-only``)."""
    return report_block("dgp_epoch", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.dgp_epoch")


def _options(parser) -> None:
    parser.add_argument("--rounds", type=int, default=DEFAULTS["rounds"])
    parser.add_argument("--epochs-per-round", type=int, default=DEFAULTS["epochs_per_round"])
    parser.add_argument("--output", help="write the record here instead, leave docs/benchmarks*.md as it is and print the block")
    parser.add_argument("--skip-xla", action="store_true", help="leave out the XLA-step model (minutes per round on a CPU)")


def _measure(args, output):
    options = {"output": f"--output {args.output}" if args.output else "", "skip_xla": "--skip-xla" if args.skip_xla else ""}
    if args.output and output is not None:
        return markdown(measure(args.rounds, args.epochs_per_round, Path(args.output), args.skip_xla, options), Path(args.output))
    return measure(args.rounds, args.epochs_per_round, output=output, skip_xla=args.skip_xla, command_options=options)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.dgp_epoch", __doc__.splitlines()[0], _measure, report_from_records, _options, markdown, OUTPUT)
