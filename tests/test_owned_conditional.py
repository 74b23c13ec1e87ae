"""The activated layers' own training step (activated_dgp.zonal.owned_conditional, ActivatedGPLayer) against GPflow.

The references are GPflow's own functions on the same covariances and the same q_sqrt value: ``base_conditional`` and
``gauss_kl`` for the algebra, ``shared_independent_conditional`` (GPflow's conditional for a SharedIndependent kernel)
and ``gauss_kl`` with GPflow's Kuu for a layer, and gpflux's ELBO with GPflow's conditional for a whole DGP."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.conditionals.multioutput.conditionals import shared_independent_conditional
from gpflow.conditionals.util import base_conditional
from gpflow.config import default_jitter
from gpflow.covariances import Kuu
from gpflow.kullback_leiblers import gauss_kl

from activated_dgp import build_activated_dgp
from activated_dgp.deep import layers as layers_module
from activated_dgp.deep.builders import activated_gp_layer
from activated_dgp.zonal import conditionals as fast
from activated_dgp.zonal.owned_conditional import TriangularLayout, owned_marginals_and_kl, stacked_factors
from test_fast_conditional import TOLERANCE, assert_close  # max |actual − expected| ≤ 1e-10 · max |expected|


# ------------------------------------------------------------------------------------------------
# the algebra on given covariances
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M, blocks", [(7, 1), (7, 3), (9, 4), (16, 8)])
@pytest.mark.parametrize("P", [1, 3])
def test_stacked_factors_are_the_lower_triangle_of_fill_triangular(rng, M, P, blocks):
    """Block c of the stacked factors is [L_p[c₀:, c₀:c₁] for every p] side by side, L_p = tfp's fill_triangular."""
    x = rng.normal(size=(P, M * (M + 1) // 2))
    layout = TriangularLayout(M, P, blocks)
    L = tfp.math.fill_triangular(x).numpy()  # [P, M, M]
    assert sum(layout.widths) == M and len(layout.starts) == blocks
    for block, c0, w in zip(stacked_factors(tf.constant(x), layout), layout.starts, layout.widths):
        expected = np.concatenate([L[p, c0:, c0 : c0 + w] for p in range(P)], axis=1)
        np.testing.assert_array_equal(block.numpy(), expected)
    np.testing.assert_array_equal(x.reshape(-1)[layout.diagonal], np.diagonal(L, axis1=1, axis2=2).reshape(-1))


def test_stacked_factors_gradient_is_fill_triangulars(rng):
    M, P = 6, 2
    x = tf.constant(rng.normal(size=(P, M * (M + 1) // 2)))
    weights = [tf.constant(rng.normal(size=(M, M))) for _ in range(P)]
    layout = TriangularLayout(M, P, 3)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        L = tfp.math.fill_triangular(x)
        reference = tf.add_n([tf.reduce_sum(weights[p] * L[p]) for p in range(P)])
        ours = 0.0
        for block, c0, w in zip(stacked_factors(x, layout), layout.starts, layout.widths):
            for p in range(P):
                ours += tf.reduce_sum(weights[p][c0:, c0 : c0 + w] * block[:, p * w : (p + 1) * w])
    assert_close(ours, reference)
    assert_close(tape.gradient(ours, x), tape.gradient(reference, x))


def _covariances(rng, M, P, leading_rows=5):
    root = rng.normal(size=(M, M))
    Kmm = tf.constant(root @ root.T + M * np.eye(M))
    Kmn = tf.constant(rng.normal(size=(M, leading_rows)))
    Knn = tf.constant(3.0 * M + rng.uniform(size=leading_rows))
    q_mu = tf.constant(rng.normal(size=(M, P)))
    x = tf.constant(rng.normal(size=(P, M * (M + 1) // 2)) * 0.5)
    return Kmm, Kmn, Knn, q_mu, x


@pytest.mark.parametrize("white, blocks", [(True, 1), (True, 2), (True, 4), (False, 1)])
@pytest.mark.parametrize("P", [1, 3])
def test_marginals_kl_and_gradients_equal_base_conditional_and_gauss_kl(rng, white, blocks, P):
    M = 9
    Kmm, Kmn, Knn, q_mu, x = _covariances(rng, M, P)
    layout = TriangularLayout(M, P, blocks)
    sources = [Kmm, Kmn, Knn, q_mu, x]
    results = []
    for which in ("owned", "gpflow"):
        with tf.GradientTape() as tape:
            tape.watch(sources)
            if which == "owned":
                mean, var, kl = owned_marginals_and_kl(Kmn, tf.linalg.cholesky(Kmm), Knn, q_mu, x, layout, white)
            else:
                q_sqrt = tfp.math.fill_triangular(x)
                mean, var = base_conditional(Kmn, Kmm, Knn, q_mu, q_sqrt=q_sqrt, white=white)
                kl = gauss_kl(q_mu, q_sqrt, None if white else Kmm)
            weights = tf.cast(tf.reshape(tf.range(tf.size(mean)), tf.shape(mean)) % 5 + 1, mean.dtype)
            objective = tf.reduce_sum(weights * mean) + tf.reduce_sum(tf.sqrt(weights) * var) + 0.3 * kl
        results.append((mean, var, kl, tape.gradient(objective, sources)))
    (mean, var, kl, grads), (mean_ref, var_ref, kl_ref, grads_ref) = results
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)
    assert_close(kl, kl_ref)
    assert np.all(var.numpy() > 0) and kl.numpy() > 0
    for grad, grad_ref in zip(grads, grads_ref):
        assert_close(grad, grad_ref)


def test_kl_is_computed_only_when_asked(rng):
    Kmm, Kmn, Knn, q_mu, x = _covariances(rng, 5, 2)
    *_, kl = owned_marginals_and_kl(Kmn, tf.linalg.cholesky(Kmm), Knn, q_mu, x, TriangularLayout(5, 2), True, with_kl=False)
    assert kl is None


@pytest.mark.parametrize("arguments, message", [((0, 2), "M ≥ 1"), ((4, 0), "P ≥ 1"), ((4, 2, 5), "num_blocks"), ((4, 2, 0), "num_blocks")])
def test_layout_refuses_bad_sizes(arguments, message):
    with pytest.raises(ValueError, match=message):
        TriangularLayout(*arguments)


def test_unwhitened_algebra_takes_one_block(rng):
    Kmm, Kmn, Knn, q_mu, x = _covariances(rng, 6, 2)
    with pytest.raises(ValueError, match="one block"):
        owned_marginals_and_kl(Kmn, tf.linalg.cholesky(Kmm), Knn, q_mu, x, TriangularLayout(6, 2, 2), False)


# ------------------------------------------------------------------------------------------------
# the layer
# ------------------------------------------------------------------------------------------------


def _layer(rng, whiten=True, input_dim=3, num_inducing=9, outputs=4, mean_function=None):
    """An activated layer with a random q_mu and lower-triangular q_sqrt, so that every term matters."""
    W = rng.normal(size=(num_inducing, input_dim + 1))
    layer = activated_gp_layer(W, outputs, num_data=50, truncation_level=8, lengthscales=1.3, whiten=whiten, mean_function=mean_function)
    layer.q_mu.assign(rng.normal(size=(num_inducing, outputs)))
    layer.q_sqrt.assign(np.tril(rng.normal(size=(outputs, num_inducing, num_inducing))) * 0.4 + np.eye(num_inducing))
    return layer


def _gpflow_predict_and_kl(layer, X, full_cov=False, full_output_cov=False):
    """GPflow's conditional for a shared-independent layer and gauss_kl (with Kuu unwhitened), on the layer's q_sqrt."""
    q_sqrt = tf.convert_to_tensor(layer.q_sqrt)
    mean, cov = shared_independent_conditional(
        X, layer.inducing_variable, layer.kernel, layer.q_mu, q_sqrt=q_sqrt, full_cov=full_cov, full_output_cov=full_output_cov, white=layer.whiten
    )
    K = None if layer.whiten else Kuu(layer.inducing_variable, layer.kernel, jitter=default_jitter())
    return mean + layer.mean_function(X), cov, gauss_kl(layer.q_mu, q_sqrt, K)


def _variables(layer, X):
    return [layer.q_mu.unconstrained_variable, layer.q_sqrt.unconstrained_variable, layer.inducing_variable.inducing_variable.W.unconstrained_variable, X]


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("outputs", [1, 4])
@pytest.mark.parametrize("leading", [(), (3,)])
def test_layer_call_equals_gpflows_conditional_and_kl(rng, whiten, outputs, leading):
    """Inside a call (what a training step runs): the output distribution's mean and variance and the added loss
    KL / N, and their gradients with respect to q_μ, q_sqrt, W and the inputs."""
    layer = _layer(rng, whiten=whiten, outputs=outputs, mean_function=gpflow.mean_functions.Linear(rng.normal(size=(3, outputs))))
    X = tf.Variable(rng.normal(size=leading + (6, 3)))
    assert layer.owns_conditional()
    results = []
    for which in ("owned", "gpflow"):
        with tf.GradientTape() as tape:
            if which == "owned":
                distribution = layer(X)
                mean, var, kl = distribution.loc, distribution.scale.diag ** 2, layer.losses[-1] * layer.num_data
            else:
                mean, var, kl = _gpflow_predict_and_kl(layer, X)
            objective = tf.reduce_sum(tf.sin(mean)) + tf.reduce_sum(tf.sqrt(var)) + kl
        results.append((mean.numpy(), var.numpy(), kl.numpy(), [g.numpy() for g in tape.gradient(objective, _variables(layer, X))]))
    (mean, var, kl, grads), (mean_ref, var_ref, kl_ref, grads_ref) = results
    assert mean.shape == leading + (6, outputs)
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)
    assert_close(kl, kl_ref)
    for grad, grad_ref in zip(grads, grads_ref):
        assert_close(grad, grad_ref)


@pytest.mark.parametrize("whiten", [True, False])
def test_predict_and_prior_kl_outside_a_call(rng, whiten):
    layer = _layer(rng, whiten=whiten)
    X = tf.constant(rng.normal(size=(2, 5, 3)))
    mean, var = layer.predict(X)
    mean_ref, var_ref, kl_ref = _gpflow_predict_and_kl(layer, X)
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)
    assert_close(layer.prior_kl(), kl_ref)


def _count_fill_triangular(monkeypatch):
    calls = []
    original = tfp.bijectors.FillTriangular._forward

    def counting(self, x):
        calls.append(1)
        return original(self, x)

    monkeypatch.setattr(tfp.bijectors.FillTriangular, "_forward", counting)
    return calls


def _owned_calls(monkeypatch):
    calls = []
    original = layers_module.owned_marginals_and_kl

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(layers_module, "owned_marginals_and_kl", spy)
    return calls


@pytest.mark.parametrize(
    "case",
    ["full_cov", "full_output_cov", "gpflow_conditional", "diagonal q_sqrt"],
)
def test_cases_not_owned_are_gpflows_with_q_sqrt_read_once(rng, monkeypatch, case):
    """Full covariances, a q_sqrt that is not gpflux's lower-triangular parameter, and everything inside
    gpflow_conditional() take GPflow's conditional and prior_kl: same values, and one q_sqrt transform per call
    (gpflux's GPLayer evaluates it twice, once in predict and once in prior_kl)."""
    layer = _layer(rng, outputs=2)
    X = tf.constant(rng.normal(size=(5, 3)))
    if case == "diagonal q_sqrt":
        layer.q_sqrt = gpflow.Parameter(rng.uniform(0.5, 1.0, size=(9, 2)), transform=gpflow.utilities.positive())
    if case in ("full_cov", "full_output_cov"):
        setattr(layer, case, True)
    owned = _owned_calls(monkeypatch)
    transforms = _count_fill_triangular(monkeypatch)
    if case == "gpflow_conditional":
        with fast.gpflow_conditional():
            assert not layer.owns_conditional()
            layer(X)
    else:
        assert not layer.owns_conditional(layer.full_cov, layer.full_output_cov)
        layer(X)
    assert not owned
    assert len(transforms) == (0 if case == "diagonal q_sqrt" else 1)
    kl = layer.losses[-1] * layer.num_data
    _, _, kl_ref = _gpflow_predict_and_kl(layer, X)
    assert_close(kl, kl_ref)
    full_cov, full_output_cov = layer.full_cov, layer.full_output_cov
    mean, cov = layer.predict(X, full_cov=full_cov, full_output_cov=full_output_cov)
    expected = _gpflow_predict_and_kl(layer, X, full_cov, full_output_cov)[:2]
    assert cov.shape == expected[1].shape
    assert_close(mean, expected[0])
    assert_close(cov, expected[1])


def test_gpflux_layer_reads_q_sqrt_twice_and_ours_not_at_all(rng, monkeypatch):
    """The count above is not vacuous: gpflux's GPLayer on the same parts transforms q_sqrt twice per call, as does the
    layer inside gpflux_step(); the owned step reads the unconstrained vector and never transforms it."""
    import gpflux

    layer = _layer(rng, outputs=2)
    X = tf.constant(rng.normal(size=(5, 3)))
    upstream = gpflux.layers.GPLayer(layer.kernel, layer.inducing_variable, num_data=50, num_latent_gps=2, mean_function=gpflow.mean_functions.Zero())
    transforms = _count_fill_triangular(monkeypatch)
    upstream(X, training=True)
    assert len(transforms) == 2
    owned = _owned_calls(monkeypatch)
    layer(X)
    assert len(transforms) == 2 and len(owned) == 1
    with layers_module.gpflux_step():  # the comparison switch: gpflux's own step
        assert not layer.owns_conditional()
        layer(X)
    assert len(transforms) == 4 and len(owned) == 1
    _, _, kl_ref = _gpflow_predict_and_kl(layer, X)
    assert_close(layer.losses[-1] * layer.num_data, kl_ref)


def test_symmetric_variances_predictions_keep_the_batched_conditional(rng, monkeypatch):
    """Inside symmetric_variances() (predictions), predict outside a call takes the batched conditional's quadratic
    forms; a call (a step) still takes the owned algebra."""
    layer = _layer(rng, outputs=3)
    X = tf.constant(rng.normal(size=(5, 3)))
    owned = _owned_calls(monkeypatch)
    with fast.symmetric_variances():
        mean, var = layer.predict(X)
        assert not owned
        layer(X)
        assert len(owned) == 1
    mean_ref, var_ref, _ = _gpflow_predict_and_kl(layer, X)
    assert_close(mean, mean_ref)
    assert_close(var, var_ref)


def test_dgp_elbo_and_its_gradient_equal_gpflows(rng, monkeypatch):
    """A whole activated DGP: gpflux's ELBO (one Monte Carlo draw per layer, same seed) and its gradient with the
    owned step equal those with GPflow's conditional and KL (inside gpflow_conditional())."""
    import gpflux

    num_data = 40
    dgp = build_activated_dgp(3, num_data, num_layers=3, num_units=12, seed=0)
    for layer in dgp.f_layers:
        layer.q_mu.assign(0.3 * rng.normal(size=layer.q_mu.shape))
        layer.q_sqrt.assign(np.tril(rng.normal(size=layer.q_sqrt.shape)) * 0.1 + 0.5 * np.eye(layer.q_sqrt.shape[-1]))
    X = rng.normal(size=(num_data, 3))
    Y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(num_data, 1))
    variables = dgp.trainable_variables

    def elbo_and_gradient():
        tf.random.set_seed(7)
        with tf.GradientTape() as tape:
            elbo = dgp.elbo((X, Y))
        return elbo.numpy(), [g.numpy() for g in tape.gradient(elbo, variables)]

    calls = _owned_calls(monkeypatch)
    elbo, gradient = elbo_and_gradient()
    assert len(calls) == 3  # one owned step per layer
    with fast.gpflow_conditional():
        elbo_ref, gradient_ref = elbo_and_gradient()
    assert len(calls) == 3
    tf.random.set_seed(8)
    assert dgp.elbo((X, Y)).numpy() != elbo  # the draws depend on the seed: the equality above is not vacuous
    assert isinstance(dgp, gpflux.models.DeepGP)
    assert abs(elbo - elbo_ref) <= TOLERANCE * abs(elbo_ref)
    for grad, grad_ref in zip(gradient, gradient_ref):
        assert_close(grad, grad_ref)


@pytest.mark.parametrize("whiten", [True, False])
def test_compiled_step_of_a_one_layer_dgp_equals_gpflows(rng, whiten):
    """The ELBO and its gradient traced in a tf.function (as Keras' train step is), for a layer size no other test
    uses (its index maps are first built while a graph is traced); one layer, so that no sample is drawn."""
    num_data = 30
    dgp = build_activated_dgp(2, num_data, num_layers=1, num_units=11, whiten=whiten, seed=1)
    (layer,) = dgp.f_layers
    layer.q_mu.assign(rng.normal(size=layer.q_mu.shape))
    layer.q_sqrt.assign(np.tril(rng.normal(size=layer.q_sqrt.shape)) * 0.2 + np.eye(11))
    X, Y = rng.normal(size=(num_data, 2)), rng.normal(size=(num_data, 1))
    variables = dgp.trainable_variables

    def step():
        with tf.GradientTape() as tape:
            elbo = dgp.elbo((X, Y))
        return elbo, tape.gradient(elbo, variables)

    elbo, gradient = tf.function(step, autograph=False)()
    with fast.gpflow_conditional():
        elbo_ref, gradient_ref = tf.function(step, autograph=False)()
    assert_close(elbo, elbo_ref)
    for grad, grad_ref in zip(gradient, gradient_ref):
        assert_close(grad, grad_ref)
