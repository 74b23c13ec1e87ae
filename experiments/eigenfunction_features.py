"""Eigenfunction inducing variables against ordinary inducing points in an SVGP on UCI regression.

    python -m experiments eigenfunction_features [--datasets energy concrete] [--num-inducing 16 64]
        [--splits 0 1 2] [--maxiter 500] [--data-dir $ADGP_DATA_DIR]

For each data set, split and M, two SVGPs with the same squared-exponential ARD kernel, Gaussian
likelihood and the same initial hyperparameters (inputs and targets standardised on the training part;
lengthscales √D, variance 1, noise 0.1) are trained by L-BFGS on the full-batch ELBO (whitened q(u),
kernel and likelihood trained):

* ``points``: M ordinary inducing points, initialised by k-means on the training inputs, trained;
* ``eigenfunctions``: :class:`EigenfunctionFeature` (Monte Carlo form) with the top-M Nyström
  eigenfunctions of the *initial* kernel on S = min(N, 1000) training inputs, which are also the
  Monte Carlo samples Z of q. ψ stays fixed while the kernel hyperparameters move: the Monte Carlo form
  keeps K − Q_ff ⪰ 0 regardless.

Reported: ELBO / N (standardised units), test RMSE and test NLPD in the original units. A study of the harness:
one record per (data set, split, M, method) in docs/results/eigenfunction_features/records.jsonl; the table is the
generated block of docs/results/eigenfunction_features.md.
"""

from __future__ import annotations

import sys
import time

import gpflow
import numpy as np

from activated_dgp.data.uci import Standardizer, load_uci
from activated_dgp.eigen import EigenfunctionFeature, Nystrom, kmeans_filters
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, from_legacy, relabel
from experiments.harness.statistics import standard_error
from experiments.harness.study import page_path

METHODS = ("points", "eigenfunctions")


def _model(method: str, X: np.ndarray, y: np.ndarray, M: int, seed: int):
    D = X.shape[1]
    kernel = gpflow.kernels.SquaredExponential(lengthscales=np.full(D, np.sqrt(D)), variance=1.0)
    if method == "points":
        inducing = gpflow.inducing_variables.InducingPoints(kmeans_filters(X, M, seed=seed))
    else:
        rows = np.random.default_rng(seed).choice(len(X), size=min(len(X), 1000), replace=False)
        Z = X[rows]
        inducing = EigenfunctionFeature(Nystrom(M).fit(Z, gpflow.utilities.deepcopy(kernel)), samples=Z)
    return gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(variance=0.1), inducing, num_data=len(X), whiten=True)


def run_one(dataset, split_index: int, method: str, M: int, maxiter: int):
    split = dataset.splits[split_index]
    X_train, y_train = dataset.X[split.train], dataset.y[split.train]
    X_test, y_test = dataset.X[split.test], dataset.y[split.test]
    sx, sy = Standardizer.fit(X_train), Standardizer.fit(y_train)
    X, y, Xt = sx.transform(X_train), sy.transform(y_train), sx.transform(X_test)
    model = _model(method, X, y, M, seed=split_index)
    data = (X, y)
    start = time.perf_counter()
    gpflow.optimizers.Scipy().minimize(model.training_loss_closure(data), model.trainable_variables, options=dict(maxiter=maxiter))
    seconds = time.perf_counter() - start
    mean, var = model.predict_y(Xt)
    mean = sy.inverse(mean.numpy())
    var = var.numpy() * sy.std**2
    rmse = float(np.sqrt(np.mean((mean - y_test) ** 2)))
    nlpd = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y_test - mean) ** 2 / var))
    elbo = float(model.elbo(data).numpy()) / len(X)
    return dict(dataset=dataset.name, split=split_index, method=method, M=M, elbo=elbo, rmse=rmse, nlpd=nlpd, seconds=seconds)


def table(rows) -> str:
    lines = [
        "SE-ARD kernel, Gaussian likelihood, whitened SVGP trained by L-BFGS on the full-batch ELBO (kernel, noise, q(u);",
        "inducing points also trained). `eigenfunctions` = `EigenfunctionFeature` (Monte Carlo form) with the top-M Nyström",
        "eigenfunctions of the initial kernel on S = min(N, 1000) training inputs, fixed during training. ELBO per data",
        "point in standardised units; RMSE and NLPD on the test part in original units; mean ± standard error over splits.",
        "",
        "| data set | M | method | ELBO / N | test RMSE | test NLPD | fit time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["dataset"], r["M"], r["method"]) for r in rows}, key=lambda k: (k[0], k[1], METHODS.index(k[2])))

    def stat(values):
        values = np.asarray(values)
        se = standard_error(values, single=0.0)
        return f"{values.mean():.3f} ± {se:.3f}"

    for name, M, method in keys:
        sel = [r for r in rows if (r["dataset"], r["M"], r["method"]) == (name, M, method)]
        lines.append(
            f"| {name} | {M} | {method} | {stat([r['elbo'] for r in sel])} | {stat([r['rmse'] for r in sel])} | "
            f"{stat([r['nlpd'] for r in sel])} | {np.mean([r['seconds'] for r in sel]):.1f} |"
        )
    lines.append(f"\nSplits: {sorted({r['split'] for r in rows})}.")
    return "\n".join(lines) + "\n"


# ---- the study (experiments/harness): one cell per (data set, split, M, method)
KEY = ("dataset", "split", "M", "method")


def add_options(parser) -> None:
    parser.add_argument("--datasets", nargs="+", default=["energy", "concrete"])
    parser.add_argument("--num-inducing", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--maxiter", type=int, default=500)


def PROTOCOL(options) -> Protocol:
    """The setting a cell's numbers depend on besides its key: L-BFGS's iterations."""
    return Protocol("1", {"maxiter": options.maxiter})


def upgrade(record: dict) -> dict:
    """Records made before the study declared a :class:`Protocol` carry ``v1:maxiter<…>``."""
    return relabel(record, from_legacy(record.get("protocol"), [("maxiter", "maxiter", int)]))


def cells(options) -> list:
    return [{"dataset": name, "split": split, "M": M, "method": method} for name in options.datasets
            for split in options.splits for M in options.num_inducing for method in METHODS]


def run_cell(cell, options, context) -> dict:
    gpflow.config.set_default_float(np.float64)
    dataset = context.artifacts.in_memory("dataset", [cell["dataset"], options.data_dir],  # read once per run
                                          lambda: load_uci(cell["dataset"], options.data_dir))
    row = run_one(dataset, cell["split"], cell["method"], cell["M"], options.maxiter)
    return {**row, "dataset": cell["dataset"], "command": options.command}


def report(records, options) -> None:
    text = (table(records) if records else
            "**No record yet.** Run `nice -n 10 python -m experiments eigenfunction_features --data-dir $ADGP_DATA_DIR` "
            "(24 cells, roughly 30 min on 2 loaded cores) to make `docs/results/eigenfunction_features/records.jsonl` "
            "and this table.\n")
    write_block(page_path(options), "eigenfunction_features", text, "python -m experiments eigenfunction_features --report-only")


def main(argv=None):
    return cli.main("eigenfunction_features", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
