"""Training from files in constant memory: one epoch of an activated DGP on N = 2,000,000 rows (issue 15).

A synthetic regression set, y = sin(2 x₁) + x₂x₃/2 + 0.1 ε with x ~ N(0, I_8), is written in chunks to two
``.npy`` files in a temporary directory and trained for one epoch with
``train_dgp(dgp, ArraySource.from_npy(x, y))`` (block-wise file reads, shuffled windows). Each N runs in a
fresh process, which reports its peak RSS (``ru_maxrss``) and its RSS just before training; the baseline in
the same run is the same epoch on a smaller N, so that "peak RSS independent of N" reads as a ratio near 1.

Run:  python -m benchmarks.streaming                        (writes the "streaming" section of docs/benchmarks.md)
      python -m benchmarks.streaming --sizes 20000 5000 --no-write     (a quick check)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

INPUT_DIM = 8
#: The zonal Softplus, named: the committed timings were measured with it, the library default then (the Swish since).
ACTIVATION = "softplus"


def write_data(directory: str, num_data: int, chunk: int = 100_000, seed: int = 0):
    rng = np.random.default_rng(seed)
    x_path, y_path = os.path.join(directory, "x.npy"), os.path.join(directory, "y.npy")
    X = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float64, shape=(num_data, INPUT_DIM))
    Y = np.lib.format.open_memmap(y_path, mode="w+", dtype=np.float64, shape=(num_data, 1))
    for start in range(0, num_data, chunk):
        x = rng.standard_normal((min(chunk, num_data - start), INPUT_DIM))
        X[start : start + len(x)] = x
        Y[start : start + len(x)] = np.sin(2 * x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3] + 0.1 * rng.standard_normal((len(x), 1))
    X.flush(), Y.flush()
    del X, Y
    return x_path, y_path


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def train_one_epoch(x_path: str, y_path: str, layers: int, units: int, batch_size: int) -> dict:
    """In this process: one epoch from the files; RSS before training and peak (MiB), rows per second."""
    from activated_dgp import TrainingSchedule, build_activated_dgp, train_dgp
    from activated_dgp.data import ArraySource

    source = ArraySource.from_npy(x_path, y_path)
    dgp = build_activated_dgp(INPUT_DIM, source.num_data, num_layers=layers, num_units=units, activation=ACTIVATION, seed=0)
    schedule = TrainingSchedule(epochs=1, batch_size=batch_size)
    before = _current_rss_mib()
    start = time.perf_counter()
    history = train_dgp(dgp, source, schedule=schedule)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss_before": before, "peak_rss": peak, "rows_per_s": source.num_data / seconds, "loss": history["loss"][-1]}


def main(sizes, layers: int, units: int, batch_size: int, write: bool) -> str:
    from benchmarks._report import write_section

    results = {}
    for num_data in sizes:
        with tempfile.TemporaryDirectory() as directory:
            x_path, y_path = write_data(directory, num_data)
            command = [sys.executable, "-m", "benchmarks.streaming", "--child", x_path, y_path,
                       "--layers", str(layers), "--units", str(units), "--batch-size", str(batch_size)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            results[num_data] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[num_data]
        print(f"N={num_data:,}: RSS before {r['rss_before']:.0f} MiB, peak {r['peak_rss']:.0f} MiB, {r['rows_per_s']:,.0f} rows/s", flush=True)
    smallest = min(sizes)
    rows = "\n".join(
        f"| {n:,} | {n * (INPUT_DIM + 1) * 8 / 2**20:.0f} | {r['rss_before']:.0f} | {r['peak_rss']:.0f} | "
        f"{r['peak_rss'] / results[smallest]['peak_rss']:.2f} | {r['rows_per_s']:,.0f} |"
        for n, r in results.items()
    )
    doc = f"""Command: `python -m benchmarks.streaming` (synthetic regression, D = {INPUT_DIM}, written to `.npy` files in a temporary
directory; one epoch of `train_dgp(dgp, ArraySource.from_npy(...))`, {layers} layers of {units} units, float64, global batch {batch_size};
one fresh process per N).

| N | data on disk (MiB) | RSS before training (MiB) | peak RSS (MiB) | peak / peak at N = {smallest:,} | rows per second |
|---|---|---|---|---|---|
{rows}

- Peak RSS is set by the model, TensorFlow and one shuffle window of blocks, not by N (target: ratio ≈ 1).
- Rows per second include tracing the step on the first batch.
"""
    if write:
        write_section("streaming", doc, "python -m benchmarks.streaming")
    return doc


if __name__ == "__main__":
    from experiments.harness.cli import make_parser

    parser = make_parser("python -m benchmarks.streaming", __doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000_000, 200_000])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(train_one_epoch(*args.child, args.layers, args.units, args.batch_size)))
    else:
        print(main(args.sizes, args.layers, args.units, args.batch_size, write=not args.no_write))
