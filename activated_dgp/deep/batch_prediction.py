"""Compiled Monte Carlo predictions of a DeepGP on many points, in batches of bounded memory.

For a batch of B points, S samples are propagated through layers 1..L−1 (as in
:func:`activated_dgp.deep.sampling.sample_layers`) and the last layer's Gaussian q(f_L | h^(s)) is
integrated against the likelihood:

    E[y | x]   ≈ (1/S) Σ_s m_s(x),                    m_s, v_s = moments of p(y | h^(s)),
    Var[y | x] ≈ (1/S) Σ_s v_s(x) + (1/S) Σ_s m_s(x)² − E[y | x]²,
    log p(y | x) ≈ log (1/S) Σ_s ∫ p(y | f) q(f | h^(s)) df.

These are the compiled batch functions of :func:`activated_dgp.deep.prediction.predict_y` and
:func:`~activated_dgp.deep.prediction.predictive_log_density` (:class:`~activated_dgp.deep.prediction.PredictionFunctions`),
with a fixed number of samples and a fixed batch size, and inputs that may be a memmap (read batch by batch, each
batch checked for NaN and inf). Each row's draws depend on (seed, row) only, so the results do not depend on the
batch size beyond round-off and equal the module-level functions' with the same seed. Memory is
O(S · B · M · P) for the batch (the per-output q_sqrt products L_pᵀA of every layer, one [S·B, P_ℓ·M_ℓ] matrix in
:mod:`activated_dgp.zonal.conditionals`) plus the outputs [N, P]. The cost per point is dominated by those products,
S · Σ_ℓ P_ℓ M_ℓ² multiply-adds.
"""

from __future__ import annotations

from typing import Optional, Tuple

import gpflux
import numpy as np

from .prediction import PredictionFunctions, checked_batch_size, prediction_batch_size, run_batched
from .sampling import checked_num_samples
from ..validation import dgp_input_width

__all__ = ["BatchPredictor"]


class BatchPredictor:
    """Predictions of ``dgp`` with ``num_samples`` samples, ``batch_size`` points per compiled call.

    :param dgp: a gpflux DeepGP (float64 or float32 parameters).
    :param num_samples: S ≥ 1.
    :param batch_size: B ≥ 1 points per call; memory ∝ S · B. The default, 64, keeps the per-layer
        q_sqrt products, [S·B, P·M] (16 MiB at P = 8, M = 128, S = 32, float64), near the caches: with GPflow's
        conditional, on 2 CPU cores B = 32–64 predicted about 1.8× as many points per second as B = 1,024
        (``python -m benchmarks.prediction`` has a row for B = 1,024). ``None``: the most rows that fit
        ``memory_budget`` bytes (:func:`~activated_dgp.deep.prediction.prediction_batch_size`).
    :param progress: show a progress bar over the points once a prediction has run
        :data:`~activated_dgp.deep.prediction.PROGRESS_AFTER_SECONDS` with batches left.
    """

    def __init__(
        self, dgp: gpflux.models.DeepGP, num_samples: int = 32, batch_size: Optional[int] = 64,
        memory_budget: Optional[float] = None, progress: bool = False,
    ):
        self.num_samples = checked_num_samples(num_samples)
        self.batch_size = prediction_batch_size(dgp, self.num_samples, memory_budget) if batch_size is None else checked_batch_size(batch_size)
        self.dgp, self.progress = dgp, progress
        # its own compiled functions, traced at its first call (e.g. inside gpflow_conditional() for a comparison)
        self._functions = PredictionFunctions(dgp, self.num_samples)

    def _checked(self, X, Y=None):
        X = X if isinstance(X, np.ndarray) else np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be a matrix [N, D], got shape {X.shape}")
        width = dgp_input_width(self.dgp)
        if width is not None and X.shape[1] != width:
            raise ValueError(f"X has {X.shape[1]} columns but the DGP's first layer takes D = {width}")
        if Y is not None and (np.ndim(Y) != 2 or len(Y) != len(X)):
            raise ValueError(f"Y must be [N, P] with N = {len(X)}, got shape {np.shape(Y)}")
        return X

    def predict_y(self, X, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance of y, [N, P] each, X [N, D] (an array or a memmap)."""
        return run_batched(self.dgp, "y_moments", self._checked(X), self.num_samples, seed, None, self.batch_size, progress=self.progress, functions=self._functions)

    def predictive_log_density(self, X, Y, seed: int = 0) -> np.ndarray:
        """log p(y | x) per point, [N]; −mean is the NLPD."""
        X = self._checked(X, Y)
        return run_batched(self.dgp, "log_density", X, self.num_samples, seed, Y, self.batch_size, progress=self.progress, functions=self._functions)
