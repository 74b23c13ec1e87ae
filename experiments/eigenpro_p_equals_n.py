"""EigenPro 3 with the centers = all training points (p = n) and the inexact projection: the divergence of the
p = 5,000 MNIST cell (docs/results/eigenpro.md), reproduced and diagnosed at a size where K(X, X) is dense (issue 13).

Data: the first n of a seeded permutation of the 5,000 embedded MNIST training digits (``experiments.eigenpro_mnist``),
one-hot targets, Laplacian kernel ``Exponential(lengthscales=5.0)``; centers Z = X. The defaults are the p = 5,000
cell scaled by 1/5: n = p = 1,000, Nyström s = 400 (2,000 of 5,000), q = 20 (100 per 2,000), projection by one
EigenPro 2 epoch on K(Z, Z) with its own subsample 400 and level 20.

Prints per epoch the training MSE and the distance to the least-squares fit over the centers (``scipy.linalg.lstsq``
on K(X, Z); here an interpolant). ``--before`` trains with the update as it was before the fix, θ = S P S u (the
inexact projection S twice), instead of θ = S P Sᵀ u. ``--spectrum`` prints the eigenvalues of the full-batch
iteration operator T H (H = K(Z, X) K(X, Z)/n) for T = G⁻¹ P G⁻¹ (exact projection), S P S and S P Sᵀ, formed densely
(S from p solves of unit vectors), beside the power-iteration estimate the step size uses.

Run:  python -m experiments.eigenpro_p_equals_n --data-dir ../shared/data --spectrum            # after the fix
      python -m experiments.eigenpro_p_equals_n --data-dir ../shared/data --before              # the old update
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402


def _before_fix():
    """EigenPro3 with the consistent update's inexact branch as it was: θ = S (G − Ψ_Z D Ψ_Zᵀ) S u."""
    import tensorflow as tf

    from activated_dgp.kernel_machines import EigenPro3

    class BeforeFix(EigenPro3):
        def _direction(self, X_m, g, Psi_m):
            if self.update != "consistent" or self.projection != "inexact" or not self.data_preconditioner.q:
                return super()._direction(X_m, g, Psi_m)
            theta = self._solve(self.basis.apply_transpose(X_m, g) / X_m.shape[0])
            operator = self.basis.gram_operator()
            P_theta = operator.matmul(np.arange(operator.size), theta) - tf.matmul(self._Psi_Z, self.data_preconditioner.correction(self._Psi_Z, theta))
            return self._solve(P_theta)

    return BeforeFix


def spectrum(model, X) -> None:
    """Eigenvalues of T H for the exact, the old (S P S) and the new (S P Sᵀ) preconditioner T, with Z = X."""
    G = model.basis.dense_gram()
    n = G.shape[0]
    S = model._solve(np.eye(n))
    Psi, D = model._Psi_Z.numpy(), model.data_preconditioner.weights.numpy()
    P = G - (Psi * D) @ Psi.T
    H = G @ G / n
    SG = np.linalg.eigvals(S @ G).real
    print(f"K(Z, Z): eigenvalues {np.linalg.eigvalsh(G)[[0, -1]]}; S G (one projection) eigenvalues {SG.min():.3e} … {SG.max():.4f}; "
          f"‖S − Sᵀ‖/‖S‖ = {np.linalg.norm(S - S.T) / np.linalg.norm(S):.2f}")
    for name, T in (("exact G⁻¹ P G⁻¹", np.linalg.solve(G, np.linalg.solve(G, P).T)), ("S P S (before)", S @ P @ S), ("S P Sᵀ (after)", S @ P @ S.T)):
        e = np.linalg.eigvals(T @ H)
        print(f"  T = {name:16s} T H: real parts {e.real.min():+.3e} … {e.real.max():+.3e}, spectral radius {np.abs(e).max():.3e}, "
              f"largest |imaginary part| {np.abs(e.imag).max():.1e}")
    print(f"  the model's power-iteration estimate (before its 1.1 margin): {model.top_eigenvalue / 1.1:.3e}; β = {model.beta:.3e}, "
          f"m = {model.batch_size}, η = {model.step_size:.3e}")


def main(argv=None):
    import gpflow
    import scipy.linalg

    from activated_dgp.kernel_machines import EigenPro3
    from experiments.setups import mnist_arrays

    from experiments.harness.cli import make_parser, shared_option

    parser = make_parser("python -m experiments.eigenpro_p_equals_n", __doc__)
    shared_option(parser, "--data-dir", help="folder holding mnist/ (default $ADGP_DATA_DIR)")
    parser.add_argument("--n", type=int, default=1000, help="training digits = centers")
    parser.add_argument("--s", type=int, default=400, help="Nyström subsample of the data preconditioner")
    parser.add_argument("--q", type=int, default=20)
    parser.add_argument("--projection-s", type=int, default=400)
    parser.add_argument("--projection-q", type=int, default=20)
    parser.add_argument("--projection-epochs", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--before", action="store_true", help="the update before the fix, θ = S P S u")
    parser.add_argument("--spectrum", action="store_true", help="dense eigenvalues of the iteration operator (n ≤ ~2,000)")
    args = parser.parse_args(argv)
    X, y, *_ = mnist_arrays(args.data_dir)
    rows = np.sort(np.random.default_rng(0).choice(X.shape[0], args.n, replace=False))
    X, Y = X[rows], np.eye(10)[y[rows]]
    kernel = gpflow.kernels.Exponential(lengthscales=5.0)
    Kxz = kernel(X).numpy()
    fitted = Kxz @ scipy.linalg.lstsq(Kxz, Y)[0]
    model = (_before_fix() if args.before else EigenPro3)(
        kernel, X, subsample_size=args.s, num_eigenpairs=args.q, projection="inexact", projection_epochs=args.projection_epochs,
        projection_subsample=args.projection_s, projection_eigenpairs=args.projection_q, seed=0)
    print(f"p = n = {args.n}, s = {args.s}, q = {args.q}, projection s = {args.projection_s}, q = {args.projection_q}, "
          f"{args.projection_epochs} epoch(s); update {'S P S (before the fix)' if args.before else 'S P Sᵀ'}", flush=True)
    model.fit(X, Y, epochs=0, progress=False)
    if args.spectrum:
        spectrum(model, X)

    def report(epoch):
        error = np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted)
        print(f"  epoch {epoch:3d}: train MSE {model.history['loss'][-1]:.4e}, ‖f − f_lstsq‖/‖f_lstsq‖ {error:.3e}", flush=True)

    start = time.perf_counter()
    try:
        model.fit(X, Y, epochs=args.epochs, progress=False, callback=report)
    except ValueError as error:
        print(f"  stopped: {error}")
    print(f"  {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
