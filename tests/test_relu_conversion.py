"""The activation-matched zonal kernel (λ_n ∝ |σ_n|) and the conversion of plain ReLU networks with it.

The truths are computed here: the ReLU's Funk–Hecke coefficients by scipy quadrature against scipy's Gegenbauer
polynomials, the harmonic counts by their binomial formula, and the series, Kuu and the means' KL densely in NumPy.
"""

import math

import gpflow
import numpy as np
import pytest
import tf_keras
from scipy.integrate import quad
from scipy.special import comb, eval_gegenbauer, gammaln

from activated_dgp import dgp_from_keras
from activated_dgp.zonal import ActivationFeature, ZonalMatchedKernel


def harmonic_count(n: int, d: int) -> float:
    """N_n^d, the number of degree-n spherical harmonics on S^(d−1)."""
    return 1.0 if n == 0 else (2 * n + d - 2) / n * comb(n + d - 3, n - 1, exact=True)


def normalised_gegenbauer(n: int, d: int, t):
    alpha = (d - 2) / 2
    return eval_gegenbauer(n, alpha, t) / eval_gegenbauer(n, alpha, 1.0)


def relu_sigma_by_quadrature(d: int, levels: int) -> np.ndarray:
    """σ_n = ω ∫_0^1 t Ĉ_n(t) (1 − t²)^((d−3)/2) dt, ω = Γ(d/2) / (√π Γ((d−1)/2)); exactly zero levels set to 0."""
    omega = math.exp(gammaln(d / 2) - gammaln((d - 1) / 2)) / math.sqrt(math.pi)
    sigma = np.array([omega * quad(lambda t: t * normalised_gegenbauer(n, d, t) * (1 - t * t) ** ((d - 3) / 2),
                                   0.0, 1.0, epsabs=1e-14, epsrel=1e-12)[0] for n in range(levels)])
    return np.where(np.abs(sigma) < 1e-12, 0.0, sigma)


def dense_series(coefficients, d: int, cosine) -> np.ndarray:
    """Σ_n c_n N_n^d Ĉ_n(cosine), term by term."""
    return sum(c * harmonic_count(n, d) * normalised_gegenbauer(n, d, cosine) for n, c in enumerate(coefficients) if c != 0)


def dense_matched_kuu(W: np.ndarray, levels: int, variance: float) -> np.ndarray:
    d = W.shape[1]
    sigma = relu_sigma_by_quadrature(d, levels)
    lam = np.abs(sigma) / sum(abs(s) * harmonic_count(n, d) for n, s in enumerate(sigma))
    ratio = np.divide(sigma**2, lam, out=np.zeros_like(sigma), where=lam != 0)
    norms = np.linalg.norm(W, axis=1)
    cosine = np.clip((W / norms[:, None]) @ (W / norms[:, None]).T, -1.0, 1.0)
    return norms[:, None] * norms[None, :] * dense_series(ratio, d, cosine) / variance


@pytest.mark.parametrize("input_dim", [2, 4])
def test_matched_kernel_kuu_and_k_against_a_dense_series(input_dim):
    rng = np.random.default_rng(1)
    d, levels, variance = input_dim + 1, 9, 0.7
    W = rng.normal(size=(6, d))
    kernel = ZonalMatchedKernel(input_dim, levels, variance=variance)
    Kuu = gpflow.covariances.Kuu(ActivationFeature(W, "relu", levels), kernel).numpy()
    np.testing.assert_allclose(Kuu, dense_matched_kuu(W, levels, variance), rtol=1e-8, atol=1e-12)
    # the kernel itself: v ‖x̃‖‖x̃'‖ Σ λ_n N_n Ĉ_n(t), and k(x, x) = v ‖x̃‖² (s(1) = 1)
    sigma = relu_sigma_by_quadrature(d, levels)
    lam = np.abs(sigma) / sum(abs(s) * harmonic_count(n, d) for n, s in enumerate(sigma))
    X = rng.normal(size=(5, input_dim))
    extended = np.concatenate([X, np.ones((5, 1))], axis=1)
    norms = np.linalg.norm(extended, axis=1)
    cosine = np.clip((extended / norms[:, None]) @ (extended / norms[:, None]).T, -1, 1)
    K_dense = variance * norms[:, None] * norms[None, :] * dense_series(lam, d, cosine)
    np.testing.assert_allclose(kernel.K(X).numpy(), K_dense, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(kernel.K_diag(X).numpy(), variance * norms**2, rtol=1e-10)


def test_matched_kernel_kuu_is_positive_definite_and_k_minus_qff_psd():
    rng = np.random.default_rng(2)
    kernel = ZonalMatchedKernel(4, 10)
    feature = ActivationFeature(rng.normal(size=(12, 5)), "relu", 10)
    Kuu = gpflow.covariances.Kuu(feature, kernel).numpy()
    eigenvalues = np.linalg.eigvalsh(Kuu)
    assert eigenvalues.min() > 1e-8 * eigenvalues.max()
    X = rng.normal(size=(30, 4))
    Kuf = gpflow.covariances.Kuf(feature, kernel, X).numpy()
    residual = kernel.K(X).numpy() - Kuf.T @ np.linalg.solve(Kuu, Kuf)
    assert np.linalg.eigvalsh(residual).min() > -1e-8 * np.trace(kernel.K(X).numpy())


def small_relu_network(rng, hidden=(8,), inputs=2):
    tf_keras.utils.set_random_seed(0)
    layers = [tf_keras.Input((inputs,))] + [tf_keras.layers.Dense(h, "relu") for h in hidden] + [tf_keras.layers.Dense(1)]
    network = tf_keras.Sequential(layers)
    for layer in network.layers:  # non-zero biases
        layer.bias.assign(rng.normal(scale=0.5, size=layer.bias.shape))
    return network


def test_the_means_kl_of_a_matched_relu_layer_against_a_dense_computation():
    rng = np.random.default_rng(3)
    network = small_relu_network(rng)
    num_data = 40
    report = dgp_from_keras(network, num_data, truncation_level=8, relu_kernel="matched")
    assert isinstance(report.dgp.f_layers[0].kernel.kernel, ZonalMatchedKernel)
    hidden, output = network.layers
    W = np.concatenate([hidden.kernel.numpy(), hidden.bias.numpy()[None, :]], axis=0).T.astype(np.float64)  # [M, d]
    B = output.kernel.numpy().astype(np.float64)  # the posterior-mean weights of the bare conversion
    Kuu = dense_matched_kuu(W, 8, 1.0)
    m = Kuu @ B  # the non-whitened inducing mean whose posterior mean is Φ(x) B
    dense_kl = 0.5 * float(np.sum(m * np.linalg.solve(Kuu, m)))
    np.testing.assert_allclose(report.mean_kl[0], dense_kl, rtol=1e-5)
    np.testing.assert_allclose(sum(report.mean_kl) / num_data, dense_kl / num_data, rtol=1e-5)


def test_relu_kernel_option_is_checked():
    network = small_relu_network(np.random.default_rng(4))
    with pytest.raises(ValueError, match="relu_kernel"):
        dgp_from_keras(network, 10, relu_kernel="cosine")
    with pytest.raises(ValueError, match="far_field"):
        dgp_from_keras(network, 10, X=np.zeros((3, 2)), relu_kernel="matched", far_field=True)


def test_a_converted_relu_mlp_with_matched_kernels_and_elbo_variances_predicts_like_its_network():
    """Bare conversion (no refit) of a small trained 2-hidden-layer ReLU MLP with biases, matched kernels and each
    layer's v chosen by the ELBO: sampled predictions (predict_y) within 1.1× the network's test RMSE, the bound the
    choice rule of benchmarks/bare_relu_conversion.py asks of a remedy."""
    from activated_dgp import predict_y
    from activated_dgp.training import select_kernel_variances

    rng = np.random.default_rng(0)
    X, X_test = rng.uniform(-2, 2, size=(200, 2)), rng.uniform(-2, 2, size=(200, 2))
    f = lambda X: np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:] * np.cos(X[:, :1])  # noqa: E731
    Y, Y_test = f(X) + 0.1 * rng.normal(size=(200, 1)), f(X_test) + 0.1 * rng.normal(size=(200, 1))
    tf_keras.utils.set_random_seed(0)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(16, "relu"),
                                   tf_keras.layers.Dense(16, "relu"), tf_keras.layers.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(X, Y, epochs=150, batch_size=50, verbose=0)
    net_rmse = np.sqrt(np.mean((network(X_test).numpy() - Y_test) ** 2))
    with pytest.warns(UserWarning, match="KL"):
        dgp = dgp_from_keras(network, len(X), truncation_level=20, relu_kernel="matched").dgp
    select_kernel_variances(dgp, X, Y)
    mean, _ = predict_y(dgp, X_test, seed=0)
    assert np.sqrt(np.mean((mean - Y_test) ** 2)) <= 1.1 * net_rmse


def test_a_dgp_with_matched_kernels_is_not_saved_silently_as_arc_cosine(tmp_path):
    from activated_dgp import save_dgp

    report = dgp_from_keras(small_relu_network(np.random.default_rng(5)), 10, truncation_level=6, relu_kernel="matched")
    with pytest.raises(ValueError, match="ZonalMatchedKernel"):
        save_dgp(report.dgp, str(tmp_path / "matched"))
