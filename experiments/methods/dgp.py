"""The classic doubly-stochastic DGP (Salimbeni & Deisenroth 2017) and the predictive mixture of any Gaussian DeepGP.

``dgp`` — built in gpflux: GPLayers with ``gpflow.kernels.ArcCosine(order=1)`` and ordinary inducing points (k-means of
the training inputs), identity mean functions in the hidden layers, hidden q_sqrt scaled by 1e-5, Gaussian noise
initialised at :data:`DGP_INITIAL_NOISE` (0.1 of the standardised targets' variance; the paper's 0.01 until v5) —
gpflux's ``build_constant_input_dim_deep_gp`` with the arc-cosine kernel in place of the squared exponential.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Tuple

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
from scipy.cluster.vq import kmeans2

from activated_dgp import train_dgp
from activated_dgp.deep.sampling import sample_layers
from experiments.methods.networks import NetworkCache
from experiments.methods.protocol import NUM_LAYERS, NUM_UNITS, PREDICT_BATCH, Budget, Prediction, SplitData, fit_parts


def dgp_mixture(dgp: gpflux.models.DeepGP, X, num_samples: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Predictive mixture of a Gaussian-likelihood DeepGP: per propagated sample s the last layer's
    N(μ_s(x), σ²_s(x) + σ²_noise); means, variances [S, N]. Batched over test points for memory."""
    noise = float(dgp.likelihood_layer.likelihood.variance.numpy())
    means, variances = [], []
    for start in range(0, len(X), PREDICT_BATCH):
        _, mean, var = sample_layers(dgp, X[start : start + PREDICT_BATCH], num_samples, seed=seed + start)
        means.append(mean.numpy()[..., 0])
        variances.append(var.numpy()[..., 0] + noise)
    return np.concatenate(means, 1), np.concatenate(variances, 1)


def elbo_fit_summary(history: dict) -> dict:
    """What a record keeps of an early-stopped ELBO fit (``RestoreBest.summary``): steps run, best step restored,
    its validation NLPD, and the step where the fit diverged (None if it did not)."""
    return {k: history.get(k) for k in ("steps_run", "best_step", "best_validation", "diverged_step")}


#: The classic DGP's initial noise variance (targets standardised). Salimbeni & Deisenroth start at 0.01 and run
#: 20,000 full-batch steps; under early stopping that start fails on noisy sets: the softplus-parametrised noise grows
#: ~10x slower from 0.01 than from 0.1, the means over-fit meanwhile, and the fit stops near its start (wine split 0:
#: best step 55, noise 0.013, test NLPD 1.472; from 0.1: best step 2,420, noise 0.55, NLPD 1.170).
DGP_INITIAL_NOISE = 0.1


def build_classic_dgp(X: np.ndarray, seed: int, num_layers: int = NUM_LAYERS, num_inducing: int = NUM_UNITS) -> gpflux.models.DeepGP:
    """Salimbeni & Deisenroth's DGP as gpflux builds it, with an ARD arc-cosine kernel (order 1) per layer."""
    num_data, input_dim = X.shape
    rng = np.random.default_rng(seed)
    rows = rng.choice(num_data, size=min(num_data, 20000), replace=False)
    np.random.seed(seed)  # kmeans2 "points" initialisation
    if num_data >= num_inducing:
        centroids, _ = kmeans2(X[rows], k=num_inducing, minit="points", seed=seed)
    else:
        centroids = X[rng.choice(num_data, size=num_inducing, replace=True)] + 1e-3 * rng.normal(size=(num_inducing, input_dim))
    layers = []
    for index in range(num_layers):
        last = index == num_layers - 1
        output_dim = 1 if last else input_dim
        base = gpflow.kernels.ArcCosine(order=1, variance=1.0, weight_variances=np.ones(input_dim), bias_variance=1.0)
        kernel = gpflux.helpers.construct_basic_kernel(base, output_dim=output_dim, share_hyperparams=True)
        inducing = gpflux.helpers.construct_basic_inducing_variables(
            num_inducing=num_inducing, input_dim=input_dim, share_variables=True, z_init=centroids.copy()
        )
        mean = gpflow.mean_functions.Zero() if last else gpflow.mean_functions.Identity()
        layer = gpflux.layers.GPLayer(kernel, inducing, num_data, mean_function=mean, name=f"gp_{index}")
        if not last:
            layer.q_sqrt.assign(layer.q_sqrt * 1e-5)
        layers.append(layer)
    return gpflux.models.DeepGP(layers, gpflux.layers.LikelihoodLayer(gpflow.likelihoods.Gaussian(DGP_INITIAL_NOISE)))


def predict_dgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    (X, y), validation = fit_parts(data, budget)
    tf.random.set_seed(data.seed)
    dgp = build_classic_dgp(X, data.seed)
    schedule = replace(budget.schedule(budget.dgp_steps, len(X)), ramp_steps=0)  # v5's definition, as the paper trains it
    history = train_dgp(dgp, X, y, schedule, validation_data=validation)
    means, variances = dgp_mixture(dgp, data.X_test, budget.mc_samples, data.seed)
    extra = {
        "noise_variance": float(dgp.likelihood_layer.likelihood.variance.numpy()),
        "final_loss": float(history["loss"][-1]) if history.get("loss") else None,
        "dgp": elbo_fit_summary(history),
    }
    return means, variances, extra
