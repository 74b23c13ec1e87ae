"""EigenPro 3 (Abedsoltan, Belkin & Pandit 2023, Algorithms 1 and 2): kernel networks
f = Σ_j α_j b_j with p functions b_j independent of the training set — kernel centers b_j = K(·, z_j)
(Definition 1) or activated interdomain features b_m = g̃_m — trained on the square loss
L(f) = (1/2n) Σ_i (f(x_i) − y_i)² by projected preconditioned stochastic gradient descent (eq. 17, 30).

One step on a minibatch X_m of size m, with g = f(X_m) − y_m [m, L], u = B(X_m)ᵀ g / m [p, L] (the
stochastic gradient evaluated against the basis, K(Z, X_m) g / m) and G = [⟨b_r, b_j⟩_H], [p, p]:

* ``update="paper"`` (Algorithm 1, eq. 35–36): precondition, then project,
      θ = G⁻¹ (u − Ψ_Z diag(μ_i − μ_(q+1)) ψ(X_m)ᵀ g / m),      α ← α − η θ;
* ``update="consistent"`` (default): project, then precondition inside span(b),
      θ_g = G⁻¹ u,   θ = θ_g − W diag(μ_i − μ_(q+1)) Ψ_Zᵀ θ_g,   W = G⁻¹ Ψ_Z,   α ← α − η θ,
  i.e. f ← f − η proj P proj ∇̃L. Here Ψ_Z = [⟨b_j, ψ_i⟩_H], [p, q] (ψ_i(z_j) for centers).

Why two updates: the fixed point of the paper's update solves B(X)ᵀ (I − Q)(B(X) α − y) = 0, which
is not the least-squares solution argmin ‖B(X) α − y‖ once the preconditioner acts (q > 0): P does
not commute with the H-projection onto span(b). (On a 400-point Laplacian problem with 40 centers
the fixed point's weights are 13 % off the least-squares ones at q = 20, its residual 4 % larger.)
The consistent update's fixed point is proj_Z ∇L = 0, the least-squares solution, for any positive
definite P; proj P proj still flattens the spectrum wherever the top eigenfunctions lie near span(b).

The projection G⁻¹ is ``projection="exact"`` (Algorithm 2's reference: G held, p × p, pseudo-inverse
through its eigendecomposition) or ``"inexact"`` (Algorithm 1: ``projection_epochs`` epochs of
EigenPro 2 on G, whose own Nyström preconditioner depends on the basis only). The data preconditioner
(ψ, μ) is the Nyström one on s data points (the paper's) or any eigen-module approximation (IKA,
NeuralEF; :class:`Preconditioner`).

Inexact projection in the consistent update. EigenPro 2 from θ = 0 with a fixed minibatch order is one
linear map S ≈ G⁻¹, but not a symmetric one (SGD steps in one order; the correction touches the Nyström
subsample only). The full-batch iteration is α ↦ T H α with H = B(X)ᵀB(X)/n and T the update's
preconditioner. Exactly, T = G⁻¹ P G⁻¹ (P = G − Ψ_Z D Ψ_Zᵀ), symmetric positive semi-definite, so T H has
real eigenvalues ≥ 0 and (m, η) from β and its top eigenvalue λ converge (Ma, Bassily & Belkin 2018). With
S in both places, T = S P S is not symmetric and T H can have negative eigenvalues, for which
|1 − ηλ| > 1 at every η > 0: no step size converges. Measured at p = n = 1,000 MNIST digits (Laplacian,
lengthscale 5; s = 400, q = 20; EigenPro 2 on 400 of the centers, q = 20, one epoch): S P S H has
eigenvalues from −1.05e-2 to +5.3e-3, the negative one dominant (the power iteration found it: its
spectral radius 1.05e-2 is the estimate), and the loss grew ×1e9 per epoch. Hence
θ = S (G − Ψ_Z D Ψ_Zᵀ) Sᵀ u: T = S P Sᵀ is symmetric positive semi-definite for any S
(:meth:`EigenPro2Solver.solve_adjoint` applies Sᵀ at the cost of S), the eigenvalues of T H are real in
[8e-7, 6.6e-3] there, and the fixed point is still the least-squares solution (T non-singular). The price
of a rough S remains: T H's small eigenvalues are the exact ones times ≈ λ_min(SG)² (0.085² after one
epoch there), so at p = n the iteration converges more slowly than with the exact projection.

Step size. (m, η) follow Algorithm 3's rule (:func:`step_schedule`) with β the largest one-point
curvature of the actual (projected, preconditioned) step over ≤ 256 data points and λ the top eigenvalue of the full-batch iteration
operator α ↦ θ(α) on that subsample, estimated by power iteration (for the paper's Nyström update it
is ≈ μ_(q+1); for the consistent update or approximate eigenfunctions it is larger, and using
μ_(q+1) there would diverge).

Memory: per step the blocks of B(X_m) (m × block), the inexact projection's K[M, :] blocks, Ψ_Z and
W (p × q) and α (p × L): nothing n × p or p × p, except the exact projection's G and the held K(Z, Z)
(``gram_cache_bytes``).

Cost of the inexact projection. Every step runs the projection's EigenPro 2 epochs over the same minibatches
(the rng [seed, 3]), twice with the consistent update (Sᵀ, then S). Its Nyström eigenfunctions at each of those
minibatches, ψ(M_k) [m_k, q_z], are therefore computed once and held by the solver (p·q_z·projection_epochs
floats; :class:`EigenPro2Solver`), and with K(Z, Z) held the inner steps are NumPy BLAS products on its rows
(:class:`BasisGram`). Same iteration, same numbers to round-off; docs/kernel_machines.md has the measured gain.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import gpflow
import numpy as np
import tensorflow as tf

from .. import saving
from ..deep.introspection import check_spectra, parameter_record
from ..eigen import EigenApproximation
from ..eigen import saved_kernels  # noqa: F401  (registers the kind "kernel", which a saved model holds)
from ..eigen.base import SavedState, require_float64
from ..zonal.inducing_variables import ActivationFeature
from ..zonal.spectra import registered_activation_name
from ..validation import check_positive_int
from .blocks import DEFAULT_BLOCK, ActivatedBasis, KernelCenters, check_data, check_targets
from .centers import choose_centers
from .eigenpro2 import EigenPro2Solver
from .preconditioner import Preconditioner, batch_step, step_schedule
from .span import SpanEigenfunctions
from .training_loop import TrainedWeights, TrainingState, run_epochs

__all__ = ["EigenPro3", "PROJECTIONS", "UPDATES", "ExactProjection"]

PROJECTIONS = ("inexact", "exact")
GRAM_CACHE_BYTES = 1 << 30  # EigenPro3's default gram_cache_bytes
UPDATES = ("consistent", "paper")


class ExactProjection:
    """θ = G⁺ h through G = V Λ Vᵀ (eigenvalues below 1e-12 λ_max dropped): Algorithm 2, line 6."""

    def __init__(self, gram: np.ndarray):
        gram = 0.5 * (gram + gram.T)
        values, vectors = np.linalg.eigh(gram)
        keep = values > 1e-12 * max(values.max(), np.finfo(float).tiny)
        self._vectors = vectors[:, keep]
        self._inverse = 1.0 / values[keep]

    def solve(self, h, epochs=None, rng=None) -> np.ndarray:
        return self._vectors @ (self._inverse[:, None] * (self._vectors.T @ np.asarray(h)))


class EigenPro3(TrainedWeights, tf.Module):
    """A kernel network trained by EigenPro 3 (module docstring).

    :param kernel: any gpflow kernel (the paper's Laplacian: ``gpflow.kernels.Exponential(lengthscales=5.0)``).
    :param centers: Z [p, D], or None to choose ``num_centers`` with ``center_method`` ("random", "kmeans") in ``fit``.
    :param feature: instead of centers, an ``ActivationFeature``: the basis is g̃_m (Kuf, Kuu).
    :param preconditioner: None (Nyström on ``subsample_size`` data points, level ``num_eigenpairs``),
        ``"span"`` (Ritz eigenfunctions of the data covariance inside the model's span on
        ``subsample_size`` data points, :class:`SpanEigenfunctions`; needs G dense, for small p and
        for activated features), a fitted eigen-module approximation with ≥ q + 1 eigenpairs (level
        ``num_eigenpairs``), or a :class:`Preconditioner`.
    :param projection: "inexact" (EigenPro 2 on G, ``projection_epochs`` epochs, subsample
        ``projection_subsample``, level ``projection_eigenpairs``) or "exact".
    :param update: "consistent" (default) or "paper".
    :param max_batch: the largest minibatch m (otherwise m = β/λ).
    :param batch_size: a fixed m instead (m = n: full-batch preconditioned gradient descent, Algorithm 2).
    :param estimate_size: data points used to estimate β and the top eigenvalue (power iteration).
    :param gram_cache_bytes: the model's Gram matrix K(Z, Z) [p, p] is computed once and held when its 8·p² bytes
        fit in this many (default 1 GiB: p ≤ 11,585); then each projection step is a p × p product instead of p²
        kernel evaluations in D dimensions. 0: recomputed in blocks at every use, as the paper must for p in the
        millions. (Activated features hold Kuu [M, M] anyway.)
    :param average_after: None (the paper: predict with the last iterate), or a number of epochs k after which
        the model predicts with the Polyak–Ruppert tail average ᾱ = (1/T) Σ_t α_t of every step from epoch k + 1
        on. When p < n the least-squares problem is not interpolated, and a constant step stalls at a noise floor
        ∝ η around the solution; the average of constant-step least-squares SGD converges to it (Bach and
        Moulines 2013, "Non-strongly-convex smooth stochastic approximation with convergence rate O(1/n)").

    ``activated_dgp.save(model, DIR)`` writes α (and ᾱ), the epoch history, the centers (or the activated feature,
    with a registered activation), the kernel (:mod:`activated_dgp.eigen.saved_kernels`), the settings and an
    eigen-module preconditioner (saved as its own kind); ``activated_dgp.load(DIR)`` rebuilds a model that predicts as
    the saved one did, and that ``fit`` on the same data continues from its epoch.
    """

    def __init__(
        self,
        kernel: gpflow.kernels.Kernel,
        centers=None,
        *,
        num_centers: Optional[int] = None,
        center_method: str = "random",
        feature=None,
        preconditioner: Union[None, str, EigenApproximation, Preconditioner] = None,
        subsample_size: int = 2000,
        num_eigenpairs: int = 100,
        projection: str = "inexact",
        projection_epochs: int = 1,
        projection_subsample: int = 2000,
        projection_eigenpairs: int = 100,
        update: str = "consistent",
        max_batch: int = 4096,
        batch_size: Optional[int] = None,
        estimate_size: int = 2000,
        power_iterations: int = 20,
        block_size: int = DEFAULT_BLOCK,
        seed: int = 0,
        average_after: Optional[int] = None,
        gram_cache_bytes: int = GRAM_CACHE_BYTES,
        name=None,
    ):
        super().__init__(name=name)
        require_float64("EigenPro3")
        if not isinstance(kernel, gpflow.kernels.Kernel):
            raise ValueError(f"the kernel must be a gpflow kernel, got {type(kernel).__name__}")
        if projection not in PROJECTIONS:
            raise ValueError(f"unknown projection {projection!r}; use one of {PROJECTIONS}")
        if update not in UPDATES:
            raise ValueError(f"unknown update {update!r}; use one of {UPDATES}")
        if sum(x is not None for x in (centers, num_centers, feature)) != 1:
            raise ValueError("give exactly one of centers, num_centers or feature")
        if not (preconditioner is None or isinstance(preconditioner, (EigenApproximation, Preconditioner)) or (isinstance(preconditioner, str) and preconditioner == "span")):
            raise ValueError(f"preconditioner must be None, \"span\", an eigen-module approximation or a Preconditioner, got {preconditioner!r}")
        self.kernel = kernel
        self.feature = feature
        self._given_centers = None if centers is None else check_data(centers, "the centers")
        self.num_centers, self.center_method = num_centers, center_method
        self.preconditioner_option = preconditioner
        self.subsample_size = check_positive_int(subsample_size, "subsample_size")
        self.num_eigenpairs = num_eigenpairs
        self.projection, self.update = projection, update
        self.projection_epochs = check_positive_int(projection_epochs, "projection_epochs")
        self.projection_subsample = check_positive_int(projection_subsample, "projection_subsample")
        self.projection_eigenpairs = projection_eigenpairs
        self.max_batch = check_positive_int(max_batch, "max_batch")
        self.fixed_batch = None if batch_size is None else check_positive_int(batch_size, "batch_size")
        self.estimate_size = check_positive_int(estimate_size, "estimate_size")
        self.power_iterations = check_positive_int(power_iterations, "power_iterations")
        self.block_size, self.seed = block_size, int(seed)
        if average_after is not None and (isinstance(average_after, bool) or int(average_after) != average_after or average_after < 0):
            raise ValueError(f"average_after must be None or a number of epochs ≥ 0, got {average_after!r}")
        self.average_after = None if average_after is None else int(average_after)
        if isinstance(gram_cache_bytes, bool) or int(gram_cache_bytes) != gram_cache_bytes or gram_cache_bytes < 0:
            raise ValueError(f"gram_cache_bytes must be a number of bytes ≥ 0, got {gram_cache_bytes!r}")
        self.gram_cache_bytes = int(gram_cache_bytes)
        self.state = TrainingState()
        self.centers = tf.Variable(np.zeros((0, 0)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="centers")
        self.basis = None

    # -- setup ---------------------------------------------------------------------------------

    def _build_basis(self, X: np.ndarray):
        if self.feature is not None:
            self.basis = ActivatedBasis(self.kernel, self.feature, self.block_size)
            return
        if self._given_centers is not None:
            Z = self._given_centers
            if Z.shape[1] != X.shape[1]:
                raise ValueError(f"the centers have width {Z.shape[1]}, the inputs {X.shape[1]}")
        elif self.centers.numpy().shape[:1] == (self.num_centers,):
            Z = self.centers.numpy()  # restored from a checkpoint
        else:
            Z = choose_centers(X, self.num_centers, self.center_method, seed=self.seed)
        self.centers.assign(Z)
        self._center_basis()

    def _center_basis(self) -> None:
        """The basis of the centers held in ``self.centers`` (fitted, or restored by activated_dgp.load)."""
        Z = self.centers.numpy()
        self.basis = KernelCenters(self.kernel, Z, self.block_size, cache_gram=8 * Z.shape[0] ** 2 <= self.gram_cache_bytes)

    def _build_preconditioner(self, X: np.ndarray, rng) -> Preconditioner:
        option, q = self.preconditioner_option, self.num_eigenpairs
        if isinstance(option, Preconditioner):
            return option
        if isinstance(option, EigenApproximation):
            return Preconditioner(option, q)
        s = min(self.subsample_size, X.shape[0])
        if int(q) != q or q < 0:
            raise ValueError(f"num_eigenpairs q must be a non-negative integer, got {q!r}")
        sample = X[np.sort(rng.choice(X.shape[0], s, replace=False))]
        if option == "span":
            if q >= self.basis.num_functions:
                raise ValueError(f"the span preconditioner's level q = {q} must be smaller than the number of basis functions p = {self.basis.num_functions}")
            return Preconditioner(SpanEigenfunctions(self.basis, sample, q + 1), q)
        if q >= s:
            raise ValueError(f"the preconditioner level q = {q} must be smaller than the Nyström subsample size s = {s}")
        return Preconditioner.nystrom(self.kernel, sample, q)

    def _setup(self, X: np.ndarray) -> None:
        rng = np.random.default_rng([self.seed, 7])
        self._build_basis(X)
        p = self.basis.num_functions
        self.data_preconditioner = self._build_preconditioner(X, rng)
        q = self.data_preconditioner.q
        self._Psi_Z = self.basis.eigenfunction_products(self.data_preconditioner.approximation, q) if q else tf.zeros([p, 0], tf.float64)
        if self.projection == "exact":
            self.projector = ExactProjection(self.basis.dense_gram())
        else:
            s_z = min(self.projection_subsample, p)
            q_z = min(self.projection_eigenpairs, s_z - 1)
            self.projector = EigenPro2Solver(self.basis.gram_operator(), s_z, q_z, self.max_batch, seed=self.seed)
        if self.update == "consistent" and q and self.projection == "exact":
            self._W = self.projector.solve(self._Psi_Z.numpy())  # W = G⁻¹ Ψ_Z
        sample = X[np.sort(rng.choice(X.shape[0], min(self.estimate_size, X.shape[0]), replace=False))]
        Psi = self.data_preconditioner.eigenfunctions(sample)
        if q:
            self._check_definite(sample[:1000], Psi[:1000], rng)
        self.beta = self._curvature(sample[:256], Psi[:256])
        self.top_eigenvalue = self._power_iteration(sample, Psi, rng)
        self.batch_size, self.step_size = step_schedule(
            self.beta, self.top_eigenvalue, min(self.max_batch, X.shape[0]), None if self.fixed_batch is None else min(self.fixed_batch, X.shape[0])
        )

    # -- the update ----------------------------------------------------------------------------

    def _solve(self, h) -> np.ndarray:
        """G⁻¹ h: exact, or ``projection_epochs`` epochs of EigenPro 2 with a fixed minibatch order, so
        that the inexact projection is one fixed linear map throughout training."""
        return self.projector.solve(np.asarray(h), epochs=self.projection_epochs, rng=np.random.default_rng([self.seed, 3]))

    def _direction(self, X_m, g, Psi_m) -> np.ndarray:
        """θ [p, L] for the residual g [m, L] at X_m (module docstring)."""
        m = X_m.shape[0]
        u = self.basis.apply_transpose(X_m, g) / m
        preconditioned = self.data_preconditioner.q > 0
        if self.update == "paper":
            if preconditioned:
                u = u - tf.matmul(self._Psi_Z, self.data_preconditioner.correction(Psi_m, g)) / m
            return self._solve(u)
        if not preconditioned:
            return self._solve(u)
        if self.projection == "exact":
            theta = self._solve(u)
            return theta - self._W @ self.data_preconditioner.correction(self._Psi_Z, theta).numpy()
        # proj P proj with inexact projections: θ = S (G − Ψ_Z D Ψ_Zᵀ) Sᵀ u (module docstring, "Inexact projection")
        theta = self.projector.solve_adjoint(np.asarray(u), epochs=self.projection_epochs, rng=np.random.default_rng([self.seed, 3]))
        P_theta = self.basis.gram_operator().matmul(None, theta) - tf.matmul(self._Psi_Z, self.data_preconditioner.correction(self._Psi_Z, theta))
        return self._solve(P_theta)

    def _check_definite(self, sample, Psi, rng, size: int = 1000) -> None:
        """ValueError (:meth:`Preconditioner.check_on_sample`) where the preconditioner P the update applies
        is indefinite: the paper's update applies P to data gradients, so K − Ψ D Ψᵀ on data points is
        checked; the consistent one applies proj P proj, so G − Ψ_Z D Ψ_Zᵀ on ≤ 1000 of the basis functions
        (a principal submatrix: indefinite there means indefinite). Learned eigenfunctions (IKA, NeuralEF)
        are not exactly H-orthonormal and typically fail the first check but pass the second."""
        if self.update == "paper":
            self.data_preconditioner.check_on_sample(KernelCenters(self.kernel, sample).dense_gram(), Psi)
            return
        p = self.basis.num_functions
        rows = np.sort(rng.choice(p, size=min(size, p), replace=False))
        self.data_preconditioner.check_on_sample(self.basis.gram(rows, rows).numpy(), tf.gather(self._Psi_Z, rows).numpy())

    def _curvature(self, points, Psi, chunk: int = 128) -> float:
        """β = max_x of the one-point curvature B(x) θ(x), θ(x) the step's direction for a unit residual at x
        alone: ⟨K(·, x), proj P proj K(·, x)⟩_H for the consistent update. It is at most the preconditioned
        kernel diagonal k_P(x, x), and far below it when span{b} is a small part of H (activated features),
        where k_P(x, x) would force a step orders of magnitude too small. Residuals I [c, c] give c points at once."""
        beta = 0.0
        for start in range(0, points.shape[0], chunk):
            X_c = tf.constant(points[start : start + chunk])
            c = X_c.shape[0]
            theta = self._direction(X_c, np.eye(c), Psi[start : start + chunk])  # u = B(X_c)ᵀ I / c
            beta = max(beta, c * float(tf.reduce_max(tf.linalg.diag_part(self.basis.apply(X_c, theta)))))
        return beta

    def _power_iteration(self, sample, Psi, rng) -> float:
        """Top eigenvalue of α ↦ θ(α) with g = B(sample) α (full batch over the sample, no targets)."""
        v = rng.standard_normal((self.basis.num_functions, 1))
        v /= np.linalg.norm(v)
        estimate = 0.0
        for _ in range(self.power_iterations):
            g = self.basis.apply(sample, v)
            w = self._direction(sample, g, Psi)
            estimate = float(np.linalg.norm(w))
            if not np.isfinite(estimate) or estimate == 0.0:
                raise ValueError("could not estimate the preconditioned operator's top eigenvalue (zero or non-finite)")
            v = w / estimate
        return 1.1 * estimate  # power iteration approaches from below: keep a margin

    def _epoch(self, X, y, rng) -> float:
        order = rng.permutation(X.shape[0])
        alpha = self.state.weights.numpy()
        averaging = self.average_after is not None and int(self.state.epoch.numpy()) >= self.average_after
        mean, count = self.state.averaged.numpy(), int(self.state.averaged_steps.numpy())
        if mean.shape != alpha.shape:  # e.g. restored from a checkpoint written without averaging
            mean, count = np.zeros_like(alpha), 0
        losses = []
        for start in range(0, len(order), self.batch_size):
            rows = np.sort(order[start : start + self.batch_size])
            X_m = tf.constant(X[rows])
            g = self.basis.apply(X_m, alpha) - y[rows]
            Psi_m = self.data_preconditioner.eigenfunctions(X_m) if (self.update == "paper" and self.data_preconditioner.q) else None
            alpha = alpha - batch_step(self.beta, self.top_eigenvalue, len(rows)) * self._direction(X_m, g, Psi_m)
            losses.append(float(tf.reduce_mean(tf.reduce_sum(g**2, axis=1))))
            if averaging:  # running mean of the iterates: ᾱ_(T+1) = ᾱ_T + (α_(T+1) − ᾱ_T) / (T + 1)
                count += 1
                mean = mean + (alpha - mean) / count
        self.state.weights.assign(alpha)
        if averaging:
            self.state.averaged.assign(mean)
            self.state.averaged_steps.assign(count)
        return float(np.mean(losses))

    # -- public --------------------------------------------------------------------------------

    def fit(self, X, y, epochs: int = 10, *, checkpoint_dir=None, progress: bool = True, tolerance: Optional[float] = None, callback=None) -> "EigenPro3":
        """Train until ``epochs`` epochs in total; y [n] or [n, L]. Checkpoints (α, centers, epoch,
        history) go to ``checkpoint_dir`` after every epoch and are resumed from when present."""
        X = check_data(X)
        y = check_targets(y, X.shape[0])
        checkpoint = tf.train.Checkpoint(state=self.state, centers=self.centers)
        if checkpoint_dir is not None:
            latest = tf.train.latest_checkpoint(str(checkpoint_dir))
            if latest:
                checkpoint.restore(latest).expect_partial()
        self._setup(X)
        p = self.basis.num_functions
        self.state.ensure_weights((p, y.shape[1]))
        run_epochs(self.state, checkpoint, lambda rng: self._epoch(X, y, rng), epochs, self.seed, checkpoint_dir=checkpoint_dir, progress=progress, tolerance=tolerance, callback=callback, label="EigenPro3")
        return self

    def predict(self, X) -> np.ndarray:
        """f(X) = B(X) α [N, L], in blocks."""
        if self.basis is None:
            if self.state.weights.numpy().size == 0:
                raise ValueError("the model is not fitted")
            # restored by activated_dgp.load: the basis of the restored centers (or feature)
            if self.feature is not None:
                self.basis = ActivatedBasis(self.kernel, self.feature, self.block_size)
            else:
                self._center_basis()
        return self.basis.apply(check_data(X), self.weights).numpy()


# ---------------------------------------------------------------- saving (activated_dgp.save / load)

_SETTINGS = (
    "num_centers", "center_method", "subsample_size", "num_eigenpairs", "projection", "projection_epochs", "projection_subsample",
    "projection_eigenpairs", "update", "max_batch", "estimate_size", "power_iterations", "block_size", "seed", "average_after",
    "gram_cache_bytes",
)


def _state(model: EigenPro3) -> SavedState:
    return SavedState(state=model.state, centers=model.centers, feature=model.feature)


def _describe_feature(feature) -> Tuple[dict, np.ndarray]:
    if type(feature) is not ActivationFeature:
        raise ValueError(f"cannot save the EigenPro3 model: its feature is a {type(feature).__name__}, not an ActivationFeature")
    try:
        activation = registered_activation_name(feature.activation)
    except ValueError as error:
        raise ValueError(f"cannot save the EigenPro3 model's feature: {error}") from None
    spec = dict(activation=activation, truncation_level=feature.truncation_level, shape=list(feature.W.shape), record=parameter_record(feature.W))
    what = "cannot save the EigenPro3 model's feature as rebuilt from its activation and truncation level"
    _check_feature(spec, feature.eigenvalues, _feature_from_spec(spec), what)
    return spec, feature.eigenvalues


def _check_feature(spec: dict, spectrum: np.ndarray, rebuilt: ActivationFeature, what: str) -> None:
    if parameter_record(rebuilt.W) != spec["record"]:
        raise ValueError(f"{what}: its W differs ({spec['record']} vs {parameter_record(rebuilt.W)})")
    check_spectra({"feature": spectrum}, {"feature": rebuilt.eigenvalues}, what)


def _feature_from_spec(spec: dict) -> ActivationFeature:
    return ActivationFeature(np.ones(spec["shape"]), spec["activation"], spec["truncation_level"])


def _describe_eigenpro3(model: EigenPro3) -> saving.Description:
    config = {name: getattr(model, name) for name in _SETTINGS}
    config.update(batch_size=model.fixed_batch, feature=None, preconditioner=model.preconditioner_option)
    arrays, children = {}, {"kernel": model.kernel}
    if model._given_centers is not None:
        arrays["given_centers"] = model._given_centers
    if model.feature is not None:
        config["feature"], arrays["feature_spectrum"] = _describe_feature(model.feature)
    option = model.preconditioner_option
    if isinstance(option, Preconditioner):
        config["preconditioner"], children["preconditioner"] = dict(level=int(option.q)), option.approximation
    elif isinstance(option, EigenApproximation):
        config["preconditioner"], children["preconditioner"] = "approximation", option
    return saving.Description(config=config, trackable=_state(model), arrays=arrays, children=children)


def _rebuild_eigenpro3(config: dict, arrays: dict, children: dict):
    config = dict(config)
    option, spec = config.pop("preconditioner"), config.pop("feature")
    if isinstance(option, dict):
        option = Preconditioner(children["preconditioner"], option["level"])
    elif option == "approximation":
        option = children["preconditioner"]
    feature = None
    if spec is not None:
        feature = _feature_from_spec(spec)
        _check_feature(spec, arrays["feature_spectrum"], feature, "the saved EigenPro3 model's feature")
    model = EigenPro3(children["kernel"], arrays.get("given_centers"), feature=feature, preconditioner=option, **config)
    return model, _state(model)


saving.register_saved_kind(
    saving.SavedKind(name="eigenpro3", matches=lambda obj: isinstance(obj, EigenPro3), describe=_describe_eigenpro3, rebuild=_rebuild_eigenpro3)
)
