"""make_convertible: a plain ReLU network's units swapped for zonal Swish units, refitted to it and fine-tuned, converts
exactly and keeps its outputs and its classifier head.

Truths: the original network's own outputs (Keras), the swapped network's own forward pass (Keras) against the
converted DGP's mean propagation, a least-squares optimality check written here, and GPflow's Gaussian KL
(``gauss_kl`` with and without the mean) for the converted means' KL.
"""

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp import dgp_from_keras, make_convertible, propagate_means
from activated_dgp.deep.posterior_mean import mean_kl
from activated_dgp.deep.twin import ActivatedLayer
from activated_dgp.training import TrainingSchedule, swap_to_zonal


def _regression_network(seed=0, width=16):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(300, 2))
    Y = np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:] * np.cos(X[:, :1]) + 0.05 * rng.normal(size=(300, 1))
    tf_keras.utils.set_random_seed(seed)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(width, "relu"),
                                   tf_keras.layers.Dense(width), tf_keras.layers.ReLU(), tf_keras.layers.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(X, Y, epochs=60, batch_size=32, verbose=0)
    return network, X, Y


@pytest.fixture(scope="module")
def regression():
    return _regression_network()


def test_the_refit_starts_near_the_network_and_each_unit_scale_is_least_squares(regression):
    network, X, Y = regression
    swapped, head, mismatch = swap_to_zonal(network, X, truncation_level=10)
    assert head is None and len(mismatch) == 2
    assert [type(layer) for layer in swapped.layers] == [ActivatedLayer, ActivatedLayer, tf_keras.layers.Dense]
    original = network(X).numpy().astype(np.float64)
    # the swapped network reproduces the ReLU network's function to a fraction of its spread, before any training
    assert np.sqrt(np.mean((swapped(X).numpy() - original) ** 2)) < 0.2 * np.std(original)
    # the first layer's unit scales minimise ‖c φ_m − relu unit m‖²: scaling any unit by 1 ± 5 % does worse
    relu_units = tf_keras.Model(network.inputs, network.layers[0].output)(X).numpy().astype(np.float64)
    phi = swapped.layers[0](X).numpy()
    errors = np.sum((phi - relu_units) ** 2, axis=0)
    for factor in (0.95, 1.05):
        assert np.all(np.sum((factor * phi - relu_units) ** 2, axis=0) >= errors - 1e-12)


def test_the_made_network_converts_exactly_and_is_never_worse_than_its_start(regression):
    network, X, Y = regression
    result = make_convertible(network, X, Y, truncation_level=10, steps=150)
    assert result.final_loss <= result.swapped_loss + 1e-12
    assert np.isfinite(result.original_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the means' KL warning (its size is tested below)
        dgp = dgp_from_keras(result.network, len(X)).dgp
    X_test = np.random.default_rng(5).uniform(-3, 3, size=(100, 2))
    np.testing.assert_allclose(propagate_means(dgp, X_test)[-1].numpy(), result.network(X_test).numpy(), atol=1e-8)


def test_a_fine_tuning_that_only_hurts_hands_back_the_start(regression):
    network, X, Y = regression
    start = swap_to_zonal(network, X, truncation_level=10)[0]
    wild = TrainingSchedule(epochs=3, batch_size=16, learning_rate=5.0, verbose=0)
    result = make_convertible(network, X, Y, truncation_level=10, schedule=wild)
    assert result.history.get("restored_start") is True
    assert result.final_loss == pytest.approx(result.swapped_loss, rel=1e-12)
    for a, b in zip(start.get_weights(), result.network.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_the_converted_means_kl_is_gpflows_mean_part(regression):
    network, X, Y = regression
    result = make_convertible(network, X, Y, truncation_level=10, steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dgp = dgp_from_keras(result.network, len(X), whiten=False).dgp
    layer = dgp.f_layers[1]
    Kuu = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    q_mu = tf.convert_to_tensor(layer.q_mu)
    q_sqrt = tf.convert_to_tensor(layer.q_sqrt)
    with_mean = gpflow.kullback_leiblers.gauss_kl(q_mu, q_sqrt, K=Kuu)
    without = gpflow.kullback_leiblers.gauss_kl(tf.zeros_like(q_mu), q_sqrt, K=Kuu)
    assert mean_kl(layer) == pytest.approx(float(with_mean - without), rel=1e-6)
    # bounded per data point, unlike the ReLU units' (which the bare conversion of the same network warns about)
    assert sum(mean_kl(f) for f in dgp.f_layers) / len(X) < 1e3


def test_the_penalised_kl_is_the_converted_dgps_and_the_penalty_lowers_it(regression):
    """network_mean_kl, ½ Σ_p V_pᵀ Kuu V_p from the swapped network's own weights, equals GPflow's Gaussian KL mean
    part of the converted DGP (gauss_kl with and without q_μ, Kuu with jitter: the jitter's ½ ε ‖V‖² apart); with
    kl_weight = 1 the fine-tuning ends at a lower KL than without it, and never above its penalised start."""
    from activated_dgp.training.mean_kl_penalty import _blocks, network_mean_kl

    network, X, Y = regression
    plain = make_convertible(network, X, Y, truncation_level=10, steps=150, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dgp = dgp_from_keras(plain.network, len(X), whiten=False).dgp
    jitter = gpflow.config.default_jitter()
    for term, layer, (_, dense) in zip(network_mean_kl(plain.network), dgp.f_layers, _blocks(plain.network)):
        Kuu = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=jitter)
        q_mu, q_sqrt = tf.convert_to_tensor(layer.q_mu), tf.convert_to_tensor(layer.q_sqrt)
        gauss = float(gpflow.kullback_leiblers.gauss_kl(q_mu, q_sqrt, K=Kuu) - gpflow.kullback_leiblers.gauss_kl(tf.zeros_like(q_mu), q_sqrt, K=Kuu))
        squared_norm = np.sum(dense.kernel.numpy() ** 2) if dense is not None else layer.q_mu.shape[0]  # ‖V‖², V = I between blocks
        assert float(term) + 0.5 * jitter * squared_norm == pytest.approx(gauss, rel=1e-9)
    assert plain.mean_kl == pytest.approx([float(t) for t in network_mean_kl(plain.network)], rel=1e-12)

    penalised = make_convertible(network, X, Y, truncation_level=10, steps=150, seed=0, kl_weight=1.0)
    assert sum(penalised.mean_kl) < 0.8 * sum(plain.mean_kl)
    factor = 2 * penalised.original_loss / len(X)  # 2σ̂² / N with σ̂² the original network's training MSE
    swapped = make_convertible(network, X, Y, truncation_level=10, steps=0, seed=0)  # the fine-tuning's start
    assert penalised.final_loss + factor * sum(penalised.mean_kl) <= swapped.final_loss + factor * sum(swapped.mean_kl) + 1e-12
    for bad in (-1.0, float("nan"), True):
        with pytest.raises(ValueError, match="kl_weight"):
            make_convertible(network, X, Y, truncation_level=10, steps=0, kl_weight=bad)


def test_a_softmax_head_is_kept_and_converts_to_the_softmax_likelihood():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = ((X[:, 0] * X[:, 1] > 0).astype(int) + (X[:, 2] > 1)).reshape(-1, 1)
    tf_keras.utils.set_random_seed(1)
    network = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(8, "relu"), tf_keras.layers.Dense(3, "softmax")])
    network.compile(tf_keras.optimizers.Adam(0.02), "sparse_categorical_crossentropy")
    network.fit(X, y, epochs=40, verbose=0)
    result = make_convertible(network, X, y, truncation_level=10, steps=100)
    probabilities = result.network(X).numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-12)
    assert np.mean(probabilities.argmax(1) == network(X).numpy().argmax(1)) > 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        conversion = dgp_from_keras(result.network, len(X))
    assert isinstance(conversion.dgp.likelihood_layer.likelihood, gpflow.likelihoods.Softmax)
    logits = tf_keras.Sequential(result.network.layers[:-1])(X).numpy()
    np.testing.assert_allclose(propagate_means(conversion.dgp, X)[-1].numpy(), logits, atol=1e-8)


def test_bad_input_names_the_problem(regression):
    network, X, Y = regression
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="X"):
        make_convertible(network, bad, Y, steps=0)
    with pytest.raises(ValueError, match=r"\[N, 2\]"):
        swap_to_zonal(network, X[:, :1])
    with pytest.raises(ValueError, match="steps"):
        make_convertible(network, X, Y, steps=-1)
    with pytest.raises(ValueError, match="Conv2D"):  # no convertible tail at all
        make_convertible(tf_keras.Sequential([tf_keras.Input((8, 8, 1)), tf_keras.layers.Conv2D(2, 3)]), np.zeros((4, 8, 8, 1)),
                         np.zeros((4, 1)), steps=0)


def test_a_cnn_keeps_its_convolutions_and_gets_a_convertible_head():
    rng = np.random.default_rng(2)
    images = rng.normal(size=(120, 8, 8, 1))
    labels = (images[:, :4].mean(axis=(1, 2, 3)) > images[:, 4:].mean(axis=(1, 2, 3))).astype(int).reshape(-1, 1)
    tf_keras.utils.set_random_seed(2)
    cnn = tf_keras.Sequential([tf_keras.Input((8, 8, 1)), tf_keras.layers.Conv2D(2, 3, activation="relu"),
                               tf_keras.layers.MaxPooling2D(), tf_keras.layers.Flatten(), tf_keras.layers.Dense(6, "relu"),
                               tf_keras.layers.Dense(2, "softmax")])
    cnn.compile(tf_keras.optimizers.Adam(0.02), "sparse_categorical_crossentropy")
    cnn.fit(images, labels, epochs=20, verbose=0)
    made = make_convertible(cnn, images, labels, truncation_level=10, steps=20)
    assert made.network.layers[0] is cnn.layers[0]  # the convolution is the user's own layer, untouched
    assert isinstance(made.network.layers[3], ActivatedLayer) and isinstance(made.network.layers[-1], tf_keras.layers.Softmax)
    features = tf_keras.Sequential(cnn.layers[:3])(images).numpy().astype(np.float64)
    head = tf_keras.Sequential(made.network.layers[3:])
    np.testing.assert_allclose(made.network(images).numpy(), head(features).numpy(), atol=1e-6)
