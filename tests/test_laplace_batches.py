"""The NeuralEF linearised Laplace approximation computed in batches (per-example Jacobians, Rayleigh–Ritz blocks of
batch_size · C pairs, the GGN and the test covariances batch by batch, the Monte Carlo predictive block by block)
against the same quantities computed here in one piece: the Jacobians of the whole batch by one
tf.GradientTape.jacobian, the dense NTK Gram of the N C training pairs, eq. 22 of Deng et al. (2022) with a dense
k × k inverse, and the softmax predictive from one [S, N, C] draw."""

import sys
from pathlib import Path

import numpy as np
import tf_keras
from scipy.special import softmax

sys.path.insert(0, str(Path(__file__).parent))
from test_laplace import autodiff_jacobians, data, hessians  # noqa: E402

from activated_dgp.eigen import LinearisedLaplace, jacobian_function  # noqa: E402
from activated_dgp.eigen import laplace_likelihoods  # noqa: E402
from activated_dgp.eigen.laplace import pair_inputs  # noqa: E402


def conv_net(input_dim: int, outputs: int, seed: int):
    """A small 1-D CNN (float64): a network the layer-wise products do not cover, so its Jacobians are per-example."""
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([
        tf_keras.Input((input_dim,), dtype="float64"),
        tf_keras.layers.Reshape((input_dim, 1), dtype="float64"),
        tf_keras.layers.Conv1D(3, 3, activation="tanh", dtype="float64"),
        tf_keras.layers.Flatten(dtype="float64"),
        tf_keras.layers.Dense(outputs, dtype="float64"),
    ])
    model(np.zeros((1, input_dim)))
    return model


def test_per_example_jacobians_equal_the_jacobian_of_the_whole_batch(rng):
    model = conv_net(6, 3, seed=0)
    X = rng.normal(size=(7, 6))
    expected, _ = autodiff_jacobians(model, X)
    J = jacobian_function(lambda A: model(A, training=False), model.trainable_variables)(X).numpy()
    np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-14)


def test_neuralef_lla_in_batches_equals_the_unbatched_dense_computation(rng, monkeypatch):
    N, D, C, k, delta, S = 10, 6, 3, 3, 0.8, 201
    X, Y = data("softmax", N, D, C, rng)
    X_test = rng.normal(size=(5, D))
    model = conv_net(D, C, seed=1)
    # Monte Carlo blocks of 2 samples (2 · 5 · 3 numbers), the last one of 1
    monkeypatch.setattr(laplace_likelihoods, "MC_BLOCK_NUMBERS", 2 * X_test.shape[0] * C)
    la = LinearisedLaplace(model, "softmax", prior_precision=delta, method="neuralef", num_eigenpairs=k, neuralef_steps=30,
                           neuralef_options={"oversampling": 0, "batch_size": 8}, jacobian_cache_bytes=0, batch_size=2,
                           predictive="mc", num_samples=S, seed=3, verbose=0).fit(X, Y)
    assert la.ntk_source == "jacobians" and la._layerwise is None  # per-example Jacobians at every step and Ritz block

    # the Rayleigh–Ritz step on the dense Gram of the N C pairs: ψ orthonormal on the pairs, ψᵀ K ψ / (NC)² = diag(μ)
    J, F = autodiff_jacobians(model, X)
    pairs = J.reshape(N * C, -1)
    gram = pairs @ pairs.T
    psi = la.eigenfunctions(pair_inputs(X, C)).numpy()  # [N C, k]
    mu = la.eigenfunctions.eigenvalues.numpy()
    np.testing.assert_allclose(psi.T @ psi / (N * C), np.eye(k), atol=1e-10)
    np.testing.assert_allclose(psi.T @ gram @ psi / (N * C) ** 2, np.diag(mu), atol=1e-10 * mu.max())

    # eq. 22 in one piece: Ψ̃ = √μ ψ per (x, c), H = Σ_i Ψ̃_iᵀ Λ_i Ψ̃_i, Cov(x) = Ψ̃(x) (H + δ I)⁻¹ Ψ̃(x)ᵀ
    features = (psi * np.sqrt(mu)).reshape(N, C, k)
    H = np.einsum("ncp,ncd,ndq->pq", features, hessians("softmax", F), features)
    test_features = (la.eigenfunctions(pair_inputs(X_test, C)).numpy() * np.sqrt(mu)).reshape(-1, C, k)
    covariance = np.einsum("ncp,pq,ndq->ncd", test_features, np.linalg.inv(H + delta * np.eye(k)), test_features)
    _, F_test = autodiff_jacobians(model, X_test)
    mean, latent = la.predict_f(X_test, full_output_cov=True)
    np.testing.assert_allclose(mean.numpy(), F_test, rtol=1e-12)
    np.testing.assert_allclose(latent.numpy(), covariance, rtol=1e-10, atol=1e-12 * np.abs(covariance).max())

    # the Monte Carlo predictive from one draw ε [S, N, C]: f_s = μ + A ε_s, A = V diag(√λ) of Cov = V diag(λ) Vᵀ
    values, vectors = np.linalg.eigh(covariance)
    root = vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]
    epsilon = np.random.default_rng(3).standard_normal((S, X_test.shape[0], C))
    expected = softmax(F_test[None] + np.einsum("ncd,snd->snc", root, epsilon), axis=2).mean(axis=0)
    np.testing.assert_allclose(la.predict_y(X_test)[0].numpy(), expected, rtol=1e-10, atol=1e-12)
