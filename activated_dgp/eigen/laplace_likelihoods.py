"""The likelihoods of the linearised Laplace approximation: their output Hessians Λ, log-likelihoods at
the MAP, and predictive approximations over a Gaussian latent f ~ N(μ, Σ_f).

For each likelihood p(y | f) of the network's latent output f = g(x, θ) [C]:

* ``gaussian``: p(y | f) = N(y | f, σ² I_C), Λ = −∂²_ff log p = I_C / σ²; predictive N(y | μ, Σ_f + σ² I).
* ``bernoulli`` (logistic link, one output): p(y = 1 | f) = s(f) = 1 / (1 + e^(−f)), Λ = s(f)(1 − s(f));
  predictive p(y = 1) = ∫ s(f) N(f | μ, v) df, by the probit approximation s(μ / √(1 + π v / 8))
  (MacKay 1992) or by Monte Carlo.
* ``softmax`` (C ≥ 2 classes): p(y = c | f) = softmax(f)_c, Λ = diag(p) − p pᵀ; predictive
  ∫ softmax(f) N(f | μ, Σ_f) df by Monte Carlo (seeded), or the generalised probit approximation
  softmax(μ_c / √(1 + π Σ_f,cc / 8)) (Daxberger et al. 2021, "Laplace Redux", their ``link_approx="probit"``).

These Λ are the blocks of the generalised Gauss–Newton matrix Σ⁻¹ = Σ_i J_iᵀ Λ_i J_i + δ I
(Deng et al. 2022, eq. 21; Immer et al. 2021).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from check_shapes import check_shapes
from scipy.special import expit, log_expit, logsumexp, softmax

__all__ = ["LIKELIHOOD_NAMES", "PREDICTIVES", "output_hessians", "log_likelihood", "predictive_probabilities", "log_predictive_density"]

LIKELIHOOD_NAMES = ("gaussian", "bernoulli", "softmax")
#: the predictive approximations each likelihood accepts (the first is the default)
PREDICTIVES = {"gaussian": ("exact",), "bernoulli": ("probit", "mc"), "softmax": ("mc", "probit")}
#: the most random numbers (samples × points × outputs) one block of the Monte Carlo predictive draws: 2²² float64
#: numbers, 32 MiB per array of the block
MC_BLOCK_NUMBERS = 2**22


@check_shapes("F: [N, C]", "return: [N, C, C]")
def output_hessians(likelihood: str, F: np.ndarray, noise_variance: float) -> np.ndarray:
    """Λ_i = −∂²_ff log p(y_i | f) at f = F_i (independent of y for these three likelihoods), [N, C, C]."""
    N, C = F.shape
    if likelihood == "gaussian":
        return np.broadcast_to(np.eye(C) / noise_variance, (N, C, C)).copy()
    if likelihood == "bernoulli":
        p = expit(F)
        return (p * (1.0 - p))[:, :, None]
    p = softmax(F, axis=1)
    return np.einsum("nc,cd->ncd", p, np.eye(C)) - p[:, :, None] * p[:, None, :]


@check_shapes("F: [N, C]", "Y: [N, L]")
def log_likelihood(likelihood: str, F: np.ndarray, Y: np.ndarray, noise_variance: float) -> float:
    """Σ_i log p(y_i | f_i) (the log p(D | θ_MAP) of the Laplace evidence)."""
    if likelihood == "gaussian":
        return float(np.sum(-0.5 * np.log(2 * np.pi * noise_variance) - 0.5 * (Y - F) ** 2 / noise_variance))
    if likelihood == "bernoulli":
        return float(np.sum(Y * log_expit(F) + (1 - Y) * log_expit(-F)))
    labels = Y[:, 0].astype(int)
    return float(np.sum(F[np.arange(F.shape[0]), labels] - logsumexp(F, axis=1)))


def _matrix_square_root(S: np.ndarray) -> np.ndarray:
    """A [N, C, C] with A Aᵀ = S for symmetric PSD S [N, C, C] (eigen-square-root, negative round-off clipped)."""
    values, vectors = np.linalg.eigh(0.5 * (S + np.swapaxes(S, 1, 2)))
    return vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]


@check_shapes("mean: [N, C]", "covariance: [N, C, C]", "return: [N, C]")
def predictive_probabilities(
    likelihood: str, mean: np.ndarray, covariance: np.ndarray, predictive: str, num_samples: int = 1000, seed: int = 0
) -> np.ndarray:
    """E[p(y = c | f)] under f ~ N(mean, covariance) for the classification likelihoods: [N, 1] for
    ``bernoulli`` (p(y = 1)), [N, C] for ``softmax``; ``predictive`` "probit" or "mc" (``num_samples``
    draws ε [S, N, C] from a ``numpy.random.default_rng(seed)``, f_s = μ + A ε_s with A Aᵀ = Σ_f, averaged).

    The Monte Carlo draws are taken in consecutive blocks of samples, each of at most :data:`MC_BLOCK_NUMBERS`
    numbers (at least one sample), and summed: the same ε, in the same order, as one [S, N, C] draw, in
    O(N C²) memory besides one block."""
    variance = np.diagonal(covariance, axis1=1, axis2=2)
    if predictive == "probit":
        scaled = mean / np.sqrt(1.0 + np.pi * variance / 8.0)
        return expit(scaled) if likelihood == "bernoulli" else softmax(scaled, axis=1)
    root = _matrix_square_root(covariance)  # [N, C, C]
    generator = np.random.default_rng(seed)
    block = max(1, MC_BLOCK_NUMBERS // max(mean.size, 1))
    total = np.zeros_like(mean)
    for start in range(0, num_samples, block):
        epsilon = generator.standard_normal((min(block, num_samples - start),) + mean.shape)  # [s, N, C]
        samples = mean[None] + np.einsum("ncd,snd->snc", root, epsilon)
        total += (expit(samples) if likelihood == "bernoulli" else softmax(samples, axis=2)).sum(axis=0)
    return total / num_samples


@check_shapes("mean: [N, C]", "covariance: [N, C, C]", "Y: [N, L]", "return: [N]")
def log_predictive_density(
    likelihood: str,
    mean: np.ndarray,
    covariance: np.ndarray,
    Y: np.ndarray,
    noise_variance: float,
    predictive: Optional[str] = None,
    num_samples: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """log p(y_i | x_i, D) per point under the predictive: Σ_c log N(y_c | μ_c, Σ_f,cc + σ²) (Gaussian,
    outputs taken independently), log p(y) of the probit/MC class probabilities otherwise."""
    if likelihood == "gaussian":
        variance = np.diagonal(covariance, axis1=1, axis2=2) + noise_variance
        return np.sum(-0.5 * np.log(2 * np.pi * variance) - 0.5 * (Y - mean) ** 2 / variance, axis=1)
    p = predictive_probabilities(likelihood, mean, covariance, predictive, num_samples, seed)
    tiny = np.finfo(np.float64).tiny
    if likelihood == "bernoulli":
        return np.log(np.maximum(np.where(Y[:, 0] == 1, p[:, 0], 1.0 - p[:, 0]), tiny))
    return np.log(np.maximum(p[np.arange(p.shape[0]), Y[:, 0].astype(int)], tiny))
