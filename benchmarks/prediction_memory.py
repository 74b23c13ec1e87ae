"""Peak memory of ``predict_y`` with its defaults as the number of points grows: flat beyond one batch.

Model as in :mod:`benchmarks.prediction_vs_keras` (a converted 3 × 64 twin, D = 8, S = 100 samples, the default memory
budget). For each N, a fresh Python process builds the model, predicts two batches (tracing), then records its peak
RSS (``resource.getrusage``'s ru_maxrss) before and after ``predict_y(dgp, X)`` on N standard-normal points. The
growth covers the batch's working set and the outputs (2 · N · 8 bytes); with batching it should not grow with N.
Memory, unlike time, does not depend on what else the machine runs.

Run:  python -m benchmarks.prediction_memory                (writes docs/results/prediction_memory.json and the
                                                              "prediction-memory" block of docs/benchmarks_prediction.md)
      python -m benchmarks.prediction_memory --report-only  (the block from the record)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

from benchmarks._report import machine_state, record_line, report_block, write_record


OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "prediction_memory.json"
REPORT_COMMAND = "python -m benchmarks.prediction_memory --report-only"
REPORT_BLOCKS = [("docs/benchmarks_prediction.md", "prediction-memory")]
POINTS = (1_000, 10_000, 50_000, 200_000)

_CHILD = """
import json, os, resource, sys
import numpy as np
from activated_dgp import build_activated_nn, dgp_from_keras, predict_y
from activated_dgp.deep.prediction import prediction_batch_size
from benchmarks.prediction_vs_keras import INPUT_DIM, UNITS, WIDTHS, SAMPLES
points = int(sys.argv[1])
X = np.random.default_rng(0).standard_normal((points, INPUT_DIM))
network = build_activated_nn(INPUT_DIM, num_layers=len(WIDTHS), num_units=UNITS, layer_widths=WIDTHS[:-1], output_dim=WIDTHS[-1], seed=0)
dgp = dgp_from_keras(network, num_data=points, X=X[:1000]).dgp
batch = prediction_batch_size(dgp, SAMPLES, num_rows=points)
predict_y(dgp, X[: min(points, 2 * batch)], progress=False)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
predict_y(dgp, X, progress=False)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"points": points, "batch_size": batch, "peak_rss_before_mib": round(before, 1), "peak_rss_growth_mib": round(after - before, 1)}))
"""


def measure(output=OUTPUT) -> dict:
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    rows = []
    for points in POINTS:
        run = subprocess.run([sys.executable, "-c", _CHILD, str(points)], capture_output=True, text=True, env=env, cwd=root, check=True)
        rows.append(json.loads(run.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    record = {"command": "python -m benchmarks.prediction_memory", "rows": rows, **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def markdown(record: dict) -> str:
    rows = record["rows"]
    first = rows[0]["peak_rss_growth_mib"]
    lines = [record_line(OUTPUT, record["command"]), "",
             "Command: `python -m benchmarks.prediction_memory` (`predict_y` with its defaults on a converted 3 × 64 twin, "
             "S = 100; one fresh process per N).", "",
             "| points N | batch size | peak RSS before (MiB) | peak RSS growth during `predict_y` (MiB) | / growth at the smallest N |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['points']:,} | {row['batch_size']} | {row['peak_rss_before_mib']:.0f} | {row['peak_rss_growth_mib']:.1f} "
                     f"| {row['peak_rss_growth_mib'] / first:.2f} |")
    growths = [row["peak_rss_growth_mib"] for row in rows]
    ordered = all(a <= b for a, b in zip(growths, growths[1:]))
    lines += ["", f"- Over N = {rows[0]['points']:,}…{rows[-1]['points']:,} the growth stays between {min(growths):.0f} and "
              f"{max(growths):.0f} MiB{', rising with N' if ordered else ', not ordered by N (the allocator differs from process to process)'}; "
              f"the outputs alone are {rows[-1]['points'] * 16 / 2**20:.1f} MiB at the largest N and one batch's estimated working set "
              "(`bytes_per_row` × batch size) is 192 MiB at most, within the default 512 MiB budget."]
    return "\n".join(lines)


def report_from_records() -> str:
    return report_block("prediction-memory", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.prediction_memory")


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.prediction_memory", __doc__.splitlines()[0], measure, report_from_records)
