"""Nyström, IKA and Mercer-feature ridge regression against independent truths.

* Funk–Hecke: for uniform data on S^2 the arc-cosine kernel's operator eigenvalues are λ_n with
  multiplicity N_n^3 = 1, 3, 5 (levels 0, 1, 2).
* Eigen-equation and orthonormality of the Nyström eigenfunctions on the landmarks.
* IKA vs Nyström kernel-approximation error on held-out data (IKA paper §4.3).
* Feature ridge with Nyström Mercer features → exact kernel ridge regression.
"""

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import activated_dgp as adgp
from activated_dgp.eigen.feature_regression import FeatureRidge, kernel_ridge_regression, ridge_regression
from activated_dgp.eigen.ika import IKA, activation_basis, kmeans_filters, random_data_filters
from activated_dgp.eigen.kernel_sources import PrecomputedGram
from activated_dgp.eigen.nystrom import Nystrom

LEVEL_TOLERANCE = 0.05  # relative error of the level-mean eigenvalues


def _sphere(n, d, seed):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def sphere_problem():
    gpflow.config.set_default_float(np.float64)
    X = _sphere(1500, 3, seed=0)
    kernel = adgp.ZonalArcCosine(input_dim=3, truncation_level=10, bias=False, lengthscales=1.0)
    return X, kernel


def _level_errors(mu):
    """Relative errors of the level-mean eigenvalues (levels 0, 1, 2) against Funk–Hecke λ_n."""
    lam = adgp.zonal.arc_cosine_coefficients(3, 10)
    sizes = [int(adgp.zonal.num_harmonics(n, 3)) for n in range(3)]
    assert sizes == [1, 3, 5]
    errors, start = [], 0
    for n, size in enumerate(sizes):
        errors.append(abs(np.mean(mu[start : start + size]) / lam[n] - 1.0))
        start += size
    return np.array(errors)


def test_nystrom_recovers_funk_hecke_levels(sphere_problem):
    X, kernel = sphere_problem
    nystrom = Nystrom(9).fit(X, kernel)
    mu = nystrom.eigenvalues.numpy()
    assert np.all(np.diff(mu) <= 0)
    errors = _level_errors(mu)
    assert np.all(errors < LEVEL_TOLERANCE), errors
    # the gap to level 3 (λ_3 = 0, next non-zero λ_4 ≈ 6.5e-4) is visible
    assert mu[-1] > 10 * adgp.zonal.arc_cosine_coefficients(3, 10)[4]


@pytest.mark.parametrize("filters", ["data", "kmeans"])
def test_ika_recovers_funk_hecke_levels(sphere_problem, filters):
    X, kernel = sphere_problem
    W = random_data_filters(X, 60, seed=1) if filters == "data" else kmeans_filters(X, 60, seed=1, iterations=20)
    ika = IKA(9, activation_basis(W, "relu")).fit(X, kernel)
    mu = ika.eigenvalues.numpy()
    assert np.all(np.diff(mu) <= 0)
    errors = _level_errors(mu)
    assert np.all(errors < LEVEL_TOLERANCE), errors
    psi = ika(X).numpy()
    np.testing.assert_allclose(psi.T @ psi / len(X), np.eye(9), atol=1e-8)


def test_nystrom_orthonormal_and_eigen_equation_on_landmarks(sphere_problem):
    X, kernel = sphere_problem
    N = len(X)
    nystrom = Nystrom(9).fit(X, kernel)
    psi = nystrom(X).numpy()
    np.testing.assert_allclose(psi.T @ psi / N, np.eye(9), atol=1e-8)
    # the extension evaluated at the landmarks is ψ there: (1/N) G ψ(X) = μ ψ(X), ψ(X) = √N U
    G = kernel(tf.constant(X)).numpy()
    mu = nystrom.eigenvalues.numpy()
    np.testing.assert_allclose(G @ psi / N, psi * mu[None, :], atol=1e-9)
    lam, U = np.linalg.eigh(G)
    for j in range(3):  # level 0 and the level-1 eigenvalues are simple (non-degenerate) on a sample
        u = U[:, -1 - j] * np.sqrt(N)
        assert min(np.abs(psi[:, j] - u).max(), np.abs(psi[:, j] + u).max()) < 1e-7
    # the same from a precomputed Gram matrix with row indices as inputs
    from_gram = Nystrom(9).fit(np.arange(N), PrecomputedGram(G))
    np.testing.assert_allclose(from_gram.eigenvalues.numpy(), mu, rtol=1e-10)
    np.testing.assert_allclose(np.abs(from_gram(np.arange(10)).numpy()), np.abs(psi[:10]), atol=1e-8)


def test_lanczos_solver_matches_lapack_top_eigenpairs():
    """The Lanczos solver (ARPACK) against scipy.linalg.eigh's LAPACK subset driver on the same Gram
    matrix: the top-k eigenvalues, and each eigenvector up to sign (the top 6 SE eigenvalues on a
    1-D uniform sample are simple)."""
    import scipy.linalg

    gpflow.config.set_default_float(np.float64)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.7)
    X = np.random.default_rng(3).uniform(-2, 2, (600, 1))
    N, k = len(X), 6
    lanczos = Nystrom(k, solver="lanczos").fit(X, kernel)
    G = kernel(tf.constant(X)).numpy()
    lam, U = scipy.linalg.eigh(G, subset_by_index=[N - k, N - 1], driver="evr")
    np.testing.assert_allclose(lanczos.eigenvalues.numpy(), lam[::-1] / N, rtol=1e-9)
    psi = lanczos(X).numpy()
    for j in range(k):
        u = U[:, -1 - j] * np.sqrt(N)
        assert min(np.abs(psi[:, j] - u).max(), np.abs(psi[:, j] + u).max()) < 1e-6
    with pytest.raises(ValueError, match="unknown Nyström solver 'qr'"):
        Nystrom(k, solver="qr")


def _mean_absolute_error(approximation, kernel, X_test):
    Phi = approximation.features(X_test).numpy()
    return np.abs(kernel(tf.constant(X_test)).numpy() - Phi @ Phi.T).mean()


@pytest.mark.parametrize("filters", ["data", "kmeans"])
def test_ika_kernel_error_not_worse_than_nystrom(filters):
    """IKA §4.3: RBF kernel on unit-norm data, n filters, sample size S, rank 20.

    The paper's Nyström baseline uses the n filter points as landmarks while IKA uses the same n
    filters as basis and S ≫ n samples: IKA must be at least as accurate on held-out pairs. Against
    Nyström on all S samples (a rank-20 truncation of an S-dimensional span, which contains IKA's
    span here) IKA can at best tie: it must be within 5 %.
    """
    D, S, n, rank, lengthscale = 5, 1000, 64, 20, 0.8
    Z = np.random.default_rng(0).normal(size=(S + 400, D)) * np.linspace(1.0, 0.5, D)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    X, X_test = Z[:S], Z[S:]
    kernel = gpflow.kernels.SquaredExponential(lengthscales=lengthscale)
    W = random_data_filters(X, n, seed=0) if filters == "data" else kmeans_filters(X, n, seed=0, iterations=20)
    # on unit-norm inputs exp(w·x/ℓ²) ∝ the RBF bump at w
    ika = IKA(rank, activation_basis(W / lengthscale**2, "exp")).fit(X, kernel)
    error_ika = _mean_absolute_error(ika, kernel, X_test)
    error_nystrom_filters = _mean_absolute_error(Nystrom(rank).fit(W, kernel), kernel, X_test)
    error_nystrom_samples = _mean_absolute_error(Nystrom(rank).fit(X, kernel), kernel, X_test)
    assert error_ika <= error_nystrom_filters, (error_ika, error_nystrom_filters)
    assert error_ika <= 1.05 * error_nystrom_samples, (error_ika, error_nystrom_samples)


def test_feature_ridge_approaches_kernel_ridge():
    X = _sphere(400, 3, seed=3)
    X_train, X_test = X[:300], X[300:]
    f = lambda Z: np.sin(3 * Z[:, 0]) + Z[:, 1] * Z[:, 2]  # noqa: E731
    y = f(X_train) + 0.1 * np.random.default_rng(4).normal(size=len(X_train))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.7)
    regularisation = 1e-3
    exact = kernel_ridge_regression(kernel, X_train, y, regularisation).predict(X_test).numpy()
    gaps = []
    for k in (3, 10, 30, 100):
        nystrom = Nystrom(k).fit(X_train, kernel)
        model = FeatureRidge(nystrom.features, regularisation).fit(X_train, y)
        gaps.append(np.sqrt(np.mean((model.predict(X_test).numpy() - exact) ** 2)))
    gaps = np.array(gaps)
    assert np.all(np.diff(gaps) < 0), gaps
    assert gaps[-1] < 1e-3 * np.sqrt(np.mean(exact**2)), gaps
    # ridge_regression is the closed form (ΦᵀΦ + N r I)⁻¹ Φᵀ y, multi-output too
    Phi = Nystrom(10).fit(X_train, kernel).features(X_train).numpy()
    Y = np.stack([y, 2 * y], axis=1)
    w = ridge_regression(Phi, Y, regularisation).numpy()
    np.testing.assert_allclose(w, np.linalg.solve(Phi.T @ Phi + 300 * regularisation * np.eye(10), Phi.T @ Y), rtol=1e-8)


def test_bad_inputs_raise():
    kernel = gpflow.kernels.SquaredExponential()
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="exceeds"):
        Nystrom(21).fit(X, kernel)
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Nystrom(3).fit(X_nan, kernel)
    basis = activation_basis(random_data_filters(X, 5, seed=0), "tanh")
    with pytest.raises(ValueError, match="NaN"):
        IKA(3, basis).fit(X_nan, kernel)
    with pytest.raises(ValueError, match="exceeds"):
        IKA(6, basis).fit(X, kernel)
    with pytest.raises(ValueError, match="basis returned shape"):
        IKA(2, lambda Z: np.ones((len(Z) + 1, 4))).fit(X, kernel)
    with pytest.raises(ValueError, match="basis returned shape"):
        IKA(2, lambda Z: np.ones(len(Z))).fit(X, kernel)
    fitted = IKA(2, lambda Z: np.asarray(Z)[:, :2] if len(Z) == 20 else np.ones((len(Z), 3))).fit(X, kernel)
    with pytest.raises(ValueError, match="basis returned shape"):
        fitted(X[:5])
    with pytest.raises(ValueError, match="n = 30 filters"):
        random_data_filters(X, 30)


def test_warnings_only_when_the_jitter_changes_the_eigenpairs_and_for_non_psd_gram():
    kernel = gpflow.kernels.SquaredExponential()
    X = np.random.default_rng(0).normal(size=(50, 2))
    W = random_data_filters(X, 4, seed=0)
    offsets = np.linspace(-0.5, 0.5, 4)
    # an exactly repeated filter makes P̃ singular, but the redundant direction carries no eigenvalue: the
    # eigenpairs equal those of the basis without the copy (silently)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        redundant = IKA(3, activation_basis(np.concatenate([W, W[:1]]), "tanh", offsets=np.append(offsets, offsets[0]))).fit(X, kernel)
    plain = IKA(3, activation_basis(W, "tanh", offsets=offsets)).fit(X, kernel)
    np.testing.assert_allclose(redundant.eigenvalues.numpy(), plain.eigenvalues.numpy(), rtol=1e-8)
    np.testing.assert_allclose(np.abs(redundant(X).numpy()), np.abs(plain(X).numpy()), rtol=1e-6, atol=1e-8)
    # a nearly dependent pair that the top eigenfunction needs apart: b = [x1, x1 + δ x2], δ = 5e-6 (condition
    # number ≈ 1e11) under the linear kernel x·y with x2's variance larger, whose top eigenfunction is ∝ x2 =
    # (b2 − b1)/δ with eigenvalue mean(x2²) (Nyström, exact here): the jitter shrinks it, and the warning says so
    Z = np.random.default_rng(1).normal(size=(200, 2)) * np.array([1.0, 3.0])
    basis = lambda A: np.stack([A[:, 0], A[:, 0] + 5e-6 * A[:, 1]], axis=1)  # noqa: E731
    with pytest.warns(RuntimeWarning, match="eigenpairs are degraded"):
        degraded = IKA(1, basis).fit(Z, gpflow.kernels.Linear())
    assert degraded.eigenvalues.numpy()[0] < 0.9 * np.mean(Z[:, 1] ** 2)
    G = np.diag([3.0, 2.0, 1.0, -0.5])
    with pytest.warns(RuntimeWarning, match="not positive semi-definite"):
        Nystrom(2).fit(np.arange(4), G)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Nystrom(2).fit(X, kernel)


def test_default_offsets_give_the_nystrom_eigenpairs_off_the_sphere():
    """The example of docs/tour.md: k-means ReLU filters on 2-D Gaussian data under an RBF kernel. Without offsets the
    span is positively homogeneous and misses the eigenfunctions; the default offsets (hinges through the filters)
    recover Nyström's eigenvalues (a dense eigendecomposition of the 2,000-point Gram matrix) within 2 %."""
    X = np.random.default_rng(0).normal(size=(2000, 2))
    rbf = gpflow.kernels.SquaredExponential()
    reference = np.linalg.eigvalsh(rbf(X).numpy())[::-1][:10] / len(X)
    W = kmeans_filters(X, 128)
    with_offsets = IKA(10, activation_basis(W)).fit(X, rbf).eigenvalues.numpy()
    without = IKA(10, activation_basis(W, offsets=None)).fit(X, rbf).eigenvalues.numpy()
    assert np.max(np.abs(with_offsets - reference) / reference) < 0.02
    assert np.max(np.abs(without - reference) / reference) > 0.2


def test_checkpoint_round_trip(tmp_path):
    X = np.random.default_rng(0).normal(size=(60, 2))
    X_new = np.random.default_rng(1).normal(size=(7, 2))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.7, variance=1.3)
    nystrom = Nystrom(5).fit(X, kernel)
    path = tf.train.Checkpoint(model=nystrom).write(str(tmp_path / "nystrom"))
    restored = Nystrom(5, kernel=gpflow.kernels.SquaredExponential())  # default hyperparameters, restored below
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored(X_new).numpy(), nystrom(X_new).numpy())
    np.testing.assert_array_equal(restored.features(X_new).numpy(), nystrom.features(X_new).numpy())

    ika = IKA(4, activation_basis(kmeans_filters(X, 10, seed=0), "tanh", offsets=np.linspace(-1, 1, 10))).fit(X, kernel)
    path = tf.train.Checkpoint(model=ika).write(str(tmp_path / "ika"))
    restored_ika = IKA(4, activation_basis(np.zeros((10, 2)), "tanh"))
    tf.train.Checkpoint(model=restored_ika).read(path).assert_consumed()
    np.testing.assert_array_equal(restored_ika.features(X_new).numpy(), ika.features(X_new).numpy())
