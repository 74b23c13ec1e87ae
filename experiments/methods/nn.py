"""The network baselines: the NN, the plain network, temperature scaling (NN+TS) and the deep ensemble.

* ``nn`` — the twin on MSE; predictive N(f(x), σ²) with σ² = its MSE on the data it trained on. It *is*
  the ADGP's initialisation (one cached fit per split serves NN, NN+TS, ensemble member 0 and ADGP).
* ``plain`` — an ordinary network of the same shape, [Dense(128, softplus), Dense(D, no bias)] × 2,
  [Dense(128, softplus), Dense(1, no bias)], predicting as ``nn`` does.
* ``ensemble`` — 5 twins from different seeds (member 0 is ``nn``'s network); mixture of N(f_k(x), σ_k²),
  σ_k² = member k's training MSE (Lakshminarayanan et al. 2017).
* ``nn_ts`` — temperature scaling for regression (Guo et al. 2017 adapted): the NN's network;
  predictive N(f(x), T σ²_train) with T fitted on the validation part by minimising the validation NLL,
  whose minimiser is T = MSE_val / MSE_train (closed form).
* ``relu``, ``relu_ts`` — the same for the network most users have, a 2-hidden-layer ReLU MLP with biases;
  ``relu_tuned_ts`` — ``relu_ts`` after the extra training ``relu_adgp``'s network gets (the control for it).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp.training import fine_tuning_schedule, train_network
from experiments.methods.networks import (NetworkCache, batched, fit_network, fine_tuning_steps, fit_twin, mean_and_variance, network_mean,
                                          training_mse)
from experiments.methods.protocol import Budget, Prediction, SplitData, fit_parts, shifted_validation

ENSEMBLE_SIZE = 5


def _network_prediction(kind: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    network, history = fit_network(kind, data, budget, data.seed, networks)
    (X, y), _ = fit_parts(data, budget)
    noise = training_mse(network, X, y)
    return network_mean(network, data.X_test)[None], np.full((1, len(data.X_test)), noise), {"train_mse": noise, "network": history}


def predict_nn(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _network_prediction("twin", data, budget, networks)


def predict_plain(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _network_prediction("plain", data, budget, networks)


def predict_relu(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _network_prediction("relu", data, budget, networks)


def predict_ensemble(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    means, variances, histories = [], [], []
    (X, y), _ = fit_parts(data, budget)
    for member in range(ENSEMBLE_SIZE):
        network, history = fit_network("twin", data, budget, data.seed + 1000 * member, networks)
        means.append(network_mean(network, data.X_test))
        variances.append(np.full(len(data.X_test), training_mse(network, X, y)))
        histories.append(history)
    return np.stack(means), np.stack(variances), {"members": ENSEMBLE_SIZE, "networks": histories}


def predict_ensemble_nll(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """The deep ensemble as Lakshminarayanan, Pritzel & Blundell (2017) train it, without their adversarial examples:
    :data:`ENSEMBLE_SIZE` ReLU MLPs ([Dense(128, relu)] × 2 → Dense(2)), each predicting μ(x) and σ²(x) and trained on
    the Gaussian negative log-likelihood (:class:`~experiments.methods.networks.GaussianNLL`) with early stopping on
    it; the predictive is the equal mixture of the members' N(μ_m(x), σ²_m(x))."""
    means, variances, histories = [], [], []
    for member in range(ENSEMBLE_SIZE):
        network, history = fit_network("relu_nll", data, budget, data.seed + 1000 * member, networks)
        mean, variance = mean_and_variance(batched(lambda b: network(b).numpy(), data.X_test))
        means.append(np.asarray(mean))
        variances.append(np.asarray(variance))
        histories.append(history)
    return np.stack(means), np.stack(variances), {"members": ENSEMBLE_SIZE, "networks": histories}


def predict_nn_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _temperature_scaled("twin", data, budget, networks)


def predict_nn_slab_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``nn_ts`` on ``adgp_slab``'s network, its temperature fitted on the same covariate-shifted slab: the control
    that tells the slab's effect from the GP's."""
    return _temperature_scaled("twin", shifted_validation(data, budget, "slab", "nn_slab_ts"), budget, networks)


def predict_nn_mixed_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``nn_ts`` on ``adgp_mixed``'s network, its temperature fitted on the same half-shifted validation part: the
    control that tells the part's effect from the GP's."""
    return _temperature_scaled("twin", shifted_validation(data, budget, "mixed", "nn_mixed_ts"), budget, networks)


def predict_relu_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    if not budget.converged:
        raise ValueError(f"relu_ts needs a converged budget (its validation part); got {budget.name!r}")
    return _temperature_scaled("relu", data, budget, networks)


def predict_relu_tuned_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``relu_ts`` after the same extra training that ``relu_adgp``'s network gets from ``make_convertible``: the ReLU
    network fine-tuned on the fit part by :func:`activated_dgp.training.fine_tuning_schedule`, then temperature-scaled."""
    if not budget.converged:
        raise ValueError(f"relu_tuned_ts needs a converged budget (its validation part); got {budget.name!r}")
    network, history = fit_network("relu", data, budget, data.seed, networks)
    (X_fit, y_fit), _ = data.validation_split()
    tuned = tf_keras.models.clone_model(network)
    tuned.set_weights(network.get_weights())
    tf.random.set_seed(data.seed)
    train_network(tuned, X_fit, y_fit, "gaussian", fine_tuning_schedule(fine_tuning_steps(budget), len(X_fit)))
    return _temperature_scaled("relu", data, budget, networks, network=(tuned, history))


def _temperature_scaled(kind: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None,
                        network=None) -> Prediction:
    """The ``kind`` network's mean with the noise N(f(x), T·MSE_train), T fitted on the validation part (``network``:
    a (network, history) to use instead of the split's cached one)."""
    if budget.converged:  # the NN's own network (trained on the fit part, stopped on the validation part)
        network, history = network or fit_network(kind, data, budget, data.seed, networks)
        (X_fit, y_fit), (X_val, y_val) = data.validation_split()
    else:
        (X_fit, y_fit), (X_val, y_val) = data.validation_split()
        network, history = fit_twin(X_fit, y_fit, budget, data.seed), {}
    train_mse = training_mse(network, X_fit, y_fit)
    val_mse = float(max(np.mean((network_mean(network, X_val) - y_val[:, 0]) ** 2), 1e-8))
    temperature = val_mse / train_mse  # argmin_T of the validation NLL of N(f(x), T·MSE_train)
    noise = temperature * train_mse
    means = network_mean(network, data.X_test)[None]
    return means, np.full_like(means, noise), {"temperature": temperature, "train_mse": train_mse, "validation_mse": val_mse, "network": history}
