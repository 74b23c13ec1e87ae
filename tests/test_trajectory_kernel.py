"""The SGD-trajectory kernel (activated_dgp.eigen.trajectory): the kernel against its definition in numpy, NeuralEF's
eigenpairs of it against numpy's eigh of the dense empirical covariance (Nyström-normalised: the eigenvalues of
K / N), and the function-space predictive against Gauss–Hermite quadrature."""

from __future__ import annotations

import numpy as np
import pytest

from activated_dgp.eigen import function_space_probabilities, sgd_trajectory_kernel, trajectory_eigenfunctions


def _trajectory(N: int = 300, M: int = 400, seed: int = 0):
    """Inputs X [N, 2] and function values [M, N, 2] of 'iterates' g_i(x) = Σ_r a_ir s_r sin(w_r·x + b_r) (plus an
    offset common to all iterates, which centring removes), with decaying scales s_r: a spectrum with a clear gap."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, 2))
    W, b = rng.normal(size=(6, 2)), rng.uniform(0, 2 * np.pi, 6)
    features = np.sin(X @ W.T + b) * np.array([3.0, 1.5, 0.8, 0.3, 0.1, 0.05])  # [N, 6]
    values = np.stack([rng.normal(size=(M, 6)) @ features.T + 5.0 * features[:, 0] for _ in range(2)], axis=2)
    return X, values


def test_kernel_is_the_covariance_of_the_iterates():
    _, values = _trajectory(N=50, M=30)
    sources = sgd_trajectory_kernel(values)
    assert len(sources) == 2
    for c, source in enumerate(sources):
        dense = np.cov(values[:, :, c].T, bias=True)  # (1/M) Σ_i (g_i − ḡ)(g_i − ḡ)ᵀ
        rows = np.arange(50)
        np.testing.assert_allclose(source.gram(rows).numpy(), dense, rtol=1e-12, atol=1e-12 * np.abs(dense).max())


def test_neuralef_eigenvalues_match_the_dense_eigendecomposition():
    X, values = _trajectory()
    models = trajectory_eigenfunctions(X, values[:, :, :1], num_eigenpairs=3, num_steps=400, oversampling=2,
                                       batch_size=128, learning_rate=3e-3)
    K = np.cov(values[:, :, 0].T, bias=True)
    reference, vectors = np.linalg.eigh(K / len(X))
    reference, vectors = reference[::-1][:3], vectors[:, ::-1][:, :3]
    assert reference[0] / reference[1] > 2 and reference[1] / reference[2] > 2  # a gap: the pairs are well defined
    np.testing.assert_allclose(models[0].eigenvalues.numpy(), reference, rtol=0.03)  # measured ≤ 0.9 % over seeds 0-2
    psi = models[0](X).numpy()
    for j in range(3):  # the top eigenfunctions on the training points: |cos| to eigh's eigenvectors
        cosine = abs(psi[:, j] @ vectors[:, j]) / np.linalg.norm(psi[:, j])
        assert cosine > 0.98, (j, cosine)


def test_function_space_predictive_against_quadrature():
    """Two classes, f₁ = 0 and f₀ ~ N(m, v(x)), v = Σ_j λ_j ψ_j(x)²: p(y = 0 | x) = E[σ(f₀)], by Gauss–Hermite."""
    rng = np.random.default_rng(0)
    N = 5
    mean = np.stack([rng.normal(size=N), np.zeros(N)], axis=1)
    psi, lam = rng.normal(size=(N, 3)), np.array([1.0, 0.4, 0.1])
    S = 40_000
    p = function_space_probabilities(mean, [psi, np.zeros((N, 0))], [lam, np.zeros(0)], num_samples=S, seed=1, chunk=4096)
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    sd = np.sqrt((psi**2) @ lam)
    exact = (weights[None] / np.sqrt(2 * np.pi) / (1 + np.exp(-(mean[:, :1] + sd[:, None] * nodes[None])))).sum(1)
    np.testing.assert_allclose(p[:, 0], exact, atol=4 * 0.5 / np.sqrt(S))
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="at least 2 iterates"):
        sgd_trajectory_kernel(np.zeros((1, 5)))
    with pytest.raises(ValueError, match="NaN"):
        sgd_trajectory_kernel(np.full((3, 5), np.nan))
    with pytest.raises(ValueError, match="N = 5 rows"):
        trajectory_eigenfunctions(np.zeros((4, 2)), np.ones((3, 5)))
    with pytest.raises(ValueError, match="each of the C = 2"):
        function_space_probabilities(np.zeros((3, 2)), [np.zeros((3, 1))], [np.ones(1)])
