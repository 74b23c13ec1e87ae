"""Training from files in constant memory: one epoch of an activated DGP on N = 2,000,000 rows.

A synthetic regression set, y = sin(2 x₁) + x₂x₃/2 + 0.1 ε with x ~ N(0, I_8), is written in chunks to two
``.npy`` files in a temporary directory and trained for one epoch with
``train_dgp(dgp, ArraySource.from_npy(x, y))`` (block-wise file reads, shuffled windows). Each N runs in a
fresh process, which reports its peak RSS (``ru_maxrss``) and its RSS just before training; the baseline in
the same run is the same epoch on a smaller N, so that "peak RSS independent of N" reads as a ratio near 1.

Run:  python -m benchmarks.streaming                        (writes docs/results/streaming.json, after every N, and the
                                                             "streaming" block of docs/benchmarks*.md; ``--report-only``
                                                             rewrites the block from the record, timing nothing)
      python -m benchmarks.streaming --sizes 20000 5000 --no-write     (a quick check)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from activated_dgp import TrainingSchedule, build_activated_dgp, train_dgp
from activated_dgp.data import ArraySource
from benchmarks._report import command_line, load_average_line, machine_state, record_line, report_block, write_record

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
    """In this process: one epoch from the files; RSS before training and peak (MiB), seconds and rows per second."""
    source = ArraySource.from_npy(x_path, y_path)
    dgp = build_activated_dgp(INPUT_DIM, source.num_data, num_layers=layers, num_units=units, activation=ACTIVATION, seed=0)
    schedule = TrainingSchedule(epochs=1, batch_size=batch_size)
    before = _current_rss_mib()
    start = time.perf_counter()
    history = train_dgp(dgp, source, schedule=schedule)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss_before": before, "peak_rss": peak, "seconds": seconds, "rows_per_s": source.num_data / seconds,
            "loss": float(history["loss"][-1])}


OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "streaming.json"
REPORT_COMMAND = "python -m benchmarks.streaming --report-only"
REPORT_BLOCKS = [("docs/benchmarks_prediction.md", "streaming")]
DEFAULTS = {"sizes": [2_000_000, 200_000], "layers": 2, "units": 64, "batch_size": 1000}


def _epoch_in_subprocess(num_data: int, layers: int, units: int, batch_size: int) -> dict:
    """One epoch on ``num_data`` rows written to files, in a fresh process: its :func:`train_one_epoch` result."""
    with tempfile.TemporaryDirectory() as directory:
        x_path, y_path = write_data(directory, num_data)
        command = [sys.executable, "-m", "benchmarks.streaming", "--child", x_path, y_path, str(layers), str(units), str(batch_size)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
    return {"N": num_data, **json.loads(out.stdout.strip().splitlines()[-1])}


def measure(sizes, layers: int, units: int, batch_size: int, output=OUTPUT) -> dict:
    """RSS before training, peak RSS and rows per second of one epoch from files for every N in ``sizes``, each in a
    fresh process; the record, written to ``output`` after every N (None: not written)."""
    given = {"sizes": list(sizes), "layers": layers, "units": units, "batch_size": batch_size}
    record = {"command": command_line("python -m benchmarks.streaming", given, DEFAULTS), "D": INPUT_DIM, "activation": ACTIVATION, **given, "rows": []}
    for num_data in sizes:
        r = _epoch_in_subprocess(num_data, layers, units, batch_size)
        print(f"N={num_data:,}: RSS before {r['rss_before']:.0f} MiB, peak {r['peak_rss']:.0f} MiB, {r['rows_per_s']:,.0f} rows/s", flush=True)
        record = {**record, "rows": record["rows"] + [r], **machine_state()}
        if output is not None:
            write_record(output, record)
    return record


def markdown(record: dict) -> str:
    """The "streaming" block of docs/benchmarks*.md from its record: peak RSS per N, against the smallest N."""
    results = {r["N"]: r for r in record["rows"]}
    smallest = min(results)
    rows = "\n".join(
        f"| {n:,} | {n * (record['D'] + 1) * 8 / 2**20:.0f} | {r['rss_before']:.0f} | {r['peak_rss']:.0f} | "
        f"{r['peak_rss'] / results[smallest]['peak_rss']:.2f} | {r['rows_per_s']:,.0f} |"
        for n, r in results.items()
    )
    missing = [n for n in record["sizes"] if n not in results]
    partial = f"- Interrupted: no row for N = {', '.join(f'{n:,}' for n in missing)}.\n" if missing else ""
    return f"""{record_line(OUTPUT, record["command"])}

Command: `{record["command"]}` (synthetic regression, D = {record["D"]}, written to `.npy` files in a temporary
directory; one epoch of `train_dgp(dgp, ArraySource.from_npy(...))`, {record["layers"]} layers of {record["units"]} units, float64, global batch {record["batch_size"]};
one fresh process per N).

| N | data on disk (MiB) | RSS before training (MiB) | peak RSS (MiB) | peak / peak at N = {smallest:,} | rows per second |
|---|---|---|---|---|---|
{rows}

- Peak RSS is set by the model, TensorFlow and one shuffle window of blocks, not by N (target: ratio ≈ 1).
- Rows per second include tracing the step on the first batch.
{partial}{load_average_line(record)}"""


def report_from_records() -> str:
    """The "streaming" block of docs/benchmarks*.md from its record (``--report-only``)."""
    return report_block("streaming", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.streaming")


def _options(parser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", default=DEFAULTS["sizes"])
    parser.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    parser.add_argument("--units", type=int, default=DEFAULTS["units"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])


def _measure(args, output):
    return measure(args.sizes, args.layers, args.units, args.batch_size, output=output)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    if len(sys.argv) == 7 and sys.argv[1] == "--child":  # a measuring process started by measure()
        x_path, y_path, layers, units, batch_size = sys.argv[2:]
        print(json.dumps(train_one_epoch(x_path, y_path, int(layers), int(units), int(batch_size))))
    else:
        measure_or_report("benchmarks.streaming", __doc__.splitlines()[0], _measure, report_from_records, _options,
                          markdown, OUTPUT)
