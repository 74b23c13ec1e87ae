"""The exact empirical NTK (activated_dgp.eigen.ntk) against Jacobians computed here: one
tf.GradientTape.gradient per example, and central finite differences of the network's output in the
flat parameter vector; and the Rademacher estimate ntk_kernel (NeuralEF eq. 20) against the exact Gram."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp.eigen import jacobian_features, jacobian_kernel, ntk_gram, ntk_kernel, rademacher_matrix


def small_cnn(seed=0, outputs=1):
    """784-free small CNN on 6 × 6 images given as rows [N, 36]: conv 3×3 (2 filters), ReLU-free tanh,
    dense to ``outputs``; float64."""
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([
        tf_keras.Input((36,), dtype="float64"),
        tf_keras.layers.Reshape((6, 6, 1), dtype="float64"),
        tf_keras.layers.Conv2D(2, 3, activation="tanh", dtype="float64"),
        tf_keras.layers.MaxPooling2D(2, dtype="float64"),
        tf_keras.layers.Flatten(dtype="float64"),
        tf_keras.layers.Dense(3, activation="tanh", dtype="float64"),
        tf_keras.layers.Dense(outputs, dtype="float64"),
    ])
    return model


def per_example_jacobian(model, X):
    rows = []
    for x in X:
        with tf.GradientTape() as tape:
            output = tf.reduce_sum(model(tf.constant(x[None, :])))
        rows.append(np.concatenate([g.numpy().ravel() for g in tape.gradient(output, model.trainable_variables)]))
    return np.array(rows)


def finite_difference_jacobian(model, X, step=1e-6):
    variables = model.trainable_variables
    theta = np.concatenate([v.numpy().ravel() for v in variables])
    sizes = [int(np.prod(v.shape)) for v in variables]

    def assign(vector):
        for v, part in zip(variables, np.split(vector, np.cumsum(sizes)[:-1])):
            v.assign(part.reshape(v.shape))

    J = np.zeros((len(X), theta.size))
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = step
        assign(theta + e)
        up = model(X).numpy()[:, 0]
        assign(theta - e)
        down = model(X).numpy()[:, 0]
        J[:, i] = (up - down) / (2 * step)
    assign(theta)
    return J


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(1)
    model = small_cnn()
    X = rng.normal(size=(7, 36))
    X2 = rng.normal(size=(4, 36))
    return model, X, X2


def test_jacobian_features_match_per_example_gradients_and_finite_differences(setup):
    model, X, _ = setup
    J = jacobian_features(model, X, batch_size=3)
    P = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert J.shape == (7, P)
    np.testing.assert_allclose(J, per_example_jacobian(model, X), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(J, finite_difference_jacobian(model, X), rtol=1e-5, atol=1e-7)


def test_ntk_gram_is_the_jacobian_gram(setup):
    model, X, X2 = setup
    J, J2 = per_example_jacobian(model, X), per_example_jacobian(model, X2)
    np.testing.assert_allclose(ntk_gram(model, X), J @ J.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ntk_gram(model, X, X2, batch_size=2), J @ J2.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jacobian_kernel(model).gram(X, X2).numpy(), J @ J2.T, rtol=1e-10, atol=1e-12)


def test_rademacher_ntk_estimate_converges_to_the_exact_gram(setup):
    """E_v[(J v)(J v)ᵀ] = J Jᵀ for Rademacher v (eq. 20): S = 400 directions give the Gram within a few
    Monte Carlo standard errors (relative Frobenius error ~ sqrt(2/S) ≈ 0.07)."""
    model, X, _ = setup
    J = per_example_jacobian(model, X)
    exact = J @ J.T
    estimate = ntk_kernel(model, 400, seed=3).gram(X).numpy()
    assert np.linalg.norm(estimate - exact) / np.linalg.norm(exact) < 0.25


def test_eq20_features_are_the_jacobian_times_the_rademacher_matrix(setup):
    """ntk_kernel's forward-mode features ∂_θ g(X) v_s equal J(X) V, J the per-example gradients of this
    test and V = rademacher_matrix (same seed): the same directions, in the Jacobian's column order."""
    model, X, _ = setup
    V = rademacher_matrix(model, 7, seed=5)
    assert V.shape == (model.count_params(), 7) and set(np.unique(V)) == {-1.0, 1.0}
    forward = ntk_kernel(model, 7, seed=5).feature_map(tf.constant(X)).numpy()
    np.testing.assert_allclose(per_example_jacobian(model, X) @ V, forward, rtol=1e-5, atol=1e-6)
    assert not np.allclose(rademacher_matrix(model, 7, seed=6), V)
    with pytest.raises(ValueError, match="num_samples"):
        rademacher_matrix(model, 0)


def test_bad_input_raises_clear_errors(setup):
    model, X, _ = setup
    with pytest.raises(ValueError, match="NaN"):
        jacobian_features(model, np.where(np.arange(36) == 0, np.nan, X))
    with pytest.raises(ValueError, match="outputs"):
        jacobian_features(small_cnn(outputs=2), X)
    with pytest.raises(ValueError, match="trainable variables"):
        ntk_gram(tf_keras.Sequential([tf_keras.layers.Dense(1)]), X)
    with pytest.raises(ValueError, match="batch_size"):
        jacobian_features(model, X, batch_size=0)


def test_repeated_calls_reuse_one_traced_jacobian(setup):
    """jacobian_features / ntk_gram on one network, with batches of several sizes, trace its Jacobian
    once (no retracing per call), and the reused function still follows the network's current weights."""
    from activated_dgp.eigen.ntk import _network_jacobian

    rng = np.random.default_rng(2)
    model = small_cnn(seed=4)
    X = rng.normal(size=(5, 36))
    for size in (2, 3, 5):
        jacobian_features(model, X, batch_size=size)
        ntk_gram(model, X, X[:2])
    assert _network_jacobian(model).experimental_get_tracing_count() == 1
    model.layers[-1].kernel.assign(2.0 * model.layers[-1].kernel)
    np.testing.assert_allclose(jacobian_features(model, X), per_example_jacobian(model, X), rtol=1e-10, atol=1e-12)
    assert _network_jacobian(model).experimental_get_tracing_count() == 1
