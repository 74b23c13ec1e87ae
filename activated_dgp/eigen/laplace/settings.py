"""The settings of the linearised Laplace approximation (:mod:`activated_dgp.eigen.laplace`): its methods, prior
precision searches, covariances and prior structures, the byte budget of NeuralEF's cached training Jacobians, and the
constructor arguments a saved fit records."""

from __future__ import annotations

import numpy as np

METHODS = ("exact", "last_layer", "diagonal", "kron", "lowrank", "neuralef", "eigenfunctions")
PRIOR_PRECISION_SEARCHES = ("marginal_likelihood", "validation")
_EIGEN_METHODS = ("neuralef", "eigenfunctions")
#: the methods whose GGN keeps k < P eigenvalues: their evidence counts the P − k others as 0
_LOW_RANK = ("lowrank",) + _EIGEN_METHODS
#: the covariances of the eigenfunction methods (:class:`LinearisedLaplace`'s ``covariance``)
COVARIANCES = ("eq22", "subspace")
#: one prior precision for all weights, or one per layer (exact, diagonal, lowrank: per variable; kron: per layer)
PRIOR_STRUCTURES = ("scalar", "layerwise")
_LAYERWISE_PRIOR_METHODS = ("exact", "diagonal", "kron", "lowrank")
#: the largest training-Jacobian array (N C P float64 numbers, in bytes) that ``method="neuralef"`` computes
#: once and trains NeuralEF on, instead of recomputing the batch's Jacobians at every step (1 GiB)
JACOBIAN_CACHE_BYTES = 2**30
_LEGACY_CONFIG = "laplace.json"  # the file of a directory saved by activated_dgp 0.1
#: the constructor arguments a saved fit records (besides the prior precision), under the same names
_SETTINGS = (
    "likelihood", "noise_variance", "method", "num_eigenpairs", "ntk_samples", "neuralef_steps", "neuralef_options",
    "predictive", "num_samples", "seed", "batch_size", "max_parameters", "covariance", "prior_structure", "kron_fallback",
)



def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be positive and finite, got {value!r}")
    return float(value)
