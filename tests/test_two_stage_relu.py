"""train_two_stage on a plain ReLU network: by default it is made convertible first, so that the converted DGP's
mean propagation is the swapped network's forward pass and its means carry a bounded KL; the validation scores of
the starting network and of the DGP are reported, and a make_convertible guard keeps the start when fine-tuning
makes the validation loss worse.

Truths: the swapped network's own forward pass (Keras), scipy's normal log density of the network's validation
residuals, GPflow's Gaussian KL (``gauss_kl``) of the converted means, and a network loss computed in the test.
"""

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from scipy import stats

from activated_dgp import dgp_from_keras, make_convertible, propagate_means, train_two_stage
from activated_dgp.deep.network_reading import relu_layers
from activated_dgp.training import TrainingSchedule, swap_to_zonal
from activated_dgp.training.two_stage import _validation_scores

SHORT = TrainingSchedule(epochs=2, batch_size=64, verbose=0)


def _relu_regression(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(240, 2))
    Y = np.sin(2 * X[:, :1]) + 0.3 * X[:, 1:] + 0.05 * rng.normal(size=(240, 1))
    tf_keras.utils.set_random_seed(seed)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(16, "relu"),
                                   tf_keras.layers.Dense(16, "relu"), tf_keras.layers.Dense(1)], name="relu_mlp")
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(X, Y, epochs=40, batch_size=32, verbose=0)
    return network, X, Y


@pytest.fixture(scope="module")
def relu_regression():
    return _relu_regression()


def test_relu_layers_names_the_relu_blocks(relu_regression):
    network, _, _ = relu_regression
    assert relu_layers(network) == [network.layers[0].name, network.layers[1].name]
    softplus = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(4, "softplus"), tf_keras.layers.Dense(1)])
    assert relu_layers(softplus) == []


def test_a_relu_network_is_made_convertible_by_default_and_its_means_are_exact_with_a_bounded_kl(relu_regression):
    network, X, Y = relu_regression
    validation = (X[:40], Y[:40])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = train_two_stage(X[40:], Y[40:], network=network, validation_data=validation, dgp_schedule=SHORT,
                                 make_convertible=dict(steps=100, truncation_level=10), seed=0)
    assert result.convertible is not None and result.network is result.convertible.network
    assert relu_layers(result.network) == []  # the DGP mirrors the swapped network, not the ReLU one
    assert result.conversion_mismatch < 1e-8
    # the converted means' KL, from GPflow's gauss_kl with and without the mean, per data point: bounded (the issue's
    # target is ≤ 10 nats per data point), unlike the ReLU units' (1e16 and more on such a network)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dgp = dgp_from_keras(result.network, len(X) - 40, whiten=False).dgp
    total = 0.0
    for layer in dgp.f_layers:
        Kuu = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
        q_mu, q_sqrt = tf.convert_to_tensor(layer.q_mu), tf.convert_to_tensor(layer.q_sqrt)
        total += float(gpflow.kullback_leiblers.gauss_kl(q_mu, q_sqrt, K=Kuu)
                       - gpflow.kullback_leiblers.gauss_kl(tf.zeros_like(q_mu), q_sqrt, K=Kuu))
    assert total / (len(X) - 40) <= 10.0
    assert sum(result.conversion_kl) == pytest.approx(total, rel=1e-4)  # the result's record of the same KL
    # the converted DGP (before stage 2) propagates the swapped network's forward pass
    X_test = np.random.default_rng(3).uniform(-3, 3, size=(50, 2))
    np.testing.assert_allclose(propagate_means(dgp, X_test)[-1].numpy(), result.network(X_test).numpy(), atol=1e-8)


@pytest.fixture(scope="module")
def as_is(relu_regression):
    network, X, Y = relu_regression
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return train_two_stage(X[40:], Y[40:], network=network, validation_data=(X[:40], Y[:40]), dgp_schedule=SHORT,
                               make_convertible=False, seed=0)


def test_the_validation_scores_hold_the_starting_networks_gaussian_log_density(relu_regression, as_is):
    network, X, Y = relu_regression
    assert as_is.convertible is None and as_is.network is network
    residuals = Y[:40] - network(X[:40]).numpy()
    expected = np.mean(stats.norm.logpdf(residuals, scale=np.sqrt(as_is.initial_noise_variance)))
    assert as_is.validation_scores["network"] == pytest.approx(expected, rel=1e-10)
    assert np.isfinite(as_is.validation_scores["dgp"])


def test_a_dgp_scoring_below_the_network_is_named_in_a_warning(relu_regression, as_is):
    network, X, Y = relu_regression
    likelihood = as_is.dgp.likelihood_layer.likelihood
    kept = likelihood.variance.numpy()
    likelihood.variance.assign(1e3)  # a DGP far worse than the network: every validation point is 30 σ-units wide
    try:
        with pytest.warns(UserWarning, match="validation log predictive density .* below the starting network's"):
            scores = _validation_scores(as_is, network, (X[:40], Y[:40]), "gaussian", as_is.initial_noise_variance, 0)
    finally:
        likelihood.variance.assign(kept)
    assert scores["dgp"] < scores["network"]
    assert scores["dgp"] == pytest.approx(-0.5 * np.log(2 * np.pi * 1e3), abs=0.05)


def test_make_convertible_keeps_the_start_when_fine_tuning_hurts_even_with_validation_data(relu_regression):
    network, X, Y = relu_regression
    wild = TrainingSchedule(epochs=3, batch_size=16, learning_rate=5.0, verbose=0)
    result = make_convertible(network, X[40:], Y[40:], truncation_level=10, schedule=wild, validation_data=(X[:40], Y[:40]))
    start = swap_to_zonal(network, X[40:], truncation_level=10)[0]
    for a, b in zip(start.get_weights(), result.network.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    start_loss = float(np.mean((start(X[40:]).numpy() - Y[40:]) ** 2))  # the loss written out, on the fit part
    assert result.final_loss == pytest.approx(start_loss, rel=1e-10)


def test_a_bad_make_convertible_option_names_the_problem(relu_regression):
    network, X, Y = relu_regression
    with pytest.raises(ValueError, match="make_convertible must be 'auto', True, False or a dict"):
        train_two_stage(X, Y, network=network, make_convertible="yes")
