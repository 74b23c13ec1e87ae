"""The kernel an SGD trajectory induces, its eigenfunctions by NeuralEF, and the function-space posterior predictive
built from them (Deng et al., 2022, "NeuralEF: Deconstructing Kernels by Deep Neural Networks", appendix C.3).

From the outputs g(x, θ_i) of a network at M weights θ_1 … θ_M visited by SGD,

    κ_SGD(x, x') = (1/M) Σ_i (g(x, θ_i) − ḡ(x)) (g(x', θ_i) − ḡ(x')),   ḡ = (1/M) Σ_i g(·, θ_i),

one kernel per output dimension (the correlations between outputs are dropped, as in the paper). On the training
points this is Φ Φᵀ / M with the centred function values Φ [N, M] as features, so NeuralEF needs no N × N matrix
(:func:`sgd_trajectory_kernel` gives a :class:`~activated_dgp.eigen.PrecomputedFeatures`). With the top-k eigenpairs
(λ_cj, ψ_cj) of output c (ψ normalised to E[ψ²] = 1 over the training points, λ the eigenvalues of the integral
operator, i.e. of K / N: the Nyström normalisation) and a mean function m(x) (the SWA network, standing in for ḡ),
the predictive of a classifier is the Monte-Carlo average over function samples

    f_c(x) = m_c(x) + Σ_j sqrt(λ_cj) ψ_cj(x) ε_cj,   ε ~ N(0, I),     p(y | x) ≈ (1/S) Σ_s softmax(f^(s)(x))_y

(:func:`function_space_probabilities`; the paper uses S = 256).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from .kernel_sources import PrecomputedFeatures
from .neuralef import NeuralEF

__all__ = ["sgd_trajectory_kernel", "trajectory_eigenfunctions", "function_space_probabilities"]


def _function_values(function_values) -> np.ndarray:
    values = np.asarray(function_values, dtype=np.float64)
    if values.ndim == 2:
        values = values[:, :, None]
    if values.ndim != 3:
        raise ValueError(f"function values must be [M, N] or [M, N, C] (iterates, points, outputs), got shape {values.shape}")
    if values.shape[0] < 2:
        raise ValueError(f"the SGD-trajectory kernel needs at least 2 iterates, got {values.shape[0]}")
    if values.shape[1] == 0:
        raise ValueError("function values of 0 points given")
    if not np.all(np.isfinite(values)):
        raise ValueError("the function values contain NaN or inf")
    return values


def sgd_trajectory_kernel(function_values) -> List[PrecomputedFeatures]:
    """κ_SGD on the training points, one kernel source per output: for function values [M, N] (one output) or
    [M, N, C] (M iterates, N points, C outputs), the :class:`PrecomputedFeatures` of Φ_c = (values[:, :, c] −
    their mean over iterates)ᵀ [N, M] with S = M, so κ_c = Φ_c Φ_cᵀ / M. Inputs of the sources are row indices."""
    values = _function_values(function_values)
    centred = values - values.mean(axis=0, keepdims=True)
    return [PrecomputedFeatures(centred[:, :, c].T, num_samples=values.shape[0]) for c in range(values.shape[2])]


def trajectory_eigenfunctions(X, function_values, num_eigenpairs: int = 10, num_steps: int = 2000, seed: int = 0,
                              schedule: str = "constant", print_every: Optional[int] = 0, **neuralef_options) -> List[NeuralEF]:
    """The top-``num_eigenpairs`` eigenfunctions of κ_SGD per output, one :class:`NeuralEF` each, trained on the
    training inputs X [N, D] (the points of ``function_values`` [M, N] or [M, N, C], in the same order) for
    ``num_steps`` steps of ``schedule`` (NeuralEF.fit's; network seed ``seed + c`` for output c);
    ``neuralef_options`` go to the NeuralEF constructor."""
    X = np.asarray(X, dtype=np.float64)
    sources = sgd_trajectory_kernel(function_values)
    if X.ndim != 2 or X.shape[0] != sources[0].num_rows:
        raise ValueError(f"X must be [N, D] with N = {sources[0].num_rows} rows (the function values' points), got shape {X.shape}")
    models = []
    for c, source in enumerate(sources):
        model = NeuralEF(num_eigenpairs, kernel=source, input_dim=X.shape[1], seed=seed + c, **neuralef_options)
        models.append(model.fit(X, num_steps=num_steps, schedule=schedule, print_every=print_every))
    return models


def function_space_probabilities(mean_logits, eigenfunctions: Sequence, eigenvalues: Sequence, num_samples: int = 256,
                                 seed: Optional[int] = None, chunk: int = 16) -> np.ndarray:
    """(1/S) Σ_s softmax(f^(s)(x)) [N, C] with f_c = m_c + Σ_j sqrt(λ_cj) ψ_cj ε_cj (module docstring).

    :param mean_logits: m(x) [N, C].
    :param eigenfunctions: per output c, ψ_c(x) [N, k_c].
    :param eigenvalues: per output c, λ_c [k_c] (negative values are taken as 0).
    """
    mean = np.asarray(mean_logits, dtype=np.float64)
    if mean.ndim != 2 or not np.all(np.isfinite(mean)):
        raise ValueError(f"mean_logits must be a finite matrix [N, C], got shape {mean.shape}")
    N, C = mean.shape
    if len(eigenfunctions) != C or len(eigenvalues) != C:
        raise ValueError(f"give eigenfunctions and eigenvalues for each of the C = {C} outputs, got {len(eigenfunctions)} and {len(eigenvalues)}")
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    scaled = []
    for c, (psi, lam) in enumerate(zip(eigenfunctions, eigenvalues)):
        psi, lam = np.asarray(psi, dtype=np.float64), np.asarray(lam, dtype=np.float64).reshape(-1)
        if psi.ndim != 2 or psi.shape != (N, lam.size) or not np.all(np.isfinite(psi)) or not np.all(np.isfinite(lam)):
            raise ValueError(f"output {c}: eigenfunctions must be finite [N, k] = [{N}, {lam.size}] with finite eigenvalues [k], got {psi.shape}")
        scaled.append(psi * np.sqrt(np.maximum(lam, 0.0))[None, :])  # [N, k_c]
    rng = np.random.default_rng(seed)
    total = np.zeros((N, C))
    for start in range(0, int(num_samples), int(chunk)):
        S = min(int(chunk), int(num_samples) - start)
        logits = np.repeat(mean[None], S, axis=0)
        for c, factor in enumerate(scaled):
            logits[:, :, c] += rng.standard_normal((S, factor.shape[1])) @ factor.T
        logits -= logits.max(axis=2, keepdims=True)
        probabilities = np.exp(logits)
        total += (probabilities / probabilities.sum(axis=2, keepdims=True)).sum(axis=0)
    return total / int(num_samples)
