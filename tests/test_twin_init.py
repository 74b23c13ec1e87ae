"""The twin's initial inducing directions: rows of W ~ N(0, I / ((D+1) S)), S = Σ_i ℓ_i⁻²,
so that a unit's scale ‖w‖ ‖x̃‖ is ≈ 1 for standardised inputs whatever the lengthscales."""

import numpy as np
import pytest
from scipy import stats

from activated_dgp.deep import ActivatedLayer
from activated_dgp.deep.twin import initial_directions


@pytest.mark.parametrize("lengthscales", [None, 1.0, 4.0, "per-coordinate"])
def test_initial_directions_have_the_closed_form_variance(lengthscales):
    D, M = 6, 4000
    if lengthscales == "per-coordinate":
        lengthscales = np.array([0.5, 1.0, 2.0, 3.0, 1.5, 0.7, 5.0])
    S = 1.0 if lengthscales is None else float(np.sum(np.broadcast_to(np.asarray(lengthscales, dtype=float), (D + 1,)) ** -2.0))
    W = initial_directions(M, D, np.random.default_rng(0), lengthscales)
    assert W.shape == (M, D + 1)
    variance = 1.0 / ((D + 1) * S)
    # every entry: mean 0 and the closed-form variance (chi-square interval on M (D+1) normal draws)
    n = W.size
    low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], n) / n
    assert low < np.mean(W**2) / variance < high
    assert abs(np.mean(W)) < 4.0 * np.sqrt(variance / n)
    # Kolmogorov-Smirnov against N(0, variance) on the standardised entries
    assert stats.kstest(W.ravel() / np.sqrt(variance), "norm").pvalue > 1e-4


def test_unit_scale_is_one_for_standardised_inputs_whatever_the_lengthscale():
    """E ‖w‖² E ‖x̃‖² = 1 with x ~ N(0, I): a dense Monte Carlo of ‖w‖ ‖x̃‖ for several ℓ."""
    D, rng = 5, np.random.default_rng(1)
    X = rng.normal(size=(20000, D))
    for lengthscales in (1.0, np.sqrt(D + 1.0), 10.0, np.array([1.0, 2.0, 0.5, 1.0, 3.0, 1.0])):
        W = initial_directions(20000, D, np.random.default_rng(2), lengthscales)
        x_tilde = np.hstack([X, np.ones((len(X), 1))]) / lengthscales
        product = np.mean(np.sum(W**2, axis=1)) * np.mean(np.sum(x_tilde**2, axis=1))
        assert product == pytest.approx(1.0, rel=0.03)


def test_common_lengthscale_does_not_change_the_initial_twin_layer():
    """A common ℓ changes no angle and the initial scale absorbs 1/ℓ: the seeded layer's outputs agree."""
    D, X = 4, np.random.default_rng(3).normal(size=(50, 4))
    outputs = [ActivatedLayer(16, "softplus", 10, lengthscales=ell, seed=7)(X).numpy() for ell in (1.0, 3.0, 17.0)]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-10)
    np.testing.assert_allclose(outputs[2], outputs[0], rtol=1e-10)


def test_initial_directions_reject_bad_lengthscales():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="lengthscales"):
        initial_directions(3, 2, rng, [1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="lengthscales"):
        initial_directions(3, 2, rng, [1.0, 2.0])


def test_the_default_twin_unit_is_the_zonal_swish():
    """Without ``activation`` the twin's unit is ‖w‖ ‖x̃‖ σ(t), σ(t) = 3t·sigmoid(3t), t = ŵ·x̂ (the library default
    of the zonal Swish twin), computed here with scipy's expit; the Ñ = 20 series is exact to < 1e-4 (twin_training.md), far
    below the distance to the old default, the zonal Softplus log(1 + e^(3t))."""
    from scipy.special import expit

    D, rng = 4, np.random.default_rng(5)
    X = rng.normal(size=(60, D))
    layer = ActivatedLayer(12, seed=1)
    out = layer(X).numpy()
    W = layer.W.numpy()
    x_tilde = np.hstack([X, np.ones((60, 1))])  # ℓ = 1
    radius = np.linalg.norm(x_tilde, axis=1)[:, None] * np.linalg.norm(W, axis=1)[None, :]
    t = (x_tilde @ W.T) / radius
    np.testing.assert_allclose(out, radius * 3.0 * t * expit(3.0 * t), rtol=0, atol=1e-4 * radius.max())
    assert np.max(np.abs(out - radius * np.logaddexp(0.0, 3.0 * t))) > 0.1 * radius.max()
