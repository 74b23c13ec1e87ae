"""A preconditioner inside the model's span: the top eigenfunctions of the covariance operator
T = E_x[K(·, x) ⊗ K(·, x)] restricted to span{b_1..b_p} (Rayleigh–Ritz in the RKHS metric).

For f = Σ_j c_j b_j, ⟨f, T f⟩_H = E_x[f(x)²] = cᵀ A c with A = B(X_s)ᵀ B(X_s) / s on a data sample
X_s, and ‖f‖_H² = cᵀ G c with G the basis's Gram matrix (K(Z, Z), or Kuu). The generalised
eigenproblem A c = μ G c (cᵀ G c = 1) gives H-unit Ritz functions u_i = B c_i with Ritz values μ_i;
ψ_i = u_i / √μ_i are orthonormal on the sample, as the eigen module's convention asks, so
:class:`Preconditioner` takes them as it takes Nyström's.

Why: the u_i lie in span{b}, so P = I − Σ (1 − μ_(q+1)/μ_i) u_i ⊗ u_i commutes with the
H-projection onto span{b}. Then the paper's update and the consistent one coincide, both converge to
the least-squares solution, and the iteration's condition number is μ_1'/μ_p' of the *restricted*
spectrum after flattening, μ_(q+1)/μ_p, whatever the conditioning of G. The data's Nyström
eigenfunctions instead flatten directions that may lie far from span{b}: for an ill-conditioned basis
(activated features, Kuu with condition 1e5) their preconditioned iteration stalls.

Cost: G [p, p] and B(X_s) [s, p] are held, and one p × p generalised eigendecomposition: meant for
a layer-width basis (activated features) or a few thousand centers, not for p = 20,000.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..eigen import EigenApproximation
from ..eigen.rayleigh_ritz import generalised_eigh

__all__ = ["SpanEigenfunctions"]


class SpanEigenfunctions(EigenApproximation):
    """Ritz pairs (μ_i, ψ_i = B(·) V_i) of T within a basis's span (module docstring).

    :param basis: a :class:`KernelCenters` or :class:`ActivatedBasis`.
    :param X_sample: data points X_s [s, D] on which E_x is estimated.
    :param num_eigenpairs: k ≤ the numerical rank of G (q + 1 for a level-q preconditioner).
    """

    def __init__(self, basis, X_sample, num_eigenpairs: int, name=None):
        super().__init__(num_eigenpairs, name=name)
        self.basis = basis
        X_sample = tf.convert_to_tensor(X_sample, tf.float64)
        p = basis.num_functions
        values = tf.concat([basis.values(X_sample, a, b) for a, b in basis._column_blocks()], axis=1).numpy()  # B(X_s) [s, p]
        gram = basis.dense_gram()
        mu, C = generalised_eigh(values.T @ values / values.shape[0], gram)
        if mu.size < self.num_eigenpairs:
            raise ValueError(f"the basis's Gram matrix has numerical rank {mu.size} < {self.num_eigenpairs} eigenpairs asked for (p = {p})")
        mu, C = mu[: self.num_eigenpairs], C[:, : self.num_eigenpairs]
        if mu[-1] <= 0:
            raise ValueError(f"the Ritz value μ_{self.num_eigenpairs} = {mu[-1]:.2e} is not positive: use fewer eigenpairs")
        self._eigenvalues.assign(mu)
        self._coefficients = tf.constant(C / np.sqrt(mu)[None, :])  # V [p, k]: ψ = B V
        self._gram_coefficients = tf.constant(gram @ self._coefficients.numpy())  # G V [p, k]

    def __call__(self, X) -> tf.Tensor:
        """ψ(X) = B(X) V [N, k]."""
        return self.basis.apply(X, self._coefficients)

    def basis_products(self, q: int) -> tf.Tensor:
        """⟨b_j, ψ_i⟩_H = (G V)_ji [p, q] (for centers this is ψ_i(z_j))."""
        return self._gram_coefficients[:, :q]
