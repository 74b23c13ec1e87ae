"""Time and peak memory of the activated Kuf/Kuu against GPflow's closed-form kernels.

Sizes: M = 128 inducing variables, N = 10,000 inputs, D = 8, truncation level Ñ = 20, float64.
Baselines timed in the same run: ``gpflow.kernels.ArcCosine(order=1)`` and
``gpflow.kernels.SquaredExponential`` evaluating K(Z, X) of the same sizes. Every operation is
timed as a plain (eager) call, the way GPflow models call covariances, and wrapped in
``tf.function``; gradients are those of sum(K) with respect to the inducing directions W (or Z)
and the inputs X.

Peak memory: each operation runs in a fresh subprocess with TensorFlow's BFC allocator on the CPU
(``TF_CPU_ALLOCATOR_USE_BFC=true``, which keeps allocation statistics); after one warm-up call
(compilation, caches) the statistics are reset and the peak allocated during one more call, minus
what was allocated just before it, is reported. The result tensor itself counts (rounded up to the
allocator's bin sizes); memory of the XLA compiler and of Python objects does not.

The "[XLA, float64/float32]" rows compile the whole call, Kuf against GPflow's SquaredExponential K(Z, X) of the
same shape and dtype (the memory floor: one pass over an [M, N] matrix), and their gradients.

Run:  python -m benchmarks.covariances            (writes docs/results/covariances.json and the "covariances" block
                                                   of docs/benchmarks*.md; ``--report-only`` rewrites the block from
                                                   the record, timing nothing)
      python -m benchmarks.covariances --repeats 2 --only XLA      (a quick check of the XLA rows; writes nothing)
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
import subprocess
import sys

import gpflow
import numpy as np
import tensorflow as tf

from activated_dgp import ActivationFeature, ZonalArcCosine
from benchmarks._report import (command_line, load_average_line, machine_state, record_line, report_block, time_call,
                                write_record)

NUM_INDUCING, NUM_DATA, INPUT_DIM, TRUNCATION = 128, 10_000, 8, 20


def _problem(seed: int = 0, dtype=np.float64, num_inducing: int = NUM_INDUCING, num_data: int = NUM_DATA):
    rng = np.random.default_rng(seed)
    with gpflow.config.as_context(dataclasses.replace(gpflow.config.config(), float=dtype)):
        X = tf.Variable(rng.standard_normal((num_data, INPUT_DIM)).astype(dtype))
        Z = tf.Variable(rng.standard_normal((num_inducing, INPUT_DIM)).astype(dtype))
        kernel = ZonalArcCosine(input_dim=INPUT_DIM, truncation_level=TRUNCATION)
        feature = ActivationFeature(rng.standard_normal((num_inducing, INPUT_DIM + 1)), activation="softplus", truncation_level=TRUNCATION)
        arccos = gpflow.kernels.ArcCosine(order=1)
        se = gpflow.kernels.SquaredExponential()
    return tf, gpflow, X, Z, kernel, feature, arccos, se


def _gradient(tf, fn, variables):
    def run():
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(fn())
        return tape.gradient(value, variables)

    return run


def xla_operations(num_inducing: int = NUM_INDUCING, num_data: int = NUM_DATA):
    """Whole-call XLA (``tf.function(jit_compile=True)``) Kuf against SE K(Z, X), forward and gradient, float64 and float32."""
    ops = {}
    for dtype, label in ((np.float64, "float64"), (np.float32, "float32")):
        tf, gpflow, X, Z, kernel, feature, _, se = _problem(dtype=dtype, num_inducing=num_inducing, num_data=num_data)
        kuf = lambda feature=feature, kernel=kernel, X=X: gpflow.covariances.Kuf(feature, kernel, X)  # noqa: E731
        se_kzx = lambda se=se, Z=Z, X=X: se(Z, X)  # noqa: E731
        ops[f"activated Kuf [XLA, {label}]"] = kuf
        ops[f"SquaredExponential K(Z, X) [XLA, {label}]"] = se_kzx
        ops[f"activated Kuf, grad W and X [XLA, {label}]"] = _gradient(tf, kuf, [feature.W.unconstrained_variable, X])
        ops[f"SquaredExponential K(Z, X), grad Z and X [XLA, {label}]"] = _gradient(tf, se_kzx, [Z, X])
    return {name: tf.function(fn, jit_compile=True) for name, fn in ops.items()}


def operations(num_inducing: int = NUM_INDUCING, num_data: int = NUM_DATA):
    """name → zero-argument callable, all built on one shared problem (M = ``num_inducing``, N = ``num_data``)."""
    tf, gpflow, X, Z, kernel, feature, arccos, se = _problem(num_inducing=num_inducing, num_data=num_data)
    Kuf, Kuu = gpflow.covariances.Kuf, gpflow.covariances.Kuu
    W = feature.W.unconstrained_variable

    def gradient(fn, variables):
        return _gradient(tf, fn, variables)

    kuf = lambda: Kuf(feature, kernel, X)  # noqa: E731
    kuu = lambda: Kuu(feature, kernel)  # noqa: E731
    arccos_kzx = lambda: arccos(Z, X)  # noqa: E731
    se_kzx = lambda: se(Z, X)  # noqa: E731
    ops = {
        "activated Kuf": kuf,
        "activated Kuu": kuu,
        "ArcCosine K(Z, X)": arccos_kzx,
        "SquaredExponential K(Z, X)": se_kzx,
        "activated Kuf, grad W and X": gradient(kuf, [W, X]),
        "ArcCosine K(Z, X), grad Z and X": gradient(arccos_kzx, [Z, X]),
        "SquaredExponential K(Z, X), grad Z and X": gradient(se_kzx, [Z, X]),
    }
    compiled = {f"{name} [tf.function]": tf.function(fn) for name, fn in ops.items() if "Kuu" not in name}
    return {**ops, **compiled, **xla_operations(num_inducing, num_data)}


def measure_memory(name: str, num_inducing: int = NUM_INDUCING, num_data: int = NUM_DATA) -> float:
    """Extra peak memory (MiB) of one warm call of operation ``name``: peak of TF's CPU allocator during the
    call minus what was allocated just before it (stats reset after a warm-up call)."""
    fn = operations(num_inducing, num_data)[name]
    fn()
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    result = fn()
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    del result
    return (peak - before) / 2**20


def _memory_in_subprocess(name: str, num_inducing: int, num_data: int) -> float:
    # the BFC allocator keeps statistics (peak, current) for the CPU device
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true")
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.covariances", "--memory-of", name, str(num_inducing), str(num_data)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["extra_peak_mib"]


OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "covariances.json"
REPORT_COMMAND = "python -m benchmarks.covariances --report-only"
REPORT_BLOCKS = [("docs/benchmarks.md", "covariances")]
WARMUP, REPEATS = 2, 20


def measure(repeats: int, only=None, output=OUTPUT, num_inducing: int = NUM_INDUCING, num_data: int = NUM_DATA) -> dict:
    """Seconds of each of ``repeats`` warm calls of every operation (whose name contains ``only``), then its extra
    peak memory in a fresh subprocess; the record, written to ``output`` (None: not written)."""
    ops = {name: fn for name, fn in operations(num_inducing, num_data).items() if only is None or only in name}
    print(f"M={num_inducing} N={num_data} D={INPUT_DIM} Ñ={TRUNCATION} float64; {repeats} timed calls each", flush=True)
    seconds = {}
    for name, fn in ops.items():
        seconds[name] = time_call(fn, repeats=repeats, warmup=WARMUP)
        print(f"  {name:50s} {1e3 * np.median(seconds[name]):8.2f} ms", flush=True)
    memory = {}
    for name in ops:
        memory[name] = _memory_in_subprocess(name, num_inducing, num_data)
        print(f"  {name:50s} {memory[name]:8.1f} MiB extra peak", flush=True)
    command = command_line("python -m benchmarks.covariances", {"repeats": repeats}, {"repeats": REPEATS})
    record = {"command": command, "M": num_inducing, "N": num_data, "D": INPUT_DIM, "truncation_level": TRUNCATION,
              "dtype": "float64", "activation": "softplus", "repeats": repeats, "warmup": WARMUP,
              "rows": [{"operation": name, "seconds": [round(t, 7) for t in seconds[name]], "extra_peak_mib": round(memory[name], 4)}
                       for name in ops], **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def _baseline(name: str) -> str:
    """The operation a row's time is divided by: GPflow's ArcCosine K(Z, X) in the same mode (its gradient for a
    gradient row); for the XLA rows, GPflow's SquaredExponential K(Z, X) of the same dtype."""
    if "XLA" in name:
        return name.replace("activated Kuf", "SquaredExponential K(Z, X)").replace("grad W and X", "grad Z and X")
    base = "ArcCosine K(Z, X), grad Z and X" if "grad" in name else "ArcCosine K(Z, X)"
    return base + (" [tf.function]" if name.endswith("[tf.function]") else "")


def table_rows(record: dict) -> str:
    """The rows of the table: median time, ratio to the row's baseline (when measured), extra peak memory."""
    times = {row["operation"]: float(np.median(row["seconds"])) for row in record["rows"]}
    output_mib = record["M"] * record["N"] * 8 / 2**20
    rows = []
    for row in record["rows"]:
        name, memory = row["operation"], row["extra_peak_mib"]
        base = _baseline(name)
        ratio = "—" if "Kuu" in name or base not in times else f"{times[name] / times[base]:.2f}"
        rows.append(f"| {name} | {1e3 * times[name]:.2f} | {ratio} | {memory:.1f} | {memory / output_mib:.1f} |")
    return "\n".join(rows)


def markdown(record: dict) -> str:
    """The "covariances" block of docs/benchmarks*.md from its record."""
    times = {row["operation"]: float(np.median(row["seconds"])) for row in record["rows"]}
    M, N, D, truncation = record["M"], record["N"], record["D"], record["truncation_level"]
    output_mib = M * N * 8 / 2**20
    reference = "ArcCosine K(Z, X)"
    xla_summary = "; ".join(
        f"{what} {label} {times[f'activated Kuf{grad} [XLA, {label}]'] / times[f'SquaredExponential K(Z, X){se_grad} [XLA, {label}]']:.2f}×"
        for label in ("float64", "float32")
        for what, grad, se_grad in (("forward", "", ""), ("gradient", ", grad W and X", ", grad Z and X"))
    )
    kuf_eager = times["activated Kuf"] / times[reference]
    kuf_grad = times["activated Kuf, grad W and X"] / times["activated Kuf"]
    arccos_grad = times["ArcCosine K(Z, X), grad Z and X"] / times[reference]
    return f"""{record_line(OUTPUT, record["command"])}

Command: `{record["command"]}` (M = {M}, N = {N:,}, D = {D}, Ñ = {truncation}, float64,
Softplus features; median of {record["repeats"]} warm calls; extra peak memory from TF's BFC CPU allocator in a fresh subprocess per row, output included).

| operation | time (ms) | time / ArcCosine K(Z, X) (same mode; XLA rows: / SE K(Z, X), same dtype) | extra peak memory (MiB) | in units of one [M, N] matrix ({output_mib:.1f} MiB) |
|---|---|---|---|---|
{table_rows(record)}

- Activated Kuf takes {kuf_eager:.2f}× the time of GPflow's closed-form ArcCosine K(Z, X) called eagerly (target ≤ 0.5×). The Clenshaw
  recurrence is compiled with XLA (`tf.function(jit_compile=True)`) and runs as one fused pass over the [M, N] cosine matrix.
  It sums each parity as a Chebyshev series in u = 2t² − 1 (even levels, and t × the odd ones; docs/zonal_core.md):
  Softplus's odd levels from 3 on vanish, so its Ñ = {truncation} series takes {truncation // 2} steps of one multiply-add and one subtraction.
  Earlier tables of this section, XLA float64 against SE: the Gegenbauer recurrence in t (2026-11-23) forward 1.42×,
  gradient 1.82×; the Gegenbauer recurrence in s = t² (three multiply-adds per step) forward 1.01×, gradient 1.54×.
- Its gradient with respect to W and X costs {kuf_grad:.2f}× the forward call (GPflow's ArcCosine: {arccos_grad:.2f}×): the custom gradient
  evaluates S'(t) as a second Clenshaw sum in the α + 1 basis instead of back-propagating through Ñ stored intermediates.
- Whole-call XLA (`jit_compile=True`, norms and products fused with the Clenshaw loop), against GPflow's SquaredExponential
  K(Z, X) compiled the same way (target ≤ 1.0): {xla_summary}.
- Extra memory stays a small multiple of one [M, N] matrix; an [M, N, Ñ] tensor, as in the paper's appendix-E sketch, would be
  {output_mib * truncation:.0f} MiB.
- Timings on a shared 2-core machine are noisy; the ratios, taken in one run, are what to compare.
{load_average_line(record)}"""


def report_from_records() -> str:
    """The "covariances" block of docs/benchmarks*.md from its record (``--report-only``)."""
    return report_block("covariances", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.covariances")


def _options(parser) -> None:
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed calls per operation (after 2 untimed ones)")
    parser.add_argument("--only", help="only the operations whose name contains this text: print their rows, write nothing")


def _measure(args, output):
    """The record of the run (written to ``output``); with ``--only``, the measured rows, and nothing is written."""
    record = measure(args.repeats, only=args.only, output=None if args.only else output)
    return table_rows(record) if args.only is not None else record


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    if len(sys.argv) == 5 and sys.argv[1] == "--memory-of":  # a measuring process started by measure()
        print(json.dumps({"extra_peak_mib": measure_memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))}))
    else:
        measure_or_report("benchmarks.covariances", __doc__.splitlines()[0], _measure, report_from_records, _options,
                          markdown, OUTPUT)
