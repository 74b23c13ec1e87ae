"""Eigenfunctions as interdomain inducing variables: u_j = ∫ f(x) ψ_j(x) q(x) dx.

For f ~ GP(0, κ) and any functions ψ_1..ψ_M (the eigenfunctions of κ's integral operator under the
data distribution q, fitted by :class:`Nystrom`, :class:`NeuralEF` or :class:`IKA`), the projections
u_j = ⟨f, ψ_j⟩_(L²(q)) are jointly Gaussian with f, with

    Cov(u_i, u_j) = ∬ ψ_i(x) κ(x, x') ψ_j(x') q(x) q(x') dx dx',    Cov(u_j, f(x)) = ∫ κ(x, x') ψ_j(x') q(x') dx'.

Two forms are offered (``form=``):

* ``"monte_carlo"`` (default): the integrals over q are replaced by an average over S samples
  Z = {z_s} of q (e.g. the training inputs), u = W f(Z) with W = ψ(Z)ᵀ / S [M, S]:

      Kuu = W κ(Z, Z) Wᵀ,      Kuf = W κ(Z, X).

  u is then an exact linear functional of the GP, so Kuu and Kuf are the covariances of an actual
  Gaussian vector and Q_ff = Kfu Kuu⁻¹ Kuf ⪯ κ(X, X) holds for *any* ψ (however inaccurate the
  eigenfunctions, and for kernel hyperparameters other than those ψ was fitted for). Cost: an S × S
  kernel matrix for Kuu and S × N for Kuf.
* ``"diagonal"``: the closed forms for exact eigenfunctions of κ under q, Kuu = diag(μ),
  Kuf = μ_j ψ_j(x) (the variational Fourier / spherical harmonic features of Hensman et al. 2017
  and Dutordoir et al. 2020, in the L²(q) normalisation). O(N M) and no kernel evaluation, but
  consistent only when (μ, ψ) are the exact eigenpairs of the kernel in use: with approximate
  eigenfunctions Q_ff ⪯ κ may fail (shown in tests/test_eigen_features.py).

The class registers Kuu and Kuf with ``gpflow.covariances`` for any GPflow kernel, so it can be used
in ``gpflow.models.SVGP``/``SGPR`` and, wrapped in ``SharedIndependentInducingVariables``, in a GPflux
``GPLayer``.
"""

from __future__ import annotations

from typing import Callable, Optional

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu

from .base import as_float64_matrix, require_float64

__all__ = ["EigenfunctionFeature", "FORMS"]

FORMS = ("monte_carlo", "diagonal")


class EigenfunctionFeature(gpflow.inducing_variables.InducingVariables):
    """M inducing variables u_j = ∫ f ψ_j dq from fitted eigenfunctions (module docstring).

    :param eigenfunctions: a fitted eigen approximation (anything with ``__call__(X) → ψ(X)`` [N, M]
        and, for the diagonal form, ``eigenvalues`` [M]), or a plain callable X → ψ(X).
    :param samples: Z [S, D], samples of q (e.g. the training inputs); needed by the Monte Carlo form.
    :param form: ``"monte_carlo"`` (consistent for any ψ) or ``"diagonal"`` (exact eigenpairs only).
    :param eigenvalues: μ [M] for the diagonal form when ``eigenfunctions`` has no ``eigenvalues``.
    """

    def __init__(self, eigenfunctions: Callable, samples=None, form: str = "monte_carlo", eigenvalues=None, name: Optional[str] = None):
        super().__init__(name=name)
        require_float64("EigenfunctionFeature")
        if form not in FORMS:
            raise ValueError(f"unknown form {form!r}; use one of {FORMS}")
        if not callable(eigenfunctions):
            raise ValueError("eigenfunctions must be callable X [N, D] → ψ(X) [N, M] (e.g. a fitted Nystrom or NeuralEF)")
        self.form = form
        # kept out of tf.Module's tracking: the eigenfunctions are fixed, their networks must not be trained with the GP
        self._eigenfunctions = lambda X: eigenfunctions(X)
        if eigenvalues is None and hasattr(eigenfunctions, "eigenvalues"):
            eigenvalues = eigenfunctions.eigenvalues
        self.samples = None
        self.sample_values = None
        if form == "monte_carlo":
            if samples is None:
                raise ValueError("the Monte Carlo form needs samples Z [S, D] of the data distribution q")
            Z = as_float64_matrix(samples, "the samples Z")
            values = self._evaluate(Z)
            self.samples = tf.constant(Z)
            self.sample_values = tf.constant(values)  # ψ(Z) [S, M], fixed
            self._M = values.shape[1]
        else:
            if eigenvalues is None:
                raise ValueError("the diagonal form needs the eigenvalues μ [M]")
            mu = np.asarray(eigenvalues.numpy() if isinstance(eigenvalues, (tf.Tensor, tf.Variable)) else eigenvalues, dtype=np.float64)
            if mu.ndim != 1 or not np.all(np.isfinite(mu)) or np.any(mu <= 0):
                raise ValueError(f"the eigenvalues must be a vector of positive finite numbers, got {mu}")
            self._M = mu.shape[0]
        self.eigenvalues = None if eigenvalues is None else tf.constant(np.asarray(eigenvalues, dtype=np.float64).reshape(-1))
        if self.eigenvalues is not None and self.eigenvalues.shape[0] != self._M:
            raise ValueError(f"{self.eigenvalues.shape[0]} eigenvalues for {self._M} eigenfunctions")

    def _evaluate(self, X) -> np.ndarray:
        values = self._eigenfunctions(X)
        values = np.asarray(values.numpy() if isinstance(values, (tf.Tensor, tf.Variable)) else values, dtype=np.float64)
        if values.ndim != 2 or values.shape[0] != np.shape(X)[0]:
            raise ValueError(f"the eigenfunctions returned shape {values.shape} for {np.shape(X)[0]} inputs; expected [N, M]")
        if not np.all(np.isfinite(values)):
            raise ValueError("the eigenfunctions returned NaN or inf")
        return values

    def __len__(self) -> int:
        return self._M

    @property
    def num_inducing(self) -> tf.Tensor:
        return tf.constant(self._M)

    @property
    def shape(self):
        return (self._M, None, 1)

    def projection(self) -> tf.Tensor:
        """W = ψ(Z)ᵀ / S [M, S] (Monte Carlo form): u = W f(Z)."""
        return tf.transpose(self.sample_values) / tf.cast(tf.shape(self.sample_values)[0], tf.float64)

    def values(self, X) -> tf.Tensor:
        """ψ(X) [N, M] (float64), for the diagonal form's Kuf."""
        return tf.cast(self._eigenfunctions(X), tf.float64)


@Kuu.register(EigenfunctionFeature, gpflow.kernels.Kernel)
def Kuu_eigenfunction(inducing_variable: EigenfunctionFeature, kernel: gpflow.kernels.Kernel, *, jitter: float = 0.0) -> tf.Tensor:
    """Cov(u, u) [M, M]: W κ(Z, Z) Wᵀ (Monte Carlo) or diag(μ) (diagonal), plus jitter · I."""
    M = len(inducing_variable)
    if inducing_variable.form == "monte_carlo":
        W = inducing_variable.projection()
        K = tf.matmul(W, tf.matmul(tf.cast(kernel(inducing_variable.samples), tf.float64), W, transpose_b=True))
        K = 0.5 * (K + tf.transpose(K))
    else:
        K = tf.linalg.diag(inducing_variable.eigenvalues)
    return K + jitter * tf.eye(M, dtype=K.dtype)


@Kuf.register(EigenfunctionFeature, gpflow.kernels.Kernel, object)
def Kuf_eigenfunction(inducing_variable: EigenfunctionFeature, kernel: gpflow.kernels.Kernel, Xnew) -> tf.Tensor:
    """Cov(u, f(X)) [M, N]: W κ(Z, X) (Monte Carlo) or μ_j ψ_j(x) (diagonal)."""
    if inducing_variable.form == "monte_carlo":
        return tf.matmul(inducing_variable.projection(), tf.cast(kernel(inducing_variable.samples, Xnew), tf.float64))
    return inducing_variable.eigenvalues[:, None] * tf.transpose(inducing_variable.values(Xnew))
