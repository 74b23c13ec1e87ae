"""The posterior covariance of the linearised Laplace approximation at a test batch, J(x) Σ J(x)ᵀ [B, C, C], for
each curvature structure (:mod:`activated_dgp.eigen.laplace`): with H = V diag(e) Vᵀ (exact, last layer, the
eigenfunction features of eq. 22), Σ = V diag(1/(e + δ)) Vᵀ and F Σ Fᵀ = ‖diag(e + δ)^(−1/2) Vᵀ Fᵀ‖²; diagonal,
F diag(1/(h + δ)) Fᵀ; low rank (Woodbury), δ⁻¹ J Jᵀ − (J V) diag(e / (δ (e + δ))) (J V)ᵀ; Kronecker factors
(:mod:`~activated_dgp.eigen.kfac`); one prior precision per group (:mod:`~activated_dgp.eigen.grouped_prior`)."""

from __future__ import annotations

from typing import List

import numpy as np

from ..grouped_prior import GroupedPrior
from .network import _NetworkFeatures


class _PosteriorCovariance(_NetworkFeatures):
    """The test covariances of :class:`~activated_dgp.eigen.LinearisedLaplace` at any prior precision δ."""

    def _per_parameter(self, delta):
        """δ as one value per parameter (layerwise), or the scalar itself."""
        if self.prior_structure != "layerwise":
            return delta
        return np.repeat(self._checked_layer_precisions(delta), self._prior_groups())

    def _prior_groups(self) -> List[int]:
        """The sizes of the parameter groups that share a prior precision under ``prior_structure="layerwise"``, in
        parameter order: each variable (exact, diagonal, lowrank) or each layer's kernel and bias (kron)."""
        if self.method == "kron":
            return self.kron.layer_sizes()
        return [int(np.prod(v.shape)) for v in self.variables]

    def _checked_layer_precisions(self, values) -> np.ndarray:
        values = np.atleast_1d(np.asarray(values, dtype=np.float64))
        groups = self._prior_groups()
        if values.size == 1:
            values = np.full(len(groups), values[0])
        if values.shape != (len(groups),) or not np.all(np.isfinite(values) & (values > 0)):
            raise ValueError(f"prior_structure='layerwise' needs {len(groups)} positive prior precisions (one per "
                             f"{'layer' if self.method == 'kron' else 'variable'}), got {values.tolist()}")
        return values

    def _grouped_prior(self) -> GroupedPrior:
        """The GGN's eigenpairs as a :class:`~activated_dgp.eigen.grouped_prior.GroupedPrior` over the variables (exact,
        lowrank), built once per fit."""
        cached = getattr(self, "_grouped_cache", (None, None))
        if cached[0] is not self.ggn_eigenvalues:
            cached = (self.ggn_eigenvalues, GroupedPrior.of_eigenpairs(self.ggn_eigenvalues, self.ggn_eigenvectors, self._prior_groups()))
            self._grouped_cache = cached
        return cached[1]

    def _projected(self, X: np.ndarray) -> np.ndarray:
        """The δ-independent factor of one batch's covariance: F V [B, C, m] (eigenvector methods; layer-wise J V
        where it can), or F itself (diagonal)."""
        if self.ggn_eigenvectors is None:
            return self._features(X)
        if self._woodbury:  # [J V, J Jᵀ]: [B, C, k + C]
            F = self._features(X, eigen=False)
            return np.concatenate([F @ self.ggn_eigenvectors, F @ np.swapaxes(F, 1, 2)], axis=2)
        if self._layerwise_covariance:
            return self._layerwise.jacobian_times(X, self.ggn_eigenvectors)
        return self._features(X) @ self.ggn_eigenvectors

    def _covariance(self, projected: np.ndarray, delta: float) -> np.ndarray:
        """F Σ Fᵀ [B, C, C] for Σ = (H + δ I)⁻¹, from :meth:`_projected`'s F V (or F, diagonal)."""
        if self.ggn_eigenvectors is None:  # diagonal
            F = projected
            return (F / (self.ggn_eigenvalues + self._per_parameter(delta))[None, None, :]) @ np.swapaxes(F, 1, 2)  # batched BLAS, not a 3-operand einsum
        if self._woodbury:  # δ⁻¹ J Jᵀ − (J V) diag(e / (δ (e + δ))) (J V)ᵀ (:mod:`activated_dgp.eigen.laplace`)
            e = self.ggn_eigenvalues
            JV, JJ = projected[:, :, : e.size], projected[:, :, e.size :]
            return JJ / delta - (JV * (e / (delta * (e + delta)))[None, None, :]) @ np.swapaxes(JV, 1, 2)
        root = projected / np.sqrt(self.ggn_eigenvalues + delta)[None, None, :]
        return root @ np.swapaxes(root, 1, 2)

    def _latent_covariance(self, X: np.ndarray, delta: float) -> np.ndarray:
        """J(X) Σ J(X)ᵀ [N, C, C] at prior precision δ, in batches (layer-wise where the network allows)."""
        if self.prior_structure == "layerwise" and self.method in ("exact", "lowrank"):
            deltas, grouped = self._checked_layer_precisions(delta), self._grouped_prior()
            return np.concatenate([grouped.covariance(self._features(X[rows], eigen=False), deltas) for rows in self._batches(X.shape[0])], axis=0)
        if self.method == "kron":
            delta = self._checked_layer_precisions(delta) if self.prior_structure == "layerwise" else delta
            return np.concatenate([self.kron.covariance(X[rows], delta) for rows in self._batches(X.shape[0])], axis=0)
        if self._layerwise_covariance and self.ggn_eigenvectors is None:
            variances = 1.0 / (self.ggn_eigenvalues + self._per_parameter(delta))
            return np.concatenate([self._layerwise.covariance(X[rows], variances) for rows in self._batches(X.shape[0])], axis=0)
        return np.concatenate([self._covariance(self._projected(X[rows]), delta) for rows in self._batches(X.shape[0])], axis=0)
