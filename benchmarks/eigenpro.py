"""EigenPro 3 benchmarks: iterations to a target error per preconditioner, and scaling.

``iterations`` (machine-independent counts): protein (first --n rows, standardised features), p random
centers, Laplacian kernel (Exponential, lengthscale 2), exact projection, consistent update, full batch
(deterministic preconditioned gradient descent, so counts do not depend on minibatch noise). Counted: epochs
until ‖f − f_lstsq‖ / ‖f_lstsq‖ < --target on the training points, f_lstsq from ``scipy.linalg.lstsq``.
Preconditioners: none (q = 0); Nyström at s = 100 … 2000 (q = s/10, ≤ 100); IKA and NeuralEF (q + 1
eigenpairs fitted on 2000 points) and the span (Ritz) preconditioner, each at q = 10 and 50 (--learned-q).

``scaling`` (timings: run on a quiet machine; record docs/results/eigenpro_scaling.json, written after every cell,
and its table in docs/benchmarks*.md, which ``scaling --report-only`` rewrites from it): seconds per EigenPro 3 epoch (inexact projection, one
EigenPro 2 epoch per step, Nyström s = 2000, q = 100) as n grows (protein 5k → 45k rows, p = 1000) and
as p grows (1k → 10k centers at the default n = --scaling-n = 10,000 rows, 20k with --scaling-n 20000; every p
is a random subset of the data, never a duplicate), each cell in a fresh process for its peak RSS; beside it the direct solve (K(X, Z) [n, p]
formed, ``scipy.linalg.lstsq``) where p ≤ --direct-max. K(Z, Z) is recomputed in blocks at every projection
step (``gram_cache_bytes=0``, the paper's O(p)-memory setting) unless --gram-cache-gib holds it. Each cell
records the minibatch m that the step rule chose, so the per-epoch work the paper's complexity gives,
(n/m)·(m·p + p²) kernel evaluations (gradient at the batch, one EigenPro 2 epoch over K(Z, Z)), is printed
beside the measured time. Ratios are against the first cell of the same run.

``gram-cache`` (timings: quiet machine): seconds of one EigenPro 3 epoch on the 5,000 MNIST training digits
(D = 784, Laplacian kernel of bandwidth 5, the settings of ``experiments.eigenpro_mnist``) with the model's
K(Z, Z) held (``gram_cache_bytes`` default) against recomputed in blocks at every projection step
(``gram_cache_bytes=0``), for each --gram-p, the two alternating in one process; the ratio is the figure to quote.

``projection-speed``: this checkout's ``activated_dgp`` against the package as of --reference (a commit, extracted
with ``git archive`` and imported under another name), taking turns in one process, on the 5,000 MNIST digits with
the settings of ``experiments.eigenpro_mnist`` (held K(Z, Z)). First the inexact projection of the consistent
update alone, θ = S (G Sᵀ u) for u [p, 10] (EigenPro 2 on K(Z, Z), s = min(2000, p), q = min(100, p/10); one
untimed call each, then --repeats timed calls in turn; medians) for each --speed-p; then EigenPro 3's setup and one
epoch (reference, current, reference, current; the faster of each pair) for each --epoch-p. Both tables give the
ratio and the relative difference of the results (the iteration is the same, so round-off). Both tables and every
timing behind them go to docs/figures/eigenpro_projection_speed.json (written atomically; not with --no-write), the
record docs/kernel_machines.md names (it quotes no speed-up until one is committed).

Run:  nice -n 10 python -m benchmarks.eigenpro iterations --data-dir $ADGP_DATA_DIR
      python -m benchmarks.eigenpro scaling --data-dir $ADGP_DATA_DIR     (quiet machine; writes its record and docs/benchmarks*.md)
      python -m benchmarks.eigenpro gram-cache --data-dir $ADGP_DATA_DIR  (quiet machine; ~5 min)
      nice -n 10 python -m benchmarks.eigenpro projection-speed --data-dir $ADGP_DATA_DIR   (~5 min; writes its record)
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
from pathlib import Path
import queue as queues
import resource
import subprocess
import tempfile
import time

import gpflow
import numpy as np
import scipy.linalg

from activated_dgp import eigen
from activated_dgp.data.uci import load_uci
from activated_dgp.eigen import IKA, NeuralEF
import activated_dgp.kernel_machines as current
from activated_dgp.kernel_machines import EigenPro3, choose_centers
from benchmarks._report import (command_line, import_package, load_average_line, machine_state, record_line,
                                report_block, write_record)
from experiments.harness.artifacts import atomic_write_text
from experiments.harness.blocks import write_block
from experiments.harness.cli import make_parser, shared_option
from experiments.harness.setups import mnist_arrays

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS_RECORD = ROOT / "docs" / "figures" / "eigenpro_iterations.json"
GRAM_CACHE_RECORD = ROOT / "docs" / "figures" / "eigenpro_gram_cache.json"  # the gram-cache mode's record
PROJECTION_SPEED_RECORD = ROOT / "docs" / "figures" / "eigenpro_projection_speed.json"  # the projection-speed mode's record
EIGENPRO_PAGE = ROOT / "docs" / "results" / "eigenpro.md"


def protein(data_dir, n, seed=0):
    data = load_uci("protein", data_dir)
    rows = np.random.default_rng(seed).permutation(data.num_data)[:n]
    X = data.X[rows]
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    y = data.y[rows]
    return X, (y - y.mean()) / y.std()


def _epochs_to_target(model, X, y, fitted, target, max_epochs):
    """One fit (one preconditioner setup), checked after every epoch through the fit's callback."""
    reached = lambda epoch: np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted) < target  # noqa: E731
    model.fit(X, y, epochs=max_epochs, progress=False, callback=reached)
    epochs = len(model.history["loss"])
    return epochs if reached(epochs) else None


def iterations(args):
    X, y = protein(args.data_dir, args.n)
    kernel = gpflow.kernels.Exponential(lengthscales=2.0)
    Z = choose_centers(X, args.p, "random", seed=0)
    Kxz = kernel(X, Z).numpy()
    fitted = Kxz @ scipy.linalg.lstsq(Kxz, y)[0]
    sample = X[:2000]
    common = dict(projection="exact", batch_size=X.shape[0], power_iterations=20)
    setups = [("none", dict(num_eigenpairs=0))]
    setups += [(f"Nyström s = {s}", dict(subsample_size=s, num_eigenpairs=min(s // 10, 100))) for s in (100, 300, 1000, 2000)]
    for q in args.learned_q:
        setups += [("IKA (200 k-means ReLU features)", dict(preconditioner=lambda q=q: IKA(q + 1, eigen.activation_basis(eigen.kmeans_filters(sample, 200), "relu", offsets=np.ones(200))).fit(sample, kernel), num_eigenpairs=q))]
        setups += [("NeuralEF (2000 steps)", dict(preconditioner=lambda q=q: NeuralEF(q + 1, kernel=kernel, input_dim=X.shape[1], seed=0).fit(sample, num_steps=2000), num_eigenpairs=q))]
        setups += [("span (Ritz in span K(·, Z))", dict(preconditioner="span", subsample_size=2000, num_eigenpairs=q))]
    results = []
    for name, options in setups:
        options = dict(options)
        if callable(options.get("preconditioner")):
            options["preconditioner"] = options["preconditioner"]()
        row = {"preconditioner": name, "q": options.get("num_eigenpairs")}
        try:
            model = EigenPro3(kernel, Z, **common, **options)
            row.update(epochs=_epochs_to_target(model, X, y, fitted, args.target, args.max_epochs), top=float(model.top_eigenvalue))
        except ValueError as error:
            row["error"] = str(error)
        results.append(row)
        print(row, flush=True)
    record = {"n": int(X.shape[0]), "p": args.p, "target": args.target, "max_epochs": args.max_epochs,
              "learned_q": list(args.learned_q), "rows": results}
    if not args.no_write:
        atomic_write_text(ITERATIONS_RECORD, json.dumps(record, indent=1) + "\n")
        write_iterations(record)
    print(iterations_table(record))


def iterations_table(record: dict) -> str:
    """The iterations table of docs/results/eigenpro.md from a record of :func:`iterations`."""
    rows = [f"Protein, n = {record['n']:,}, p = {record['p']} random centers, target {record['target']:g} relative error from "
            f"lstsq, full batch, exact projection (record: `docs/figures/eigenpro_iterations.json`).", "",
            "| preconditioner | q | epochs to target | μ_(q+1) or top of the iteration |", "|---|---|---|---|"]
    for r in record["rows"]:
        if "error" in r:
            reason = r["error"]
            reason = reason[: reason.find("): ") + 1] if "): " in reason else reason  # the reason, not the advice
            rows.append(f"| {r['preconditioner']} | {r['q']} | refused: {reason} | |")
        else:
            rows.append(f"| {r['preconditioner']} | {r['q']} | {r['epochs'] or '> ' + str(record['max_epochs'])} | {r['top']:.3e} |")
    return "\n".join(rows) + "\n"


REPORT_BLOCKS = [("docs/results/eigenpro.md", "eigenpro_iterations"), ("docs/benchmarks_kernels.md", "eigenpro_scaling")]


def report_from_records() -> None:
    """The iterations table of docs/results/eigenpro.md and the scaling table of docs/benchmarks*.md from their
    records (``iterations --report-only``, ``scaling --report-only``)."""
    write_iterations(json.loads(ITERATIONS_RECORD.read_text()))
    report_scaling()


def write_iterations(record: dict) -> None:
    write_block(EIGENPRO_PAGE, "eigenpro_iterations", iterations_table(record),
                "python -m benchmarks.eigenpro iterations --report-only")


def _scaling_cell(queue, data_dir, n, p, direct, gram_cache_bytes):
    """In a fresh process: two EigenPro 3 epochs on n protein rows with p centers, their seconds, the batch the step
    rule chose and the peak RSS above the state after loading; with ``direct``, the lstsq solve's seconds and peak."""

    X, y = protein(data_dir, n)
    kernel = gpflow.kernels.Exponential(lengthscales=2.0)
    Z = choose_centers(X, p, "random", seed=0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = EigenPro3(kernel, Z, subsample_size=2000, num_eigenpairs=100, projection="inexact", projection_subsample=min(2000, p),
                      projection_eigenpairs=100, gram_cache_bytes=gram_cache_bytes)
    model.fit(X, y, epochs=2, progress=False)
    result = {"n": n, "p": p, "batch": int(model.batch_size), "epoch_seconds": float(model.history["seconds"][-1]),
              "seconds_of_each_epoch": [float(seconds) for seconds in model.history["seconds"]],
              "ep3_peak_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}
    if direct:
        start = time.perf_counter()
        scipy.linalg.lstsq(kernel(X, Z).numpy(), y)
        result["direct_seconds"] = time.perf_counter() - start
        result["direct_peak_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    queue.put(result)


def _or_dash(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _epoch_work(cell) -> float:
    """Kernel evaluations of one EigenPro 3 epoch by the paper's count: n/m steps, each a gradient at m points
    over p centers and one EigenPro 2 epoch over the p × p K(Z, Z)."""
    return cell["n"] / cell["batch"] * (cell["batch"] * cell["p"] + cell["p"] ** 2)


SCALING_RECORD = ROOT / "docs" / "results" / "eigenpro_scaling.json"  # the scaling mode's record
SCALING_REPORT_COMMAND = "python -m benchmarks.eigenpro scaling --report-only"


def scaling_cells(scaling_n: int) -> list:
    """The (n, p) cells of ``scaling``: n grows at p = 1,000, then p grows at n = ``scaling_n`` (the centers are a
    random subset of the data, so the p-series stops at n)."""
    return [(n, 1000) for n in (5000, 10000, 20000, 45000)] + [(scaling_n, p) for p in (2000, 5000, 10000, 20000) if p <= scaling_n]


SCALING_DEFAULTS = {"scaling_n": 10000, "gram_cache_gib": 0.0, "direct_max": 10000}


def _result_of(process, queue) -> dict:
    """What the cell's ``process`` puts on ``queue``; an error if it exits without (instead of waiting for ever)."""
    while True:
        try:
            return queue.get(timeout=5)
        except queues.Empty:
            if not process.is_alive():
                raise RuntimeError(f"a scaling cell's process exited with code {process.exitcode} and no result")


def scaling(args, output=SCALING_RECORD):
    """Seconds of an EigenPro 3 epoch, its batch and peak RSS (and the direct solve's) for every cell of
    :func:`scaling_cells`, each in a fresh process; the record is written to ``output`` after every cell (not with
    --no-write, which prints the table instead of reporting it)."""
    context = multiprocessing.get_context("spawn")
    if not 2000 <= args.scaling_n <= 45000:
        raise ValueError(f"--scaling-n must lie in [2,000, 45,000] (protein's rows; the p-series needs p ≤ n), got {args.scaling_n}")
    cells = scaling_cells(args.scaling_n)
    gram_cache_bytes = int(args.gram_cache_gib * 2**30)
    given = {name: getattr(args, name) for name in SCALING_DEFAULTS}
    record = {"command": command_line("python -m benchmarks.eigenpro scaling --data-dir $ADGP_DATA_DIR", given, SCALING_DEFAULTS),
              **given, "cells": [list(cell) for cell in cells], "rows": []}
    for index, (n, p) in enumerate(cells):
        queue = context.Queue()
        process = context.Process(target=_scaling_cell, args=(queue, args.data_dir, n, p, p <= args.direct_max, gram_cache_bytes))
        process.start()
        record = {**record, "rows": record["rows"] + [_result_of(process, queue)], **machine_state()}
        process.join()
        print(f"[{index + 1}/{len(cells)}]", record["rows"][-1], flush=True)
        if not args.no_write:
            write_record(output, record)
    print(scaling_table(record) if args.no_write else report_scaling())


def scaling_table(record: dict) -> str:
    """The "eigenpro_scaling" block of docs/benchmarks*.md from a record of :func:`scaling`."""
    results = record["rows"]
    base = results[0]
    held = (f"held up to {record['gram_cache_gib']:g} GiB" if record["gram_cache_gib"]
            else "recomputed in blocks at every projection step (O(p) memory)")
    rows = [record_line(SCALING_RECORD, record["command"]), "",
            f"Command: `{record['command']}`"
            f" (protein, Laplacian kernel of lengthscale 2, random centers, inexact projection, Nyström s = 2000, q = 100;"
            f" the second of 2 epochs timed; each cell a fresh process; K(Z, Z) {held}; peak RSS above the process's state after"
            f" loading the data; the direct solve where p ≤ {record['direct_max']:,}).", "",
            "| n | p | batch m | s / epoch | ratio to first | n·p ratio | (n/m)(mp + p²) ratio | EigenPro 3 peak MB | direct lstsq s | direct peak MB |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r['n']:,} | {r['p']:,} | {r['batch']} | {r['epoch_seconds']:.2f} | {r['epoch_seconds'] / base['epoch_seconds']:.2f} | "
                    f"{r['n'] * r['p'] / (base['n'] * base['p']):.1f} | {_epoch_work(r) / _epoch_work(base):.1f} | "
                    f"{r['ep3_peak_mb']:.0f} | {_or_dash(r.get('direct_seconds'), '.2f')} | {_or_dash(r.get('direct_peak_mb'), '.0f')} |")
    missing = [f"n = {n:,}, p = {p:,}" for n, p in record["cells"][len(results):]]
    rows.append("")
    if missing:
        rows.append(f"- Interrupted: no row for {'; '.join(missing)}.")
    return "\n".join(rows) + "\n" + load_average_line(record)


def report_scaling() -> str:
    """The "eigenpro_scaling" block of docs/benchmarks*.md from its record (``scaling --report-only``)."""
    return report_block("eigenpro_scaling", scaling_table, SCALING_RECORD, SCALING_REPORT_COMMAND,
                        made_by="python -m benchmarks.eigenpro scaling --data-dir $ADGP_DATA_DIR")


def gram_cache(args):
    X, y, *_ = mnist_arrays(args.data_dir)
    Y = np.eye(10)[y]
    kernel = gpflow.kernels.Exponential(lengthscales=5.0)
    rows = ["| p | held K(Z, Z): epoch s (setup + epoch s) | recomputed blocks: epoch s (setup + epoch s) | epoch ratio | setup + epoch ratio |",
            "|---|---|---|---|---|"]
    cells = []
    for p in args.gram_p:
        Z = choose_centers(X, p, "random", seed=0)
        seconds = {}
        for label, cache in (("held", 1 << 30), ("blocks", 0), ("held", 1 << 30)):  # held twice: warm-up effects show
            model = EigenPro3(kernel, Z, subsample_size=2000, num_eigenpairs=100, projection="inexact", projection_subsample=min(2000, p),
                              projection_eigenpairs=min(100, p // 10), seed=0, gram_cache_bytes=cache)
            start = time.perf_counter()
            model.fit(X, Y, epochs=1, progress=False)
            seconds.setdefault(label, []).append((float(model.history["seconds"][-1]), time.perf_counter() - start))
            print(f"p = {p}, {label}: epoch {seconds[label][-1][0]:.1f} s, setup + epoch {seconds[label][-1][1]:.1f} s", flush=True)
        held, blocks = min(seconds["held"]), seconds["blocks"][0]
        rows.append(f"| {p:,} | {held[0]:.1f} ({held[1]:.1f}) | {blocks[0]:.1f} ({blocks[1]:.1f}) | {held[0] / blocks[0]:.2f} | {held[1] / blocks[1]:.2f} |")
        cells.append({"p": p, "held": held, "blocks": blocks, "all": seconds, "load_average": os.getloadavg()[0]})

    command = "python -m benchmarks.eigenpro gram-cache --data-dir DIR --gram-p " + " ".join(map(str, args.gram_p))
    record = {"command": command, "seconds": "(epoch, setup + epoch) per run; 'held' is the faster of its two runs", "cells": cells,
              "table": rows}
    atomic_write_text(GRAM_CACHE_RECORD, json.dumps(record, indent=1) + "\n")
    print("\n".join(rows) + f"\n(record: {GRAM_CACHE_RECORD.relative_to(ROOT)})")


def _package_at(revision, folder):
    """``activated_dgp`` as of ``revision``, imported as ``adgp_reference`` from ``folder`` (its imports are relative)."""

    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(root), "archive", revision, "activated_dgp"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    (Path(folder) / "activated_dgp").rename(Path(folder) / "adgp_reference")
    import_package(folder, "adgp_reference")
    return importlib.import_module("adgp_reference.kernel_machines")


def projection_speed(args):
    X, y, *_ = mnist_arrays(args.data_dir)
    Y = np.eye(10)[y]
    kernel = gpflow.kernels.Exponential(lengthscales=5.0)
    projection_rows = [f"| p | inner batches | {args.reference}: s / projection | current: s / projection | ratio | ‖Δθ‖/‖θ‖ |", "|---|---|---|---|---|---|"]
    rows = [f"| p | {args.reference}: epoch s (setup + epoch s) | current: epoch s (setup + epoch s) | epoch ratio | setup + epoch ratio | ‖Δα‖/‖α‖ |",
            "|---|---|---|---|---|---|"]
    projection_cells, epoch_cells = [], []
    with tempfile.TemporaryDirectory() as folder:
        reference = _package_at(args.reference, folder)
        for p in args.speed_p:
            Z = current.choose_centers(X, p, "random", seed=0)
            u = np.random.default_rng(1).standard_normal((p, 10))
            runs = []
            for package in (reference, current):
                solver = package.EigenPro2Solver(package.KernelCenters(kernel, Z, cache_gram=True).gram_operator(), min(2000, p), min(100, p // 10), seed=0)
                everything = np.arange(p) if package is reference else None  # G V over all rows (the reference took indices)

                def project(solver=solver, everything=everything):
                    rng = lambda: np.random.default_rng([0, 3])  # noqa: E731  (EigenPro3's fixed projection order)
                    return solver.solve(solver.operator.matmul(everything, solver.solve_adjoint(u, rng=rng())).numpy(), rng=rng())

                runs.append((project, []))
                result = project()  # untimed: the current package computes and holds ψ(M_k) here
            difference = np.linalg.norm(result - runs[0][0]()) / np.linalg.norm(result)
            for _ in range(args.repeats):
                for project, seconds in runs:
                    start = time.perf_counter()
                    project()
                    seconds.append(time.perf_counter() - start)
            before, after = (float(np.median(seconds)) for _, seconds in runs)
            print(f"p = {p}: projection {before:.3f} s ({args.reference}), {after:.3f} s (current)", flush=True)
            projection_rows.append(f"| {p:,} | {-(-p // solver.batch_size)} | {before:.3f} | {after:.3f} | {after / before:.2f} | {difference:.1e} |")
            projection_cells.append({"p": p, "inner_batches": int(-(-p // solver.batch_size)), "reference_seconds": before, "current_seconds": after,
                                     "ratio": after / before, "relative_difference": float(difference),
                                     "all_seconds": {"reference": runs[0][1], "current": runs[1][1]}, "load_average": os.getloadavg()[0]})
        for p in args.epoch_p:
            Z = current.choose_centers(X, p, "random", seed=0)
            seconds, weights = {}, {}
            for label, package in (("reference", reference), ("current", current)) * 2:
                model = package.EigenPro3(kernel, Z, subsample_size=2000, num_eigenpairs=100, projection="inexact", projection_subsample=min(2000, p),
                                          projection_eigenpairs=min(100, p // 10), seed=0)
                start = time.perf_counter()
                model.fit(X, Y, epochs=1, progress=False)
                seconds.setdefault(label, []).append((float(model.history["seconds"][-1]), time.perf_counter() - start))
                weights[label] = np.asarray(model.weights)
                print(f"p = {p}, {label}: epoch {seconds[label][-1][0]:.1f} s, setup + epoch {seconds[label][-1][1]:.1f} s", flush=True)
            before, after = min(seconds["reference"]), min(seconds["current"])
            change = np.linalg.norm(weights["current"] - weights["reference"]) / np.linalg.norm(weights["reference"])
            rows.append(f"| {p:,} | {before[0]:.1f} ({before[1]:.1f}) | {after[0]:.1f} ({after[1]:.1f}) | {after[0] / before[0]:.2f} | {after[1] / before[1]:.2f} | {change:.1e} |")
            epoch_cells.append({"p": p, "reference": before, "current": after, "epoch_ratio": after[0] / before[0],
                                "setup_and_epoch_ratio": after[1] / before[1], "relative_weight_change": float(change),
                                "all": seconds, "load_average": os.getloadavg()[0]})
    print("\n".join(projection_rows + [""] + rows))
    if args.no_write:
        return

    command = ("python -m benchmarks.eigenpro projection-speed --data-dir DIR --reference " + args.reference
               + " --speed-p " + " ".join(map(str, args.speed_p)) + " --epoch-p " + " ".join(map(str, args.epoch_p))
               + f" --repeats {args.repeats}")
    record = {"command": command, "reference": args.reference, "cpu_count": os.cpu_count(),
              "seconds": "projection: median of --repeats timed calls; epoch: (epoch, setup + epoch), the faster of two runs per package",
              "projection": projection_cells, "epoch": epoch_cells, "table": projection_rows + [""] + rows}
    atomic_write_text(PROJECTION_SPEED_RECORD, json.dumps(record, indent=1) + "\n")
    print(f"(record: {PROJECTION_SPEED_RECORD.relative_to(ROOT)})")


def main(argv=None):
    parser = make_parser("python -m benchmarks.eigenpro", __doc__)
    parser.add_argument("mode", choices=("iterations", "scaling", "gram-cache", "projection-speed"))
    shared_option(parser, "--data-dir", help="folder holding uci/ (default $ADGP_DATA_DIR)")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--p", type=int, default=300)
    parser.add_argument("--target", type=float, default=1e-2)
    parser.add_argument("--max-epochs", type=int, default=300)
    parser.add_argument("--learned-q", type=int, nargs="+", default=[10, 50], help="preconditioner levels q of the IKA, NeuralEF and span rows")
    parser.add_argument("--direct-max", type=int, default=SCALING_DEFAULTS["direct_max"])
    parser.add_argument("--scaling-n", type=int, default=SCALING_DEFAULTS["scaling_n"],
                        help="rows of the p-growing cells of scaling; p runs 2k, 5k, 10k, 20k up to this n (20,000 takes about half an hour more on 2 cores)")
    parser.add_argument("--no-write", action="store_true", help="scaling, iterations, projection-speed: print the table without touching docs/ or the record")
    shared_option(parser, "--report-only", help="iterations, scaling: rewrite the mode's table from its record, run nothing")
    parser.add_argument("--gram-cache-gib", type=float, default=SCALING_DEFAULTS["gram_cache_gib"], help="scaling: hold K(Z, Z) when it fits in this many GiB (default 0: recompute, O(p) memory)")
    parser.add_argument("--gram-p", type=int, nargs="+", default=[1000, 2000], help="centers of the gram-cache mode")
    parser.add_argument("--speed-p", type=int, nargs="+", default=[1000, 2000, 5000], help="centers of projection-speed's projection table")
    parser.add_argument("--epoch-p", type=int, nargs="*", default=[2000], help="centers of projection-speed's setup + epoch table")
    parser.add_argument("--repeats", type=int, default=5, help="timed projections per package in projection-speed")
    parser.add_argument("--reference", default="2ed2028", help="the commit projection-speed compares against (default: the last one before the held ψ schedule)")
    args = parser.parse_args(argv)
    if args.report_only and args.mode == "iterations":
        return write_iterations(json.loads(ITERATIONS_RECORD.read_text()))
    if args.report_only and args.mode == "scaling":
        text = report_scaling()  # empty without a record (report_block printed a notice)
        if text:
            print(text)
        return None
    {"iterations": iterations, "scaling": scaling, "gram-cache": gram_cache, "projection-speed": projection_speed}[args.mode](args)


if __name__ == "__main__":
    main()
