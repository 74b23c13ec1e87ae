"""Funk–Hecke coefficients of zonal functions, and the precision policy that makes them exact in any dimension.

The coefficient of level n of a zonal function s on S^(d−1) ⊂ R^d (Dutordoir et al., 2021, eq. 7, 11, C.1) is

    a_n = ω_d ∫_(−1)^1 s(t) Ĉ_n(t) (1 − t²)^((d−3)/2) dt = ω_d ∫_0^π s(cos θ) Ĉ_n(cos θ) sin^(d−2)θ dθ,

and the series the models sum is Σ_n a_n N_n^d Ĉ_n(t). :func:`funk_hecke_coefficients` is the entry point: it
integrates in float64 (Gauss–Legendre in θ, or Gauss–Jacobi in t) where that is accurate, and in extended precision
(mpmath) where it is not.

**Why extended precision.** In high dimension the integral cancels catastrophically: the weight concentrates at
t ≈ 0 with width 1/√d, where Ĉ_n(t) ≈ t^n is tiny, while N_n^d ≈ d^n/n! is huge. For a smooth s, a_n N_n^d tends to
the Taylor coefficient s^(n)(0)/n! (Ĉ_n(t) → t^n as d → ∞), so a_n ≈ 1e−110 at d = 10,000, n = 39 must be computed
to ~1e−121 absolute from an integrand of size 1. Float64 quadrature returns its round-off (~1e−17) times N_n^d
instead (at d = 1,025 it gives σ_8 N_8 = −9.6 for a true −0.16).

:func:`funk_hecke_coefficients_extended` integrates at a working precision of log10(max N_n^d) + 30 decimal digits:

* t = cos θ, so that shapes with √(1 − t²) or √(2 − 2t) endpoint terms (arc-cosine, Matérn of the
  chordal distance) become analytic in θ;
* θ restricted to the window where sin^(d−2)θ exceeds 10^(−digits) (it is [0, π] for small d);
* Clenshaw–Curtis in θ on each piece between breakpoints, the number of nodes doubled (nested
  nodes, so old evaluations are reused) until every a_n N_n^d changes by less than 1e−14 relative
  to max(|a_n N_n^d|, 1e−6 max_k |a_k N_k^d|).

This needs s evaluated in extended precision: any callable that maps an ``mpmath.mpf`` to an mpf
qualifies (the package's activations and shapes do: they are *dual*, see :func:`dual`); a callable
written with NumPy ufuncs does not, and :func:`funk_hecke_coefficients` then falls back to float64 with a
round-off floor. Results are cached per (function, d, Ñ, breakpoints), so a model built many times pays the cost
once.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Callable, Sequence

import mpmath
import numpy as np
from scipy.special import roots_jacobi, roots_legendre

from .spherical import (
    _check_dimension,
    _check_truncation_level,
    funk_hecke_constant,
    gegenbauer_alpha,
    harmonic_count,
    normalised_gegenbauer_polynomials,
    num_harmonics,
)

__all__ = [
    "funk_hecke_coefficients",
    "funk_hecke_coefficients_extended",
    "apply_threshold",
    "dual",
    "is_extended",
    "supports_extended_precision",
    "PrecisionWarning",
    "QUADRATURE_METHODS",
]

# target of the node-doubling loop (relative to max(|a_n N_n|, floor)), and the floor's fraction of the largest term
_TOLERANCE = 1e-14
_FLOOR = 1e-6
_GUARD_DIGITS = 30
_MAX_NODES = 8192


def is_extended(value) -> bool:
    """Whether ``value`` is an mpmath number (the functions here then compute in extended precision)."""
    return isinstance(value, (mpmath.mpf, mpmath.mpc))


def dual(numpy_function: Callable, mp_function: Callable) -> Callable:
    """One callable from a NumPy version (arrays of float64 cosines) and an mpmath version (one mpf):
    the first is used on arrays, the second on mpmath numbers, so that Funk–Hecke coefficients can be
    computed in extended precision. Example: ``dual(lambda t: np.tanh(2 * t), lambda t: mpmath.tanh(2 * t))``.
    """

    @functools.wraps(numpy_function)
    def function(cosine):
        return mp_function(cosine) if is_extended(cosine) else numpy_function(cosine)

    return function


def supports_extended_precision(function: Callable) -> bool:
    """Whether ``function`` maps mpmath numbers to mpmath numbers that agree with its float64 values.

    Probed at t = 1/3 (not a binary fraction, so a silent float conversion inside would be caught by the
    type check only; the value check catches a function that means something else for mpf inputs)."""
    try:
        with mpmath.workdps(30):
            value = function(mpmath.mpf(1) / 3)
        if isinstance(value, np.ndarray) and value.dtype == object and value.size == 1:
            value = value.reshape(()).item()
        if not isinstance(value, mpmath.mpf):
            return False
        reference = np.asarray(function(np.array([1.0 / 3.0])), dtype=np.float64).reshape(-1)[0]
    except Exception:  # noqa: BLE001 — any failure means "not usable in extended precision"
        return False
    value = float(value)
    return bool(np.isfinite(value) and abs(value - reference) <= 1e-10 * max(1.0, abs(reference)))


def _to_fixed(value, bits: int) -> int:
    """round(value · 2^bits) as a Python integer (fixed-point arithmetic: exact integer products in C)."""
    return int(mpmath.nint(mpmath.ldexp(value, bits)))


@functools.lru_cache(maxsize=64)
def _clenshaw_curtis(intervals: int, bits: int):
    """Clenshaw–Curtis nodes x_k = cos(kπ/m) (mpf) and weights on [−1, 1] (integers, scale 2^bits), k = 0..m.

    w_k = (c_k/m) (1 − Σ_(j=1)^(m/2) b_j/(4j² − 1) cos(2πjk/m)), c_0 = c_m = 1, c_k = 2 otherwise,
    b_(m/2) = 1, b_j = 2 otherwise (Clenshaw & Curtis 1960; Trefethen, *Approximation Theory and
    Approximation Practice*, ch. 19)."""
    m, half = intervals, intervals // 2
    with mpmath.workprec(bits + 16):
        table = np.array([_to_fixed(mpmath.cospi(mpmath.mpf(2 * r) / m), bits) for r in range(m)], dtype=object)
        nodes = [mpmath.cospi(mpmath.mpf(k) / m) for k in range(m + 1)]
        factors = np.array(
            [_to_fixed(mpmath.mpf(1 if j == half else 2) / (4 * j * j - 1), bits) for j in range(1, half + 1)],
            dtype=object,
        )
    j = np.arange(1, half + 1)
    one = 1 << bits
    weights = [0] * (m + 1)
    for k in range(half + 1):
        total = one - (int(np.dot(factors, table[(j * k) % m])) >> bits)
        weights[k] = weights[m - k] = total * (1 if k in (0, m) else 2) // m
    return nodes, np.array(weights, dtype=object)


def _normalised_gegenbauer_fixed(t: np.ndarray, truncation_level: int, dimension: int, bits: int) -> np.ndarray:
    """Ĉ_n(t_k) for n < Ñ as integers at scale 2^bits, shape [Ñ, K], from fixed-point cosines t [K].

    Ĉ_(k+1) = ((2k + d − 2) t Ĉ_k − k Ĉ_(k−1)) / (k + d − 2), Ĉ_0 = 1, Ĉ_1 = t: the recurrence of
    :func:`activated_dgp.zonal.spherical.normalised_gegenbauer_polynomials` with integer coefficients."""
    rows = [np.full(t.shape, 1 << bits, dtype=object)]
    if truncation_level > 1:
        rows.append(t)
    for k in range(1, truncation_level - 1):
        rows.append(((2 * k + dimension - 2) * ((t * rows[k]) >> bits) - k * rows[k - 1]) // (k + dimension - 2))
    return np.stack(rows)


def _evaluate(function: Callable, t):
    value = function(t)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    try:
        value = mpmath.mpf(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the function must return a real number for an mpmath cosine, got {value!r}") from error
    if not mpmath.isfinite(value):
        raise ValueError("the function returned NaN or inf on [−1, 1]")
    return value


def _window(dimension: int, digits: int) -> float:
    """Half-width δ around θ = π/2 outside which sin^(d−2)θ < 10^(−digits) (π/2: the whole range)."""
    if dimension <= 2:
        return math.pi / 2
    bound = math.exp(-digits * math.log(10.0) / (dimension - 2))
    return min(math.pi / 2, math.acos(bound))


class _Piece:
    """One quadrature piece [a, b] in θ: nested Clenshaw–Curtis samples, reused when the nodes double."""

    def __init__(self, a, b, function, dimension, truncation_level, bits):
        self.a, self.half_width = a, (b - a) / 2
        self.function, self.dimension, self.truncation_level, self.bits = function, dimension, truncation_level, bits
        self.values, self.gegenbauer = None, None  # [K] mpf s(t)·sin^(d−2)θ, [Ñ, K] fixed-point Ĉ_n(t)

    def sample(self, nodes) -> None:
        count = len(nodes)
        fresh = range(count) if self.values is None else range(1, count, 2)
        values, cosines = [], []
        for k in fresh:
            theta = self.a + self.half_width * (nodes[k] + 1)
            t = mpmath.cos(theta)
            values.append(_evaluate(self.function, t) * mpmath.sin(theta) ** (self.dimension - 2))
            cosines.append(_to_fixed(t, self.bits))
        gegenbauer = _normalised_gegenbauer_fixed(
            np.array(cosines, dtype=object), self.truncation_level, self.dimension, self.bits
        )
        if self.values is None:
            self.values, self.gegenbauer = values, gegenbauer
            return
        merged = [None] * count
        merged[0::2], merged[1::2] = self.values, values
        stacked = np.empty((self.truncation_level, count), dtype=object)
        stacked[:, 0::2], stacked[:, 1::2] = self.gegenbauer, gegenbauer
        self.values, self.gegenbauer = merged, stacked

    def integrals(self, weights) -> list:
        """∫ s(cos θ) Ĉ_n(cos θ) sin^(d−2)θ dθ over the piece, n < Ñ (mpf)."""
        scale = max(mpmath.mag(v) for v in self.values)  # fixed point relative to the largest sample
        fixed = np.array([_to_fixed(v, self.bits - scale) for v in self.values], dtype=object)
        products = (weights * fixed) >> self.bits
        sums = self.gegenbauer.dot(products)
        return [self.half_width * mpmath.ldexp(int(s), scale - 2 * self.bits) for s in sums]


def _integrate(function, dimension, truncation_level, breakpoints) -> np.ndarray:
    d = dimension
    multiplicities = [harmonic_count(n, d) for n in range(truncation_level)]
    digits = int(math.log10(max(multiplicities))) + _GUARD_DIGITS
    bits = 64 * math.ceil((digits * math.log2(10) + 8) / 64)  # in steps of 64 bits, so the node cache is shared
    delta = _window(d, digits - 5)
    with mpmath.workdps(digits):
        cuts = sorted({math.acos(b) for b in map(float, breakpoints) if -1.0 < b < 1.0})
        low, high = math.pi / 2 - delta, math.pi / 2 + delta
        full = delta >= math.pi / 2
        edges = [mpmath.mpf(0) if full else mpmath.mpf(low)]
        edges += [mpmath.mpf(c) for c in cuts if low < c < high]
        edges.append(mpmath.pi if full else mpmath.mpf(high))
        pieces = [_Piece(a, b, function, d, truncation_level, bits) for a, b in zip(edges[:-1], edges[1:])]
        intervals, previous = 32, None
        while True:
            nodes, weights = _clenshaw_curtis(intervals, bits)
            totals = [mpmath.mpf(0)] * truncation_level
            for piece in pieces:
                piece.sample(nodes)
                totals = [x + y for x, y in zip(totals, piece.integrals(weights))]
            terms = [float(abs(totals[n])) * multiplicities[n] for n in range(truncation_level)]
            if previous is not None:
                floor = max(_FLOOR * max(terms), 1e-300)
                change = max(
                    float(abs(totals[n] - previous[n])) * multiplicities[n] / max(terms[n], floor)
                    for n in range(truncation_level)
                )
                if change <= _TOLERANCE:
                    break
                if intervals >= _MAX_NODES:
                    raise ValueError(
                        f"extended-precision Funk–Hecke quadrature did not converge in d = {d} with "
                        f"{_MAX_NODES + 1} nodes per piece (relative change {change:.2g}); is the function smooth "
                        "between its breakpoints?"
                    )
            previous = totals
            intervals *= 2
        constant = mpmath.gamma(mpmath.mpf(d) / 2) / (mpmath.gamma(mpmath.mpf(d - 1) / 2) * mpmath.sqrt(mpmath.pi))
        return np.array([float(constant * total) for total in totals], dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _cached(function, dimension, truncation_level, breakpoints) -> np.ndarray:
    result = _integrate(function, dimension, truncation_level, breakpoints)
    result.setflags(write=False)
    return result


def funk_hecke_coefficients_extended(
    function: Callable, dimension: int, truncation_level: int, *, breakpoints: Sequence[float] = ()
) -> np.ndarray:
    """a_n, n < Ñ, of a zonal function s on S^(d−1) in extended precision (see the module docstring).

    :param function: s, mapping an ``mpmath.mpf`` cosine to an mpf (see :func:`supports_extended_precision`).
    :param dimension: d ≥ 2.
    :param truncation_level: Ñ ≥ 1.
    :param breakpoints: cosines in (−1, 1) where s is not smooth (quadrature pieces end there).
    :return: float64 [Ñ], unthresholded; each a_n N_n^d accurate to ~1e−14 relative to
        max(|a_n N_n^d|, 1e−6 max_k |a_k N_k^d|).
    """
    key = (int(dimension), int(truncation_level), tuple(sorted(float(b) for b in breakpoints)))
    try:
        hash(function)
    except TypeError:
        return _integrate(function, *key)
    return _cached(function, *key).copy()


# ------------------------------------------------------------------------------------------------
# Float64 quadrature and the choice between it and extended precision
# ------------------------------------------------------------------------------------------------



def _gauss_rule(lower: float, upper: float, exponent: float, points: int):
    """Nodes and weights for ∫_lower^upper f(t) (1 − t²)^exponent dt on a piece of [−1, 1].

    The (1 ∓ t)^exponent factor is put into a Gauss–Jacobi weight when the piece touches ±1 (where
    it may be singular); on the rest of the piece it is smooth and multiplied into the weights.
    """
    half_width = 0.5 * (upper - lower)
    touches_right, touches_left = upper == 1.0, lower == -1.0
    u, w = roots_jacobi(
        points, exponent if touches_right else 0.0, exponent if touches_left else 0.0
    )
    t = lower + half_width * (u + 1.0)
    # (1 − t) = half_width (1 − u) on a piece ending at 1, (1 + t) = half_width (1 + u) likewise
    scale = half_width
    if touches_right:
        scale *= half_width**exponent
    else:
        w = w * (1.0 - t) ** exponent
    if touches_left:
        scale *= half_width**exponent
    else:
        w = w * (1.0 + t) ** exponent
    return t, w * scale


def _angular_rule(lower: float, upper: float, dimension: int, points: int):
    """Nodes t and weights for ∫_lower^upper f(t) (1 − t²)^((d−3)/2) dt after t = cos θ.

    The integral becomes ∫ f(cos θ) sin^(d−2) θ dθ over [arccos upper, arccos lower]; the weight
    sin^(d−2) θ is smooth, and so is f(cos θ) for the shapes met here even where f has
    √(1 − t²)-type endpoint behaviour (arc-cosine, Matérn of the chordal distance), so
    Gauss–Legendre in θ converges exponentially.
    """
    theta_low, theta_high = math.acos(upper), math.acos(lower)
    u, w = roots_legendre(points)
    half_width = 0.5 * (theta_high - theta_low)
    theta = theta_low + half_width * (u + 1.0)
    return np.cos(theta), w * half_width * np.sin(theta) ** (dimension - 2)


QUADRATURE_METHODS = ("auto", "extended", "angular", "gauss-gegenbauer")

# float64 round-off of a quadrature sum: this many ulps of Σ|w_i s(t_i) Ĉ_n(t_i)| (a generous bound)
_ROUNDOFF_ULPS = 16.0
# "auto" accepts float64 when every level's round-off is below this fraction of max(|a_n N_n|, 1e−3 max_k |a_k N_k|)
_FLOAT64_ACCEPTED = 1e-10
# a float64-only function draws a PrecisionWarning when its round-off exceeds this fraction of the series (or the threshold)
_WARN_FRACTION = 1e-11


class PrecisionWarning(UserWarning):
    """Funk–Hecke coefficients limited by float64 round-off (a function that cannot be evaluated in
    extended precision, in high dimension)."""


def _float64_quadrature(function, dimension, truncation_level, breakpoints, quadrature_points, method):
    """(a_n, bound on their round-off) by a float64 Gauss rule, both [Ñ] (see :func:`funk_hecke_coefficients`)."""
    cuts = sorted({float(p) for p in breakpoints if -1.0 < float(p) < 1.0})
    edges = [-1.0, *cuts, 1.0]
    alpha = gegenbauer_alpha(dimension)
    total, magnitude = np.zeros(truncation_level), np.zeros(truncation_level)
    for lower, upper in zip(edges[:-1], edges[1:]):
        if method == "gauss-gegenbauer":
            t, w = _gauss_rule(lower, upper, (dimension - 3) / 2.0, quadrature_points)
        else:
            t, w = _angular_rule(lower, upper, dimension, quadrature_points)
        values = np.asarray(function(t), dtype=np.float64)
        if values.shape != t.shape:
            raise ValueError(
                f"the function must map an array of cosines elementwise; got shape {values.shape} for input {t.shape}"
            )
        if not np.all(np.isfinite(values)):
            raise ValueError("the function returned NaN or inf on [−1, 1]")
        polynomials = normalised_gegenbauer_polynomials(t, truncation_level, alpha)
        total += (w * values) @ polynomials
        magnitude += np.abs(w * values) @ np.abs(polynomials)
    constant = funk_hecke_constant(dimension)
    return constant * total, _ROUNDOFF_ULPS * np.finfo(np.float64).eps * constant * magnitude


def funk_hecke_coefficients(
    function: Callable[[np.ndarray], np.ndarray],
    dimension: int,
    truncation_level: int,
    *,
    breakpoints: Sequence[float] = (),
    quadrature_points: int = 200,
    method: str = "auto",
    threshold: float = 1e-9,
) -> np.ndarray:
    """Funk–Hecke coefficients of a zonal function on S^(d−1) (eq. 7, 11, C.1):

        a_n = ω_d / C_n^(α)(1) ∫_(−1)^1 s(t) C_n^(α)(t) (1 − t²)^((d−3)/2) dt
            = ω_d ∫_(−1)^1 s(t) Ĉ_n(t) (1 − t²)^((d−3)/2) dt,      n = 0..Ñ−1,

    so that s(x·x') = Σ_n a_n N_n^d Ĉ_n(x·x').

    In high dimension the integral cancels: a_n N_n^d stays O(1) while N_n^d ≈ d^n/n!, so a float64
    rule returns its round-off times N_n^d (see :mod:`activated_dgp.zonal.funk_hecke`). Methods:

    * ``"auto"`` (default): the float64 angular rule with ``quadrature_points`` and with
      max(2·quadrature_points, 40√d) nodes, accepted when both its round-off bound (16 ulps of
      Σ_i |w_i s(t_i) Ĉ_n(t_i)|) and the change between the two, times N_n^d, are below 1e−10 of
      max(|a_n N_n^d|, 1e−3 S), S = ω_d ∫ |s(t)| (1 − t²)^((d−3)/2) dt, at every level (low d); otherwise extended precision when ``function`` accepts mpmath numbers
      (:func:`~activated_dgp.zonal.funk_hecke.supports_extended_precision`; the package's shapes and
      activations do, and :func:`~activated_dgp.zonal.funk_hecke.dual` makes any function do).
      A float64-only function keeps the float64 result; levels whose error bound exceeds 1% of them are
      set to zero, and a :class:`PrecisionWarning` names the levels whose error bound exceeds ``threshold``
      (at least 1e−11) times S.
    * ``"extended"``: always extended precision (a ValueError if ``function`` cannot take mpmath numbers).
    * ``"angular"``: Gauss–Legendre in θ = arccos t, weight sin^(d−2) θ, float64, no checks. Measured
      against the closed forms (tests), ~1e-15 for the arc-cosine kernel and the ReLU in d = 2..10.
    * ``"gauss-gegenbauer"``: Gauss–Jacobi in t with the weight's exponents (d−3)/2, float64; exact
      for polynomial s, algebraically convergent for (1 − t)^(k/2) endpoint terms.

    The float64 rules are applied piecewise between ``breakpoints`` (cosines where s is not smooth,
    e.g. 0 for the ReLU) with ``quadrature_points`` nodes per piece. Finally levels whose term
    |a_n| N_n^d is below ``threshold`` times Σ_k |a_k| N_k^d are set to zero (:func:`apply_threshold`).

    :return: float64 [Ñ].
    """
    d = _check_dimension(dimension)
    truncation_level = _check_truncation_level(truncation_level)
    if method not in QUADRATURE_METHODS:
        raise ValueError(f"unknown quadrature method {method!r}; choose one of {QUADRATURE_METHODS}")
    if quadrature_points < truncation_level:
        raise ValueError(
            f"quadrature_points ({quadrature_points}) must be at least truncation_level ({truncation_level})"
        )
    if method == "extended":
        if not supports_extended_precision(function):
            raise ValueError(
                "method='extended' needs a function that maps mpmath numbers to mpmath numbers "
                "(see activated_dgp.zonal.funk_hecke.dual)"
            )
        coefficients = funk_hecke_coefficients_extended(function, d, truncation_level, breakpoints=breakpoints)
        return apply_threshold(coefficients, d, threshold)
    if method != "auto":
        coefficients, _ = _float64_quadrature(function, d, truncation_level, breakpoints, quadrature_points, method)
        return apply_threshold(coefficients, d, threshold)
    # float64 twice (n and 2n nodes): accepted when both the round-off bound and the change stay below
    # 1e−10 of max(|a_n N_n|, 1e−3 S), S = ω_d ∫ |s| (1 − t²)^((d−3)/2) dt, a scale that garbage cannot inflate
    coarse, _ = _float64_quadrature(function, d, truncation_level, breakpoints, quadrature_points, "angular")
    points = max(2 * quadrature_points, int(40 * math.sqrt(d)))
    coefficients, roundoff = _float64_quadrature(function, d, truncation_level, breakpoints, points, "angular")
    multiplicity = num_harmonics(np.arange(truncation_level), d)
    terms = np.abs(coefficients) * multiplicity
    errors = np.maximum(roundoff, np.abs(coefficients - coarse)) * multiplicity
    scale = roundoff[0] / (_ROUNDOFF_ULPS * np.finfo(np.float64).eps)
    if np.any(errors > _FLOAT64_ACCEPTED * np.maximum(terms, 1e-3 * scale)):
        if supports_extended_precision(function):
            coefficients = funk_hecke_coefficients_extended(function, d, truncation_level, breakpoints=breakpoints)
        else:
            lost = errors > 1e-2 * terms  # not even two digits: dropped rather than kept as noise
            coefficients = np.where(lost, 0.0, coefficients)
            harmful = np.flatnonzero(errors > max(threshold, _WARN_FRACTION) * scale)
            if harmful.size:
                warnings.warn(
                    f"Funk–Hecke coefficients of {getattr(function, '__name__', 'the function')} in d = {d}: "
                    f"float64 quadrature error reaches {np.max(errors[harmful] / scale):.1e} of ∫|s| at levels "
                    f"{harmful.tolist()} (levels {np.flatnonzero(lost).tolist()} are below it and were set to 0). "
                    "The function cannot be evaluated in extended precision; wrap it with "
                    "activated_dgp.zonal.funk_hecke.dual(numpy_version, mpmath_version) for exact coefficients.",
                    PrecisionWarning,
                    stacklevel=2,
                )
    return apply_threshold(coefficients, d, threshold)


def apply_threshold(coefficients: np.ndarray, dimension: int, threshold: float) -> np.ndarray:
    """Zero the levels whose term in the series is negligible: |a_n| N_n^d < threshold · Σ_k |a_k| N_k^d.

    The paper zeroes |a_n| < 1e-9 to remove quadrature noise at levels that are exactly zero
    (Tables C.1, C.2). We compare each level's contribution with the whole series' (Σ_k |a_k| N_k^d
    bounds max_t |s(t)|) instead: it removes the same noise (|a_n| ~ 1e-16 in low d, far less with
    extended precision), is invariant to the scale of s, and does not delete real levels in high
    dimension, where a_n is tiny yet N_n^d is huge (d = 9: arc-cosine λ_14 ≈ 8.0e-10 but
    λ_14 N_14 ≈ 1.6e-4; the paper's rule would silently turn Ñ = 20 into Ñ = 14).
    """
    coefficients = np.array(coefficients, dtype=np.float64)
    contribution = np.abs(coefficients) * num_harmonics(np.arange(coefficients.shape[0]), dimension)
    coefficients[contribution < threshold * np.sum(contribution)] = 0.0
    return coefficients
