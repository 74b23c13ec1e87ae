"""ZonalKernel / ZonalArcCosine against GPflow's closed-form kernels, plus dtype and bad-input behaviour."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from check_shapes.exceptions import ShapeMismatchError

from activated_dgp import ActivationFeature, ZonalArcCosine
from activated_dgp.zonal import ZonalKernel, zonal_matern52_shape
from activated_dgp.zonal.spectra import arc_cosine_shape


def _gpflow_arc_cosine(lengthscales, variance):
    lengthscales = np.asarray(lengthscales)
    return gpflow.kernels.ArcCosine(
        order=1,
        variance=variance,
        weight_variances=1.0 / lengthscales[:-1] ** 2,
        bias_variance=1.0 / lengthscales[-1] ** 2,
    )


@pytest.mark.parametrize("input_dim", [1, 2, 4])
def test_converges_to_gpflow_arc_cosine(input_dim, rng):
    lengthscales = rng.uniform(0.5, 2.0, size=input_dim + 1)
    X, X2 = rng.normal(size=(25, input_dim)), rng.normal(size=(15, input_dim))
    reference = _gpflow_arc_cosine(lengthscales, 1.7)(X, X2).numpy()
    errors = []
    for truncation_level in (5, 10, 20, 40, 80):
        kernel = ZonalArcCosine(input_dim, truncation_level, variance=1.7, lengthscales=lengthscales, threshold=0.0)
        errors.append(np.max(np.abs(kernel(X, X2).numpy() - reference)) / np.max(np.abs(reference)))
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    assert errors[-1] < 2e-4, errors


def test_diag_matches_full_and_kernel_is_psd(rng):
    kernel = ZonalArcCosine(3, 12, variance=0.8, lengthscales=rng.uniform(0.5, 2, 4))
    X = rng.normal(size=(60, 3))
    K = kernel(X).numpy()
    np.testing.assert_allclose(kernel(X, full_cov=False).numpy(), np.diag(K), rtol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-10 * np.abs(K).max()
    np.testing.assert_allclose(K, K.T, atol=1e-14)


def test_eigenvalues_are_the_arc_cosine_spectrum():
    kernel = ZonalArcCosine(2, 10)  # d = 3
    np.testing.assert_allclose(kernel.eigenvalues[:3], [0.375, 1 / 6, 3 / 128], rtol=1e-12)
    assert kernel.dimension == 3 and kernel.eigenvalues.shape == (10,)


def test_unit_inputs_without_bias_give_the_plain_zonal_kernel(rng):
    """bias=False, ℓ = 1: on the sphere the kernel is v·s(x·x'); compare with GPflow's Matérn-5/2
    of the Euclidean (chordal) distance, an independent implementation of the same function."""
    X = rng.normal(size=(20, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    kernel = ZonalKernel(zonal_matern52_shape, 3, truncation_level=40, variance=2.0, bias=False, threshold=0.0)
    reference = gpflow.kernels.Matern52(variance=2.0, lengthscales=1.0)(X).numpy()
    np.testing.assert_allclose(kernel(X).numpy(), reference, atol=5e-4)
    assert np.all(kernel.eigenvalues > 0)  # Matérn has a full spectrum (Fig. C.2)


def test_float32_kernel_and_covariances(rng):
    X = rng.normal(size=(30, 2))
    W = rng.normal(size=(7, 3))
    results = {}
    for dtype in (np.float64, np.float32):
        with gpflow.config.as_context(gpflow.config.Config(float=dtype)):
            kernel = ZonalArcCosine(2, 15, lengthscales=[1.0, 1.5, 0.8])
            feature = ActivationFeature(W.astype(dtype), "softplus", 15)
            K = kernel(X.astype(dtype))
            Kuf = gpflow.covariances.Kuf(feature, kernel, X.astype(dtype))
            Kuu = gpflow.covariances.Kuu(feature, kernel)
            assert K.dtype == dtype and Kuf.dtype == dtype and Kuu.dtype == dtype
            results[dtype] = [K.numpy(), Kuf.numpy(), Kuu.numpy()]
    for single, double in zip(results[np.float32], results[np.float64]):
        np.testing.assert_allclose(single, double, rtol=1e-4, atol=1e-4 * np.abs(double).max())


def test_gradients_wrt_hyperparameters_and_inputs_are_finite(rng):
    kernel = ZonalArcCosine(2, 10, lengthscales=[1.0, 2.0, 0.5])
    X = tf.constant(rng.normal(size=(10, 2)))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(X)
        value = tf.reduce_sum(kernel(X))
    for gradient in tape.gradient(value, [X, *kernel.trainable_variables]):
        assert np.all(np.isfinite(gradient.numpy()))


def test_bad_inputs_raise_value_errors(rng):
    kernel = ZonalArcCosine(3, 10)
    with pytest.raises(ValueError, match="3 columns"):
        kernel(rng.normal(size=(5, 4)))
    with pytest.raises(ShapeMismatchError, match="K_diag"):  # GPflow's shape checks: [batch..., N, D]
        kernel.K_diag(rng.normal(size=3))
    with pytest.raises(ValueError, match="truncation_level must be ≥ 1"):
        ZonalArcCosine(3, 0)
    with pytest.raises(ValueError, match="input_dim"):
        ZonalArcCosine(0, 5)
    with pytest.raises(ValueError, match="lengthscales"):
        ZonalArcCosine(3, 5, lengthscales=[1.0, 1.0])
    with pytest.raises(ValueError, match="not positive definite"):
        ZonalKernel(lambda t: -t, 2, 5)


def test_values_are_checked_at_the_entry_points_not_in_every_kernel_call(rng):
    """NaN/inf checks cost a pass over every minibatch, so K and Kuf do not make them; the public entry
    points (fit, predict, conversion) do, once (tests/test_reliability.py covers each of them)."""
    from activated_dgp import build_activated_dgp, predict_y

    bad = rng.normal(size=(5, 3))
    bad[2, 1] = np.nan
    assert np.isnan(ZonalArcCosine(3, 10).K(bad).numpy()[2]).all()  # the kernel itself: no check, no cost
    graph = tf.function(ZonalArcCosine(3, 10).K).get_concrete_function(tf.TensorSpec([None, 3], tf.float64)).graph
    assert not [op for op in graph.get_operations() if "Assert" in op.type or "CheckNumerics" in op.type]
    dgp = build_activated_dgp(3, 10, num_layers=1, num_units=4, truncation_level=5)
    with pytest.raises(ValueError, match=r"X contains NaN or inf in rows 2"):
        predict_y(dgp, bad)


@pytest.mark.parametrize("bias", [True, False])
def test_batched_inputs_follow_gpflow_shape_conventions(bias, rng):
    """[batch..., N, D] inputs: K(X) is [batch..., N, N], K(X, X2) is [batch..., N, batch2..., N2],
    K_diag [batch..., N], Kuf [M, batch..., N]; each block equals the kernel of that slice, whose values
    are checked elsewhere against gpflow's ArcCosine."""
    kernel = ZonalArcCosine(3, 10, lengthscales=[1.0, 2.0, 0.5, 1.5][: 3 + bias], bias=bias)
    X, X2 = rng.normal(size=(2, 3, 4, 3)), rng.normal(size=(5, 2, 3))
    full, cross, diag = kernel.K(X).numpy(), kernel.K(X, X2).numpy(), kernel.K_diag(X).numpy()
    assert full.shape == (2, 3, 4, 4) and cross.shape == (2, 3, 4, 5, 2) and diag.shape == (2, 3, 4)
    feature = ActivationFeature(rng.normal(size=(6, 3 + bias)), "relu", 10)
    Kuf = gpflow.covariances.Kuf(feature, kernel, X).numpy()
    assert Kuf.shape == (6, 2, 3, 4)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(full[i, j], kernel.K(X[i, j]).numpy(), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(diag[i, j], np.diag(kernel.K(X[i, j]).numpy()), rtol=1e-12)
            np.testing.assert_allclose(Kuf[:, i, j], gpflow.covariances.Kuf(feature, kernel, X[i, j]).numpy(), rtol=1e-12, atol=1e-14)
            for k in range(5):
                np.testing.assert_allclose(cross[i, j, :, k], kernel.K(X[i, j], X2[k]).numpy(), rtol=1e-12, atol=1e-14)
