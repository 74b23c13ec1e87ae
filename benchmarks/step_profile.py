"""Where the time of one DGP training step goes: op self-times of a few compiled steps, by op type and by part.

Models as in :mod:`benchmarks.dgp_epoch` (10,000 × 8 data, minibatch 128, 3 layers of 128 units / inducing
variables, float64, Adam through ``keras.Model.fit``): the activated DGP and GPflux's SE DGP. After one warm-up
epoch, ``--steps`` steps of each run under ``tf.profiler.experimental``; the host trace (XPlane) is read back and
each op's *self* time (its duration less that of the ops nested in it on the same thread) is summed

* by op type (MatMul, Cholesky, MatrixTriangularSolve, the XLA-compiled Clenshaw sums, …), and
* by part of the step, from the op's name scope and type: the covariances (Kuu, Kuf, K_diag), Cholesky, the
  triangular solves, the other matrix products (the q_sqrt products L_pᵀA of the conditional), KL, likelihood,
  optimizer, and the rest (elementwise ops, reshapes, dispatch of small ops).

Only fractions of one model's op time within one run are meant to be quoted: on a shared machine the absolute
times are not meaningful. Run with one thread per pool so that op times add up to the step:

    TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 python -m benchmarks.step_profile
    python -m benchmarks.step_profile --count-ops        (ops of the step's graph by type, no profiling)
    python -m benchmarks.step_profile --flops            (multiply-adds of a step's forward pass, per layer)
    python -m benchmarks.step_profile --compare-with DIR (this checkout's step against the checkout in DIR's, and
                                                          GPflux's, taking turns in one process)
    python -m benchmarks.step_profile --compare-fast-conditional   (the activated DGP's step with its owned step,
        gpflux's step and GPflow's conditional, and BatchPredictor with the batched conditional of
        activated_dgp.zonal.conditionals against GPflow's, taking turns in one process)

The script runs on older checkouts too (it uses only ``build_activated_dgp`` and gpflux):
``PYTHONPATH=DIR python benchmarks/step_profile.py --count-ops`` counts the ops of DIR's step.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import os
from pathlib import Path
import shutil
import statistics
import tempfile
import time

import gpflow
import numpy as np
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2
import tf_keras

import activated_dgp
from benchmarks._report import import_package, write_section
from benchmarks.dgp_epoch import ACTIVATION, BATCH, INPUT_DIM, NUM_DATA, NUM_LAYERS, NUM_UNITS  # the same model
from benchmarks.dgp_epoch import _data, activated_dgp_model, gpflux_dgp_model
from experiments.harness.cli import make_parser


def _threads():
    intra, inter = os.environ.get("TF_NUM_INTRAOP_THREADS"), os.environ.get("TF_NUM_INTEROP_THREADS")
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra))
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(int(inter))


def build_models(X):
    """name → compiled gpflux training model (benchmarks.dgp_epoch's two DGPs)."""
    models = {}
    for name, dgp in (("activated DGP", activated_dgp_model()), ("GPflux DGP (SE)", gpflux_dgp_model(X))):
        model = dgp.as_training_model()
        model.compile(tf_keras.optimizers.Adam(0.01))
        models[name] = model
    return models


def _dataset(X, Y, steps):
    data = tf.data.Dataset.from_tensor_slices({"inputs": X, "targets": Y}).repeat().batch(BATCH, drop_remainder=True)
    return data.take(steps)


# ------------------------------------------------------------------------------------------------
# op counts of the compiled step
# ------------------------------------------------------------------------------------------------


def count_ops(model, X, Y) -> tuple[collections.Counter, collections.Counter]:
    """Ops of one training step's graph by type: (top-level graph, graph plus every function in its library)."""
    spec = {
        "inputs": tf.TensorSpec([BATCH, X.shape[1]], tf.float64),
        "targets": tf.TensorSpec([BATCH, Y.shape[1]], tf.float64),
    }
    graph = tf.function(model.train_step).get_concrete_function(spec).graph
    top = collections.Counter(op.type for op in graph.get_operations())
    total = collections.Counter(top)
    for function in graph.as_graph_def().library.function:
        total.update(node.op for node in function.node_def)
    return top, total


# ------------------------------------------------------------------------------------------------
# profile: op self-times from the XPlane trace
# ------------------------------------------------------------------------------------------------

SCOPES = ("Kuf", "Kuu", "prior_kl", "likelihood", "conditional")


def add_name_scopes() -> None:
    """Give the parts of a step name scopes (trace time only; no ops): GPflow's Kuf, Kuu, conditional and prior_kl
    dispatchers and the likelihood's variational expectations, so that op names, and the names of their gradients,
    say which part they belong to."""

    def scoped(scope, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with tf.name_scope(scope):
                return function(*args, **kwargs)

        return wrapper

    dispatchers = {
        "Kuf": gpflow.covariances.Kuf,
        "Kuu": gpflow.covariances.Kuu,
        "conditional": gpflow.conditionals.conditional,
        "prior_kl": gpflow.kullback_leiblers.prior_kl,
    }
    for scope, dispatcher in dispatchers.items():
        for key, function in list(dispatcher.funcs.items()):
            dispatcher.funcs[key] = scoped(scope, function)
        dispatcher._cache.clear()
    likelihood = gpflow.likelihoods.Likelihood
    likelihood.variational_expectations = scoped("likelihood", likelihood.variational_expectations)


def _scope(component: str):
    """"Kuf", "Kuf_1" → "Kuf"; "prior_kl_2" → "prior_kl"; anything else → None."""
    base = component.rstrip("0123456789").rstrip("_") if component[-1:].isdigit() else component
    return base if base in SCOPES else None


def part_of(name: str, kind: str) -> str:
    """The part of the step an op belongs to, from its innermost known name scope, then its type."""
    path = name.split("/")
    scopes = [_scope(component) for component in path if _scope(component)]
    scope = scopes[-1] if scopes else None
    if name.startswith("ExecutorState"):
        return "executor (scheduling between ops)"
    if name.startswith("CpuExecutable"):
        return "Kuu, Kuf: XLA Clenshaw sums"
    if "fill_triangular" in name or "q_sqrt_layout" in name:  # the q_sqrt parameter's transform, evaluated where q_sqrt
        return "q_sqrt transform (fill_triangular, or the owned step's gathers)"  # is read (conditional, KL), or its owned layout
    if scope in ("Kuf", "Kuu"):
        return "Kuu, Kuf: other ops"
    if scope == "prior_kl":
        return "KL"
    if scope == "likelihood":
        return "likelihood"
    if kind.startswith("ResourceApply") or any(part.lower().startswith(("adam", "optimizer")) for part in path):
        return "optimizer (Adam)"
    if scope == "conditional":
        if kind == "Cholesky" or "Cholesky" in name:
            return "conditional: Cholesky"
        if kind == "MatrixTriangularSolve" or "triangular_solve" in name:
            return "conditional: triangular solves"
        if kind.startswith("BatchMatMul") or (kind == "MatMul" and "q_sqrt_products" in name):
            return "conditional: q_sqrt products L_pᵀA"  # GPflow's batched product, or activated_dgp.zonal.conditionals' 2-D one
        if kind == "MatMul":
            return "conditional: other matrix products"
        return "conditional: elementwise, broadcasting"
    return "other (sampling, mean functions, loss, small ops)"


def _events(logdir):
    (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    space.ParseFromString(open(path, "rb").read())
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            spans = sorted(
                ((event.offset_ps, event.offset_ps + event.duration_ps, names.get(event.metadata_id, "?")) for event in line.events),
                key=lambda span: (span[0], -span[1]),
            )
            yield line.name, spans


def op_self_times(logdir) -> collections.Counter:
    """(op name, op type) → total self time (s) of the TensorFlow op kernels in the trace.

    Op kernels appear as events "name:type" on the executor threads; an event's self time is its duration less
    that of the events nested in it (a function call op, or an XLA launch, contains its ops)."""
    totals = collections.Counter()
    for line, spans in _events(logdir):
        if not line.startswith("tf_Compute"):
            continue
        stack = []  # [end, label, start, nested op time, is an op]

        def close(until):
            while stack and stack[-1][0] <= until:
                end, label, start, nested, is_op = stack.pop()
                if not is_op:
                    continue
                name, kind = label.rsplit(":", 1)
                totals[(name, kind.split("#")[0])] += (end - start - nested) * 1e-12
                for outer in reversed(stack):  # the nearest enclosing op loses this op's time
                    if outer[4]:
                        outer[3] += end - start
                        break

        for start, end, label in spans:
            close(start)
            stack.append([end, label, start, 0, _is_op(label)])
        close(float("inf"))
    return totals


def _is_op(label: str) -> bool:
    """An op kernel's event is "op name:OpType" (XLA's and the runtime's own events are not)."""
    if ":" not in label or " " in label:
        return False
    name, kind = label.rsplit(":", 1)
    return bool(name) and kind[:1].isupper() and name not in ("KernelAndDeviceFunc", "CpuExecutable")


def profile(model, X, Y, steps: int) -> collections.Counter:
    model.fit(_dataset(X, Y, 20), epochs=1, verbose=0)  # tracing
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        model.fit(_dataset(X, Y, steps), epochs=1, verbose=0)
        tf.profiler.experimental.stop()
        return op_self_times(logdir)


def report(name, totals: collections.Counter, top: int) -> str:
    total = sum(totals.values())
    by_type, by_part = collections.Counter(), collections.Counter()
    for (op, kind), seconds in totals.items():
        by_type[kind] += seconds
        by_part[part_of(op, kind)] += seconds
    lines = [f"## {name}: op self time, fractions of the step's total", "", "| part | fraction |", "|---|---|"]
    lines += [f"| {part} | {seconds / total:.1%} |" for part, seconds in by_part.most_common()]
    lines += ["", "| op type | fraction | | op type | fraction |", "|---|---|---|---|---|"]
    rows = by_type.most_common(2 * top)
    for left, right in zip(rows[:top], rows[top:] + [("", 0.0)] * top):
        lines.append(f"| {left[0]} | {left[1] / total:.1%} | | {right[0]} | {right[1] / total:.1%} |" if right[0] else f"| {left[0]} | {left[1] / total:.1%} | | | |")
    return "\n".join(lines)


def flop_table(widths=(INPUT_DIM, INPUT_DIM, 1), M=NUM_UNITS, B=BATCH, d=INPUT_DIM + 1, truncation=20) -> str:
    """Multiply-adds of one step's forward pass, per layer (P outputs, M inducing, B rows), of the activated DGP and
    of its network twin, which evaluates the same basis functions (cosines and Clenshaw sum) and one linear map per
    layer; the gradient costs about twice the products again in both. Whitened layers: the KL needs no Cholesky and
    only O(P M²) sums of squares. The owned step skips the zero upper triangle of the q_sqrt products: k column blocks
    cost (k + 1)/(2k) of P M² B (k = 8 here)."""
    blocks = 8
    rows = []
    for index, P in enumerate(widths):
        terms = {
            "Cholesky of Kuu (M³/6)": M**3 / 6,
            "triangular solve L⁻¹Kuf (M² B / 2)": M**2 * B / 2,
            "q_sqrt products L_pᵀA (P M² B)": P * M**2 * B,
            "Kuf: cosines (M B d) + Clenshaw (2 Ñ M B)": M * B * d + 2 * truncation * M * B,
            "KL, whitened (P M²)": P * M**2,
        }
        rows.append((index, P, terms))
    names = list(rows[0][2])
    lines = ["| term | " + " | ".join(f"layer {i} (P = {P})" for i, P, _ in rows) + " | all layers | share |", "|---" * (len(rows) + 3) + "|"]
    total = sum(sum(t.values()) for _, _, t in rows)
    for name in names:
        values = [t[name] for _, _, t in rows]
        lines.append(f"| {name} | " + " | ".join(f"{v / 1e6:.2f} M" for v in values) + f" | {sum(values) / 1e6:.2f} M | {sum(values) / total:.0%} |")
    lines.append("| forward total | " + " | ".join(f"{sum(t.values()) / 1e6:.2f} M" for _, _, t in rows) + f" | {total / 1e6:.1f} M | 100% |")
    products = sum(t["q_sqrt products L_pᵀA (P M² B)"] for _, _, t in rows)
    owned = total - products * (1 - (blocks + 1) / (2 * blocks))
    twin = sum(M * B * d + 2 * truncation * M * B + M * P * B for P in widths)
    lines += [
        "",
        f"- The network twin's forward pass: the same cosines and Clenshaw sums and one [B, M] · [M, P] map per layer, "
        f"{twin / 1e6:.2f} M multiply-adds.",
        f"- The activated DGP's step does {total / twin:.1f}× the twin's arithmetic with GPflow's conditional and "
        f"{owned / twin:.1f}× with the owned step ({owned / 1e6:.1f} M: the q_sqrt products over the lower triangle only, "
        f"{(blocks + 1) / (2 * blocks):.0%} of P M² B). At equal arithmetic rates the DGP's step costs that multiple of "
        "the twin's; a measured ratio below it means the twin's step is bound by per-op overhead rather than arithmetic.",
    ]
    return "\n".join(lines)


#: The block this script writes (``--flops``; the multiply-add counts follow from the benchmark's settings alone)
REPORT_BLOCKS = [("docs/benchmarks_training.md", "step-flops")]


def report_from_records() -> None:
    """The "step-flops" block of docs/benchmarks_training.md (:func:`flop_table`: counts, nothing timed)."""
    write_section("step-flops", flop_table(), "python -m benchmarks.step_profile --flops", doc=Path(__file__).resolve().parents[1] / "docs" / "benchmarks_training.md")


def time_steps(model, X, Y, steps: int, repeats: int) -> list[float]:
    """Seconds per step of ``repeats`` fits of ``steps`` steps each, after one warm-up fit."""
    model.fit(_dataset(X, Y, 20), epochs=1, verbose=0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.fit(_dataset(X, Y, steps), epochs=1, verbose=0)
        times.append((time.perf_counter() - start) / steps)
    return times


def import_other_checkout(directory: str):
    """The ``activated_dgp`` package of another checkout, imported under the name ``activated_dgp_other`` (a copy
    in a temporary folder, its Keras registrations renamed), so that two versions train side by side in one process."""

    target = Path(tempfile.mkdtemp()) / "activated_dgp_other"
    shutil.copytree(Path(directory) / "activated_dgp", target)
    for path in target.rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace('package="activated_dgp"', 'package="activated_dgp_other"'))
    return import_package(target.parent, "activated_dgp_other")


def compare_steps(X, Y, models: dict, chunks: int, steps: int, trace_contexts: dict | None = None) -> str:
    """Seconds per step of each model's compiled train function, in ``chunks`` rounds of ``steps`` steps taking
    turns (the order reversed every other round); ratios of minima and the median of the per-round ratios.
    ``trace_contexts``: name → context manager factory entered while that model's step is traced."""
    data = tf.data.Dataset.from_tensor_slices({"inputs": X, "targets": Y}).repeat().batch(BATCH, drop_remainder=True)
    functions = {}
    for name, model in models.items():
        with (trace_contexts or {}).get(name, contextlib.nullcontext)():
            model.fit(data.take(5), epochs=1, verbose=0)
            function, iterator = model.make_train_function(), iter(data)
            for _ in range(10):
                function(iterator)
        functions[name] = (function, iterator)
    times = {name: [] for name in functions}
    for index in range(chunks):
        for name in list(functions)[:: 1 if index % 2 == 0 else -1]:
            function, iterator = functions[name]
            start = time.perf_counter()
            for _ in range(steps):
                logs = function(iterator)
            float(logs["loss"])
            times[name].append((time.perf_counter() - start) / steps)
    names = list(times)
    lines = [f"{name}: fastest round {1e3 * min(times[name]):.2f} ms per step" for name in names]
    for other in names[1:]:
        ratios = [a / b for a, b in zip(times[names[0]], times[other])]
        lines.append(
            f"{names[0]} / {other}: {min(times[names[0]]) / min(times[other]):.3f} (fastest rounds), "
            f"{statistics.median(ratios):.3f} (median of the per-round ratios)"
        )
    return "\n".join(lines)


def compare_fast_conditional(X, Y, chunks: int, steps: int, prediction_points: int, prediction_batches=(64, 1024)) -> str:
    """The activated DGP's training step with the layers' owned step, with gpflux's step (traced inside
    ``gpflux_step()``: the batched conditional of :mod:`activated_dgp.zonal.conditionals`) and with GPflow's conditional
    (inside ``gpflow_conditional()``), and ``BatchPredictor.predict_y`` (S = 32) with the batched conditional against
    GPflow's, taking turns in one process: ratios new / old of step time and of prediction time (the inverse of the
    throughput ratio)."""
    # imported here, not at the top: the rest of the script runs on older checkouts, which lack these
    from activated_dgp.deep import BatchPredictor
    from activated_dgp.deep.layers import gpflux_step
    from activated_dgp.zonal.conditionals import gpflow_conditional


    models = {}
    names = ("owned step", "gpflux's step, batched conditional", "GPflow's conditional")
    for name in names:
        dgp = activated_dgp_model()
        models[name] = dgp.as_training_model()
        models[name].compile(tf_keras.optimizers.Adam(0.01))
    contexts = {names[1]: gpflux_step, names[2]: gpflow_conditional}
    lines = ["training step (activated DGP):", compare_steps(X, Y, models, chunks, steps, contexts)]
    dgp = activated_dgp_model()
    for batch in prediction_batches:
        points = X[: max(prediction_points, batch)]
        new, old = BatchPredictor(dgp, 32, batch), BatchPredictor(dgp, 32, batch)
        new.predict_y(points[:batch])  # tracing
        with gpflow_conditional():
            old.predict_y(points[:batch])
        difference = np.max(np.abs(new.predict_y(points[:batch])[1] - old.predict_y(points[:batch])[1]))
        times = {"new": [], "old": []}
        for index in range(max(chunks // 4, 4)):
            for name, predictor in (("new", new), ("old", old))[:: 1 if index % 2 == 0 else -1]:
                start = time.perf_counter()
                predictor.predict_y(points)
                times[name].append(time.perf_counter() - start)
        ratios = [a / b for a, b in zip(times["new"], times["old"])]
        lines.append(
            f"BatchPredictor.predict_y, S = 32, B = {batch}, {len(points)} points: {len(points) / min(times['new']):,.0f} "
            f"vs {len(points) / min(times['old']):,.0f} points/s (fastest rounds); time new / old "
            f"{min(times['new']) / min(times['old']):.3f} (fastest rounds), {statistics.median(ratios):.3f} (median of "
            f"{len(ratios)} per-round ratios); largest variance difference {difference:.1e}"
        )
    return "\n".join(lines)


def main():
    parser = make_parser("python -m benchmarks.step_profile", __doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="profiled steps per model")
    parser.add_argument("--models", default="activated DGP,GPflux DGP (SE)")
    parser.add_argument("--count-ops", action="store_true", help="count the ops of the step's graph instead")
    parser.add_argument("--time-steps", type=int, default=0, help="time this many steps per fit instead (3 fits)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--flops", action="store_true", help="print the multiply-add count of a step and exit")
    parser.add_argument("--compare-with", metavar="DIR", help="time this checkout's activated DGP step against DIR's, in one process")
    parser.add_argument("--chunks", type=int, default=40, help="with --compare-with: rounds of 10 steps per model")
    parser.add_argument(
        "--compare-fast-conditional", action="store_true", help="time the activated DGP's step and predictions with the batched conditional against GPflow's"
    )
    parser.add_argument("--prediction-points", type=int, default=2048, help="with --compare-fast-conditional: points per prediction round")
    args = parser.parse_args()
    if args.flops:
        report_from_records()
        print(flop_table())
        return
    _threads()
    add_name_scopes()
    X, Y = _data()
    if args.compare_fast_conditional:
        print(compare_fast_conditional(X, Y, args.chunks, 10, args.prediction_points))
        return
    if args.compare_with:
        other = import_other_checkout(args.compare_with)
        models = build_models(X)
        dgp = other.build_activated_dgp(INPUT_DIM, NUM_DATA, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=ACTIVATION, seed=0)
        models["activated DGP, other checkout"] = dgp.as_training_model()
        models["activated DGP, other checkout"].compile(tf_keras.optimizers.Adam(0.01))
        print(f"this checkout: {activated_dgp.__file__}; other: {args.compare_with}")
        order = ("activated DGP", "activated DGP, other checkout", "GPflux DGP (SE)")
        print(compare_steps(X, Y, {name: models[name] for name in order}, args.chunks, 10))
        return
    models = {name: model for name, model in build_models(X).items() if name in args.models.split(",")}
    for name, model in models.items():
        if args.count_ops:
            top, total = count_ops(model, X, Y)
            print(f"{name}: {sum(top.values())} ops in the step's graph, {sum(total.values())} with its functions")
            print("  top level: " + ", ".join(f"{kind} {count}" for kind, count in top.most_common(25)))
            print("  with functions: " + ", ".join(f"{kind} {count}" for kind, count in total.most_common(25)))
        elif args.time_steps:
            times = time_steps(model, X, Y, args.time_steps, 3)
            print(f"{name}: step (ms) {', '.join(f'{1e3 * t:.2f}' for t in times)}; median {1e3 * statistics.median(times):.2f}")
        else:
            print(report(name, profile(model, X, Y, args.steps), args.top), flush=True)
            print()


if __name__ == "__main__":
    main()
