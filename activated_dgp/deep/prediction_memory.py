"""How many rows of X a batched DeepGP prediction takes at once: the working set of one row (:func:`bytes_per_row`),
and the batch size that fits a memory budget (:func:`prediction_batch_size`)."""

from __future__ import annotations

from typing import Optional

import gpflow
import gpflux
import numpy as np

from ..validation import dgp_input_width
from .inducing_samples import shares_inducing_variables
from .sampling import checked_num_samples

__all__ = ["DEFAULT_MEMORY_BUDGET", "EFFICIENT_BATCH_BYTES", "bytes_per_row", "checked_batch_size", "prediction_batch_size"]


#: The default memory budget of one batch of the Monte Carlo predictions (:func:`predict_y`,
#: :func:`predict_class_probabilities`, :func:`predictive_log_density`, :func:`layer_moments`), in bytes: 512 MiB.
#: The rows of X are predicted in batches of the most rows whose working set (:func:`bytes_per_row`) fits in it;
#: each function's ``memory_budget`` keyword overrides it for one call.
DEFAULT_MEMORY_BUDGET = 512 * 2**20

#: The working set a batch aims at, in bytes: 192 MiB. Each batch pays a fixed cost (the inducing draws of the sampled
#: layers, the Cholesky factors, the call itself), so batches should be large, but not so large that their [S·B, M]
#: intermediates leave the caches. On the 2-core development machine (a converted 3 × 64 network, S = 100, one row
#: ≈ 0.6 MiB by :func:`bytes_per_row`) 10,000 points took 4.0–4.1 s in batches of 300 rows against 4.6–4.9 s in
#: batches of 137 (80 MiB), with nothing else running; the peak RSS grew by 75 and 23 MiB. The batch size is the
#: smaller of this target's rows and the memory budget's (at least one row).
EFFICIENT_BATCH_BYTES = 192 * 2**20

def _likelihood_points(likelihood) -> int:
    """Q, the points per (sample, row, output) at which the likelihood is integrated: its Monte Carlo draws or its
    Gauss–Hermite points (1 for a closed form)."""
    if isinstance(likelihood, gpflow.likelihoods.MonteCarloLikelihood):
        return int(likelihood.num_monte_carlo_points)
    if isinstance(likelihood, gpflow.likelihoods.Gaussian):
        return 1
    return int(getattr(getattr(likelihood, "quadrature", None), "n_gh", 20))


def bytes_per_row(dgp: gpflux.models.DeepGP, num_samples: int) -> int:
    """The working set of one row of X in a batched prediction with S = ``num_samples`` samples, in bytes:

        (W_1 + S · max( max_ℓ [2 M_ℓ + 3 max(M_ℓ P_ℓ, K_ℓ) + 6 P_ℓ + D_ℓ],  P_L (Q + 4) )) · (bytes per value),

    with layer 1 (which sees each row once) counted once, W_1 = 2 M_1 + 3 max(M_1 P_1, K_1) + D, and only its
    6 P_1 draws and samples per sample; M_ℓ the inducing variables, P_ℓ the outputs and D_ℓ the input width of layer ℓ (for the hidden layers after the
    first that are sampled from inducing draws, :func:`propagate_samples`, the term is 3 M_ℓ + 6 P_ℓ + D_ℓ), K_ℓ = M_ℓ(M_ℓ + 1)/2 where
    P_ℓ ≥ 2 (else 0), Q the likelihood's quadrature points or Monte Carlo draws. The middle term is the conditional's
    variance work (:func:`activated_dgp.zonal.conditionals.whitened_marginals`): the per-output products L_pᵀA,
    [S·B, P·M] for a batch, their squares and GPflow's broadcast [P, M, S·B] on its own path, or the K products
    a_i a_j of the quadratic forms; the rest are Kuf and L⁻¹Kuf, the moments, draws and samples."""
    num_samples = checked_num_samples(num_samples)
    itemsize = dgp.f_layers[0].q_mu.dtype.size
    width, per_sample = dgp_input_width(dgp) or 1, 0
    last, once = len(dgp.f_layers) - 1, 0
    for index, layer in enumerate(dgp.f_layers):
        M, P = int(layer.inducing_variable.num_inducing), int(layer.num_latent_gps)
        upper = M * (M + 1) // 2 if P >= 2 else 0  # the quadratic forms' a_i a_j (symmetric_variances)
        if index == 0 and last > 0:  # sees each row once; its moments are tiled to the S samples
            once = 2 * M + 3 * max(M * P, upper) + width
            per_sample = max(per_sample, 6 * P)
        elif index < last and shares_inducing_variables(layer):  # sampled from inducing draws: Kuf, L⁻¹Kuf, samples
            per_sample = max(per_sample, 3 * M + 6 * P + width)
        else:
            per_sample = max(per_sample, 2 * M + 3 * max(M * P, upper) + 6 * P + width)
        width = P
    per_sample = max(per_sample, width * (_likelihood_points(dgp.likelihood_layer.likelihood) + 4))
    return (once + num_samples * per_sample) * itemsize


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.2f} MiB"


def prediction_batch_size(dgp: gpflux.models.DeepGP, num_samples: int, memory_budget: Optional[float] = None, num_rows: Optional[int] = None) -> int:
    """The rows per batch of a prediction with S = ``num_samples`` samples under ``memory_budget`` bytes (default
    :data:`DEFAULT_MEMORY_BUDGET`): ⌊min(budget, :data:`EFFICIENT_BATCH_BYTES`) / :func:`bytes_per_row`⌋ rows, at least
    one and at most ``num_rows``. A budget too small for one row raises a ValueError that names the amount one row
    needs."""
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)) or not budget > 0 or not np.isfinite(budget):
        raise ValueError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
    row = bytes_per_row(dgp, num_samples)
    if budget < row:
        raise ValueError(
            f"memory_budget of {int(budget):,} bytes ({_mib(budget)}) is too small for even one row of X: one row needs "
            f"{row:,} bytes ({_mib(row)}) with num_samples = {num_samples}; raise memory_budget to at least that, or lower num_samples"
        )
    size = max(1, int(min(budget, EFFICIENT_BATCH_BYTES) // row))
    return size if num_rows is None else max(1, min(size, int(num_rows)))


def checked_batch_size(batch_size) -> int:
    """``batch_size`` as an int when it is an integer ≥ 1, else a ValueError naming it."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)
