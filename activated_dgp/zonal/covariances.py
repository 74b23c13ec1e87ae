"""Kuu and Kuf of activated inducing variables under a zonal kernel, registered with GPflow's dispatch.

With k(x, x') = v ‖x̃‖‖x̃'‖ Σ λ_n N_n Ĉ_n(t) and g_m as in :class:`ActivationFeature`, the RKHS inner
product ⟨g, h⟩_H = Σ_(n,j) g_nj h_nj / (v λ_n) (eq. 9) and the addition theorem give
(Dutordoir et al., 2021, eq. 13, 14):

    Kuf[m, i] = Cov(u_m, f(x_i)) = ⟨g_m, k(x_i, ·)⟩_H
              = ‖w_m‖ ‖x̃_i‖ Σ_(n<Ñ, λ_n≠0) σ_n N_n^d Ĉ_n(ŵ_m·x̂_i),
    Kuu[m, m'] = ⟨g_m, g_m'⟩_H
              = ‖w_m‖ ‖w_m'‖ / v · Σ_(n<Ñ, λ_n≠0) σ_n²/λ_n N_n^d Ĉ_n(ŵ_m·ŵ_m').

Factors kept, and why:
* N_n^d = (n + α)/α · C_n^(α)(1), the addition theorem's factor (written with the normalised Ĉ_n
  so that α = 0, d = 2, works): dropping it would make Kuu and Kuf inconsistent with K.
* ‖w_m‖: part of g_m (eq. 10); it is the weight scale of the equivalent network layer.
* 1/v: the kernel variance scales the RKHS norm.
* Levels with λ_n = 0 are dropped from both: there ⟨·,·⟩_H does not see g_m, and keeping σ_n in
  Kuf would give f a component its prior does not have. The kernel's truncation also bounds the
  series, so the effective truncation is min(Ñ_kernel, Ñ_feature).
With these, Kuu and Kuf are the exact inner products of the truncated, finite-rank RKHS, so
K − Kfu Kuu⁻¹ Kuf ⪰ 0 and the SGPR bound never exceeds the GPR evidence (tests check both).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import TensorLike, TensorType
from gpflow.covariances import Kuf, Kuu

from .inducing_variables import ActivationFeature
from .kernels import ZonalKernel
from .spherical import gegenbauer_series, num_harmonics

__all__ = ["basis_coefficients", "inducing_coefficients"]


def _check_compatible(feature: ActivationFeature, kernel: ZonalKernel) -> None:
    if feature.dimension != kernel.dimension:
        raise ValueError(
            f"W has {feature.dimension} columns but the kernel works in d = {kernel.dimension} dimensions "
            f"({kernel.input_dim} inputs{' + 1 bias' if kernel.bias else ''}); W must be [M, {kernel.dimension}]"
        )


def _levels(feature: ActivationFeature, kernel: ZonalKernel):
    _check_compatible(feature, kernel)
    truncation = min(feature.truncation_level, kernel.truncation_level)
    lam = kernel.eigenvalues[:truncation]
    sigma = np.where(lam != 0.0, feature.eigenvalues[:truncation], 0.0)
    multiplicity = num_harmonics(np.arange(truncation), kernel.dimension)
    return sigma, lam, multiplicity


def basis_coefficients(feature: ActivationFeature, kernel: ZonalKernel) -> np.ndarray:
    """σ_n N_n^d on the levels the kernel keeps: Kuf's series, i.e. the truncated activation."""
    sigma, _, multiplicity = _levels(feature, kernel)
    return sigma * multiplicity


def inducing_coefficients(feature: ActivationFeature, kernel: ZonalKernel) -> np.ndarray:
    """σ_n²/λ_n N_n^d (0 where λ_n = 0): Kuu's series, without the 1/v factor.

    Formed as (σ_n N_n^d)² / (λ_n N_n^d): both factors are O(1) in any dimension, whereas σ_n² alone
    underflows in high d (σ_n ≈ 1e−110 at d = 10,000, n = 39)."""
    sigma, lam, multiplicity = _levels(feature, kernel)
    basis, kernel_terms = sigma * multiplicity, lam * multiplicity
    return np.divide(basis**2, kernel_terms, out=np.zeros_like(lam), where=lam != 0.0)


@Kuu.register(ActivationFeature, ZonalKernel)
@check_shapes(
    "inducing_variable: [M, D, 1]",
    "return: [M, M]",
)
def Kuu_activation_zonal(
    inducing_variable: ActivationFeature, kernel: ZonalKernel, *, jitter: float = 0.0
) -> tf.Tensor:
    """⟨g_m, g_m'⟩_H + jitter·I: [M, M] (eq. 13 with the factors of the module docstring)."""
    norms, directions = inducing_variable.polar_directions()
    cosine = tf.matmul(directions, directions, transpose_b=True)
    series = gegenbauer_series(cosine, inducing_coefficients(inducing_variable, kernel), kernel.alpha)
    Kmm = norms[:, None] * norms[None, :] * series / tf.cast(kernel.variance, series.dtype)
    return Kmm + tf.cast(jitter, Kmm.dtype) * tf.eye(tf.shape(Kmm)[0], dtype=Kmm.dtype)


@Kuf.register(ActivationFeature, ZonalKernel, TensorLike)
@check_shapes(
    "inducing_variable: [M, D, 1]",
    "X: [batch..., N, D]",
    "return: [M, batch..., N]",
)
def Kuf_activation_zonal(inducing_variable: ActivationFeature, kernel: ZonalKernel, X: TensorType) -> tf.Tensor:
    """g̃_m(x̃_i) = Cov(u_m, f(x_i)): [M, batch..., N] (eq. 14 with the factors of the module docstring)."""
    coefficients = basis_coefficients(inducing_variable, kernel)
    X, _ = kernel.slice(X, None)
    # O(N·D) against the series' O(M·N·Ñ): cheap enough for every batch, and it names a NaN input as an input on
    # paths that skip the library's entry checks (gpflux's own ``as_training_model().fit``, the twin's ``fit``)
    X = tf.debugging.assert_all_finite(X, "the inputs of an activated layer contain NaN or inf (the data X, or a previous layer's output)")
    input_norms, input_directions = kernel.polar_inputs(X)
    batched = input_norms.shape.rank != 1  # [batch..., N]: evaluated on the flattened rows, then reshaped
    if batched:
        shape = tf.concat([[-1], tf.shape(input_norms)], axis=0)  # [M, batch..., N]
        input_norms = tf.reshape(input_norms, [-1])
        input_directions = tf.reshape(input_directions, [-1, kernel.dimension])
    norms, directions = inducing_variable.polar_directions()
    directions = tf.cast(directions, input_directions.dtype)
    cosine = tf.matmul(directions, input_directions, transpose_b=True)
    series = gegenbauer_series(cosine, coefficients, kernel.alpha)
    result = tf.cast(norms, series.dtype)[:, None] * input_norms[None, :] * series
    return tf.reshape(result, shape) if batched else result
