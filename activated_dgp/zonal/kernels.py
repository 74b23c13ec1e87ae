"""Zonal kernels on bias-extended, length-scaled inputs: :class:`ZonalKernel` and :class:`ZonalArcCosine`.

An input x ∈ R^D is mapped to x̃ = [x, 1] / ℓ ∈ R^d, d = D + 1 (with ``bias=False``: x̃ = x / ℓ,
d = D), and the kernel is the truncated Mercer series of a zonal shape function s
(Dutordoir et al., 2021, eq. 6–8):

    k(x, x') = v ‖x̃‖ ‖x̃'‖ Σ_(n<Ñ) λ_n N_n^d Ĉ_n(t),    t = x̃·x̃' / (‖x̃‖ ‖x̃'‖),

λ_n the Funk–Hecke eigenvalues of s (eq. 7). The radial factor ‖x̃‖‖x̃'‖ is that of the arc-cosine
kernel (eq. 6); on unit-norm x̃ the kernel is the plain zonal kernel v s(x̃·x̃'). As Ñ → ∞ the
series converges to v ‖x̃‖‖x̃'‖ s(t); for the arc-cosine shape that is
``gpflow.kernels.ArcCosine(order=1)`` with weight variances 1/ℓ_(1..D)² and bias variance 1/ℓ_d².
The truncated series is what K, K_diag, Kuu and Kuf all use, so the model is a proper GP whose
inducing variables are exactly representable (K − Qff ⪰ 0).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import inherit_check_shapes
from gpflow.base import TensorType
from gpflow.utilities import positive

from .spectra import activation_coefficients, arc_cosine_coefficients, arc_cosine_shape, resolve_activation
from .spherical import (
    _check_truncation_level,
    gegenbauer_alpha,
    gegenbauer_series,
    normalised_gegenbauer_polynomials,
    num_harmonics,
    polar_decomposition,
)
from .funk_hecke import funk_hecke_coefficients
from ..validation import check_width

__all__ = ["ZonalKernel", "ZonalArcCosine", "ZonalMatchedKernel"]


class ZonalKernel(gpflow.kernels.Kernel):
    """Truncated zonal kernel of any shape function s: [−1, 1] → R (see the module docstring).

    :param shape_function: elementwise NumPy function of the cosine; must be positive definite on
        S^(d−1) (all λ_n ≥ 0), else a ValueError names the first negative level.
    :param input_dim: D, the number of input columns (after ``active_dims``).
    :param truncation_level: Ñ ≥ 1, levels n = 0..Ñ−1 are kept.
    :param variance: v > 0.
    :param lengthscales: ℓ > 0, a scalar or d values (the last one scales the bias coordinate).
    :param bias: extend inputs with a constant coordinate (d = D + 1); ``False`` gives d = D.
    :param breakpoints: cosines where s is not smooth (for the quadrature).
    :param threshold: levels with |λ_n| N_n^d below ``threshold`` · Σ_k |λ_k| N_k^d are set to zero
        (see ``spherical.apply_threshold``).

    λ_n come from :func:`~activated_dgp.zonal.funk_hecke.funk_hecke_coefficients` (method "auto"): exact to
    ~1e−14 in any dimension when ``shape_function`` also accepts mpmath numbers (as
    ``zonal_matern52_shape`` does; see :func:`activated_dgp.zonal.funk_hecke.dual`), float64 with a
    round-off check otherwise.
    """

    def __init__(
        self,
        shape_function: Callable[[np.ndarray], np.ndarray],
        input_dim: int,
        truncation_level: int = 20,
        variance: float = 1.0,
        lengthscales=1.0,
        *,
        bias: bool = True,
        breakpoints: Sequence[float] = (),
        threshold: float = 1e-9,
        quadrature_points: int = 200,
        active_dims=None,
        name: Optional[str] = None,
    ):
        super().__init__(active_dims=active_dims, name=name)
        if isinstance(input_dim, bool) or int(input_dim) != input_dim or input_dim < 1:
            raise ValueError(f"input_dim must be an integer ≥ 1, got {input_dim!r}")
        self.input_dim = int(input_dim)
        self.bias = bool(bias)
        self.dimension = self.input_dim + (1 if self.bias else 0)
        if self.dimension < 2:
            raise ValueError(
                "a zonal kernel needs inputs of dimension d ≥ 2 on the sphere; with bias=False input_dim must be ≥ 2"
            )
        self.truncation_level = _check_truncation_level(truncation_level)
        self.alpha = gegenbauer_alpha(self.dimension)
        self.threshold = float(threshold)
        self.shape_function = shape_function
        self._breakpoints = tuple(breakpoints)
        self._quadrature_points = int(quadrature_points)

        lengthscales = np.asarray(lengthscales, dtype=gpflow.default_float())
        if lengthscales.ndim > 1 or (lengthscales.ndim == 1 and lengthscales.shape[0] != self.dimension):
            raise ValueError(
                f"lengthscales must be a scalar or have d = {self.dimension} entries "
                f"({self.input_dim} inputs{' + 1 bias' if self.bias else ''}), got shape {lengthscales.shape}"
            )
        if np.any(lengthscales <= 0) or not np.all(np.isfinite(lengthscales)):
            raise ValueError(f"lengthscales must be positive and finite, got {lengthscales}")
        if not (np.isfinite(variance) and variance > 0):
            raise ValueError(f"variance must be positive and finite, got {variance}")
        self.variance = gpflow.Parameter(variance, transform=positive())
        self.lengthscales = gpflow.Parameter(lengthscales, transform=positive())

        eigenvalues = np.asarray(self._spectrum(), dtype=np.float64)
        negative = np.flatnonzero(eigenvalues < 0)
        if negative.size:
            n = negative[0]
            raise ValueError(
                f"the shape function is not positive definite on S^{self.dimension - 1}: "
                f"λ_{n} = {eigenvalues[n]:.3g} < 0"
            )
        self._eigenvalues = eigenvalues
        self._eigenvalues.setflags(write=False)

    def _spectrum(self) -> np.ndarray:
        """λ_n, n < Ñ, by Funk–Hecke quadrature of the shape function (eq. 7; float64 or extended precision)."""
        return funk_hecke_coefficients(
            self.shape_function,
            self.dimension,
            self.truncation_level,
            breakpoints=self._breakpoints,
            quadrature_points=self._quadrature_points,
            threshold=self.threshold,
        )

    @property
    def eigenvalues(self) -> np.ndarray:
        """λ_n, n = 0..Ñ−1, of the shape function (without the variance v), float64 [Ñ]."""
        return self._eigenvalues

    @property
    def series_coefficients(self) -> np.ndarray:
        """λ_n N_n^d: the coefficients of the kernel's series in the normalised Ĉ_n (without v)."""
        return self._eigenvalues * num_harmonics(np.arange(self.truncation_level), self.dimension)

    def extend(self, X: TensorType) -> tf.Tensor:
        """x̃ = [x, 1] / ℓ (or x / ℓ without bias): [batch..., N, D] → [batch..., N, d], after checking the
        width (static, once per trace).

        Values are not checked here (this runs on every minibatch): the public entry points check
        their inputs for NaN/inf once (:mod:`activated_dgp.validation`). With ``bias=False`` a zero
        input row has no direction and gives NaN."""
        X = tf.convert_to_tensor(X)
        check_width(X, self.input_dim, "inputs X")
        if self.bias:
            X = tf.concat([X, tf.ones_like(X[..., :1])], axis=-1)
        return X / tf.cast(self.lengthscales, X.dtype)

    def polar_inputs(self, X: TensorType) -> tuple[tf.Tensor, tf.Tensor]:
        """(‖x̃‖ [batch..., N], x̃/‖x̃‖ [batch..., N, d]) of the extended inputs."""
        return polar_decomposition(self.extend(X))

    @inherit_check_shapes
    def K(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        """k(X, X2): [batch..., N, D], [batch2..., N2, D] → [batch..., N, batch2..., N2]; k(X) → [batch..., N, N]."""
        norms, directions = self.polar_inputs(X)
        if X2 is None:
            cosine = tf.matmul(directions, directions, transpose_b=True)
            series = gegenbauer_series(cosine, self.series_coefficients, self.alpha)
            variance = tf.cast(self.variance, series.dtype)
            return variance * norms[..., :, None] * norms[..., None, :] * series
        norms2, directions2 = self.polar_inputs(X2)
        batched = norms.shape.rank != 1 or norms2.shape.rank != 1  # evaluated on flattened rows, then reshaped
        if batched:
            shape = tf.concat([tf.shape(norms), tf.shape(norms2)], axis=0)  # [batch..., N, batch2..., N2]
            norms, directions = tf.reshape(norms, [-1]), tf.reshape(directions, [-1, self.dimension])
            norms2, directions2 = tf.reshape(norms2, [-1]), tf.reshape(directions2, [-1, self.dimension])
        cosine = tf.matmul(directions, directions2, transpose_b=True)
        series = gegenbauer_series(cosine, self.series_coefficients, self.alpha)
        variance = tf.cast(self.variance, series.dtype)
        result = variance * norms[:, None] * norms2[None, :] * series
        return tf.reshape(result, shape) if batched else result

    @inherit_check_shapes
    def K_diag(self, X: TensorType) -> tf.Tensor:
        """k(x, x) = v ‖x̃‖² Σ_n λ_n N_n^d (Ĉ_n(1) = 1): [batch..., N, D] → [batch..., N]."""
        extended = self.extend(X)
        squared_norms = tf.reduce_sum(tf.square(extended), axis=-1)
        total = tf.constant(np.sum(self.series_coefficients), dtype=extended.dtype)
        return tf.cast(self.variance, extended.dtype) * total * squared_norms


class ZonalArcCosine(ZonalKernel):
    """The first-order arc-cosine kernel as a truncated zonal series (eq. 6–8, appendix C.1).

    ``ZonalArcCosine(input_dim=D, truncation_level=Ñ, variance=v, lengthscales=ℓ)``; λ_n = 2d σ_n²
    in closed form for every d ≥ 2 (see :func:`activated_dgp.zonal.spectra.arc_cosine_coefficients`).
    As Ñ grows, K converges to ``gpflow.kernels.ArcCosine(order=1, variance=v,
    weight_variances=1/ℓ_(1..D)², bias_variance=1/ℓ_d²)``.
    """

    def __init__(self, input_dim: int, truncation_level: int = 20, variance: float = 1.0, lengthscales=1.0, **kwargs):
        super().__init__(arc_cosine_shape, input_dim, truncation_level, variance, lengthscales, **kwargs)

    def _spectrum(self) -> np.ndarray:
        return arc_cosine_coefficients(self.dimension, self.truncation_level, threshold=self.threshold)


class ZonalMatchedKernel(ZonalKernel):
    """The zonal kernel whose spectrum is matched to an activation: λ_n ∝ |σ_n|, normalised so that s(1) = 1.

    ``ZonalMatchedKernel(input_dim=D, truncation_level=Ñ, activation="relu", variance=v, lengthscales=ℓ)``:

        λ_n = |σ_n| / Σ_(k<Ñ) |σ_k| N_k^d,    s(t) = Σ_(n<Ñ) λ_n N_n^d Ĉ_n(t),    s(1) = 1,

    σ_n the activation's Funk–Hecke coefficients (:func:`~activated_dgp.zonal.spectra.activation_coefficients`).
    An activated unit g(x) = ‖w‖‖x̃‖ σ(ŵ·x̂) then has squared RKHS norm (eq. 9)

        ‖g‖²_H = ‖w‖²/v · Σ_n σ_n² N_n^d / λ_n = ‖w‖²/v · (Σ_n |σ_n| N_n^d)²,

    the smallest that any spectrum with the same s(1) allows (Cauchy–Schwarz: (Σ|σ_n|N_n)² ≤ Σ σ_n²N_n/λ_n ·
    Σ λ_n N_n, with equality iff λ_n ∝ |σ_n|). Under the first-order arc-cosine kernel (λ_n = 2d σ_n², the
    activation-matched choice for the *squared* coefficients) the same norm is ‖w‖²/v · Σ_(σ_n≠0) N_n^d / (2d),
    which grows like the number of harmonics kept; for ReLU units in a hidden layer of width 30–50 it is 1e8–1e12
    nats per unit at Ñ = 20. Kuu's series is then Σ |σ_n| N_n^d Ĉ_n(ŵ·ŵ') · Σ_k |σ_k| N_k^d (coefficients σ_n²/λ_n,
    :func:`~activated_dgp.zonal.covariances.inducing_coefficients`), Kuf's is the activation's own, as for every
    zonal kernel. Levels where σ_n = 0 (odd n ≥ 3 for ReLU) have λ_n = 0 and are not in the prior.
    """

    def __init__(
        self, input_dim: int, truncation_level: int = 20, variance: float = 1.0, lengthscales=1.0, *,
        activation="relu", **kwargs,
    ):
        self._matched_activation = resolve_activation(activation)
        super().__init__(self._series_shape, input_dim, truncation_level, variance, lengthscales, **kwargs)

    @property
    def activation(self):
        """The :class:`~activated_dgp.zonal.spectra.ZonalActivation` the spectrum is matched to."""
        return self._matched_activation

    def _spectrum(self) -> np.ndarray:
        sigma = activation_coefficients(self._matched_activation, self.dimension, self.truncation_level, threshold=self.threshold)
        magnitude = np.abs(np.asarray(sigma, dtype=np.float64))
        total = float(np.sum(magnitude * num_harmonics(np.arange(self.truncation_level), self.dimension)))
        if not total > 0:
            raise ValueError(f"the activation {self._matched_activation.name!r} has no non-zero coefficient below Ñ = {self.truncation_level}")
        return magnitude / total

    def _series_shape(self, cosine) -> np.ndarray:
        """s(t) = Σ_n λ_n N_n^d Ĉ_n(t) (NumPy, float64): the kernel on unit vectors, without v."""
        t = np.clip(np.asarray(cosine, dtype=np.float64), -1.0, 1.0)
        return normalised_gegenbauer_polynomials(t, self.truncation_level, self.alpha) @ self.series_coefficients
