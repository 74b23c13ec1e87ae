"""One kernel convention across Nystrom, NeuralEF and IKA (the kernel in the constructor or in ``fit``), Nyström
under a float32 GPflow default, and IKA's k-means filters (scikit-learn), against dense computations here."""

import gpflow
import numpy as np
import pytest
import scipy.linalg

from activated_dgp.eigen import IKA, NeuralEF, Nystrom, activation_basis, kmeans_filters


def rbf_gram(A, B, lengthscale=0.8):
    return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / lengthscale**2)


def test_ika_takes_its_kernel_in_the_constructor_or_in_fit(rng):
    X = rng.normal(size=(80, 2))
    W = X[:12]
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.8)
    ika = IKA(3, activation_basis(W, "tanh"), kernel=kernel).fit(X)
    same = IKA(3, activation_basis(W, "tanh")).fit(X, kernel)
    B = np.tanh(X @ W.T + activation_basis(W, "tanh").offsets.numpy()[None, :])
    values = scipy.linalg.eigh(B.T @ rbf_gram(X, X) @ B / 80**2, B.T @ B / 80, eigvals_only=True)[::-1][:3]
    np.testing.assert_allclose(ika.eigenvalues.numpy(), values, rtol=1e-8)
    np.testing.assert_allclose(same.eigenvalues.numpy(), values, rtol=1e-8)
    np.testing.assert_allclose(np.abs(ika(X[:5]).numpy()), np.abs(same(X[:5]).numpy()), rtol=1e-10)
    with pytest.raises(ValueError, match="no kernel"):
        IKA(3, activation_basis(W, "tanh")).fit(X)
    # the same keyword in the other two
    assert Nystrom(2, kernel=kernel).kernel is kernel
    assert NeuralEF(2, kernel=kernel, input_dim=2) is not None


def test_nystrom_under_a_float32_default(rng):
    X = rng.normal(size=(60, 2))
    gpflow.config.set_default_float(np.float32)
    try:
        kernel = gpflow.kernels.SquaredExponential(lengthscales=0.8)
        assert kernel.lengthscales.dtype == np.float32
        nystrom = Nystrom(4, kernel=kernel).fit(X)
        psi = nystrom(X[:7]).numpy()
    finally:
        gpflow.config.set_default_float(np.float64)
    values, vectors = np.linalg.eigh(rbf_gram(X, X))
    np.testing.assert_allclose(nystrom.eigenvalues.numpy(), values[::-1][:4] / 60, rtol=1e-5)
    np.testing.assert_allclose(np.abs(psi), np.abs(np.sqrt(60) * vectors[:7, ::-1][:, :4]), atol=1e-4)


def test_kmeans_filters_find_the_means_of_separated_clusters(rng):
    """On well-separated blobs Lloyd's algorithm from any k-means++ seeding ends at the blobs' sample means."""
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [20.0, 5.0]])
    labels = np.repeat(np.arange(5), 40)
    X = centres[labels] + 0.3 * rng.normal(size=(200, 2))
    means = np.array([X[labels == c].mean(0) for c in range(5)])
    for seed in (0, 1, 2):
        W = kmeans_filters(X, 5, seed=seed)
        order = np.argsort(W[:, 0] * 100 + W[:, 1])
        np.testing.assert_allclose(W[order], means[np.argsort(means[:, 0] * 100 + means[:, 1])], rtol=0, atol=1e-12)
    seeds = kmeans_filters(X, 5, seed=0, iterations=0)  # k-means++ seeds are data points
    assert all(np.any(np.all(X == w, axis=1)) for w in seeds)
    np.testing.assert_allclose(np.linalg.norm(kmeans_filters(X, 5, normalise=True), axis=1), 1.0)
    with pytest.raises(ValueError, match="k-means filters"):
        kmeans_filters(X, 201)
