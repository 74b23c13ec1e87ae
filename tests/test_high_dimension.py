"""Funk–Hecke coefficients, Kuu/Kuf and a converted DGP in high dimension.

Accuracy criterion (the issue's): the error of a_n N_n^d relative to max(|a_n N_n^d|, 1e−3) below 1e−8,
against 40-digit mpmath references computed here by routes other than the library's
(extended-precision Clenshaw–Curtis in θ with a fixed-point Gegenbauer recurrence):

* e^(κt): the Gegenbauer (Bessel) expansion e^(κt) = Γ(α)(κ/2)^(−α) Σ (n+α) I_(n+α)(κ) C_n^(α)(t) (Watson).
* Softplus, Swish: Rodrigues' formula, integrated by parts n times,
      ∫ s Ĉ_n (1−t²)^λ dt = ∫ s^(n)(t) (1−t²)^(n+λ) dt / (2^n (λ+1)_n),   λ = (d−3)/2,
  a positive weight with no cancellation; s^(n) exactly, as polynomials in the sigmoid.
* zonal Matérn-5/2: mpmath.quad (tanh-sinh) of s(t) C_n^(α)(t)/C_n^(α)(1) (mpmath.gegenbauer) in θ.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from activated_dgp import ActivationFeature, ZonalArcCosine
from activated_dgp.zonal import ZonalKernel, zonal_matern52_shape
from activated_dgp.zonal.covariances import basis_coefficients, inducing_coefficients
from activated_dgp.zonal.funk_hecke import dual, supports_extended_precision
from activated_dgp.zonal.spectra import activation_coefficients, arc_cosine_coefficients
from activated_dgp.zonal.funk_hecke import PrecisionWarning, funk_hecke_coefficients
from activated_dgp.zonal.spherical import num_harmonics

DIMENSIONS = (2, 3, 64, 257, 1025, 4097)
TRUNCATION = 20
DIGITS = 40


def multiplicity(n: int, d: int) -> int:
    return math.comb(n + d - 1, d - 1) - (math.comb(n + d - 3, d - 1) if n >= 2 else 0)


def assert_issue_criterion(terms: np.ndarray, reference: dict, label: str) -> None:
    for n, truth in reference.items():
        error = abs(terms[n] - float(truth)) / max(abs(float(truth)), 1e-3)
        assert error < 1e-8, (label, n, terms[n], mpmath.nstr(truth, 15), error)


def library_terms(coefficients: np.ndarray, d: int) -> np.ndarray:
    return coefficients * np.array([float(multiplicity(n, d)) for n in range(len(coefficients))])


# ---------------------------------------------------------------- references


def bessel_reference(kappa: float, d: int, levels) -> dict:
    """a_n N_n^d of e^(κt) from the Bessel expansion (N_n Ĉ_n = (n+α)/α C_n^(α); d = 2: I_0 + 2 Σ I_n T_n)."""
    with mpmath.workdps(DIGITS):
        k = mpmath.mpf(kappa)
        if d == 2:
            return {n: (1 if n == 0 else 2) * mpmath.besseli(n, k) for n in levels}
        alpha = mpmath.mpf(d - 2) / 2
        front = mpmath.gamma(alpha) * (k / 2) ** (-alpha)
        # C_n^(α)(1) = (2α)_n / n!
        return {n: front * (n + alpha) * mpmath.besseli(n + alpha, k) * mpmath.rf(2 * alpha, n) / mpmath.factorial(n)
                for n in levels}


def _sigmoid_derivative_polynomials(count: int) -> list:
    """S_k(s), k < count, with d^k/du^k sigmoid(u) = S_k(sigmoid(u)): S_0 = s, S_(k+1) = S_k'(s) s (1 − s)."""
    polynomials = [[0, 1]]
    for _ in range(count - 1):
        p = polynomials[-1]
        derivative = [k * p[k] for k in range(1, len(p))]
        product = [0] * (len(derivative) + 2)
        for k, c in enumerate(derivative):
            product[k + 1] += c
            product[k + 2] -= c
        polynomials.append(product)
    return polynomials


SIGMOID = _sigmoid_derivative_polynomials(TRUNCATION + 1)


def _poly(coefficients, s):
    return mpmath.polyval(coefficients[::-1], s)


def softplus_derivative(n: int, t):
    """d^n/dt^n log(1 + e^(3t)) = 3^n S_(n−1)(σ(3t))."""
    if n == 0:
        return mpmath.log1p(mpmath.exp(3 * t))
    return 3**n * _poly(SIGMOID[n - 1], 1 / (1 + mpmath.exp(-3 * t)))


def swish_derivative(n: int, t):
    """d^n/dt^n 3t σ(3t) = 3^n (u S_n(σ(u)) + n S_(n−1)(σ(u))), u = 3t (Leibniz)."""
    s, u = 1 / (1 + mpmath.exp(-3 * t)), 3 * t
    if n == 0:
        return u * s
    return 3**n * (u * _poly(SIGMOID[n], s) + n * _poly(SIGMOID[n - 1], s))


def rodrigues_reference(derivative, d: int, levels) -> dict:
    out = {}
    with mpmath.workdps(DIGITS):
        lam = mpmath.mpf(d - 3) / 2
        omega = mpmath.gamma(mpmath.mpf(d) / 2) / (mpmath.gamma(mpmath.mpf(d - 1) / 2) * mpmath.sqrt(mpmath.pi))
        h = min(mpmath.mpf(1) / 2, 8 / mpmath.sqrt(d))
        for n in levels:
            integral = mpmath.quad(lambda t: derivative(n, t) * (1 - t * t) ** (n + lam), [-1, -h, 0, h, 1])
            out[n] = omega * integral * multiplicity(n, d) / (2**n * mpmath.rf(lam + 1, n))
    return out


def direct_reference(shape, d: int, levels) -> dict:
    """ω_d N_n ∫_0^π s(cos θ) C_n^(α)(cos θ)/C_n^(α)(1) sin^(d−2)θ dθ by mpmath.quad, precision raised by log10 N_n."""
    out = {}
    for n in levels:
        N = multiplicity(n, d)
        with mpmath.workdps(DIGITS + len(str(N)) + 10):
            alpha = mpmath.mpf(d - 2) / 2
            if d == 2:
                poly = lambda t: mpmath.chebyt(n, t)  # noqa: E731
            else:
                at_one = mpmath.gegenbauer(n, alpha, 1)
                poly = lambda t: mpmath.gegenbauer(n, alpha, t) / at_one  # noqa: E731
            digits = mpmath.mp.dps
            half = mpmath.pi / 2 if d < 64 else min(mpmath.pi / 2, mpmath.sqrt(4.7 * digits / d))
            omega = mpmath.gamma(mpmath.mpf(d) / 2) / (mpmath.gamma(mpmath.mpf(d - 1) / 2) * mpmath.sqrt(mpmath.pi))
            integral = mpmath.quad(
                lambda th: shape(mpmath.cos(th)) * poly(mpmath.cos(th)) * mpmath.sin(th) ** (d - 2),
                [mpmath.pi / 2 - half, mpmath.pi / 2, mpmath.pi / 2 + half],
            )
            out[n] = omega * integral * N
    return out


# ---------------------------------------------------------------- coefficients


def exp_callable(t):
    """A user's callable written for both NumPy arrays and mpmath numbers."""
    return mpmath.exp(2.5 * t) if isinstance(t, mpmath.mpf) else np.exp(2.5 * t)


@pytest.mark.parametrize("d", DIMENSIONS)
def test_callable_matches_bessel_expansion_in_every_dimension(d):
    assert supports_extended_precision(exp_callable)
    terms = library_terms(funk_hecke_coefficients(exp_callable, d, TRUNCATION, threshold=0.0), d)
    assert_issue_criterion(terms, bessel_reference(2.5, d, range(TRUNCATION)), f"exp, d={d}")


FAST = [("softplus", 2), ("softplus", 64), ("softplus", 1025), ("swish", 3), ("swish", 257), ("swish", 4097)]
ALL = [(name, d) for name in ("softplus", "swish") for d in DIMENSIONS]
DERIVATIVES = {"softplus": softplus_derivative, "swish": swish_derivative}


@pytest.mark.parametrize(
    "name,d", [pytest.param(*case, marks=[] if case in FAST else [pytest.mark.slow]) for case in ALL]
)
def test_softplus_and_swish_match_rodrigues_reference(name, d):
    levels = (0, 1, 2, 3, 8, 13, 19) if (name, d) in FAST else range(TRUNCATION)
    terms = library_terms(activation_coefficients(name, d, TRUNCATION, threshold=0.0), d)
    assert_issue_criterion(terms, rodrigues_reference(DERIVATIVES[name], d, levels), f"{name}, d={d}")
    # "linear + even": the odd levels from 3 on vanish; the default threshold makes them exact zeros
    thresholded = activation_coefficients(name, d, TRUNCATION)
    assert np.all(thresholded[3::2] == 0.0) and np.all(thresholded[0:3] != 0.0) and np.all(thresholded[2::2] != 0.0)


@pytest.mark.parametrize("d", [pytest.param(d, marks=[] if d < 64 else [pytest.mark.slow]) for d in DIMENSIONS])
def test_zonal_matern_kernel_eigenvalues_match_direct_quadrature(d):
    levels = (0, 1, 2, 5, 9) if d < 64 else (0, 1, 4, 9, 19)
    kernel = ZonalKernel(zonal_matern52_shape, d - 1, truncation_level=TRUNCATION, threshold=0.0)
    assert_issue_criterion(library_terms(kernel.eigenvalues, d), direct_reference(zonal_matern52_shape, d, levels), f"matern, d={d}")


def test_float64_only_callable_warns_in_high_dimension_and_drops_round_off():
    """A NumPy-only callable cannot be integrated in extended precision: float64, round-off levels zeroed,
    a PrecisionWarning naming the levels; dual() makes the same function exact."""
    numpy_only = lambda t: np.logaddexp(0.0, 3.0 * t)  # noqa: E731
    assert not supports_extended_precision(numpy_only)
    with pytest.warns(PrecisionWarning, match="quadrature error"):
        coarse = funk_hecke_coefficients(numpy_only, 1025, 12)
    terms = library_terms(coarse, 1025)
    assert np.all(np.isfinite(terms)) and np.max(np.abs(terms)) < 10  # not the 1e3…1e13 of raw float64
    exact = funk_hecke_coefficients(dual(numpy_only, lambda t: mpmath.log1p(mpmath.exp(3 * t))), 1025, 12)
    np.testing.assert_allclose(exact, activation_coefficients("softplus", 1025, 12), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="mpmath"):
        funk_hecke_coefficients(numpy_only, 5, 4, method="extended")


def test_threshold_is_relative_to_the_series():
    """Scaling s by 10^6 keeps the same levels: the threshold compares |a_n| N_n with Σ_k |a_k| N_k."""
    small = funk_hecke_coefficients(exp_callable, 7, 30, threshold=1e-9)
    large = funk_hecke_coefficients(lambda t: 1e6 * exp_callable(t), 7, 30, threshold=1e-9)
    np.testing.assert_array_equal(small == 0.0, large == 0.0)
    terms = library_terms(funk_hecke_coefficients(exp_callable, 7, 30, threshold=0.0), 7)
    np.testing.assert_array_equal(small == 0.0, terms < 1e-9 * terms.sum())
    assert np.any(small == 0.0) and np.any(small != 0.0)


# ---------------------------------------------------------------- Kuf, Kuu and the converted DGP at d = 1,025


D_FEATURES = 1024  # d = 1,025 with the bias


def test_truncated_softplus_converges_on_the_whole_interval_at_d_1025():
    """Σ_(n<Ñ) σ_n N_n Ĉ_n(t) → log(1 + e^(3t)) on [−1, 1]: monotone in Ñ, tiny near t = 0 where the
    sphere's mass lies, and slow only at |t| → 1 (the Taylor radius of softplus(3t) is π/3)."""
    from activated_dgp.zonal.spherical import normalised_gegenbauer_polynomials

    d, t = D_FEATURES + 1, np.linspace(-1.0, 1.0, 401)
    truth = np.logaddexp(0.0, 3.0 * t)
    sup, central = [], []
    for truncation in (4, 10, 20, 40):
        terms = library_terms(activation_coefficients("softplus", d, truncation), d)
        error = np.abs(normalised_gegenbauer_polynomials(t, truncation, (d - 2) / 2) @ terms - truth)
        sup.append(error.max())
        central.append(error[np.abs(t) <= 0.5].max())
    assert all(a > b for a, b in zip(sup, sup[1:])), sup
    assert all(a > b for a, b in zip(central, central[1:])), central
    assert sup[-1] < 0.05 and central[2] < 1e-5 and central[3] < 1e-10, (sup, central)


def test_kuu_series_matches_reference_coefficients_at_d_1025():
    """Kuu's σ_n²/λ_n N_n from the library vs the Rodrigues σ_n and the closed-form arc-cosine λ_n."""
    d = D_FEATURES + 1
    kernel = ZonalArcCosine(D_FEATURES, truncation_level=TRUNCATION)
    feature = ActivationFeature(np.random.randn(4, d), "softplus", truncation_level=TRUNCATION)
    reference = rodrigues_reference(softplus_derivative, d, (0, 1, 2, 4, 8, 12))
    lam = arc_cosine_coefficients(d, TRUNCATION, threshold=0.0)
    expected = {n: float(reference[n]) ** 2 / (lam[n] * multiplicity(n, d)) for n in reference}
    ours = inducing_coefficients(feature, kernel)
    for n, value in expected.items():
        assert ours[n] == pytest.approx(value, rel=1e-8), n
    assert np.all(np.isfinite(ours)) and np.max(ours) < 1e2
    np.testing.assert_array_equal(basis_coefficients(feature, kernel)[3::2], 0.0)


def test_converted_dgp_kl_is_finite_and_the_whitened_gaussian_kl_at_d_1025():
    """dgp_from_keras of a twin with 1,024 inputs at Ñ = 20: each layer's KL equals the closed form of the
    whitened KL ½ Σ_p [tr S_p + μ_pᵀμ_p − M − log det S_p], and its mean part ½ Σ_p V_pᵀ (Kuu + εI) V_p with
    Kuu built here from the reference σ_n (Rodrigues) and closed-form λ_n — the size the weights imply."""
    import gpflow

    from activated_dgp import build_activated_nn, dgp_from_keras
    from activated_dgp.zonal.spherical import normalised_gegenbauer_polynomials

    rng = np.random.default_rng(0)
    net = build_activated_nn(D_FEATURES, num_layers=2, num_units=16, layer_widths=[8], output_dim=3,
                             truncation_level=TRUNCATION, lengthscales=[np.sqrt(D_FEATURES), 1.0], seed=0,
                             activation="softplus")  # the reference σ_n below is the Softplus's
    X = rng.random((32, D_FEATURES))
    dgp = dgp_from_keras(net, num_data=32, X=X, likelihood="softmax").dgp
    layer = dgp.f_layers[0]
    kl = float(layer.prior_kl())
    q_mu, q_sqrt = layer.q_mu.numpy(), layer.q_sqrt.numpy()
    M = q_mu.shape[0]
    closed = 0.5 * sum(
        np.sum(L**2) + q_mu[:, p] @ q_mu[:, p] - M - 2 * np.sum(np.log(np.abs(np.diag(L))))
        for p, L in enumerate(q_sqrt)
    )
    assert np.isfinite(kl) and kl == pytest.approx(closed, rel=1e-9)

    d = D_FEATURES + 1
    inducing = getattr(layer.inducing_variable, "inducing_variable", layer.inducing_variable)
    W = inducing.W.numpy()
    norms = np.linalg.norm(W, axis=1)
    cosine = np.clip((W / norms[:, None]) @ (W / norms[:, None]).T, -1, 1)
    sigma = rodrigues_reference(softplus_derivative, d, range(TRUNCATION))
    lam = arc_cosine_coefficients(d, TRUNCATION, threshold=0.0)
    series = np.array([float(sigma[n]) ** 2 / (lam[n] * multiplicity(n, d)) if lam[n] > 0 else 0.0
                       for n in range(TRUNCATION)])
    kernel = getattr(layer.kernel, "kernel", layer.kernel)
    Kuu = norms[:, None] * norms[None, :] * (normalised_gegenbauer_polynomials(cosine, TRUNCATION, (d - 2) / 2) @ series)
    Kuu = Kuu / float(kernel.variance.numpy()) + gpflow.config.default_jitter() * np.eye(M)
    V = [w for w in net.get_weights() if w.ndim == 2 and w.shape == (M, 8)][0]
    mean_part = 0.5 * np.trace(V.T @ Kuu @ V)
    assert 0.5 * np.sum(q_mu**2) == pytest.approx(mean_part, rel=1e-6)
    assert kl < 1e6, kl  # with unnormalised Funk–Hecke coefficients this KL reached 1e30 for Ñ > 8
