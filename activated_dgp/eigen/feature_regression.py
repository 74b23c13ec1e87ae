"""Kernel regression through truncated Mercer features: penalised least squares (lecture §10.2).

Kernel ridge regression (KRR) on X = {x_1..x_N}, y [N] solves

    f* = argmin_(f ∈ H) (1/N) ‖f(X) − y‖² + r ‖f‖²_H,

whose solution is f*(x) = κ(x, X) α with α = (K + N r I)⁻¹ y, K = κ(X, X). Writing
f = Σ_j w_j φ_j with Mercer features φ_j = √μ_j ψ_j (so κ(x, x') = Σ_j φ_j(x) φ_j(x') and
‖f‖²_H = Σ_j w_j²), the same problem becomes the penalised least squares problem (lecture eq. 7)

    w* = argmin_w (1/N) ‖Φ w − y‖² + r ‖w‖²  ⇒  w* = (ΦᵀΦ + N r I)⁻¹ Φᵀ y,    Φ_nj = φ_j(x_n),

and f(x) = φ(x)·w*. Truncating to k features, the push-through identity
Φ (ΦᵀΦ + N r I)⁻¹ = (ΦΦᵀ + N r I)⁻¹ Φ gives f(x) = K̃(x, X)(K̃ + N r I)⁻¹ y with K̃ = ΦΦᵀ, i.e. KRR
with the rank-k kernel K̃ ≈ K. So, with this convention (the regularisation r multiplies N in
both), feature ridge on ``approx.features`` approaches :func:`kernel_ridge_regression` with the same
r as k grows; costs O(N k² + k³) instead of O(N³).

(With the lecture's 1/(2σ²) data term and penalty λ: N r = 2σ²λ.)
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.linalg
import tensorflow as tf

from .base import require_float64
from .kernel_sources import as_kernel_source

__all__ = ["ridge_regression", "FeatureRidge", "KernelRidge", "kernel_ridge_regression"]


def _as_array(values, what: str) -> np.ndarray:
    values = values.numpy() if isinstance(values, (tf.Tensor, tf.Variable)) else np.asarray(values)
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} contain NaN or inf")
    return values


def _check_regularisation(regularisation) -> float:
    r = float(regularisation)
    if not np.isfinite(r) or r < 0:
        raise ValueError(f"the regularisation must be finite and ≥ 0, got {regularisation!r}")
    return r


def _targets(y, N: int) -> np.ndarray:
    y = _as_array(y, "the targets")
    if y.ndim not in (1, 2) or y.shape[0] != N:
        raise ValueError(f"targets must have shape [N] or [N, P] with N = {N}, got {y.shape}")
    return y


def ridge_regression(features_train, y, regularisation: float) -> tf.Tensor:
    """w = (ΦᵀΦ + N r I)⁻¹ Φᵀ y for features Φ [N, k] and targets y [N] or [N, P].

    Minimises (1/N)‖Φw − y‖² + r‖w‖². With r = 0 the least-squares solution (via lstsq) is
    returned. Returns w [k] or [k, P] (float64), the shape following y.
    """
    Phi = _as_array(features_train, "the features")
    if Phi.ndim != 2:
        raise ValueError(f"features must be a matrix [N, k], got shape {Phi.shape}")
    N, k = Phi.shape
    y = _targets(y, N)
    r = _check_regularisation(regularisation)
    if r == 0.0:
        return tf.constant(np.linalg.lstsq(Phi, y, rcond=None)[0])
    A = Phi.T @ Phi + N * r * np.eye(k)
    return tf.constant(scipy.linalg.solve(A, Phi.T @ y, assume_a="pos"))


class FeatureRidge:
    """Ridge regression on a feature map, e.g. ``FeatureRidge(nystrom.features, r)``.

    ``fit(X, y)`` computes w = (ΦᵀΦ + N r I)⁻¹ Φᵀ y with Φ = feature_map(X); ``predict(X)`` is
    feature_map(X) w. With Mercer features this is KRR with the rank-k kernel (module docstring).
    """

    def __init__(self, feature_map: Callable, regularisation: float):
        require_float64("FeatureRidge")
        if not callable(feature_map):
            raise ValueError("feature_map must be callable X → Φ [N, k]")
        self.feature_map = feature_map
        self.regularisation = _check_regularisation(regularisation)
        self.weights = None

    def fit(self, X, y) -> "FeatureRidge":
        self.weights = ridge_regression(self.feature_map(X), y, self.regularisation)
        return self

    def predict(self, X) -> tf.Tensor:
        if self.weights is None:
            raise ValueError("FeatureRidge is not fitted")
        Phi = tf.cast(self.feature_map(X), tf.float64)
        w = self.weights
        if w.shape.rank == 1:
            return tf.linalg.matvec(Phi, w)
        return tf.matmul(Phi, w)

    __call__ = predict


class KernelRidge:
    """Exact kernel ridge regression: α = (K + N r I)⁻¹ y, f(x) = κ(x, X) α.

    :param kernel: anything :func:`as_kernel_source` accepts.
    """

    def __init__(self, kernel, regularisation: float):
        require_float64("KernelRidge")
        self.source = as_kernel_source(kernel)
        self.regularisation = _check_regularisation(regularisation)
        self.inputs = None
        self.alpha = None

    def fit(self, X, y) -> "KernelRidge":
        X = _as_array(X, "the inputs")
        K = np.asarray(self.source.gram(X), dtype=np.float64)
        N = K.shape[0]
        y = _targets(y, N)
        A = 0.5 * (K + K.T) + N * self.regularisation * np.eye(N)
        if self.regularisation == 0.0:
            alpha = np.linalg.lstsq(A, y, rcond=None)[0]
        else:
            alpha = scipy.linalg.solve(A, y, assume_a="pos")
        self.inputs, self.alpha = X, tf.constant(alpha)
        return self

    def predict(self, X) -> tf.Tensor:
        if self.alpha is None:
            raise ValueError("KernelRidge is not fitted")
        K = tf.cast(self.source.gram(_as_array(X, "the inputs"), self.inputs), tf.float64)
        if self.alpha.shape.rank == 1:
            return tf.linalg.matvec(K, self.alpha)
        return tf.matmul(K, self.alpha)

    __call__ = predict


def kernel_ridge_regression(kernel, X, y, regularisation: float) -> KernelRidge:
    """Fitted exact KRR (see :class:`KernelRidge`); call ``.predict(X_new)`` for κ(X_new, X) α."""
    return KernelRidge(kernel, regularisation).fit(X, y)
