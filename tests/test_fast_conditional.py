"""The activated layers' batched conditional (activated_dgp.zonal.conditionals) against GPflow's own algebra.

The reference is ``gpflow.conditionals.util.base_conditional(Kmn, Kmm, Knn, f, q_sqrt=q_sqrt, white=True)`` on the
same covariances, and, for whole models, GPflow's shared-independent conditional (``gpflow_conditional()``)."""

import gpflow
import gpflux
import numpy as np
import pytest
import tensorflow as tf
from gpflow.conditionals import conditional
from gpflow.conditionals.multioutput.conditionals import shared_independent_conditional
from gpflow.conditionals.util import base_conditional
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu

from activated_dgp import ActivationFeature, ZonalArcCosine, build_activated_dgp
from activated_dgp.zonal import conditionals as fast
from activated_dgp.zonal.conditionals import SharedActivationFeature
from activated_dgp.deep.builders import activated_gp_layer

TOLERANCE = 1e-10


def assert_close(actual, expected, tolerance=TOLERANCE):
    """max |actual − expected| ≤ tolerance · max |expected| (relative to the array's scale)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    scale = np.max(np.abs(expected))
    assert scale > 0
    assert np.max(np.abs(actual - expected)) <= tolerance * scale, np.max(np.abs(actual - expected)) / scale


def _layer(rng, input_dim=3, num_inducing=9, outputs=4):
    """An activated layer with a random (not near-zero) q_mu and lower-triangular q_sqrt, so that every term of the
    variance matters."""
    W = rng.normal(size=(num_inducing, input_dim + 1))
    layer = activated_gp_layer(W, outputs, num_data=100, truncation_level=8, lengthscales=1.3)
    layer.q_mu.assign(rng.normal(size=(num_inducing, outputs)))
    layer.q_sqrt.assign(np.tril(rng.normal(size=(outputs, num_inducing, num_inducing))) * 0.4 + np.eye(num_inducing))
    return layer


def _both(layer, X):
    """(batched conditional, base_conditional on the same covariances) of the layer at X, and their gradients with
    respect to q_mu, q_sqrt and W (of the sum of mean + variance with fixed random weights)."""
    inducing, kernel = layer.inducing_variable, layer.kernel
    variables = [layer.q_mu.unconstrained_variable, layer.q_sqrt.unconstrained_variable, inducing.inducing_variable.W.unconstrained_variable]
    results = []
    for which in ("fast", "reference"):
        with tf.GradientTape() as tape:
            if which == "fast":
                mean, var = conditional(X, inducing, kernel, layer.q_mu, q_sqrt=layer.q_sqrt, white=True)
            else:
                Kmm = Kuu(inducing, kernel, jitter=default_jitter())
                Kmn = Kuf(inducing, kernel, X)
                Knn = kernel.kernel.K_diag(X)
                mean, var = base_conditional(Kmn, Kmm, Knn, tf.convert_to_tensor(layer.q_mu), q_sqrt=tf.convert_to_tensor(layer.q_sqrt), white=True)
            weights = tf.cast(tf.reshape(tf.range(tf.size(mean)), tf.shape(mean)) % 7 + 1, mean.dtype)
            objective = tf.reduce_sum(weights * mean) + tf.reduce_sum(tf.sqrt(weights) * var)
        results.append((mean.numpy(), var.numpy(), [g.numpy() for g in tape.gradient(objective, variables)]))
    return results


@pytest.mark.parametrize("outputs", [1, 4])
@pytest.mark.parametrize("rows", [1, 6])
@pytest.mark.parametrize("leading", [(), (3,), (2, 2)])
def test_values_and_gradients_equal_gpflows_base_conditional(rng, outputs, rows, leading):
    layer = _layer(rng, outputs=outputs)
    X = tf.constant(rng.normal(size=leading + (rows, 3)))
    (mean, var, grads), (mean_ref, var_ref, grads_ref) = _both(layer, X)
    assert mean.shape == var.shape == leading + (rows, outputs)
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)
    assert np.all(var > 0)
    for grad, grad_ref in zip(grads, grads_ref):
        assert_close(grad, grad_ref)


def test_whitened_marginals_on_given_covariances_equal_base_conditional(rng):
    """The algebra alone, on an arbitrary SPD Kmm and q_sqrt with an upper triangle (ignored by both)."""
    M, P, N = 7, 3, 5
    root = rng.normal(size=(M, M))
    Kmm = tf.constant(root @ root.T + M * np.eye(M))
    Kmn = tf.constant(rng.normal(size=(M, 2, N)))
    Knn = tf.constant(10.0 + rng.uniform(size=(2, N)))
    f = tf.constant(rng.normal(size=(M, P)))
    q_sqrt = tf.constant(rng.normal(size=(P, M, M)))
    mean, var = fast.whitened_marginals(Kmn, Kmm, Knn, f, q_sqrt)
    mean_ref, var_ref = base_conditional(Kmn, Kmm, Knn, f, q_sqrt=q_sqrt, white=True)
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)


def _spy(monkeypatch):
    calls = []

    def spy(*args):
        calls.append(1)
        return original(*args)

    original = fast.whitened_marginals
    monkeypatch.setattr(fast, "whitened_marginals", spy)
    return calls


@pytest.mark.parametrize(
    "options",
    [
        dict(full_cov=True, white=True),
        dict(full_output_cov=True, white=True),
        dict(white=False),
        dict(white=True, diagonal=True),
    ],
)
def test_other_cases_are_gpflows_conditional(rng, monkeypatch, options):
    layer = _layer(rng, outputs=2)
    X = tf.constant(rng.normal(size=(5, 3)))
    q_sqrt = layer.q_sqrt
    if options.pop("diagonal", False):
        q_sqrt = tf.constant(rng.uniform(0.5, 1.0, size=(9, 2)))
    calls = _spy(monkeypatch)
    result = conditional(X, layer.inducing_variable, layer.kernel, layer.q_mu, q_sqrt=q_sqrt, **options)
    expected = shared_independent_conditional(X, layer.inducing_variable, layer.kernel, layer.q_mu, q_sqrt=q_sqrt, **options)
    assert not calls
    for a, b in zip(result, expected):
        np.testing.assert_array_equal(a, b)


def test_fast_path_taken_and_switch(rng, monkeypatch):
    layer = _layer(rng)
    X = tf.constant(rng.normal(size=(5, 3)))
    calls = _spy(monkeypatch)
    conditional(X, layer.inducing_variable, layer.kernel, layer.q_mu, q_sqrt=layer.q_sqrt, white=True)
    assert len(calls) == 1 and fast.fast_conditional_enabled()
    with fast.gpflow_conditional():
        assert not fast.fast_conditional_enabled()
        conditional(X, layer.inducing_variable, layer.kernel, layer.q_mu, q_sqrt=layer.q_sqrt, white=True)
    assert len(calls) == 1 and fast.fast_conditional_enabled()


def test_gpflows_own_types_keep_gpflows_conditional(rng):
    """Only SharedActivationFeature is dispatched here; GPflow's wrapper around the same feature is not."""
    kernel = gpflow.kernels.SharedIndependent(ZonalArcCosine(3, 8), output_dim=2)
    feature = ActivationFeature(rng.normal(size=(6, 4)), "softplus", 8)
    gpflow_wrapper = gpflow.inducing_variables.SharedIndependentInducingVariables(feature)
    ours = SharedActivationFeature(feature)
    for inducing, expected in ((gpflow_wrapper, shared_independent_conditional), (ours, fast._activated_conditional)):
        assert conditional.dispatch(tf.Tensor, type(inducing), type(kernel), gpflow.Parameter) is expected
    with pytest.raises(TypeError, match="ActivationFeature"):
        SharedActivationFeature(gpflow.inducing_variables.InducingPoints(np.zeros((3, 3))))
