"""MC dropout (Gal & Ghahramani 2016): the twin with Dropout(p) after every activated layer, active at test time.

The prediction is a mixture over ``mc_samples`` passes, each N(f_t(x), 1/τ). As in their protocol, the dropout rate
p ∈ {0.005, 0.01, 0.05, 0.1} and the model precision τ are chosen on the validation part: one network per rate, τ
maximising that network's validation log-likelihood of the mixture (their eq. 8), and the rate whose network scores
best. Fixed-step budgets (no validation part): p = 0.1 and 1/τ = training MSE of the MC mean.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tf_keras

from activated_dgp.deep.twin import with_dropout
from experiments.methods.networks import DROPOUT_RATE, NetworkCache, batched, build_twin_network, fit_network
from experiments.methods.protocol import Budget, Prediction, SplitData, fit_parts

DROPOUT_RATES = (0.005, 0.01, 0.05, 0.1)  # Gal & Ghahramani's grid, chosen on the validation part


def build_dropout_twin(input_dim: int, seed: int, rate: float = DROPOUT_RATE) -> tf_keras.Model:
    """The activated twin with Dropout(rate) after every activated (wide) layer."""
    twin = build_twin_network(input_dim, seed)
    return with_dropout(twin, rate, seed=seed)


def mixture_noise_variance(means: np.ndarray, y: np.ndarray) -> float:
    """MC dropout's model precision τ (Gal & Ghahramani 2016, eq. 8), as the noise variance 1/τ that
    maximises the validation log-likelihood of the mixture (1/T) Σ_t N(y; f_t(x), 1/τ); means [T, N]."""
    from scipy.optimize import minimize_scalar

    from activated_dgp.metrics import gaussian_mixture_log_density

    def loss(log_variance):
        return -float(np.mean(gaussian_mixture_log_density(y, means, np.full_like(means, np.exp(log_variance)))))

    result = minimize_scalar(loss, bounds=(np.log(1e-8), np.log(100.0)), method="bounded")
    return float(np.exp(result.x))


def predict_dropout(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    (X, y), validation = fit_parts(data, budget)

    def mc_means(network, inputs):  # [T, N] passes with dropout on
        return np.stack([batched(lambda b: network(b, training=True).numpy(), inputs)[:, 0] for _ in range(budget.mc_samples)])

    if validation is None:  # fixed-step budgets: p = 0.1, 1/τ = the training MSE of the MC-mean prediction
        network, history = fit_network("dropout", data, budget, data.seed, networks)
        rows = np.random.default_rng(data.seed).permutation(len(X))[:2000]
        noise = float(max(np.mean((mc_means(network, X[rows]).mean(0) - y[rows, 0]) ** 2), 1e-8))
        means = mc_means(network, data.X_test)
        return means, np.full_like(means, noise), {"noise_variance": noise, "tau": 1.0 / noise, "network": history, "dropout_rate": DROPOUT_RATE}

    from activated_dgp.metrics import gaussian_mixture_log_density

    candidates = []
    for rate in DROPOUT_RATES:
        network, history = fit_network("dropout", data, budget, data.seed, networks, dropout_rate=rate)
        validation_means = mc_means(network, validation[0])
        noise = mixture_noise_variance(validation_means, validation[1][:, 0])
        score = float(np.mean(gaussian_mixture_log_density(validation[1][:, 0], validation_means, np.full_like(validation_means, noise))))
        candidates.append((score, rate, noise, history, network))
    score, rate, noise, history, network = max(candidates, key=lambda candidate: candidate[0])
    means = mc_means(network, data.X_test)  # test passes for the chosen rate only
    return means, np.full_like(means, noise), {
        "noise_variance": noise, "tau": 1.0 / noise, "network": history, "dropout_rate": rate,
        "validation_log_likelihood": {str(c[1]): c[0] for c in candidates},
    }
