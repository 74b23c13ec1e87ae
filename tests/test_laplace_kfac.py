"""The Kronecker-factored (KFAC) linearised Laplace approximation, ``LinearisedLaplace(method="kron")``, against
dense computations written here: the exact per-layer GGN block from per-example Jacobians (one data point, where
KFAC is exact), the Kronecker factors from a hand-written NumPy forward and backward pass (several points), the
predictive and the Laplace evidence from the dense block-diagonal precision."""

import os
import sys

import numpy as np
import pytest
import tf_keras
from scipy.linalg import block_diag

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_laplace import data, dense_jacobians, hessians, mlp, twin  # noqa: E402

from activated_dgp.eigen import LinearisedLaplace  # noqa: E402


def layer_sizes(model):
    return [int(np.prod(layer.kernel.shape)) + int(layer.bias.shape[0]) for layer in model.layers if isinstance(layer, tf_keras.layers.Dense)]


def dense_blocks(H, sizes):
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [H[a:b, a:b] for a, b in zip(offsets[:-1], offsets[1:])]


@pytest.mark.parametrize("likelihood, C", [("gaussian", 2), ("bernoulli", 1), ("softmax", 3)])
def test_one_point_kron_blocks_are_the_exact_ggn_blocks(likelihood, C, rng):
    """For N = 1, A ⊗ G = (ã ãᵀ) ⊗ (Eᵀ Λ E) is the layer's GGN block J_lᵀ Λ J_l exactly."""
    X, Y = data(likelihood, 1, 3, C, rng)
    model = mlp(3, C, width=5, seed=1, hidden=2)
    la = LinearisedLaplace(model, likelihood, noise_variance=0.3, method="kron", verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    H = np.einsum("ncp,ncd,ndq->pq", J, hessians(likelihood, F, 0.3), J)
    expected = dense_blocks(H, layer_sizes(model))
    assert len(la.kron.dense_blocks()) == len(expected) == 3
    for block, truth in zip(la.kron.dense_blocks(), expected):
        np.testing.assert_allclose(block, truth, rtol=1e-10, atol=1e-12 * np.abs(truth).max())


def numpy_factors(model, X, Lambda):
    """A_l = mean ã ãᵀ and G_l = Σ_n E_nᵀ Λ_n E_n by a hand-written forward and backward pass of the tanh MLP."""
    dense = [layer for layer in model.layers if isinstance(layer, tf_keras.layers.Dense)]
    weights = [(layer.kernel.numpy(), layer.bias.numpy()) for layer in dense]
    inputs, h = [], X
    for index, (W, b) in enumerate(weights):
        inputs.append(h)
        z = h @ W + b
        h = np.tanh(z) if index < len(weights) - 1 else z
    C = h.shape[1]
    signals = [None] * len(weights)
    E = np.broadcast_to(np.eye(C), (X.shape[0], C, C))  # ∂f_c/∂z_L
    for index in range(len(weights) - 1, -1, -1):
        signals[index] = E
        if index:
            W = weights[index][0]
            E = (E @ W.T) * (1.0 - inputs[index] ** 2)[:, None, :]  # through tanh: h = tanh(z), dh/dz = 1 − h²
    A = [np.mean([np.outer(a, a) for a in np.hstack([h, np.ones((len(h), 1))])], axis=0) for h in inputs]
    G = [sum(E[n].T @ Lambda[n] @ E[n] for n in range(X.shape[0])) for E in signals]
    return A, G


@pytest.mark.parametrize("likelihood, C", [("gaussian", 2), ("softmax", 3)])
def test_kron_factors_match_dense_factors_and_the_predictive_matches_the_dense_kron_posterior(likelihood, C, rng):
    X, Y = data(likelihood, 30, 3, C, rng)
    model = mlp(3, C, width=4, seed=2, hidden=2)
    noise, delta = 0.2, 0.7
    la = LinearisedLaplace(model, likelihood, noise_variance=noise, prior_precision=delta, method="kron", batch_size=8, verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    A, G = numpy_factors(model, X, hessians(likelihood, F, noise))
    for mine, theirs in zip(la.kron.A + la.kron.G, A + G):
        np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-13)
    precision = block_diag(*[np.kron(a, g) for a, g in zip(A, G)]) + delta * np.eye(J.shape[2])
    X_test = rng.normal(size=(6, 3))
    J_test, _ = dense_jacobians(model, X_test)
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, np.linalg.inv(precision), J_test)
    np.testing.assert_allclose(la.predict_f(X_test, full_output_cov=True)[1].numpy(), expected, rtol=1e-9)
    # the Laplace evidence with the Kronecker log-determinant, against the dense one
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    log_lik = la._log_likelihood
    for d in (0.01, 0.7, 30.0):
        prec = precision - delta * np.eye(J.shape[2]) + d * np.eye(J.shape[2])
        dense = log_lik - 0.5 * d * theta @ theta + 0.5 * theta.size * np.log(d) - 0.5 * np.linalg.slogdet(prec)[1]
        np.testing.assert_allclose(la.log_marginal_likelihood(d), dense, rtol=1e-10)


def test_kron_of_a_linear_gaussian_last_layer_is_exact(rng):
    """With a Gaussian likelihood the last layer's E is I, so Σ_n ã ãᵀ ⊗ I/σ² is the exact block at any N:
    kron on the last layer's variables gives the last_layer method's predictive."""
    X, Y = data("gaussian", 25, 2, 2, rng)
    model = mlp(2, 2, width=5, seed=3)
    kron = LinearisedLaplace(model, noise_variance=0.1, prior_precision=2.0, method="kron", variables=model.layers[-1].trainable_variables, verbose=0).fit(X, Y)
    last = LinearisedLaplace(model, noise_variance=0.1, prior_precision=2.0, method="last_layer", verbose=0).fit(X, Y)
    X_test = rng.normal(size=(5, 2))
    np.testing.assert_allclose(kron.predict_f(X_test, True)[1].numpy(), last.predict_f(X_test, True)[1].numpy(), rtol=1e-9, atol=1e-14)


def test_kron_marginal_likelihood_prior_matches_a_dense_grid_optimisation(rng):
    X, Y = data("gaussian", 30, 2, 1, rng)
    model = mlp(2, 1, width=4, seed=4)
    la = LinearisedLaplace(model, noise_variance=0.05, prior_precision="marginal_likelihood", method="kron", verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    A, G = numpy_factors(model, X, hessians("gaussian", F, 0.05))
    H = block_diag(*[np.kron(a, g) for a, g in zip(A, G)])
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    values = np.linalg.eigvalsh(H)
    grid = np.logspace(-4, 4, 8001)
    evidence = [-0.5 * d * theta @ theta + 0.5 * theta.size * np.log(d) - 0.5 * np.sum(np.log(np.maximum(values, 0) + d)) for d in grid]
    best = int(np.argmax(evidence))
    assert 0 < best < len(grid) - 1
    assert abs(np.log(la.prior_precision / grid[best])) < 2 * np.log(grid[1] / grid[0])


def test_kron_save_and_load(tmp_path, rng):
    X, Y = data("softmax", 12, 2, 3, rng)
    model = mlp(2, 3, width=4, seed=5)
    la = LinearisedLaplace(model, "softmax", method="kron", prior_precision=0.5, verbose=0).fit(X, Y)
    la.save(str(tmp_path))
    again = LinearisedLaplace.load(str(tmp_path), model)
    X_test = rng.normal(size=(4, 2))
    np.testing.assert_allclose(again.predict_f(X_test)[1].numpy(), la.predict_f(X_test)[1].numpy(), rtol=1e-12)


def test_kron_rejects_unsupported_networks(rng):
    with pytest.raises(ValueError, match="'activated_0' is an ActivatedLayer.*no Kronecker form.*kron_fallback='diagonal'"):
        LinearisedLaplace(twin(2, 1, seed=0), method="kron")
    inputs = tf_keras.Input((2,), dtype="float64")
    functional = tf_keras.Model(inputs, tf_keras.layers.Dense(1, dtype="float64")(tf_keras.layers.Dense(3, dtype="float64")(inputs)))
    with pytest.raises(ValueError, match="needs a tf_keras.Sequential chain"):
        LinearisedLaplace(functional, method="kron")
    model = mlp(2, 1)
    with pytest.raises(ValueError, match="not one of them"):
        LinearisedLaplace(model, method="kron", variables=[mlp(2, 1, seed=9).trainable_variables[0]])
    with pytest.raises(ValueError, match="subnetwork"):
        LinearisedLaplace(model, method="neuralef", variables=model.trainable_variables[:2])


@pytest.mark.parametrize("method", ["exact", "diagonal", "kron"])
def test_optimize_prior_precision_marglik_on_a_linear_gaussian_model_matches_the_closed_form_evidence(method, rng):
    """A linear model y = x w + b + ε: at w = the Bayesian linear regression mean m(α*) for the maximiser α* (on a
    fine grid) of the closed-form evidence log N(y | 0, σ² I + Φ Φᵀ/α), the Laplace evidence is exact (exact and
    kron: the GGN is ΦᵀΦ/σ², kron exactly so for one output; diagonal with orthogonal centred columns) and has its
    maximum at α* too."""
    from test_laplace import blr_log_evidence

    N, noise = 50, 0.1
    X = rng.normal(size=(N, 2))
    X = X - X.mean(0)
    X = X @ np.linalg.inv(np.linalg.cholesky(X.T @ X / N).T)  # orthonormal, centred columns: ΦᵀΦ is diagonal
    Y = X @ np.array([[0.6], [-0.3]]) + 0.2 + np.sqrt(noise) * rng.normal(size=(N, 1))
    Phi = np.hstack([X, np.ones((N, 1))])
    grid = np.logspace(-3, 3, 6001)
    evidence = blr_log_evidence(Phi, Y[:, 0], noise, grid)
    best = int(np.argmax(evidence))
    assert 0 < best < len(grid) - 1
    alpha = grid[best]
    mean = np.linalg.solve(Phi.T @ Phi / noise + alpha * np.eye(3), Phi.T @ Y[:, 0] / noise)
    model = tf_keras.Sequential([tf_keras.Input((2,), dtype="float64"), tf_keras.layers.Dense(1, dtype="float64")])
    model.layers[-1].set_weights([mean[:2, None], mean[2:]])
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision=1.0, method=method, verbose=0).fit(X, Y)
    delta = la.optimize_prior_precision(method="marglik")
    assert la.prior_precision == delta
    assert abs(np.log(delta / alpha)) < 2 * np.log(grid[1] / grid[0])
    np.testing.assert_allclose(la.log_evidence, evidence[best], rtol=1e-8)
    with pytest.raises(ValueError, match="val_data"):
        la.optimize_prior_precision(method="gridsearch")
    with pytest.raises(ValueError, match="unknown prior-precision method"):
        la.optimize_prior_precision(method="cv")
    chosen = la.optimize_prior_precision("gridsearch", val_data=(X[:10], Y[:10]), grid=[0.1, 1.0, 10.0])
    assert chosen in (0.1, 1.0, 10.0) and la.validation_nll.shape == (3,)
