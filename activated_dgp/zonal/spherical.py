"""Spherical machinery: harmonic counts, Gegenbauer polynomials and their Clenshaw sums.

Everything zonal in this package is a series

    S(t) = Σ_{n < Ñ} a_n Ĉ_n(t),        Ĉ_n(t) = C_n^(α)(t) / C_n^(α)(1),   α = (d − 2) / 2,

in the cosine ``t`` between two points of the sphere S^(d−1) ⊂ R^d (Dutordoir et al., 2021,
appendix B). We work with the *normalised* polynomials Ĉ_n because

* they stay bounded (|Ĉ_n(t)| ≤ 1 on [−1, 1]) at any degree and dimension, and
* they have a clean limit at α = 0 (d = 2): Ĉ_n → T_n, the Chebyshev polynomials, whereas
  C_n^(0) ≡ 0 for n ≥ 1.

The addition theorem (B.9) in this form reads Σ_j φ_{n,j}(x) φ_{n,j}(x') = N_n^d Ĉ_n(x·x'), with
N_n^d the number of spherical harmonics of level n; (n + α)/α · C_n^(α) = N_n^d Ĉ_n is the same
quantity, and the right-hand side is the one that survives at α = 0.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import tensorflow as tf

from .._deprecation import deprecated_aliases

__all__ = [
    "gegenbauer_alpha",
    "sphere_surface_area",
    "funk_hecke_constant",
    "num_harmonics",
    "gegenbauer_polynomials",
    "normalised_gegenbauer_polynomials",
    "gegenbauer_series",
    "harmonic_count",
    "use_xla_for_gegenbauer",
    "polar_decomposition",
]


def _check_dimension(dimension: int) -> int:
    if int(dimension) != dimension or dimension < 2:
        raise ValueError(f"the sphere's ambient dimension d must be an integer ≥ 2, got {dimension!r}")
    return int(dimension)


def _check_truncation_level(truncation_level: int) -> int:
    if isinstance(truncation_level, bool) or int(truncation_level) != truncation_level:
        raise ValueError(f"truncation_level must be an integer ≥ 1, got {truncation_level!r}")
    if truncation_level < 1:
        raise ValueError(f"truncation_level must be ≥ 1, got {truncation_level}")
    return int(truncation_level)


def gegenbauer_alpha(dimension: int) -> float:
    """α = (d − 2) / 2, the Gegenbauer parameter that belongs to the sphere S^(d−1) ⊂ R^d."""
    return (_check_dimension(dimension) - 2) / 2.0


def sphere_surface_area(dimension: int) -> float:
    """Ω_(d−1) = 2 π^(d/2) / Γ(d/2), the surface area of S^(d−1) ⊂ R^d (eq. B.2)."""
    d = _check_dimension(dimension)
    return 2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0)


def funk_hecke_constant(dimension: int) -> float:
    """ω_d = Ω_(d−2) / Ω_(d−1) = Γ(d/2) / (Γ((d−1)/2) √π) (Theorem 3, eq. B.11)."""
    d = _check_dimension(dimension)
    return math.exp(math.lgamma(d / 2.0) - math.lgamma((d - 1) / 2.0)) / math.sqrt(math.pi)


def harmonic_count(level: int, dimension: int) -> int:
    """N_n^d = binom(n + d − 1, d − 1) − binom(n + d − 3, d − 1), exactly (Python integers)."""
    n, d = int(level), int(dimension)
    return math.comb(n + d - 1, d - 1) - (math.comb(n + d - 3, d - 1) if n >= 2 else 0)


def num_harmonics(level, dimension: int) -> np.ndarray:
    """N_n^d, the number of linearly independent spherical harmonics of level n on S^(d−1).

    It is the dimension of the space of harmonic homogeneous polynomials of degree n in d
    variables: binom(n + d − 1, d − 1) − binom(n + d − 3, d − 1). (The paper's eq. B.3 has a typo
    in the binomial; the equivalent (2n + d − 2)/n · binom(n + d − 3, n − 1) is the usual form.)
    Computed in exact integer arithmetic and returned as float64 (correctly rounded; inf beyond
    1.8e308), since it grows like n^(d−2) and like d^n/n!.
    """
    d = _check_dimension(dimension)
    n = np.asarray(level)
    if np.any(n < 0) or np.any(n != np.floor(n)):
        raise ValueError(f"levels must be non-negative integers, got {level!r}")

    def as_float(count: int) -> float:
        try:
            return float(count)
        except OverflowError:
            return math.inf

    # exact integer binomials, rounded once: no cancellation between two huge binomials in high d
    counts = [as_float(harmonic_count(int(k), d)) for k in n.reshape(-1)]
    return np.array(counts, dtype=np.float64).reshape(n.shape)


def gegenbauer_polynomials(t, truncation_level: int, alpha: float) -> np.ndarray:
    """[C_0^(α)(t), …, C_(Ñ−1)^(α)(t)] by the three-term recurrence, shape [..., Ñ], α > 0.

    n C_n = 2 (n + α − 1) t C_(n−1) − (n + 2α − 2) C_(n−2),   C_0 = 1, C_1 = 2α t.
    For α = 0 these polynomials vanish identically for n ≥ 1; use
    :func:`normalised_gegenbauer_polynomials`, whose limit is the Chebyshev T_n.
    """
    truncation_level = _check_truncation_level(truncation_level)
    if not alpha > 0:
        raise ValueError(f"unnormalised Gegenbauer polynomials need α > 0, got α = {alpha}")
    t = np.asarray(t, dtype=np.float64)
    values = [np.ones_like(t)]
    if truncation_level > 1:
        values.append(2.0 * alpha * t)
    for n in range(2, truncation_level):
        values.append(
            (2.0 * (n + alpha - 1.0) * t * values[-1] - (n + 2.0 * alpha - 2.0) * values[-2]) / n
        )
    return np.stack(values, axis=-1)


def _recurrence_coefficients(truncation_level: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(A_k, B_k) of Ĉ_(k+1)(t) = A_k t Ĉ_k(t) − B_k Ĉ_(k−1)(t), k = 0..Ñ−1.

    From the classical recurrence divided by C_n^(α)(1) = (2α)_n / n!:
    A_k = 2(k + α)/(k + 2α), B_k = k/(k + 2α) for k ≥ 1, and Ĉ_1(t) = t (A_0 = 1, B_0 = 0).
    At α = 0 this is the Chebyshev recurrence T_(k+1) = 2t T_k − T_(k−1).
    """
    k = np.arange(truncation_level, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(k >= 1, 2.0 * (k + alpha) / (k + 2.0 * alpha), 1.0)
        b = np.where(k >= 1, k / (k + 2.0 * alpha), 0.0)
    return a, b


def normalised_gegenbauer_polynomials(t, truncation_level: int, alpha: float) -> np.ndarray:
    """[Ĉ_0(t), …, Ĉ_(Ñ−1)(t)] with Ĉ_n = C_n^(α)/C_n^(α)(1), shape [..., Ñ], any α ≥ 0.

    Three-term recurrence of :func:`_recurrence_coefficients`; at α = 0, Ĉ_n = T_n.
    Works on NumPy arrays (float64).
    """
    truncation_level = _check_truncation_level(truncation_level)
    if alpha < 0:
        raise ValueError(f"α must be ≥ 0, got {alpha}")
    a, b = _recurrence_coefficients(truncation_level, alpha)
    t = np.asarray(t, dtype=np.float64)
    values = [np.ones_like(t)]
    if truncation_level > 1:
        values.append(t.copy())
    for k in range(1, truncation_level - 1):
        values.append(a[k] * t * values[k] - b[k] * values[k - 1])
    return np.stack(values, axis=-1)


# ------------------------------------------------------------------------------------------------
# Clenshaw summation in TensorFlow
# ------------------------------------------------------------------------------------------------

_XLA = {"enabled": True}


def use_xla_for_gegenbauer(enabled: bool) -> None:
    """Compile the Clenshaw loop of :func:`gegenbauer_series` (every zonal kernel and Kuu/Kuf evaluation) with XLA
    (the default) or run it as plain TensorFlow ops. Formerly ``set_xla``, a name that did not say what XLA is used for.

    XLA fuses the whole recurrence into one pass over the cosine matrix: no [M, N, Ñ] tensor and
    no Ñ temporaries of size [M, N]. Turn it off on platforms without an XLA backend.
    """
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"use_xla_for_gegenbauer takes True or False, got {enabled!r}")
    _XLA["enabled"] = bool(enabled)


def _parity_recurrence(levels: int, alpha: float, parity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P_j, Q_j, R_j), j < ``levels``, of the recurrence in s = t² between levels of one parity, n = parity + 2j:

        Ĉ_(n+2)(t) = (P_j s − Q_j) Ĉ_n(t) − R_j Ĉ_(n−2)(t),

    with P_j = A_(n+1) A_n, Q_j = A_(n+1) B_n / A_(n−1) + B_(n+1), R_j = A_(n+1) B_n B_(n−1) / A_(n−1) and the
    (A_k, B_k) of :func:`_recurrence_coefficients` (the t-recurrence applied twice, the odd level in between
    eliminated; the B_n / A_(n−1) terms vanish at n = 0, where B_0 = 0). Even levels are polynomials in s, odd
    levels t times polynomials in s (Gegenbauer's quadratic transformation to Jacobi polynomials in 2s − 1).
    """
    a, b = _recurrence_coefficients(2 * levels + parity + 3, alpha)
    n = parity + 2 * np.arange(levels)
    previous = np.maximum(n - 1, 0)
    ratio = np.where(n >= 1, b[n] / a[previous], 0.0)
    return a[n + 1] * a[n], a[n + 1] * ratio + b[n + 1], a[n + 1] * ratio * np.where(n >= 1, b[previous], 0.0)


def _sum_in_squares(squares: np.ndarray, coefficients: np.ndarray, p: np.ndarray, q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Σ_j c_j Ĉ_(parity+2j)(t) / t^parity by Clenshaw's backward recurrence in s = t² (``squares``, NumPy):
    b_j = c_j + (P_j s − Q_j) b_(j+1) − R_(j+1) b_(j+2), b_J = b_(J+1) = 0, and the sum is b_0."""
    length = len(coefficients)
    next_b, next_next_b = np.zeros_like(squares), np.zeros_like(squares)
    for j in range(length - 1, -1, -1):
        current = coefficients[j] + (p[j] * squares - q[j]) * next_b
        if j + 1 < length:
            current = current - r[j + 1] * next_next_b
        next_next_b, next_b = next_b, current
    return next_b


@functools.lru_cache(maxsize=256)
def _chebyshev_cached(coefficients: bytes, alpha: float, parity: int) -> np.ndarray:
    return _chebyshev_in_squares(np.frombuffer(coefficients, dtype=np.float64), alpha, parity)


def _chebyshev_in_squares(coefficients: np.ndarray, alpha: float, parity: int) -> np.ndarray:
    """d [J] with Σ_(j<J) c_j Ĉ_(parity+2j)(t) / t^parity = Σ_(k<J) d_k T_k(2s − 1), s = t².

    The left side is a polynomial of degree J − 1 in s ∈ [0, 1] (:func:`_parity_recurrence`), so interpolation at
    the J Chebyshev points of u = 2s − 1 gives its Chebyshev coefficients exactly up to round-off
    (``numpy.polynomial.chebyshev.chebinterpolate``: a discrete cosine transform of values from the stable
    recurrence in s; Trefethen, *Approximation Theory and Approximation Practice*, ch. 3). The shifted Chebyshev
    basis is well conditioned on [0, 1], unlike the monomials of s, whose coefficients grow like 10⁴ at α = 3.5,
    Ñ = 20. At α = 0 it is the identity up to the parity: T_(2j)(t) = T_j(2t² − 1)."""
    length = len(coefficients)
    recurrence = _parity_recurrence(length, alpha, parity)
    return np.polynomial.chebyshev.chebinterpolate(lambda u: _sum_in_squares(0.5 * (u + 1.0), coefficients, *recurrence), length - 1)


def _chebyshev_sum(shifted: tf.Tensor, coefficients: tf.Tensor) -> tf.Tensor:
    """Σ_k d_k T_k(u) by Clenshaw's recurrence b_k = d_k + 2u b_(k+1) − b_(k+2), sum = d_0 + u b_1 − b_2:
    one multiply-add and one subtraction per level and element (the Gegenbauer recurrence in s takes three
    multiply-adds)."""
    twice = shifted + shifted
    next_b = tf.zeros_like(shifted)
    next_next_b = tf.zeros_like(shifted)
    for k in range(coefficients.shape[0] - 1, 0, -1):
        next_next_b, next_b = next_b, coefficients[k] + twice * next_b - next_next_b
    return coefficients[0] + shifted * next_b - next_next_b


def _clenshaw(cosine: tf.Tensor, even: tf.Tensor, odd: tf.Tensor) -> tf.Tensor:
    """S(t) = E(t²) + t O(t²), E and O each a Chebyshev series in u = 2t² − 1 (:func:`_chebyshev_in_squares`).

    ``even`` and ``odd`` are the Chebyshev coefficients of each parity, either possibly of length 0. The loop
    lengths are static, so XLA unrolls them. A series whose levels of one parity stop early costs only the other
    parity's steps: the activations with a linear odd part (ReLU, Softplus, Swish: odd levels ≥ 3 vanish) take
    about half the steps of a Clenshaw sum over all Ñ levels in t.
    """
    shifted = 2.0 * cosine * cosine - 1.0
    result = tf.zeros_like(cosine)
    if even.shape[0]:
        result = _chebyshev_sum(shifted, even)
    if odd.shape[0]:
        result = result + cosine * _chebyshev_sum(shifted, odd)
    return result


_clenshaw_xla = tf.function(_clenshaw, jit_compile=True, autograph=False)


def _derivative_coefficients(coefficients: np.ndarray, alpha: float) -> np.ndarray:
    """Coefficients of S'(t) in the basis Ĉ^(α+1): d/dt Ĉ_n^(α) = n(n + 2α)/(2α + 1) Ĉ_(n−1)^(α+1).

    This follows from d/dt C_n^(α) = 2α C_(n−1)^(α+1) and C_n^(α)(1) = (2α)_n / n!; at α = 0 it is
    T_n' = n U_(n−1).
    """
    n = np.arange(1, len(coefficients), dtype=np.float64)
    return coefficients[1:] * n * (n + 2.0 * alpha) / (2.0 * alpha + 1.0)


def _series(cosine: tf.Tensor, coefficients: np.ndarray, alpha: float) -> tf.Tensor:
    parts = []
    for parity in (0, 1):
        part = np.trim_zeros(coefficients[parity::2], "b")
        parts.append(tf.constant(_chebyshev_cached(part.tobytes(), float(alpha), parity) if part.size else part, dtype=cosine.dtype))
    fn = _clenshaw_xla if _XLA["enabled"] else _clenshaw
    return fn(cosine, *parts)


def gegenbauer_series(cosine: tf.Tensor, coefficients, alpha: float) -> tf.Tensor:
    """S(t) = Σ_(n<Ñ) a_n Ĉ_n(t) evaluated elementwise on a tensor of cosines.

    :param cosine: any shape, float32 or float64; values in [−1, 1] (up to round-off).
    :param coefficients: [Ñ] fixed coefficients a_n (NumPy; not trainable).
    :param alpha: Gegenbauer parameter α = (d − 2)/2 ≥ 0.
    :return: a tensor of the shape of ``cosine``.

    Memory stays O(size of ``cosine``): Clenshaw's recurrence keeps two running terms per parity, and the
    gradient is a custom one that evaluates S'(t) as another Clenshaw sum (in the basis of
    α + 1) instead of storing Ñ intermediate tensors for back-propagation.
    """
    coefficients = np.trim_zeros(np.asarray(coefficients, dtype=np.float64), "b")
    if not np.all(np.isfinite(coefficients)):
        raise ValueError(f"the series coefficients must be finite, got {coefficients[~np.isfinite(coefficients)][:3].tolist()}")
    if not alpha >= 0:
        raise ValueError(f"the Gegenbauer parameter α = (d − 2)/2 must be ≥ 0, got {alpha!r}")
    cosine = tf.convert_to_tensor(cosine)
    if coefficients.size == 0:
        return tf.zeros_like(cosine)
    derivative = _derivative_coefficients(coefficients, alpha)

    @tf.custom_gradient
    def series(t):
        def grad(upstream):
            if np.trim_zeros(derivative, "b").size == 0:
                return tf.zeros_like(t)
            return upstream * gegenbauer_series(t, derivative, alpha + 1.0)

        # stop_gradient: the gradient is the custom one above, so no tape may record the compiled
        # forward (in eager mode it would otherwise keep the Ñ Clenshaw intermediates for back-propagation)
        return _series(tf.stop_gradient(t), coefficients, alpha), grad

    return series(cosine)


def polar_decomposition(vectors: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Split vectors [..., N, d] into norms ‖v‖ [..., N] and directions v/‖v‖ [..., N, d]."""
    norms = tf.norm(vectors, axis=-1)
    return norms, vectors / norms[..., None]


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.zonal.spherical", {"set_xla": ("activated_dgp.zonal.spherical", "use_xla_for_gegenbauer")})
