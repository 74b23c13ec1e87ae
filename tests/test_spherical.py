"""Gegenbauer machinery and Funk–Hecke quadrature against scipy, textbook identities and the paper's tables."""

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import comb, eval_chebyt, eval_gegenbauer, gamma, iv, sph_harm_y

from activated_dgp.zonal import use_xla_for_gegenbauer
from activated_dgp.zonal.spectra import arc_cosine_coefficients, arc_cosine_shape, relu_coefficients
from activated_dgp.zonal.funk_hecke import funk_hecke_coefficients
from activated_dgp.zonal.spherical import (
    funk_hecke_constant,
    gegenbauer_polynomials,
    gegenbauer_series,
    normalised_gegenbauer_polynomials,
    num_harmonics,
    sphere_surface_area,
)

COSINES = np.concatenate([np.linspace(-1.0, 1.0, 41), [-0.999999, 0.999999]])


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 3.5, 7.0])
def test_gegenbauer_matches_scipy_up_to_degree_60(alpha):
    ours = gegenbauer_polynomials(COSINES, 60, alpha)
    for n in range(60):
        reference = eval_gegenbauer(n, alpha, COSINES)
        scale = max(1.0, abs(eval_gegenbauer(n, alpha, 1.0)))
        np.testing.assert_allclose(ours[:, n], reference, rtol=0, atol=1e-11 * scale)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 3.5, 10.0])
def test_normalised_gegenbauer_matches_scipy(alpha):
    ours = normalised_gegenbauer_polynomials(COSINES, 60, alpha)
    for n in range(60):
        if alpha == 0.0:
            reference = eval_chebyt(n, COSINES)  # the α → 0 limit of C_n/C_n(1)
        else:
            reference = eval_gegenbauer(n, alpha, COSINES) / eval_gegenbauer(n, alpha, 1.0)
        np.testing.assert_allclose(ours[:, n], reference, rtol=0, atol=1e-11)


def test_num_harmonics_textbook_values():
    n = np.arange(0, 30)
    np.testing.assert_array_equal(num_harmonics(n, 2), np.where(n == 0, 1, 2))  # cos nθ, sin nθ
    np.testing.assert_array_equal(num_harmonics(n, 3), 2 * n + 1)
    for d in range(3, 12):
        reference = np.array([1.0] + [(2 * k + d - 2) / k * comb(k + d - 3, k - 1, exact=True) for k in n[1:]])
        np.testing.assert_allclose(num_harmonics(n, d), reference, rtol=1e-12)


def test_surface_area_and_funk_hecke_constant():
    assert sphere_surface_area(2) == pytest.approx(2 * np.pi)
    assert sphere_surface_area(3) == pytest.approx(4 * np.pi)
    assert sphere_surface_area(4) == pytest.approx(2 * np.pi**2)
    for d in range(3, 10):
        assert funk_hecke_constant(d) == pytest.approx(sphere_surface_area(d - 1) / sphere_surface_area(d))
    assert funk_hecke_constant(2) == pytest.approx(1 / np.pi)


def test_addition_theorem_normalisation_on_the_two_sphere(rng):
    """Σ_j φ_nj(x) φ_nj(x') = N_n Ĉ_n(x·x') with φ orthonormal under dω/Ω (eq. B.1, B.9), d = 3."""
    theta, phi = rng.uniform(0, np.pi, 2), rng.uniform(0, 2 * np.pi, 2)
    x = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], -1)
    t = x[0] @ x[1]
    ours = num_harmonics(np.arange(8), 3) * normalised_gegenbauer_polynomials(t, 8, 0.5)
    for n in range(8):
        m = np.arange(-n, n + 1)
        # scipy's Y are orthonormal under dω; φ = √(4π) Y are orthonormal under dω/4π
        total = 4 * np.pi * np.sum(sph_harm_y(n, m, theta[0], phi[0]) * np.conj(sph_harm_y(n, m, theta[1], phi[1])))
        assert total.real == pytest.approx(ours[n], abs=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 3.5, 511.5])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
@pytest.mark.parametrize("parity", ["both", "linear odd part", "only odd", "constant even part"])
def test_clenshaw_series_against_explicit_sum(alpha, dtype, tol, parity, rng):
    """The series is summed per parity in s = t² (even levels, and t × the odd ones); one parity stopping early
    (ReLU/Softplus/Swish: odd levels ≥ 3 vanish) or missing must give the same sum as scipy's polynomials."""
    coefficients = rng.normal(size=60) / (1.0 + np.arange(60))
    if parity == "linear odd part":
        coefficients[3::2] = 0.0
    elif parity == "only odd":
        coefficients[0::2] = 0.0
    elif parity == "constant even part":
        coefficients[2::2] = 0.0
    cosine = rng.uniform(-1, 1, size=(7, 13))
    if alpha == 0.0:
        basis = np.stack([eval_chebyt(n, cosine) for n in range(60)], -1)
    else:
        basis = np.stack([eval_gegenbauer(n, alpha, cosine) / eval_gegenbauer(n, alpha, 1.0) for n in range(60)], -1)
    reference = basis @ coefficients
    for xla in (True, False):
        use_xla_for_gegenbauer(xla)
        try:
            ours = gegenbauer_series(tf.constant(cosine, dtype=dtype), coefficients, alpha)
        finally:
            use_xla_for_gegenbauer(True)
        assert ours.dtype == dtype and ours.shape == cosine.shape
        np.testing.assert_allclose(ours.numpy(), reference, atol=tol * np.abs(coefficients).sum())


@pytest.mark.parametrize("alpha", [0.0, 1.5])
def test_clenshaw_gradient_against_finite_differences(alpha, rng):
    coefficients = rng.normal(size=20)
    cosine = tf.constant(rng.uniform(-0.95, 0.95, size=(5, 4)))
    with tf.GradientTape() as tape:
        tape.watch(cosine)
        value = tf.reduce_sum(tf.sin(gegenbauer_series(cosine, coefficients, alpha)))
    gradient = tape.gradient(value, cosine).numpy()
    step = 1e-6
    reference = np.zeros_like(gradient)
    for index in np.ndindex(gradient.shape):
        delta = np.zeros(gradient.shape)
        delta[index] = step
        up = np.sum(np.sin(gegenbauer_series(cosine + delta, coefficients, alpha).numpy()))
        down = np.sum(np.sin(gegenbauer_series(cosine - delta, coefficients, alpha).numpy()))
        reference[index] = (up - down) / (2 * step)
    np.testing.assert_allclose(gradient, reference, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("d", [3, 4, 6, 9])
def test_funk_hecke_of_exponential_matches_bessel_expansion(d):
    """e^(κt) = Γ(α)(κ/2)^(−α) Σ_n (n+α) I_(n+α)(κ) C_n^(α)(t) (Watson), so λ_n is known in closed form."""
    kappa, alpha, levels = 2.5, (d - 2) / 2, 15
    ours = funk_hecke_coefficients(lambda t: np.exp(kappa * t), d, levels, threshold=0.0)
    gegenbauer_rule = funk_hecke_coefficients(lambda t: np.exp(kappa * t), d, levels, threshold=0.0, method="gauss-gegenbauer")
    n = np.arange(levels)
    expansion = gamma(alpha) * (kappa / 2) ** (-alpha) * (n + alpha) * iv(n + alpha, kappa)
    norm_sq = np.pi * 2 ** (1 - 2 * alpha) * gamma(n + 2 * alpha) / (gamma(n + 1) * (n + alpha) * gamma(alpha) ** 2)
    c_at_one = gamma(n + 2 * alpha) / (gamma(2 * alpha) * gamma(n + 1))
    reference = funk_hecke_constant(d) * expansion * norm_sq / c_at_one
    np.testing.assert_allclose(ours, reference, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gegenbauer_rule, reference, rtol=1e-10, atol=1e-13)


# Table C.1 (arc-cosine λ_n) and Table C.2 (ReLU σ_n) of the paper, n = 0..9, as printed.
TABLE_C1 = {
    3: [0.375, 0.167, 0.0234, 0, 0.000651, 0, 9.16e-05, 0, 2.29e-05, 0],
    5: [0.352, 0.1, 0.00977, 0, 0.000153, 0, 1.37e-05, 0, 2.38e-06, 0],
    7: [0.342, 0.0714, 0.00534, 0, 5.34e-05, 0, 3.34e-06, 0, 4.26e-07, 0],
}
TABLE_C2 = {
    3: [0.25, 0.167, 0.0625, 0, -0.0104, 0, 0.00391, 0, -0.00195, 0],
    5: [0.188, 0.1, 0.0313, 0, -0.00391, 0, 0.00117, 0, -0.000488, 0],
    7: [0.156, 0.0714, 0.0195, 0, -0.00195, 0, 0.000488, 0, -0.000174, 0],
}


def _relu(t):
    return np.maximum(t, 0.0)


@pytest.mark.parametrize("d", [3, 5, 7])
def test_tables_c1_c2_analytic_and_quadrature(d):
    analytic = {"C1": arc_cosine_coefficients(d, 10), "C2": relu_coefficients(d, 10)}
    numerical = {
        "C1": funk_hecke_coefficients(arc_cosine_shape, d, 10),
        "C2": funk_hecke_coefficients(_relu, d, 10, breakpoints=(0.0,)),
    }
    for name, table in (("C1", TABLE_C1), ("C2", TABLE_C2)):
        for n, printed in enumerate(table[d]):
            for value in (analytic[name][n], numerical[name][n]):
                if printed == 0:
                    assert value == 0.0  # below the 1e-9 threshold, as in the paper
                else:
                    # the paper's d = 5, n = 2 ReLU entry prints 0.0313 (numerical) and 0.0312 (analytic): 1/32
                    assert abs(value - printed) <= 0.51 * 10 ** (math.floor(math.log10(abs(printed))) - 2), (
                        name, d, n, value, printed)


@pytest.mark.parametrize("method,points,tolerance", [("angular", 200, 1e-13), ("gauss-gegenbauer", 1000, 1e-10)])
@pytest.mark.parametrize("d", range(2, 11))
def test_quadrature_matches_closed_forms_every_level(d, method, points, tolerance):
    levels = 20
    kwargs = dict(threshold=0.0, method=method, quadrature_points=points)
    np.testing.assert_allclose(
        funk_hecke_coefficients(arc_cosine_shape, d, levels, **kwargs),
        arc_cosine_coefficients(d, levels, threshold=0.0),
        rtol=0,
        atol=tolerance,
    )
    np.testing.assert_allclose(
        funk_hecke_coefficients(_relu, d, levels, breakpoints=(0.0,), **kwargs),
        relu_coefficients(d, levels, threshold=0.0),
        rtol=0,
        atol=tolerance,
    )


def test_arc_cosine_series_sums_to_shape_function():
    """s(t) = Σ λ_n N_n Ĉ_n(t): at t = 1 the full series gives s(1) = 1 (slow tail, so 400 levels)."""
    for d in (2, 3, 5):
        lam = arc_cosine_coefficients(d, 400, threshold=0.0)
        total = np.sum(lam * num_harmonics(np.arange(400), d))
        assert total == pytest.approx(arc_cosine_shape(1.0), abs=2e-4)
        t = np.linspace(-1, 1, 11)
        series = normalised_gegenbauer_polynomials(t, 400, (d - 2) / 2) @ (lam * num_harmonics(np.arange(400), d))
        np.testing.assert_allclose(series, arc_cosine_shape(t), atol=2e-4)


def test_threshold_zeroes_negligible_levels_only():
    raw = relu_coefficients(9, 30, threshold=0.0)
    terms = np.abs(raw) * num_harmonics(np.arange(30), 9)
    cut = relu_coefficients(9, 30, threshold=1e-3)
    assert np.all(cut[terms < 1e-3] == 0.0) and np.any(terms < 1e-3)
    np.testing.assert_array_equal(cut[terms >= 1e-3], raw[terms >= 1e-3])
    # the default keeps every genuinely non-zero level of the arc-cosine kernel up to Ñ = 20 in d = 9
    lam = arc_cosine_coefficients(9, 20)
    assert np.all(lam[::2] > 0) and lam[1] > 0 and np.all(lam[3::2] == 0)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="truncation_level"):
        funk_hecke_coefficients(np.cos, 3, 0)
    with pytest.raises(ValueError, match="d must be an integer ≥ 2"):
        funk_hecke_coefficients(np.cos, 1, 5)
    with pytest.raises(ValueError, match="NaN or inf"), np.errstate(invalid="ignore"):
        funk_hecke_coefficients(lambda t: np.log(t + 0.5), 3, 5)
    with pytest.raises(ValueError, match="unknown quadrature method"):
        funk_hecke_coefficients(np.cos, 3, 5, method="simpson")
    with pytest.raises(ValueError, match="elementwise"):
        funk_hecke_coefficients(lambda t: 1.0, 3, 5)
