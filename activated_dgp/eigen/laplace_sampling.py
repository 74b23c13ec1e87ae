"""Weight samples of a fitted linearised Laplace approximation and the predictive they give through the network
(laplace-torch's ``pred_type="nn"``; Daxberger et al. 2021, "Laplace Redux", §2, the "NN predictive").

θ_s = θ_MAP + R z_s, z_s ~ N(0, I), with R Rᵀ = Σ the posterior covariance of each parameter method:

* exact, last_layer: Σ = V diag(1/(e + δ)) Vᵀ, R = V diag((e + δ)^(−½));
* diagonal: R = diag((h + δ)^(−½));
* lowrank, and the eigenfunction methods with ``covariance="subspace"``: Σ = δ⁻¹ I − V diag(e / (δ (e + δ))) Vᵀ,
  R z = δ^(−½) z + V diag((e + δ)^(−½) − δ^(−½)) Vᵀ z (V orthonormal [P, k]);
* kron: per Dense or Conv2D layer, Σ_l = (Q_A ⊗ Q_G) diag(1/(a_i g_j + δ)) (Q_A ⊗ Q_G)ᵀ, so with Z [in + 1, out] the
  layer's block of z, R z = Q_A (Z ⊘ sqrt(a gᵀ + δ)) Q_Gᵀ (row-major vec(A X Bᵀ) = (A ⊗ B) vec(X)); a diagonal block
  (``kron_fallback="diagonal"``) scales by (d + δ)^(−½) (:meth:`~activated_dgp.eigen.kfac.KroneckerFactors.root_times`).

With one prior precision per group (``prior_structure="layerwise"``) exact and lowrank take the root of
:class:`~activated_dgp.eigen.grouped_prior.GroupedPrior`.

The predictive runs the network at each θ_s (the posterior's variables set to θ_s and restored afterwards): for the
Gaussian likelihood the mixture's mean and variance (plus σ²), for classification the average of the sampled
class probabilities (sigmoid or softmax of the logits) and p(1 − p).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import tensorflow as tf
from scipy.special import expit, softmax

__all__ = ["parameter_root_times", "weight_sample_predictive"]


def parameter_root_times(laplace, Z: np.ndarray) -> np.ndarray:
    """R Z [m, S] for standard normals Z [m, S] (m the posterior's parameters), R Rᵀ = Σ at the fitted δ."""
    delta, e, V = laplace.prior_precision, laplace.ggn_eigenvalues, laplace.ggn_eigenvectors
    if laplace.method in ("neuralef", "eigenfunctions") and laplace.covariance != "subspace":
        raise ValueError("eq. 22 has no posterior over the weights; weight samples need covariance='subspace' "
                         "or a parameter method (exact, last_layer, diagonal, kron, lowrank)")
    if laplace.method == "kron":
        return laplace.kron.root_times(Z, laplace._checked_layer_precisions(delta) if laplace.prior_structure == "layerwise" else delta)
    if laplace.prior_structure == "layerwise" and laplace.method in ("exact", "lowrank"):
        return laplace._grouped_prior().root_times(Z, laplace._checked_layer_precisions(delta))
    if V is None:  # diagonal
        return Z / np.sqrt(e + laplace._per_parameter(delta))[:, None]
    if laplace._woodbury:
        return Z / np.sqrt(delta) + V @ (((e + delta) ** -0.5 - delta**-0.5)[:, None] * (V.T @ Z))
    return V @ (Z / np.sqrt(e + delta)[:, None])


def weight_sample_predictive(laplace, X: np.ndarray, num_samples: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(mean, variance) [N, C] of the NN predictive over ``num_samples`` weight samples (module docstring)."""
    theta = laplace._parameter_vector()
    Z = np.random.default_rng(seed).standard_normal((theta.size, num_samples))
    samples = theta[:, None] + parameter_root_times(laplace, Z)
    shapes = [v.shape for v in laplace.variables]
    sizes = [int(np.prod(shape)) for shape in shapes]
    saved = [v.numpy() for v in laplace.variables]
    outputs = []
    try:
        for s in range(num_samples):
            for variable, piece, shape in zip(laplace.variables, np.split(samples[:, s], np.cumsum(sizes)[:-1]), shapes):
                variable.assign(tf.constant(piece.reshape(shape), dtype=variable.dtype))
            outputs.append(laplace._outputs(X))
    finally:
        for variable, value in zip(laplace.variables, saved):
            variable.assign(value)
    F = np.stack(outputs)  # [S, N, C]
    if laplace.likelihood == "gaussian":
        return F.mean(0), F.var(0) + laplace.noise_variance
    p = expit(F) if laplace.likelihood == "bernoulli" else softmax(F, axis=2)
    p = p.mean(0)
    return p, p * (1.0 - p)
