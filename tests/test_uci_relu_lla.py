"""The UCI study's KFAC LLA row on the ReLU network: its predictive variance is the network's noise plus the
linearised posterior's J Σ Jᵀ ≥ 0, so never below the noise, and its mean is the network's own output."""

import numpy as np

from experiments.methods.lla import predict_relu_lla_kron
from experiments.methods.networks import NetworkCache, fit_network, network_mean
from experiments.methods.protocol import BUDGETS, SplitData


def test_the_kfac_lla_row_keeps_the_networks_mean_and_adds_variance_to_the_noise():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(110, 3))
    y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(110, 1))
    data = SplitData(X[:90], y[:90], X[90:], y[90:], 1.0, 0)
    networks = NetworkCache()
    means, variances, extra = predict_relu_lla_kron(data, BUDGETS["tiny"], networks)
    network, _ = fit_network("relu", data, BUDGETS["tiny"], data.seed, networks)
    np.testing.assert_allclose(means[0], network_mean(network, data.X_test), rtol=1e-6, atol=1e-8)
    assert np.all(variances[0] >= extra["noise_variance"] * (1 - 1e-9)) and extra["prior_precision"] > 0
