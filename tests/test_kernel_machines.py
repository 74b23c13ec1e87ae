"""EigenPro 2 / EigenPro 3 (activated_dgp.kernel_machines) against independent solutions:
numpy.linalg.solve, scipy.linalg.lstsq, numpy eigh, gpflow's SGPR."""

import gpflow
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from activated_dgp import ActivationFeature, IKA, ZonalArcCosine, eigen
from activated_dgp.kernel_machines import (
    EigenPro2,
    EigenPro3,
    KernelCenters,
    KernelGram,
    Preconditioner,
    choose_centers,
)


def _problem(n=200, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.column_stack([np.sin(2 * X[:, 0]), np.cos(X[:, 1]) + 0.1 * rng.normal(size=n)])
    return X, y


LAPLACE = dict(lengthscales=1.0)


def test_nystrom_preconditioner_eigenvalues_match_numpy_eigh():
    X, _ = _problem(120)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    pre = Preconditioner.nystrom(kernel, X, q=8)
    reference = np.sort(np.linalg.eigvalsh(kernel(X).numpy()))[::-1][:9] / X.shape[0]
    np.testing.assert_allclose(pre.approximation.eigenvalues.numpy(), reference, rtol=1e-8)
    assert pre.tail == pytest.approx(reference[8], rel=1e-8)
    # the preconditioned Gram matrix K − Ψ D Ψᵀ has top eigenvalue s·μ_(q+1) (flattened spectrum)
    Psi = pre.eigenfunctions(X).numpy()
    flattened = kernel(X).numpy() - Psi @ np.diag(pre.weights.numpy()) @ Psi.T
    assert np.linalg.eigvalsh(flattened).max() == pytest.approx(X.shape[0] * reference[8], rel=1e-6)


def test_blockwise_products_equal_dense():
    X, y = _problem(130, 3)
    kernel = gpflow.kernels.Matern32(lengthscales=0.7)
    Z = X[:37] + 0.1
    alpha = np.random.default_rng(2).normal(size=(37, 2))
    basis = KernelCenters(kernel, Z, block_size=16)
    dense = kernel(X, Z).numpy()
    np.testing.assert_allclose(basis.apply(X, alpha).numpy(), dense @ alpha, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(basis.apply_transpose(X, y).numpy(), dense.T @ y, rtol=1e-12, atol=1e-12)
    gram = KernelGram(kernel, X, block_size=16)
    rows = np.array([3, 50, 129])
    theta = np.random.default_rng(3).normal(size=(130, 2))
    np.testing.assert_allclose(gram.matmul(rows, theta).numpy(), kernel(X).numpy()[rows] @ theta, rtol=1e-12, atol=1e-12)


def test_eigenpro2_solves_the_kernel_system():
    X, y = _problem(200)
    kernel = gpflow.kernels.Exponential(lengthscales=0.2)
    K = kernel(X).numpy()
    theta = np.linalg.solve(K, y)
    model = EigenPro2(kernel, subsample_size=150, num_eigenpairs=50, seed=1).fit(X, y, epochs=150, progress=False)
    residual = np.linalg.norm(K @ model.weights - y) / np.linalg.norm(y)
    assert residual < 1e-3
    assert np.linalg.norm(model.weights - theta) / np.linalg.norm(theta) < 5e-2  # θ error ≤ cond(K) × residual
    np.testing.assert_allclose(model.predict(X[:5]), K[:5] @ model.weights, rtol=1e-10)


def test_eigenpro2_step_is_stable_for_a_large_eigenvalue_ratio():
    X, y = _problem(300)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=2.0)  # fast spectral decay
    model = EigenPro2(kernel, subsample_size=150, num_eigenpairs=10, seed=0)
    model.fit(X, y[:, :1], epochs=60, progress=False)
    pre = model.solver.preconditioner
    assert pre.approximation.eigenvalues.numpy()[0] / pre.tail > 1e2
    losses = model.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.05 * losses[0] and losses.max() <= losses[0] * 1.01


def _least_squares(kernel, X, Z, y):
    Kxz = kernel(X, Z).numpy()
    return Kxz @ scipy.linalg.lstsq(Kxz, y)[0]


@pytest.mark.parametrize(
    "projection",
    ["exact", pytest.param("inexact", marks=pytest.mark.xfail(strict=True, reason="known: 60 full-batch steps with a 4-epoch EigenPro 2 projection stall at ~35 % error (docs/kernel_machines.md)"))],
)
def test_eigenpro3_converges_to_least_squares_over_the_centers(projection):
    X, y = _problem(160)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    Z = choose_centers(X, 15, "kmeans", seed=0)
    fitted = _least_squares(kernel, X, Z, y)
    model = EigenPro3(
        kernel, Z, subsample_size=80, num_eigenpairs=6, projection=projection, projection_subsample=15,
        projection_eigenpairs=4, projection_epochs=4, batch_size=160, power_iterations=10,
    ).fit(X, y, epochs=60, progress=False)
    assert np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted) < 1e-2


def test_paper_update_has_a_biased_fixed_point_and_the_consistent_one_not():
    """Algorithm 2's fixed point solves K(Z,X)(I − Q)(K(X,Z)α − y) = 0 ≠ the normal equations."""
    X, y = _problem(160)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    Z = X[:25] + 0.2
    fitted = _least_squares(kernel, X, Z, y)
    errors = {}
    for update in ("paper", "consistent"):
        model = EigenPro3(kernel, Z, subsample_size=160, num_eigenpairs=30, projection="exact", update=update, batch_size=160, power_iterations=10)
        model.fit(X, y, epochs=150, progress=False)
        errors[update] = np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted)
    print(errors)
    assert errors["consistent"] < 1e-2 and errors["paper"] > 3 * errors["consistent"]


def test_eigenpro3_with_learned_eigenfunctions_converges_to_the_same_solution():
    X, y = _problem(160)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    Z = choose_centers(X, 15, "random", seed=1)
    fitted = _least_squares(kernel, X, Z, y)
    ika = IKA(7, eigen.activation_basis(eigen.kmeans_filters(X, 40), "relu", offsets=np.ones(40))).fit(X, kernel)
    model = EigenPro3(kernel, Z, preconditioner=ika, num_eigenpairs=6, projection="exact", batch_size=160, power_iterations=10)
    model.fit(X, y, epochs=80, progress=False)
    assert np.linalg.norm(model.predict(X) - fitted) / np.linalg.norm(fitted) < 1e-2


def test_checkpoint_resume_equals_uninterrupted_training(tmp_path):
    X, y = _problem(120)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    options = dict(num_centers=20, center_method="random", subsample_size=60, num_eigenpairs=5, projection="inexact",
                   projection_subsample=20, projection_eigenpairs=4, max_batch=40, power_iterations=5)
    full = EigenPro3(kernel, **options).fit(X, y, epochs=4, progress=False)
    EigenPro3(kernel, **options).fit(X, y, epochs=2, checkpoint_dir=tmp_path, progress=False)
    resumed = EigenPro3(kernel, **options).fit(X, y, epochs=4, checkpoint_dir=tmp_path, progress=False)
    np.testing.assert_allclose(resumed.weights, full.weights, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(resumed.history["loss"], full.history["loss"], rtol=1e-10)
    assert len(resumed.history["seconds"]) == 4


@pytest.mark.xfail(strict=True, reason="known: Kuu has condition 2.6e5 and the preconditioned iteration stalls at ~13 % from least squares (docs/kernel_machines.md)")
def test_activated_basis_matches_sgpr_mean():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(150, 1))
    y = np.sin(3 * X) + 0.05 * rng.normal(size=X.shape)
    kernel = ZonalArcCosine(input_dim=1, truncation_level=8, variance=1.0, lengthscales=np.ones(2))
    feature = ActivationFeature(rng.normal(size=(6, 2)), activation="softplus", truncation_level=8)
    noise = 1.1e-6
    sgpr = gpflow.models.SGPR((X, y), kernel, feature, noise_variance=noise)
    mean = sgpr.predict_f(X)[0].numpy()
    # SGPR's mean is the least-squares fit over span{g̃_m} with ridge σ² θᵀ Kuu θ; with σ² small both coincide
    model = EigenPro3(kernel, feature=feature, subsample_size=150, num_eigenpairs=3, projection="exact", batch_size=150, power_iterations=10)
    model.fit(X, y, epochs=200, progress=False)
    assert np.linalg.norm(model.predict(X) - mean) / np.linalg.norm(mean) < 2e-2


class _NotPSD(gpflow.kernels.Kernel):
    def K(self, X, X2=None):
        X2 = X if X2 is None else X2
        return tf.tanh(4.0 * tf.matmul(X, X2, transpose_b=True) - 1.0)

    def K_diag(self, X):
        return tf.tanh(4.0 * tf.reduce_sum(X**2, axis=1) - 1.0)


@pytest.mark.parametrize(
    "case, message",
    [
        ("too_many_centers", "more centers than data"),
        ("nan_inputs", "NaN or inf"),
        ("q_not_below_s", "must be smaller than the Nyström subsample"),
        ("not_psd", "negative eigenvalues"),
        ("target_rows", "rows but the inputs have"),
        ("unknown_projection", "unknown projection"),
    ],
)
def test_bad_inputs_raise_clear_errors(case, message):
    X, y = _problem(50)
    kernel = gpflow.kernels.Exponential(**LAPLACE)
    with pytest.raises(ValueError, match=message):
        if case == "too_many_centers":
            EigenPro3(kernel, num_centers=51).fit(X, y, epochs=1, progress=False)
        elif case == "nan_inputs":
            X[3, 1] = np.nan
            EigenPro2(kernel, subsample_size=20, num_eigenpairs=5).fit(X, y, epochs=1, progress=False)
        elif case == "q_not_below_s":
            EigenPro2(kernel, subsample_size=20, num_eigenpairs=20).fit(X, y, epochs=1, progress=False)
        elif case == "not_psd":
            EigenPro2(_NotPSD(), subsample_size=40, num_eigenpairs=5).fit(X, y, epochs=1, progress=False)
        elif case == "target_rows":
            EigenPro3(kernel, num_centers=10).fit(X, y[:-1], epochs=1, progress=False)
        elif case == "unknown_projection":
            EigenPro3(kernel, num_centers=10, projection="approximate")
