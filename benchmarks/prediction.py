"""Prediction throughput: ``BatchPredictor`` with S = 32 samples, and the floating-point floor per point (issue 15).

Model: a three-layer activated DGP, 128 units per layer, D = 8, float64, Gaussian likelihood (untrained:
the cost does not depend on the values). Inputs are a memmap in a temporary directory, so the input does not
count towards memory. Reported, for the compiled batched predictor (``activated_dgp.deep.BatchPredictor``):
points per second of ``predict_y`` and of ``predictive_log_density``, the same with B = ``--large-batch`` (on
the first ``--baseline-points`` · 4 points), and the growth of the process's peak RSS during the run (bounded by the
batch: the per-output q_sqrt products, [S·B, P·M] per layer, dominate). Baseline in the same run: the eager
``predict_y(..., batch_size=B)`` on the first ``--baseline-points`` points.

The multiply-adds per point (:func:`multiply_adds_per_point`) turn points per second into the arithmetic rate
the run reached, to compare with what the machine can do at all.

Run:  python -m benchmarks.prediction                     (20,000 points; writes the "prediction" section of docs/benchmarks.md)
      python -m benchmarks.prediction --points 1000000     (the issue's size; memory stays bounded, time grows linearly)
"""

from __future__ import annotations

import os
import resource
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

INPUT_DIM, NUM_LAYERS, NUM_UNITS, SAMPLES = 8, 3, 128, 32
#: The zonal Softplus, named: the committed timings were measured with it, the library default then (the Swish since).
ACTIVATION = "softplus"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def multiply_adds_per_point(widths=(INPUT_DIM, INPUT_DIM, 1), M=NUM_UNITS, S=SAMPLES, d=INPUT_DIM + 1, truncation=20) -> dict:
    """Multiply-adds per predicted point, by term. Layer 1 sees x once (its moments are tiled over the samples);
    layers 2..L see S sampled inputs each. Per row of a layer with P outputs: the q_sqrt products L_pᵀA, P M²;
    the triangular solve L⁻¹Kuf, M²/2; Kuf, M (d + 2Ñ) (cosines, then the Clenshaw sum); the mean Aᵀq_μ, P M."""
    terms = {"q_sqrt products": 0.0, "triangular solves": 0.0, "Kuf": 0.0, "means": 0.0}
    for index, P in enumerate(widths):
        rows = 1 if index == 0 else S
        terms["q_sqrt products"] += rows * P * M**2
        terms["triangular solves"] += rows * M**2 / 2
        terms["Kuf"] += rows * M * (d + 2 * truncation)
        terms["means"] += rows * P * M
    return terms


def main(points: int, batch_size: int, baseline_points: int, large_batch: int, write: bool) -> str:
    from activated_dgp import build_activated_dgp, predict_y
    from activated_dgp.deep import BatchPredictor
    from benchmarks._report import write_section

    dgp = build_activated_dgp(INPUT_DIM, points, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)
    with tempfile.TemporaryDirectory() as directory:
        X = np.lib.format.open_memmap(os.path.join(directory, "x.npy"), mode="w+", dtype=np.float64, shape=(points, INPUT_DIM))
        rng = np.random.default_rng(0)
        for start in range(0, points, 100_000):
            X[start : start + 100_000] = rng.standard_normal((min(100_000, points - start), INPUT_DIM))
        Y = np.zeros((points, 1))
        predictor = BatchPredictor(dgp, num_samples=SAMPLES, batch_size=batch_size)
        predictor.predict_y(X[: 2 * batch_size])  # tracing
        predictor.predictive_log_density(X[: 2 * batch_size], Y[: 2 * batch_size])
        rss_before = peak_rss_mib()
        start = time.perf_counter()
        predictor.predict_y(X)
        y_time = time.perf_counter() - start
        start = time.perf_counter()
        predictor.predictive_log_density(X, Y)
        lpd_time = time.perf_counter() - start
        rss_growth = peak_rss_mib() - rss_before
        large_points = min(4 * baseline_points, points)
        large = BatchPredictor(dgp, num_samples=SAMPLES, batch_size=large_batch)
        large.predict_y(X[: 2 * large_batch])  # tracing
        start = time.perf_counter()
        large.predict_y(X[:large_points])
        large_rate = large_points / (time.perf_counter() - start)
        base_points = min(baseline_points, points)
        predict_y(dgp, X[:batch_size], SAMPLES, seed=0, batch_size=batch_size)  # warm-up
        start = time.perf_counter()
        predict_y(dgp, X[:base_points], SAMPLES, seed=0, batch_size=batch_size)
        base_time = time.perf_counter() - start
        del X
    rate, lpd_rate, base_rate = points / y_time, points / lpd_time, base_points / base_time
    batch_matrix_mib = SAMPLES * batch_size * NUM_UNITS * 8 / 2**20
    terms = multiply_adds_per_point()
    per_point = sum(terms.values())
    shares = ", ".join(f"{name} {value / per_point:.0%}" for name, value in terms.items())
    print(f"predict_y {rate:,.0f} points/s, log density {lpd_rate:,.0f} points/s, B = {large_batch} {large_rate:,.0f} points/s, eager baseline {base_rate:,.0f} points/s", flush=True)
    doc = f"""Command: `python -m benchmarks.prediction` ({points:,} points from a memmap, D = {INPUT_DIM}, {NUM_LAYERS} layers of {NUM_UNITS} units,
float64, S = {SAMPLES} samples, batches of B = {batch_size:,}; untrained model).

| method | points per second | / eager `predict_y` |
|---|---|---|
| `BatchPredictor.predict_y` | {rate:,.0f} | {rate / base_rate:.1f} |
| `BatchPredictor.predictive_log_density` | {lpd_rate:,.0f} | {lpd_rate / base_rate:.1f} |
| `BatchPredictor.predict_y`, B = {large_batch:,} (first {large_points:,} points) | {large_rate:,.0f} | {large_rate / base_rate:.1f} |
| eager `predict_y(batch_size=B)` (first {base_points:,} points) | {base_rate:,.0f} | 1.0 |

- Peak RSS grew by {rss_growth:.0f} MiB while predicting all {points:,} points (outputs [N, P] included); one [S·B, M] matrix
  is {batch_matrix_mib:.0f} MiB. Target: ≥ 100,000 points per second.
- One point costs {per_point / 1e6:.2f} M multiply-adds ({shares}), so `predict_y` ran at
  {rate * per_point * 2 / 1e9:.1f} GFLOP/s; 100,000 points per second would need {1e5 * per_point * 2 / 1e12:.2f} TFLOP/s in float64.
"""
    if write:
        write_section("prediction", doc, "python -m benchmarks.prediction")
    return doc


if __name__ == "__main__":
    from experiments.harness.cli import make_parser

    parser = make_parser("python -m benchmarks.prediction", __doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--baseline-points", type=int, default=1_000)
    parser.add_argument("--large-batch", type=int, default=1024, help="batch size of the comparison row")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    print(main(args.points, args.batch_size, args.baseline_points, args.large_batch, write=not args.no_write))
