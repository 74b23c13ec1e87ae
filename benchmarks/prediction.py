"""Prediction throughput: ``BatchPredictor`` with S = 32 samples, and the floating-point floor per point.

Model: a three-layer activated DGP, 128 units per layer, D = 8, float64, Gaussian likelihood (untrained:
the cost does not depend on the values). Inputs are a memmap in a temporary directory, so the input does not
count towards memory. Reported, for the compiled batched predictor (``activated_dgp.deep.BatchPredictor``):
points per second of ``predict_y`` and of ``predictive_log_density``, the same with B = ``--large-batch`` (on
the first ``--baseline-points`` · 4 points), and the growth of the process's peak RSS during the run (bounded by the
batch: the per-output q_sqrt products, [S·B, P·M] per layer, dominate). Baseline in the same run: the eager
``predict_y(..., batch_size=B)`` on the first ``--baseline-points`` points.

The multiply-adds per point (:func:`multiply_adds_per_point`) turn points per second into the arithmetic rate
the run reached, to compare with what the machine can do at all.

Run:  python -m benchmarks.prediction                     (20,000 points; writes docs/results/prediction.json and the
                                                          "prediction" block of docs/benchmarks*.md; ``--report-only``
                                                          rewrites the block from the record, timing nothing)
      python -m benchmarks.prediction --points 1000000     (the issue's size; memory stays bounded, time grows linearly)
"""

from __future__ import annotations

import os
from pathlib import Path
import resource
import tempfile
import time

import numpy as np

from activated_dgp import build_activated_dgp, predict_y
from activated_dgp.deep import BatchPredictor
from benchmarks._report import command_line, load_average_line, machine_state, record_line, report_block, write_record

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


OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "prediction.json"
REPORT_COMMAND = "python -m benchmarks.prediction --report-only"
REPORT_BLOCKS = [("docs/benchmarks_prediction.md", "prediction")]
TRUNCATION = 20  # build_activated_dgp's default Ñ, which multiply_adds_per_point counts
DEFAULTS = {"points": 20_000, "batch_size": 64, "baseline_points": 1_000, "large_batch": 1024}


def _memmap_inputs(directory: str, points: int):
    """``points`` standard normal inputs [points, D] in a .npy memmap under ``directory``, written in blocks."""
    X = np.lib.format.open_memmap(os.path.join(directory, "x.npy"), mode="w+", dtype=np.float64, shape=(points, INPUT_DIM))
    rng = np.random.default_rng(0)
    for start in range(0, points, 100_000):
        X[start : start + 100_000] = rng.standard_normal((min(100_000, points - start), INPUT_DIM))
    return X


def _seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def measure(points: int, batch_size: int, baseline_points: int, large_batch: int, output=OUTPUT) -> dict:
    """Seconds of ``BatchPredictor``'s ``predict_y`` and ``predictive_log_density`` on ``points`` points (after
    tracing) and the growth of peak RSS meanwhile, of ``predict_y`` at B = ``large_batch`` on the first
    4 · ``baseline_points``, and of the eager ``predict_y`` on the first ``baseline_points``; the record, written to
    ``output`` (None: not written)."""
    dgp = build_activated_dgp(INPUT_DIM, points, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)
    with tempfile.TemporaryDirectory() as directory:
        X = _memmap_inputs(directory, points)
        Y = np.zeros((points, 1))
        predictor = BatchPredictor(dgp, num_samples=SAMPLES, batch_size=batch_size)
        predictor.predict_y(X[: 2 * batch_size])  # tracing
        predictor.predictive_log_density(X[: 2 * batch_size], Y[: 2 * batch_size])
        rss_before = peak_rss_mib()
        y_seconds = _seconds(lambda: predictor.predict_y(X))
        lpd_seconds = _seconds(lambda: predictor.predictive_log_density(X, Y))
        rss_growth = peak_rss_mib() - rss_before
        large_points = min(4 * baseline_points, points)
        large = BatchPredictor(dgp, num_samples=SAMPLES, batch_size=large_batch)
        large.predict_y(X[: 2 * large_batch])  # tracing
        large_seconds = _seconds(lambda: large.predict_y(X[:large_points]))
        base_points = min(baseline_points, points)
        predict_y(dgp, X[:batch_size], SAMPLES, seed=0, batch_size=batch_size)  # warm-up
        base_seconds = _seconds(lambda: predict_y(dgp, X[:base_points], SAMPLES, seed=0, batch_size=batch_size))
        del X
    print(f"predict_y {points / y_seconds:,.0f} points/s, log density {points / lpd_seconds:,.0f} points/s, B = {large_batch} "
          f"{large_points / large_seconds:,.0f} points/s, eager baseline {base_points / base_seconds:,.0f} points/s", flush=True)
    given = {"points": points, "batch_size": batch_size, "baseline_points": baseline_points, "large_batch": large_batch}
    record = {"command": command_line("python -m benchmarks.prediction", given, DEFAULTS), "D": INPUT_DIM, "layers": NUM_LAYERS, "units": NUM_UNITS,
              "samples": SAMPLES, "truncation_level": TRUNCATION, "activation": ACTIVATION, **given,
              "predict_y_seconds": round(y_seconds, 4), "log_density_seconds": round(lpd_seconds, 4),
              "large_batch_points": large_points, "large_batch_seconds": round(large_seconds, 4),
              "eager_points": base_points, "eager_seconds": round(base_seconds, 4), "peak_rss_growth_mib": round(rss_growth, 1),
              **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def markdown(record: dict) -> str:
    """The "prediction" block of docs/benchmarks*.md from its record: points per second, against the eager baseline."""
    points, batch_size, large_batch = record["points"], record["batch_size"], record["large_batch"]
    large_points, base_points = record["large_batch_points"], record["eager_points"]
    rate, lpd_rate = points / record["predict_y_seconds"], points / record["log_density_seconds"]
    large_rate, base_rate = large_points / record["large_batch_seconds"], base_points / record["eager_seconds"]
    D, units, samples = record["D"], record["units"], record["samples"]
    batch_matrix_mib = samples * batch_size * units * 8 / 2**20
    terms = multiply_adds_per_point((D,) * (record["layers"] - 1) + (1,), M=units, S=samples, d=D + 1, truncation=record["truncation_level"])
    per_point = sum(terms.values())
    shares = ", ".join(f"{name} {value / per_point:.0%}" for name, value in terms.items())
    return f"""{record_line(OUTPUT, record["command"])}

Command: `{record["command"]}` ({points:,} points from a memmap, D = {D}, {record["layers"]} layers of {units} units,
float64, S = {samples} samples, batches of B = {batch_size:,}; untrained model).

| method | points per second | / eager `predict_y` |
|---|---|---|
| `BatchPredictor.predict_y` | {rate:,.0f} | {rate / base_rate:.1f} |
| `BatchPredictor.predictive_log_density` | {lpd_rate:,.0f} | {lpd_rate / base_rate:.1f} |
| `BatchPredictor.predict_y`, B = {large_batch:,} (first {large_points:,} points) | {large_rate:,.0f} | {large_rate / base_rate:.1f} |
| eager `predict_y(batch_size=B)` (first {base_points:,} points) | {base_rate:,.0f} | 1.0 |

- Peak RSS grew by {record["peak_rss_growth_mib"]:.0f} MiB while predicting all {points:,} points (outputs [N, P] included); one [S·B, M] matrix
  is {batch_matrix_mib:.0f} MiB. Target: ≥ 100,000 points per second.
- One point costs {per_point / 1e6:.2f} M multiply-adds ({shares}), so `predict_y` ran at
  {rate * per_point * 2 / 1e9:.1f} GFLOP/s; 100,000 points per second would need {1e5 * per_point * 2 / 1e12:.2f} TFLOP/s in float64.
{load_average_line(record)}"""


def report_from_records() -> str:
    """The "prediction" block of docs/benchmarks*.md from its record (``--report-only``)."""
    return report_block("prediction", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.prediction")


def _options(parser) -> None:
    parser.add_argument("--points", type=int, default=DEFAULTS["points"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--baseline-points", type=int, default=DEFAULTS["baseline_points"])
    parser.add_argument("--large-batch", type=int, default=DEFAULTS["large_batch"], help="batch size of the comparison row")


def _measure(args, output):
    return measure(args.points, args.batch_size, args.baseline_points, args.large_batch, output=output)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.prediction", __doc__.splitlines()[0], _measure, report_from_records, _options, markdown, OUTPUT)
