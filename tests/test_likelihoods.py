"""The package's likelihoods against independent computations: closed forms, scipy quadrature and
tensor-product Gauss–Hermite sums in NumPy (never GPflow's own quadrature)."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import integrate
from scipy.special import expit, log_expit, log_ndtr, logsumexp, softmax

from activated_dgp.deep.builders import LogisticBernoulli, MonteCarloSoftmax, ProbitCrossEntropy, network_loss

MU = np.array([[-3.0], [-0.4], [0.0], [1.2], [4.0], [40.0]])
VAR = np.array([[0.5], [2.0], [0.01], [1.0], [3.0], [4.0]])
Y = np.array([[0.0], [1.0], [1.0], [0.0], [1.0], [0.0]])


def _gauss(f, mu, var):
    return np.exp(-0.5 * (f - mu) ** 2 / var) / np.sqrt(2 * np.pi * var)


def _quad(function, mu, var):
    """∫ N(f; μ, σ²) function(f) df by scipy's adaptive quadrature over μ ± 12σ."""
    sd = np.sqrt(var)
    return integrate.quad(lambda f: _gauss(f, mu, var) * function(f), mu - 12 * sd, mu + 12 * sd, epsabs=1e-12, epsrel=1e-10, limit=200)[0]


def test_logistic_bernoulli_log_density_is_the_closed_form_everywhere():
    F = np.linspace(-60, 60, 241)[:, None]
    likelihood = LogisticBernoulli()
    for label in (0.0, 1.0):
        expected = log_expit((2 * label - 1) * F)[:, 0]  # log σ((2y − 1) f), scipy's stable form
        got = likelihood.log_prob(None, tf.constant(F), tf.constant(np.full_like(F, label))).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)
        assert np.all(np.isfinite(got))


def test_logistic_bernoulli_expectations_match_scipy_quadrature():
    likelihood = LogisticBernoulli()
    sign = 2 * Y - 1
    ve = likelihood.variational_expectations(None, tf.constant(MU), tf.constant(VAR), tf.constant(Y)).numpy()
    lpd = likelihood.predict_log_density(None, tf.constant(MU), tf.constant(VAR), tf.constant(Y)).numpy()
    mean, var = (t.numpy()[:, 0] for t in likelihood.predict_mean_and_var(None, tf.constant(MU), tf.constant(VAR)))
    for i in range(len(MU)):
        mu, v, s = MU[i, 0], VAR[i, 0], sign[i, 0]
        assert ve[i] == pytest.approx(_quad(lambda f: log_expit(s * f), mu, v), rel=1e-6, abs=1e-8)
        # GPflow's 20-point Gauss–Hermite rule in log space: exact to ~1e-6 here
        assert lpd[i] == pytest.approx(np.log(_quad(lambda f: expit(s * f), mu, v)), rel=1e-5, abs=1e-6)
        p = _quad(expit, mu, v)
        assert mean[i] == pytest.approx(p, rel=1e-6, abs=1e-9)
        assert var[i] == pytest.approx(p * (1 - p), rel=1e-5, abs=1e-9)
    # control: a plug-in σ(μ) is far from the integral at the wide points (the comparison can fail)
    assert np.max(np.abs(mean - expit(MU[:, 0]))) > 0.03


def _hermite_grid(mu, var, points=40):
    """Nodes f [G, C] and weights [G] of the tensor-product Gauss–Hermite rule for N(μ, diag σ²) in C dims."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)  # ∫ e^(−t²/2) g(t) dt
    weights = weights / np.sqrt(2 * np.pi)
    grids = np.meshgrid(*[nodes] * len(mu), indexing="ij")
    t = np.stack([g.ravel() for g in grids], axis=1)
    w = np.prod(np.meshgrid(*[weights] * len(mu), indexing="ij"), axis=0).ravel()
    return mu + np.sqrt(var) * t, w


def test_monte_carlo_softmax_against_gauss_hermite_sums():
    mus = np.array([[0.5, -0.3, 1.0], [2.0, 0.0, -1.0], [-1.0, -1.0, 0.2]])
    vars_ = np.array([[0.3, 1.0, 0.6], [2.0, 0.5, 1.0], [0.1, 0.1, 3.0]])
    labels = np.array([[2.0], [0.0], [1.0]])  # float labels, as gpflux's targets arrive
    likelihood = MonteCarloSoftmax(3)
    likelihood.num_monte_carlo_points = 40000
    tf.random.set_seed(0)
    mean, _ = likelihood.predict_mean_and_var(None, tf.constant(mus), tf.constant(vars_))
    ve = likelihood.variational_expectations(None, tf.constant(mus), tf.constant(vars_), tf.constant(labels)).numpy()
    lpd = likelihood.predict_log_density(None, tf.constant(mus), tf.constant(vars_), tf.constant(labels)).numpy()
    plug_in_error = 0.0
    for i in range(3):
        F, w = _hermite_grid(mus[i], vars_[i])
        probabilities = w @ softmax(F, axis=1)
        label = int(labels[i, 0])
        log_p = F[:, label] - logsumexp(F, axis=1)
        # 40,000 draws: Monte Carlo standard errors below 0.003 (probabilities) and 0.01 (log terms)
        np.testing.assert_allclose(mean.numpy()[i], probabilities, atol=0.012)
        assert ve[i] == pytest.approx(w @ log_p, abs=0.04)
        assert lpd[i] == pytest.approx(np.log(probabilities[label]), abs=0.04)
        plug_in_error = max(plug_in_error, abs(probabilities - softmax(mus[i])).max())
    assert plug_in_error > 0.05  # control: the plug-in softmax(μ) is not the integral (the comparison can fail)


def test_probit_network_loss_is_the_probit_negative_log_likelihood():
    f = np.linspace(-40, 40, 161)[:, None]
    for label in (0.0, 1.0):
        y = np.full_like(f, label)
        per_point = -log_ndtr((2 * label - 1) * f)[:, 0]  # −log Φ((2y − 1) f)
        loss = ProbitCrossEntropy(reduction="none")(tf.constant(y), tf.constant(f)).numpy()
        np.testing.assert_allclose(loss, per_point, rtol=1e-10, atol=1e-12)
    assert isinstance(network_loss("probit"), ProbitCrossEntropy)
    mean = float(network_loss("probit")(tf.constant(Y), tf.constant(MU)))
    assert mean == pytest.approx(np.mean(-log_ndtr((2 * Y - 1) * MU)), rel=1e-12)
