"""``predict_y`` with its defaults on a converted 3 × 64 network against Keras ``predict`` of the same network, and the floor.

Model: the library's twin (:func:`activated_dgp.build_activated_nn`, its default zonal activation) with three layers
of M = 64 units and widths P = 64, 64, 1 (a 3 × 64 MLP), D = 8, converted by :func:`activated_dgp.dgp_from_keras`
(untrained: the cost does not depend on the values). Timed, after one untimed call each (tracing), three calls of each taking turns (the medians): Keras
``network.predict(X, verbose=0)`` and ``predict_y(dgp, X)`` with every default (S = 100 samples, the default memory
budget and the batch size it gives), on the same ``--points`` inputs. Peak RSS growth during ``predict_y`` is recorded.

The floor: S samples through layers 2..L (layer 1 sees x once) are S forward passes of the network, plus the
variance work of every sampled row, about M_ℓ²/2 · (P_ℓ + 2) multiply-adds per layer (the triangular solve and one
quadratic form per output over the upper triangle), which dwarfs the forward pass when P_ℓ is wide. Its time is the
multiply-adds at the float64 matrix-product rate measured in the same run (the quadratic forms' product shape).

Run:  python -m benchmarks.prediction_vs_keras                  (10,000 points; writes docs/results/prediction_vs_keras.json
                                                                and the "prediction-vs-keras" block of docs/benchmarks*.md)
      python -m benchmarks.prediction_vs_keras --points 500 --no-write    (a quick check that it runs)
"""

from __future__ import annotations

from pathlib import Path
import resource

import numpy as np
import tensorflow as tf

from activated_dgp import build_activated_nn, dgp_from_keras, predict_y
from activated_dgp.deep.prediction import DEFAULT_MEMORY_BUDGET, prediction_batch_size
from benchmarks._report import (command_line, load_average_line, machine_state, median, record_line, report_block,
                                time_call, write_record)

INPUT_DIM, UNITS, WIDTHS, SAMPLES, TRUNCATION = 8, 64, (64, 64, 1), 100, 20
REPEATS = 3  # timed calls of each, taking turns; the medians are reported
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "prediction_vs_keras.json"
REPORT_COMMAND = "python -m benchmarks.prediction_vs_keras --report-only"
REPORT_BLOCKS = [("docs/benchmarks_prediction.md", "prediction-vs-keras")]
DEFAULTS = {"points": 10_000}


def multiply_adds(D=INPUT_DIM, M=UNITS, widths=WIDTHS, S=SAMPLES, truncation=TRUNCATION) -> dict:
    """Multiply-adds per predicted point: ``forward`` (S forward passes through layers 2..L and one through layer 1:
    the directions W h̃, M (D_ℓ + 1), the Clenshaw sum of the zonal series, 2 Ñ M, and the output map, M P_ℓ) and ``variance`` per row of layer ℓ (S rows for
    layers 2..L, one for layer 1): the triangular solve L⁻¹Kuf, M²/2, and, for the first and the output layer, the
    quadratic forms, M(M+1)/2 · (P_ℓ + 1) for P_ℓ ≥ 2 (:func:`activated_dgp.zonal.conditionals.symmetric_variances`),
    P_ℓ M² + P_ℓ M otherwise; the hidden layers in between are sampled from one draw of their inducing outputs per
    sample (:mod:`activated_dgp.deep.inducing_samples`), whose M·P per row is counted in the forward pass."""
    forward = variance = 0.0
    inputs = D
    for index, P in enumerate(widths):
        rows = 1 if index == 0 else S
        forward += rows * (M * (inputs + 1) + 2 * truncation * M + M * P)
        if 0 < index < len(widths) - 1:  # sampled from one draw of the inducing outputs per sample: the solve only
            variance += rows * M * M / 2
        else:
            variance += rows * (M * M / 2 + (M * (M + 1) / 2 * (P + 1) if P >= 2 else P * M * (M + 1)))
        inputs = P
    return {"forward": forward, "variance": variance}


def matmul_rate(S=SAMPLES, rows=8, M=UNITS, P=WIDTHS[0]) -> float:
    """float64 multiply-adds per second of one [S·rows, K] · [K, P] product, K = M(M+1)/2 (the quadratic forms of
    the variance work; median of 5 after a warm-up)."""

    K = M * (M + 1) // 2
    a = tf.random.stateless_normal([S * rows, K], seed=[0, 0], dtype=tf.float64)
    b = tf.random.stateless_normal([K, P], seed=[0, 1], dtype=tf.float64)
    seconds = median(time_call(lambda: tf.matmul(a, b).numpy(), repeats=5, warmup=1))
    return S * rows * K * P / seconds


def measure(points: int, output=OUTPUT) -> dict:
    """Seconds of Keras ``predict`` and of ``predict_y`` with its defaults on ``points`` inputs; the record, written
    to ``output`` (None: not written)."""
    X = np.random.default_rng(0).standard_normal((points, INPUT_DIM))
    network = build_activated_nn(INPUT_DIM, num_layers=len(WIDTHS), num_units=UNITS, layer_widths=WIDTHS[:-1], output_dim=WIDTHS[-1], seed=0)
    dgp = dgp_from_keras(network, num_data=points, X=X[:1000]).dgp

    network.predict(X, verbose=0)  # tracing (the full batches and the last one)
    batch_size = prediction_batch_size(dgp, SAMPLES, num_rows=points)
    predict_y(dgp, X[: min(points, 2 * batch_size)], progress=False)  # tracing (full and, where there is one, padded batches)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    keras_times, dgp_times = [], []
    for _ in range(REPEATS):  # taking turns, so that both see the same machine
        keras_times += time_call(lambda: network.predict(X, verbose=0), repeats=1, warmup=0)
        dgp_times += time_call(lambda: predict_y(dgp, X, progress=False), repeats=1, warmup=0)
    keras_seconds, dgp_seconds = median(keras_times), median(dgp_times)
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
    terms, rate = multiply_adds(), matmul_rate()
    floor_seconds = points * sum(terms.values()) / rate
    print(f"Keras predict {keras_seconds:.3f} s, predict_y {dgp_seconds:.3f} s ({dgp_seconds / keras_seconds:.1f}×), "
          f"floor {floor_seconds:.3f} s (predict_y at {floor_seconds / dgp_seconds:.0%} of the floor's rate)", flush=True)
    record = {"command": command_line("python -m benchmarks.prediction_vs_keras", {"points": points}, DEFAULTS),
              "D": INPUT_DIM, "units": UNITS, "widths": list(WIDTHS), "samples": SAMPLES, "truncation": TRUNCATION, "points": points,
              "memory_budget_bytes": DEFAULT_MEMORY_BUDGET, "batch_size": batch_size,
              "keras_seconds": round(keras_seconds, 4), "predict_y_seconds": round(dgp_seconds, 4),
              "keras_seconds_each": [round(t, 4) for t in keras_times], "predict_y_seconds_each": [round(t, 4) for t in dgp_times],
              "peak_rss_growth_mib": round(rss_growth, 1), "multiply_adds_per_point": {k: round(v) for k, v in terms.items()},
              "matmul_multiply_adds_per_second": round(rate), **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def markdown(record: dict) -> str:
    """The "prediction-vs-keras" block of docs/benchmarks*.md from its record."""
    points, S, M = record["points"], record["samples"], record["units"]
    keras, dgp = record["keras_seconds"], record["predict_y_seconds"]
    terms, rate = record["multiply_adds_per_point"], record["matmul_multiply_adds_per_second"]
    per_point = sum(terms.values())
    floor = points * per_point / rate
    widths = " × ".join(map(str, record["widths"]))
    series = f", the zonal series' Clenshaw sums, 2 Ñ M per layer and row at Ñ = {record['truncation']}, included" if "truncation" in record else ""
    return f"""{record_line(OUTPUT, record["command"])}

Command: `{record["command"]}` ({points:,} points, D = {record["D"]}, a converted twin of 3 layers of M = {M} units with
widths {widths}, float64; `predict_y` with its defaults: S = {S} samples, memory budget
{record["memory_budget_bytes"] / 2**20:.0f} MiB, which gives batches of {record["batch_size"]:,} points).

| method | seconds | / Keras `predict` |
|---|---|---|
| Keras `network.predict(X)` | {keras:.3f} | 1.0 |
| `predict_y(dgp, X)` (defaults) | {dgp:.3f} | {dgp / keras:.1f} |
| floor: {per_point / 1e6:.2f} M multiply-adds per point at the measured rate | {floor:.3f} | {floor / keras:.1f} |

- The floor: S = {S} samples through layers 2..L cost S forward passes of the network ({terms["forward"] / 1e6:.2f} M multiply-adds
  per point{series}), plus the variance work per sampled row ({terms["variance"] / 1e6:.2f} M): the triangular solve, M²/2, and, in
  the first and the output layer, the quadratic forms a_nᵀ(L_p L_pᵀ − I)a_n over the upper triangle, M(M+1)/2 · (P + 1)
  (the hidden layers between are sampled from one draw of their inducing outputs per sample); the rate is one float64
  [S·8, M(M+1)/2] · [M(M+1)/2, P] product measured in the same run,
  {rate * 2 / 1e9:.1f} GFLOP/s. `predict_y` ran at {floor / dgp:.0%} of that rate.
- Each of the timed calls (seconds): Keras {", ".join(f"{t:.3f}" for t in record.get("keras_seconds_each", [keras]))}; `predict_y` {", ".join(f"{t:.3f}" for t in record.get("predict_y_seconds_each", [dgp]))}; the table gives the medians.
- Peak RSS grew by {record["peak_rss_growth_mib"]:.0f} MiB during `predict_y` (outputs included).
{load_average_line(record)}"""


def report_from_records() -> str:
    """The "prediction-vs-keras" block of docs/benchmarks*.md from its record (``--report-only``)."""
    return report_block("prediction-vs-keras", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.prediction_vs_keras")


def _options(parser) -> None:
    parser.add_argument("--points", type=int, default=DEFAULTS["points"])


def _measure(args, output):
    return measure(args.points, output=output)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.prediction_vs_keras", __doc__.splitlines()[0], _measure, report_from_records, _options, markdown, OUTPUT)
