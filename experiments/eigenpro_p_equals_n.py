"""EigenPro 3 with the centers = all training points (p = n) and the inexact projection: the divergence of the
p = 5,000 MNIST cell (docs/results/eigenpro.md; the diagnosis: docs/results/eigenpro_diagnosis.md), reproduced and diagnosed at a size where K(X, X) is dense.

Data: the first n of a seeded permutation of the 5,000 embedded MNIST training digits (``experiments.eigenpro_mnist``),
one-hot targets, Laplacian kernel ``Exponential(lengthscales=5.0)``; centers Z = X. The defaults are the p = 5,000
cell scaled by 1/5: n = p = 1,000, Nyström s = 400 (2,000 of 5,000), q = 20 (100 per 2,000), projection by one
EigenPro 2 epoch on K(Z, Z) with its own subsample 400 and level 20.

Three cells: the update as it was before the fix, θ = S P S u (the inexact projection S twice), and the fixed
θ = S P Sᵀ u with one and with two projection epochs. Per cell: the training MSE and the distance to the
least-squares fit over the centers (``scipy.linalg.lstsq`` on K(X, Z); here an interpolant) after every epoch, and
the eigenvalues of the full-batch iteration operator T H (H = K(Z, X) K(X, Z)/n) for T = G⁻¹ P G⁻¹ (exact
projection), S P S and S P Sᵀ, formed densely (S from p solves of unit vectors), beside the power-iteration
estimate the step size uses.

A study of the harness: one record per (update, projection epochs) in docs/results/eigenpro_p_equals_n/records.jsonl;
the tables are the generated block "eigenpro_p_equals_n" of docs/results/eigenpro_diagnosis.md.

Run:  python -m experiments eigenpro_p_equals_n --data-dir $ADGP_DATA_DIR       # the three cells, resumable
"""

from __future__ import annotations

from pathlib import Path
import sys
import time

import gpflow
import numpy as np
import scipy.linalg
import tensorflow as tf

from activated_dgp.kernel_machines import EigenPro3
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, from_legacy, relabel
from experiments.harness.setups import mnist_arrays


def _before_fix():
    """EigenPro3 with the consistent update's inexact branch as it was: θ = S (G − Ψ_Z D Ψ_Zᵀ) S u."""

    class BeforeFix(EigenPro3):
        def _direction(self, X_m, g, Psi_m):
            if self.update != "consistent" or self.projection != "inexact" or not self.data_preconditioner.q:
                return super()._direction(X_m, g, Psi_m)
            theta = self._solve(self.basis.apply_transpose(X_m, g) / X_m.shape[0])
            operator = self.basis.gram_operator()
            P_theta = operator.matmul(np.arange(operator.size), theta) - tf.matmul(self._Psi_Z, self.data_preconditioner.correction(self._Psi_Z, theta))
            return self._solve(P_theta)

    return BeforeFix


def spectrum(model, X) -> dict:
    """Eigenvalues of T H for the exact, the old (S P S) and the new (S P Sᵀ) preconditioner T, with Z = X:
    per T the smallest and largest real part, the spectral radius and the largest |imaginary part|; and the
    asymmetry ‖S − Sᵀ‖/‖S‖ of the inexact projection S, the range of S G's eigenvalues and the model's
    power-iteration estimate of the top eigenvalue (before its 1.1 margin)."""
    G = model.basis.dense_gram()
    n = G.shape[0]
    S = model._solve(np.eye(n))
    Psi, D = model._Psi_Z.numpy(), model.data_preconditioner.weights.numpy()
    P = G - (Psi * D) @ Psi.T
    H = G @ G / n
    SG = np.linalg.eigvals(S @ G).real
    result = {"S_asymmetry": float(np.linalg.norm(S - S.T) / np.linalg.norm(S)), "SG_min": float(SG.min()),
              "SG_max": float(SG.max()), "power_iteration": float(model.top_eigenvalue / 1.1), "operators": {}}
    for name, T in ((OPERATORS[0], np.linalg.solve(G, np.linalg.solve(G, P).T)), (OPERATORS[1], S @ P @ S), (OPERATORS[2], S @ P @ S.T)):
        e = np.linalg.eigvals(T @ H)
        result["operators"][name] = {"real_min": float(e.real.min()), "real_max": float(e.real.max()),
                                     "radius": float(np.abs(e).max()), "imag_max": float(np.abs(e.imag).max())}
    return result


# ---- the study (experiments/harness): one cell per (update, projection epochs)
KEY = ("update", "projection_epochs")
OPERATORS = ("exact G⁻¹ P G⁻¹", "S P S", "S P Sᵀ")
PAGE = Path("docs") / "results" / "eigenpro_diagnosis.md"


def add_options(parser) -> None:
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose generated block holds the tables")
    parser.add_argument("--n", type=int, default=1000, help="training digits = centers")
    parser.add_argument("--s", type=int, default=400, help="Nyström subsample of the data preconditioner")
    parser.add_argument("--q", type=int, default=20)
    parser.add_argument("--projection-s", type=int, default=400)
    parser.add_argument("--projection-q", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=30)


#: The options a cell's numbers depend on: (name, its prefix in older records' protocol strings, its type).
SETTINGS = (("n", "n", int), ("s", "s", int), ("q", "q", int), ("projection_s", "ps", int), ("projection_q", "pq", int),
            ("epochs", "epochs", int))


def PROTOCOL(options) -> Protocol:
    return Protocol("1", {name: getattr(options, name) for name, _, _ in SETTINGS})


def upgrade(record: dict) -> dict:
    """Records made before the study declared a :class:`Protocol` carry ``v1:n<…>:s<…>:q<…>:ps<…>:pq<…>:epochs<…>``."""
    return relabel(record, from_legacy(record.get("protocol"), SETTINGS))


def cells(options) -> list:
    """The update before the fix (S P S) and after it (S P Sᵀ) with one projection epoch, and after it with two."""
    return [{"update": "S P S", "projection_epochs": 1}, {"update": "S P Sᵀ", "projection_epochs": 1},
            {"update": "S P Sᵀ", "projection_epochs": 2}]


def run_cell(cell, options, context) -> dict:
    X, y, *_ = mnist_arrays(options.data_dir)
    rows = np.sort(np.random.default_rng(0).choice(X.shape[0], options.n, replace=False))
    X, Y = X[rows], np.eye(10)[y[rows]]
    kernel = gpflow.kernels.Exponential(lengthscales=5.0)
    Kxz = kernel(X).numpy()
    fitted = Kxz @ scipy.linalg.lstsq(Kxz, Y)[0]
    model = (_before_fix() if cell["update"] == "S P S" else EigenPro3)(
        kernel, X, subsample_size=options.s, num_eigenpairs=options.q, projection="inexact",
        projection_epochs=cell["projection_epochs"], projection_subsample=options.projection_s,
        projection_eigenpairs=options.projection_q, seed=0)
    model.fit(X, Y, epochs=0, progress=False)
    record = {"spectrum": spectrum(model, X), "loss": [], "distance": [], "stopped": None}

    def after_epoch(epoch):
        record["loss"].append(float(model.history["loss"][-1]))
        record["distance"].append(float(np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted)))
        context.progress(f"  epoch {epoch:3d}: train MSE {record['loss'][-1]:.4e}, ‖f − f_lstsq‖/‖f_lstsq‖ {record['distance'][-1]:.3e}")

    start = time.perf_counter()
    try:
        model.fit(X, Y, epochs=options.epochs, progress=False, callback=after_epoch)
    except ValueError as error:  # the divergence check
        record["stopped"] = str(error)
    record["seconds"] = time.perf_counter() - start
    return record


def tables(records) -> str:
    def at(values, epoch):
        return f"{values[epoch - 1]:.3g}" if len(values) >= epoch else "—"

    lines = ["| update | projection epochs | power-iteration estimate of the top eigenvalue | train MSE after epoch 1 | 2 | 10 | 30 | ‖f − f_lstsq‖/‖f_lstsq‖ after epoch 1 / 10 / 30 | stopped |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        d = r["distance"]
        lines.append(f"| {r['update']} | {r['projection_epochs']} | {r['spectrum']['power_iteration']:.4g} | {at(r['loss'], 1)} | "
                     f"{at(r['loss'], 2)} | {at(r['loss'], 10)} | {at(r['loss'], 30)} | {at(d, 1)} / {at(d, 10)} / {at(d, 30)} | "
                     f"{r['stopped'] or '—'} |")
    lines += ["", "Eigenvalues of the full-batch iteration operator T H (formed densely), per number of projection epochs:", "",
              "| projection epochs | T | real parts | spectral radius | largest imaginary part | ‖S − Sᵀ‖/‖S‖ | S G eigenvalues |",
              "|---|---|---|---|---|---|---|"]
    seen = set()
    for r in records:
        if r["projection_epochs"] in seen:
            continue
        seen.add(r["projection_epochs"])
        sp = r["spectrum"]
        for name in OPERATORS:
            o = sp["operators"][name]
            lines.append(f"| {r['projection_epochs']} | {name} | {o['real_min']:+.3g} … {o['real_max']:+.3g} | {o['radius']:.3g} | "
                         f"{o['imag_max']:.1e} | {sp['S_asymmetry']:.2f} | {sp['SG_min']:.3g} … {sp['SG_max']:.3g} |")
    return "\n".join(lines) + "\n"


def report(records, options) -> None:
    text = tables(records) if records else "No record yet: `python -m experiments eigenpro_p_equals_n --data-dir $ADGP_DATA_DIR`.\n"
    write_block(options.page, "eigenpro_p_equals_n", text, "python -m experiments eigenpro_p_equals_n --report-only", create=True)


def main(argv=None):
    return cli.main("eigenpro_p_equals_n", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
