"""The posterior-mean algebra of an activated GP layer: the variational mean q_μ that makes the layer's posterior
mean Φ(x) V for given weights V, the weights a q_μ gives, the KL the mean carries, and the optimal output covariance.

With Kuu + εI (ε = gpflow's default jitter, the same that GPflow's conditional adds), the layer's posterior-mean
weights are B = (Kuu + εI)⁻¹ μ_u, so B = V takes

    non-whitened:  μ_u = (Kuu + εI) V,        whitened (u = L v):  μ_v = Lᵀ V,  L Lᵀ = Kuu + εI,

and then Kfu (Kuu + εI)⁻¹ μ_u = Φ(x) V to round-off (Dutordoir et al., 2021, Sec. 5.1).
"""

from __future__ import annotations

from typing import Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf

from .diagnostics import whitened_cross_covariance
from .sampling import layer_inputs

__all__ = [
    "UnrepresentableMean",
    "set_posterior_mean_weights",
    "posterior_mean_weights",
    "mean_kl",
    "set_optimal_output_covariance",
]


class UnrepresentableMean(ValueError):
    """The layer's posterior-mean weights cannot be set: Kuu + εI is not positive definite in float64 (raised by
    :func:`set_posterior_mean_weights`, :func:`activated_dgp.training.rescale_kernel_variance`, which leaves the layer
    as it was, and :func:`dgp_from_keras`, which names the layer)."""


def _q_mu_for_weights(layer: gpflux.layers.GPLayer, V: np.ndarray) -> tf.Tensor:
    """The q_μ that gives the layer the posterior-mean weights V (see the module docstring)."""
    Kmm = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    V = tf.convert_to_tensor(V, dtype=Kmm.dtype)
    if not layer.whiten:
        return tf.linalg.matmul(Kmm, V)
    q_mu = tf.linalg.matmul(tf.linalg.cholesky(Kmm), V, transpose_a=True)
    if not bool(tf.reduce_all(tf.math.is_finite(q_mu))):  # TensorFlow's Cholesky fills NaNs instead of raising
        raise UnrepresentableMean(
            f"Kuu + εI (ε = {gpflow.config.default_jitter():g}, Kuu's largest diagonal entry "
            f"{float(tf.reduce_max(tf.linalg.diag_part(Kmm))):.3g}) is not positive definite in float64, so the "
            "whitened mean cannot be solved: the layer's inducing features are (nearly) linearly dependent, e.g. "
            "units with (nearly) parallel weights, or more units than the truncated series has independent levels"
        )
    return q_mu


def set_posterior_mean_weights(layer: gpflux.layers.GPLayer, V: np.ndarray) -> None:
    """Set q_μ so that the layer's posterior mean is Φ(x) V (see the module docstring)."""
    layer.q_mu.assign(_q_mu_for_weights(layer, V))


def posterior_mean_weights(layer: gpflux.layers.GPLayer) -> np.ndarray:
    """B = (Kuu + εI)⁻¹ μ_u (whitened: L⁻ᵀ μ_v), [M, P]: the layer's posterior mean is Φ(x) B."""
    Kmm = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    if layer.whiten:
        return tf.linalg.triangular_solve(tf.linalg.cholesky(Kmm), layer.q_mu, lower=True, adjoint=True).numpy()
    return tf.linalg.solve(Kmm, tf.convert_to_tensor(layer.q_mu)).numpy()


def mean_kl(layer: gpflux.layers.GPLayer) -> float:
    """½ Σ_p B_pᵀ (Kuu + εI) B_p = ½ Σ_p μ_pᵀ (Kuu + εI)⁻¹ μ_p (whitened: ½ ‖μ_v‖²): the part of the layer's
    KL[q(u) ‖ p(u)] that its posterior mean Φ(x) B carries, whatever q_sqrt is. It is half the squared RKHS
    norm of the mean function, Σ_p ‖Σ_m B_mp g̃_m‖²_H, which for ReLU units grows with the truncation level
    and the input dimension (Dutordoir et al., 2021, Sec. 3.3 and Fig. 4)."""
    q_mu = tf.convert_to_tensor(layer.q_mu)
    if layer.whiten:
        return 0.5 * float(tf.reduce_sum(tf.square(q_mu)))
    Kmm = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    return 0.5 * float(tf.reduce_sum(q_mu * tf.linalg.solve(Kmm, q_mu)))


def set_optimal_output_covariance(dgp: gpflux.models.DeepGP, X, noise_variance: Optional[float] = None) -> np.ndarray:
    """Set the output layer's q(u) covariance to the one that maximises the ELBO for its fixed q_μ.

    With a Gaussian likelihood the ELBO is separable in S = Cov q(u): for inputs H of the output layer (here the
    hidden layers' mean propagation of X) and A = L⁻¹ Kuf(H), Kuu = L Lᵀ, the whitened optimum is
    S = (I + c σ⁻² A Aᵀ)⁻¹, i.e. Kuu (Kuu + c σ⁻² Kuf Kfu)⁻¹ Kuu unwhitened (Titsias, 2009, the optimal q(u) of
    the collapsed bound; it does not depend on the mean), with c = N / len(X) the model's minibatch scaling.
    It is exact for a one-layer model, and for a deep one whose hidden layers are deterministic (v → 0).
    Every output head gets the same S. Returns S, [M, M]."""
    likelihood = dgp.likelihood_layer.likelihood
    if not isinstance(likelihood, gpflow.likelihoods.Gaussian):
        raise ValueError(f"the optimal q(u) covariance needs a Gaussian likelihood, the model has {type(likelihood).__name__}")
    noise = float(likelihood.variance.numpy()) if noise_variance is None else float(noise_variance)
    if not noise > 0:
        raise ValueError(f"noise_variance must be positive, got {noise_variance!r}")
    X = np.asarray(X, dtype=np.float64)
    H = layer_inputs(dgp, X)[-1]
    layer = dgp.f_layers[-1]
    L, A = (t.numpy() for t in whitened_cross_covariance(layer, H))
    scale = (dgp.num_data or len(X)) / len(X)
    S = np.linalg.inv(np.eye(A.shape[0]) + scale / noise * (A @ A.T))
    S = 0.5 * (S + S.T)
    if not layer.whiten:
        S = L @ S @ L.T
    root = np.linalg.cholesky(S + 1e-12 * np.trace(S) / len(S) * np.eye(len(S)))
    layer.q_sqrt.assign(np.broadcast_to(root, layer.q_sqrt.shape))
    return S
