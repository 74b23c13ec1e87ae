"""A prior precision per group of parameters (``prior_structure="layerwise"``) for the linearised Laplace methods
whose GGN is a low-rank-plus-nothing matrix H = W Wᵀ (``exact``: W = V diag(√e) over the eigenvalues e > 0;
``lowrank``: its top k eigenpairs), with D = diag(δ_l on the parameters of group l).

The Laplace evidence (MacKay 1992; Immer et al. 2021, eq. 5, with one δ_l per group as laplace-torch's layer-wise
prior precision) is

    log p(D | δ) ≈ log p(D | θ_MAP) − ½ Σ_l δ_l ‖θ_l‖² + ½ Σ_l m_l log δ_l − ½ log det(H + D),

and its log δ_l-derivative −δ_l ‖θ_l‖²/2 + m_l/2 − (δ_l/2) Σ_(p in l) [(H + D)⁻¹]_pp. With the r × r Grams G_l = W_lᵀ W_l
of each group's rows of W (formed once) and K = I_r + Σ_l G_l / δ_l (Sylvester's determinant identity and Woodbury),

    log det(H + D) = Σ_l m_l log δ_l + log det K,      Σ_(p in l) [(H + D)⁻¹]_pp = (m_l − tr(K⁻¹ G_l) / δ_l) / δ_l,

O(r³ + L r²) per evaluation, with no P × P matrix. For predictions, W̃ = D^(−½) W = Q diag(s) Rᵀ (thin SVD, through the
eigendecomposition of W̃ᵀ W̃ = Σ_l G_l / δ_l) gives (H + D)⁻¹ = S Sᵀ with the root

    S = D^(−½) (I + Q diag(c) Qᵀ),      c = (1 + s²)^(−½) − 1,

since (I + Q diag(c) Qᵀ)² = I − Q diag(s² / (1 + s²)) Qᵀ = (I + W̃ W̃ᵀ)⁻¹. The latent covariance is then (F S)(F S)ᵀ for the
features F(x) = J(x) [C, P], positive semi-definite by construction, and weight samples are θ_MAP + S z.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
from scipy.linalg import cho_factor, cho_solve

__all__ = ["GroupedPrior"]


class GroupedPrior:
    """(H + D)⁻¹ and log det(H + D) for H = W Wᵀ, W [P, r], and D = diag(δ_l) constant on consecutive groups of
    ``sizes`` parameters (module docstring)."""

    def __init__(self, W: np.ndarray, sizes: Sequence[int]):
        self.W = np.asarray(W, dtype=np.float64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if self.W.ndim != 2 or int(self.sizes.sum()) != self.W.shape[0]:
            raise ValueError(f"W must be [P, r] with P = {int(self.sizes.sum())} (the groups' sizes), got {self.W.shape}")
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)])
        self.grams = [self.W[a:b].T @ self.W[a:b] for a, b in zip(self.starts[:-1], self.starts[1:])]
        self._root_cache: Tuple = (None, None)

    def _K(self, deltas: np.ndarray) -> np.ndarray:
        return np.eye(self.W.shape[1]) + sum(G / d for G, d in zip(self.grams, deltas))

    def logdet_and_traces(self, deltas) -> Tuple[float, np.ndarray]:
        """log det(H + D) and, per group, Σ_(p in l) [(H + D)⁻¹]_pp [L]."""
        deltas = np.asarray(deltas, dtype=np.float64)
        factor = cho_factor(self._K(deltas), lower=True)
        logdet = float(np.sum(self.sizes * np.log(deltas)) + 2.0 * np.sum(np.log(np.diag(factor[0]))))
        inverse = cho_solve(factor, np.eye(self.W.shape[1]))
        traces = np.array([(m - np.sum(inverse * G) / d) / d for m, G, d in zip(self.sizes, self.grams, deltas)])
        return logdet, traces

    def _root(self, deltas: np.ndarray):
        """(D^(−½) per parameter [P], Q [P, r'], c [r']) of the root S at δ (cached for the last δ)."""
        key = tuple(np.asarray(deltas, dtype=np.float64).tolist())
        if self._root_cache[0] != key:
            scale = np.repeat(np.asarray(deltas, dtype=np.float64) ** -0.5, self.sizes)
            values, R = np.linalg.eigh(self._K(deltas) - np.eye(self.W.shape[1]))  # s², R
            keep = values > 1e-12 * max(values.max(initial=0.0), 1e-300)
            s = np.sqrt(values[keep])
            Q = ((self.W * scale[:, None]) @ R[:, keep]) / s[None, :]
            self._root_cache = (key, (scale, Q, (1.0 + s**2) ** -0.5 - 1.0))
        return self._root_cache[1]

    def features_times_root(self, F: np.ndarray, deltas) -> np.ndarray:
        """F S [..., P] for features F [..., P]."""
        scale, Q, c = self._root(deltas)
        scaled = F * scale
        return scaled + ((scaled @ Q) * c) @ Q.T

    def covariance(self, F: np.ndarray, deltas) -> np.ndarray:
        """F (H + D)⁻¹ Fᵀ [B, C, C] for features F [B, C, P]."""
        Y = self.features_times_root(F, deltas)
        return Y @ np.swapaxes(Y, 1, 2)

    def root_times(self, Z: np.ndarray, deltas) -> np.ndarray:
        """S Z [P, S] for Z [P, S]: S Sᵀ = (H + D)⁻¹."""
        scale, Q, c = self._root(deltas)
        return scale[:, None] * (Z + Q @ (c[:, None] * (Q.T @ Z)))

    @classmethod
    def of_eigenpairs(cls, values: np.ndarray, vectors: np.ndarray, sizes: List[int]) -> "GroupedPrior":
        """The prior of H = V diag(e) Vᵀ from its eigenpairs (those with e > 0)."""
        keep = values > 0
        return cls(vectors[:, keep] * np.sqrt(values[keep])[None, :], sizes)
