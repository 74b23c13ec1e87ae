"""Hidden-layer samples from one draw of the inducing outputs per Monte Carlo sample: each row's distribution is the
marginal that GPflow's conditional gives, and predictions made from them do not depend on the batching.

Truths: GPflow's own conditional (``GPLayer.predict`` under ``gpflow_conditional``, which switches the library's
registered conditional off) for the mean and variance at fixed inputs, checked within Monte Carlo error.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import activated_dgp as adgp
from activated_dgp.deep.inducing_samples import samples_from_inducing_draws, shares_inducing_variables
from activated_dgp.zonal.conditionals import gpflow_conditional


def _dgp(whiten: bool):
    network = adgp.build_activated_nn(3, num_layers=2, num_units=12, layer_widths=[4], output_dim=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dgp = adgp.dgp_from_keras(network, 100, whiten=whiten).dgp
    rng = np.random.default_rng(1)
    for layer in dgp.f_layers:  # a q(u) with a full, non-trivial covariance
        shape = layer.q_sqrt.shape
        scale = 0.5 if whiten else 0.05
        layer.q_sqrt.assign(np.tril(scale * rng.normal(size=shape)) + scale * np.eye(shape[-1]))
    return dgp


@pytest.mark.parametrize("whiten", [True, False])
def test_each_row_has_gpflows_marginal(whiten):
    dgp = _dgp(whiten)
    layer = dgp.f_layers[1]
    assert shares_inducing_variables(layer)
    H = np.random.default_rng(2).normal(size=(4, 4))  # four fixed inputs of the second layer
    S = 40_000
    generator = tf.random.Generator.from_seed(3)
    samples = samples_from_inducing_draws(
        layer, tf.tile(tf.constant(H)[None], [S, 1, 1]), lambda shape, dtype: generator.normal(shape, dtype=dtype),
        lambda shape, dtype: generator.normal(shape, dtype=dtype),
    ).numpy()  # [S, 4, P]
    with gpflow_conditional():
        mean, var = (t.numpy() for t in layer.predict(tf.constant(H), full_cov=False, full_output_cov=False))
    standard_error = np.sqrt(var / S)
    assert np.all(np.abs(samples.mean(0) - mean) < 5 * standard_error)
    # the sample variance's standard error is about var · √(2 / S) for Gaussian rows
    assert np.all(np.abs(samples.var(0) - var) < 5 * var * np.sqrt(2 / S))


def test_predictions_do_not_depend_on_the_batching():
    dgp = _dgp(True)
    X = np.random.default_rng(4).normal(size=(23, 3))
    mean, var = adgp.predict_y(dgp, X, num_samples=16, seed=5)
    mean_b, var_b = adgp.predict_y(dgp, X, num_samples=16, seed=5, batch_size=4)
    np.testing.assert_allclose(mean_b, mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(var_b, var, rtol=0, atol=1e-12)
    other, _ = adgp.predict_y(dgp, X, num_samples=16, seed=6)
    assert np.max(np.abs(other - mean)) > 1e-6  # the seed matters: the draws are not constant
