"""What tracing costs a converted DGP's ``fit``: ``train_dgp`` of one full-batch step (Keras traces its train
function, then runs one step) on a freshly converted DGP, with the library's GP and likelihood layers traced as
written (their ``call`` marked ``do_not_convert``, activated_dgp.deep.layers, the library's) against the same
layers' ``call`` converted by AutoGraph (gpflux's default), and against the optimizer's state (Adam's moments)
created lazily in the first step, as tf-keras does by itself, which makes ``tf.function`` trace the train step twice
(the library creates it before the fit: ``activated_dgp.deep.layers.build_optimizer_state``). AutoGraph caches what it has
converted within a process, so each mode runs in fresh processes (REPEATS each, alternating), and each process times
its first fit (what a user's script or a test pays) and then a second fit of another fresh conversion (the cost once
the conversions are cached); medians are reported, the ratio is the comparison. The fits' losses are compared too:
tracing as written computes the same numbers.

The network: three hidden ReLU layers of WIDTH units on N × D standard normal inputs, one output (a UCI-sized ADGP).

Run:  python -m benchmarks.tracing      (writes docs/results/tracing.json and its block of docs/benchmarks*.md;
      ``--report-only`` rewrites the block from the record, timing nothing)
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import time

import numpy as np
import tf_keras

from activated_dgp import TrainingSchedule, dgp_from_keras, train_dgp
from activated_dgp.deep import layers as library_layers
from benchmarks._report import report_block

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "tracing.json"
N, D, WIDTH, DEPTH, REPEATS = 500, 8, 64, 3, 3


@contextlib.contextmanager
def converted_by_autograph():
    """The library's GP and likelihood layers with their undecorated ``call``, which Keras' trace converts with
    AutoGraph."""
    classes = (library_layers.ActivatedGPLayer, library_layers.LikelihoodLayer)
    traced = [cls.call for cls in classes]
    for cls, call in zip(classes, traced):
        cls.call = call.__wrapped__
    try:
        yield
    finally:
        for cls, call in zip(classes, traced):
            cls.call = call


@contextlib.contextmanager
def optimizer_state_created_in_the_first_step():
    """Fits whose optimizer creates its slots inside the first train step (tf-keras' own behaviour), so Keras
    traces the train step twice."""
    from activated_dgp.training import callbacks

    built = library_layers.build_optimizer_state
    library_layers.build_optimizer_state = callbacks.build_optimizer_state = lambda model: None
    try:
        yield
    finally:
        library_layers.build_optimizer_state = callbacks.build_optimizer_state = built


def fit_once(network, X, Y) -> tuple:
    """CPU and wall seconds of one ``train_dgp`` step on a fresh conversion of ``network``, and its loss."""
    dgp = dgp_from_keras(network, len(X), X=X).dgp
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    history = train_dgp(dgp, X, Y, TrainingSchedule(epochs=1, batch_size=len(X), verbose=0), guard=False)
    return time.process_time() - start_cpu, time.perf_counter() - start_wall, float(history["loss"][-1])


MODES = ("as written", "converted by AutoGraph", "as written, optimizer state created in the first step")
CONTEXTS = (contextlib.nullcontext, converted_by_autograph, optimizer_state_created_in_the_first_step)


def one_process(mode: str) -> None:
    """Run in a fresh process: the first and the second fit in ``mode``, printed as one JSON line."""
    tf_keras.utils.set_random_seed(0)  # the same network and draws in every process
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    Y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(N, 1))
    network = tf_keras.Sequential([tf_keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)] + [tf_keras.layers.Dense(1)])
    network(X[:2])
    with CONTEXTS[MODES.index(mode)]():
        fits = [fit_once(network, X, Y) for _ in range(2)]
    print(json.dumps({"first": fits[0], "second": fits[1]}))


def main() -> None:
    runs = {mode: [] for mode in MODES}
    for _ in range(REPEATS):
        for index, mode in enumerate(MODES):
            output = subprocess.run([sys.executable, "-m", "benchmarks.tracing", "--one-process", str(index)], check=True,
                                    capture_output=True, text=True).stdout
            runs[mode].append(json.loads(output.strip().splitlines()[-1]))
    rows = [{"layers' call": mode, **{f"{fit}_{what}": [round(r[fit][i], 3) for r in values] for fit in ("first", "second")
                                      for i, what in ((0, "cpu_seconds"), (1, "wall_seconds"))},
             "losses": [r[fit][2] for r in values for fit in ("first", "second")]} for mode, values in runs.items()]
    record = {"N": N, "D": D, "width": WIDTH, "depth": DEPTH, "repeats": REPEATS, "cpus": os.cpu_count(), "rows": rows,
              "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()]}
    OUTPUT.write_text(json.dumps(record, indent=1) + "\n")


REPORT_COMMAND = "python -m benchmarks.tracing --report-only"
REPORT_BLOCKS = [("docs/benchmarks_training.md", "tracing")]


def markdown(record: dict) -> str:
    median = {row["layers' call"]: [statistics.median(row[f"{fit}_{what}"]) for fit in ("first", "second") for what in ("cpu_seconds", "wall_seconds")]
              for row in record["rows"]}
    written, converted = median[MODES[0]], median[MODES[1]]
    losses = [row["losses"] for row in record["rows"]]
    difference = max(abs(other - first) / abs(first) for fits in zip(*losses) for first, other in zip(fits[:1] * len(fits), fits[1:]))
    lazy = median.get(MODES[2])
    rows = "\n".join(f"| {mode} | {values[0]:.2f} | {values[1]:.2f} | {values[2]:.2f} | {values[3]:.2f} |" for mode, values in median.items())
    return (
        "## Tracing a converted DGP's first fit: without AutoGraph, once\n\n"
        "Record: `docs/results/tracing.json` (made by `python -m benchmarks.tracing`). One full-batch `train_dgp` step "
        f"(Keras traces the train function, then steps) on a fresh conversion of a {record['depth']}-hidden-layer ReLU "
        f"network of width {record['width']} (N = {record['N']}, D = {record['D']}); medians over {record['repeats']} fresh "
        "processes per mode, alternating; in each, the first fit and a second one (another fresh conversion):\n\n"
        "| the GP and likelihood layers' `call`, the optimizer's state | first fit, CPU s | wall s | second fit, CPU s | wall s |\n|---|---|---|---|---|\n"
        + rows + "\n\n"
        f"- Traced as written, a process's first fit takes {written[0] / converted[0]:.2f}× the CPU time of the "
        f"AutoGraph-converted one ({written[1] / converted[1]:.2f}× the wall time); the second fit "
        f"{written[2] / converted[2]:.2f}× ({written[3] / converted[3]:.2f}×).\n"
        + (f"- With the optimizer's state created before the fit (one trace of the train step), a first fit takes "
           f"{written[0] / lazy[0]:.2f}× the CPU time of one whose first step creates it (two traces; "
           f"{written[1] / lazy[1]:.2f}× the wall time); the second fit {written[2] / lazy[2]:.2f}× ({written[3] / lazy[3]:.2f}×).\n"
           if lazy else "")
        + f"- Same losses: largest relative difference {difference:.1e} over the {2 * record['repeats']} fits of each mode.\n"
        f"- 1/5/15-min load average at the end: {record['load_average_1_5_15']} on {record['cpus']} cores.\n"
    )


def report_from_records() -> str:
    return report_block("tracing", markdown, OUTPUT, REPORT_COMMAND)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    if len(sys.argv) == 3 and sys.argv[1] == "--one-process":  # a measuring process started by main()
        one_process(MODES[int(sys.argv[2])])
    else:
        measure_or_report("benchmarks.tracing", __doc__.splitlines()[0], main, report_from_records)
