"""The EigenPro preconditioner from the top eigensystem of the data's kernel operator.

EigenPro (Ma & Belkin 2017, 2019; EigenPro 3, eq. 25 and 32) preconditions the gradient of the
square loss in the RKHS H by

    P = I − Σ_(i≤q) (1 − μ_(q+1)/μ_i) u_i ⊗ u_i,

where u_i are the H-unit eigenfunctions of the (sample) covariance operator T = E_x[K(·, x) ⊗ K(·, x)]
with eigenvalues μ_1 ≥ … ≥ μ_(q+1). The eigen module's approximations (Nyström, IKA, NeuralEF) give
ψ_i orthonormal in L²(data) with (Tψ_i) = μ_i ψ_i; then u_i = √μ_i ψ_i and ⟨u_i, K(·, x)⟩_H = √μ_i ψ_i(x), so
for any coefficient vector g on points A,

    P{K(·, A) g} = K(·, A) g − Σ_i (μ_i − μ_(q+1)) ψ_i(·) ψ_i(A)ᵀ g           (Lemma 2 / eq. 34).

For a Nyström approximation on s points (ψ_i = √s K(·, X_s) e_i / λ_i, μ_i = λ_i / s) this is exactly the
paper's K(·, X_s) Q_s K(X_s, A) g with Q_s = E (Λ⁻¹ − λ_(q+1) Λ⁻²) Eᵀ (eq. 33).

Batch size and step size (Algorithm 3's setup; Ma, Bassily & Belkin 2018): with β = max_x of the
preconditioned kernel diagonal k(x, x) − Σ_i (μ_i − μ_(q+1)) ψ_i(x)² over the subsample and λ the top
eigenvalue of the preconditioned operator (μ_(q+1) for an exact eigensystem),

    m = min(β / λ, m_max),     η = 0.99 m / (β + (m − 1) λ).

The paper's first case, "η = β/(2m) when m < β/λ", is not dimensionally consistent; the formula
above is the optimal step of Ma et al. (2018) for every m and is what Algorithm 3 uses at m = β/λ.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import tensorflow as tf

from ..eigen import EigenApproximation, Nystrom

__all__ = ["fit_nystrom", "Preconditioner", "step_schedule", "batch_step"]


def fit_nystrom(points, source, num_eigenpairs: int) -> Nystrom:
    """A :class:`Nystrom` fit of ``num_eigenpairs`` = q + 1 eigenpairs on ``points`` (the s landmarks),
    with the eigen module's warnings turned into errors: ValueError when the Nyström block has
    negative eigenvalues beyond round-off (the kernel is not positive semi-definite) or when
    λ_(q+1) is numerically zero (q too large for the subsample)."""
    s = int(np.shape(points)[0])
    q = num_eigenpairs - 1
    if q >= s:
        raise ValueError(f"the preconditioner level q = {q} must be smaller than the Nyström subsample size s = {s}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nystrom = Nystrom(num_eigenpairs, kernel=source).fit(points)
    for warning in caught:
        message = str(warning.message)
        if "not positive semi-definite" in message:
            raise ValueError(f"the kernel's Nyström block K(X_s, X_s) has negative eigenvalues beyond round-off: {message}")
        if "numerically zero" in message:
            raise ValueError(
                f"λ_(q+1) of the Nyström block is numerically zero for q = {q}, s = {s}: use a smaller q "
                f"(or a larger subsample); {message}"
            )
        warnings.warn(warning.message, warning.category, stacklevel=2)
    return nystrom


def step_schedule(beta: float, top: float, max_batch: int, batch_size=None):
    """(m, η): m = min(⌊β/λ⌋, m_max) ≥ 1 (or the given ``batch_size``) and η = η(m) of
    :func:`batch_step` (module docstring). A full batch (m = n) gives deterministic preconditioned
    gradient descent with η ≈ 0.99/λ, which converges to the exact solution; smaller batches reach a
    noise floor proportional to η on problems that are not interpolated (p < n)."""
    if not (np.isfinite(top) and top > 0):
        raise ValueError(f"the top eigenvalue of the preconditioned operator must be positive, got {top!r}")
    beta = max(float(beta), float(top))
    m = int(max(1, min(np.floor(beta / top), max_batch))) if batch_size is None else int(batch_size)
    return m, batch_step(beta, top, m)


def batch_step(beta: float, top: float, m: int) -> float:
    """η(m) = 0.99 m / (β + (m − 1) λ), the step for a minibatch of m points (applied as η/m times the
    summed gradient). An epoch's last, smaller minibatch m' < m needs its own η(m'): reusing η(m) there
    multiplies its per-point step by about m/2 when m = β/λ, which diverges for m' = 1."""
    beta = max(float(beta), float(top))
    return 0.99 * m / (beta + (m - 1) * float(top))


@dataclass
class Preconditioner:
    """P from the top q + 1 eigenpairs of any eigen-module approximation with ``.eigenvalues`` and ψ(X).

    :param approximation: a fitted :class:`EigenApproximation` with at least q + 1 eigenpairs
        (Nystrom, IKA, NeuralEF, …), fitted on (a sample of) the training inputs.
    :param q: the preconditioner level; μ_(q+1) is the (q+1)-th eigenvalue.
    """

    approximation: EigenApproximation
    q: int

    def __post_init__(self):
        k = int(self.approximation.eigenvalues.shape[0])
        if int(self.q) != self.q or self.q < 0:
            raise ValueError(f"the preconditioner level q must be a non-negative integer, got {self.q!r}")
        if self.q + 1 > k:
            raise ValueError(f"q = {self.q} needs q + 1 = {self.q + 1} eigenpairs; the approximation has {k}")
        mu = self.approximation.eigenvalues.numpy()[: self.q + 1]
        if not np.all(np.isfinite(mu)):
            raise ValueError("the approximation's eigenvalues contain NaN or inf")
        if mu[self.q] <= 0:
            raise ValueError(f"μ_(q+1) = {mu[self.q]:.3e} is not positive: use a smaller q")
        self.tail = float(mu[self.q])
        self.weights = tf.constant(np.maximum(mu[: self.q] - self.tail, 0.0))  # μ_i − μ_(q+1), [q]

    @classmethod
    def nystrom(cls, kernel, X_subsample, q: int) -> "Preconditioner":
        """The paper's Nyström preconditioner: top q + 1 eigenpairs of K(X_s, X_s) (Algorithm 1, lines 1–2)."""
        return cls(fit_nystrom(X_subsample, kernel, q + 1), q)

    def eigenfunctions(self, X) -> tf.Tensor:
        """ψ_1..ψ_q at X, [N, q]."""
        return tf.cast(self.approximation(X), tf.float64)[:, : self.q]

    def correction(self, Psi_A, g) -> tf.Tensor:
        """diag(μ_i − μ_(q+1)) ψ(A)ᵀ g [q, L]: the coefficients of the subtracted ψ's in eq. 34."""
        return self.weights[:, None] * tf.matmul(Psi_A, g, transpose_a=True)

    def preconditioned_diagonal(self, kernel_diagonal, Psi) -> np.ndarray:
        """k_P(x, x) = k(x, x) − Σ_i (μ_i − μ_(q+1)) ψ_i(x)² [N]."""
        return np.asarray(kernel_diagonal) - (Psi.numpy() ** 2) @ self.weights.numpy()

    def check_on_sample(self, gram, Psi) -> tuple:
        """(top eigenvalue of A / r, max diagonal of A) for the preconditioned Gram A = G − Ψ D Ψᵀ on r
        sample points (G [r, r], Ψ [r, q]). A is positive semi-definite whenever the u_i = √μ_i ψ_i are
        H-orthonormal (an exact Nyström eigensystem); an approximation whose eigenvalues overstate the
        kernel's, or eigenfunctions extended from a near-singular block, make it indefinite, and then
        no step size converges: ValueError when its smallest eigenvalue is below −1e-6 of its largest.
        The diagonal matters too: off the Nyström landmarks k_P(x, x) can exceed its value on them by
        orders of magnitude (extended eigenfunctions of tiny λ_i), and β must cover it."""
        Psi = np.asarray(Psi)
        A = np.asarray(gram) - (Psi * self.weights.numpy()[None, :]) @ Psi.T
        eigenvalues = np.linalg.eigvalsh(0.5 * (A + A.T))
        if eigenvalues[0] < -1e-6 * abs(eigenvalues[-1]):
            raise ValueError(
                f"the preconditioned kernel is indefinite on the data (eigenvalues {eigenvalues[0]:.2e} … {eigenvalues[-1]:.2e}): "
                f"the preconditioner's eigenpairs overstate the kernel's (q = {self.q}); use a smaller q, a larger Nyström subsample, "
                f"or a more accurate eigenfunction approximation"
            )
        return float(eigenvalues[-1]) / A.shape[0], float(np.diagonal(A).max())

    def beta(self, kernel_diagonal, Psi) -> float:
        """β = max over the points of the preconditioned diagonal (at least μ_(q+1))."""
        return float(max(self.preconditioned_diagonal(kernel_diagonal, Psi).max(), self.tail))
