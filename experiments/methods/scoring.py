"""What a prediction is scored by besides :func:`activated_dgp.metrics.regression_metrics`: the mixture's mean and
spread, and how overconfident it is under shift."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np


def mixture_mean_std(means: np.ndarray, variances: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation [N] of the uniform mixture (1/S) Σ_s N(μ_s, σ²_s) per point (means, variances
    [S, N]): μ = mean_s μ_s, σ² = mean_s σ²_s + mean_s (μ_s − μ)² (the law of total variance)."""
    means, variances = np.asarray(means, np.float64), np.asarray(variances, np.float64)
    return means.mean(0), np.sqrt(variances.mean(0) + means.var(0))


#: |z| = |y − μ|/σ beyond which a test point counts as a surprise (0.27 % of a calibrated Gaussian's points)
Z_THRESHOLD = 3.0


def shift_diagnostics(y: np.ndarray, means: np.ndarray, variances: np.ndarray) -> Dict[str, float]:
    """From a test prediction (means, variances [S, N]; y [N] or [N, 1], standardised): ``test_std``, the mean over
    points of the predictive mixture's σ, and ``z_above_3``, the share of points with |y − μ|/σ > :data:`Z_THRESHOLD`
    (μ, σ of :func:`mixture_mean_std`)."""
    mean, std = mixture_mean_std(means, variances)
    z = (np.asarray(y, np.float64).reshape(-1) - mean) / std
    return {"test_std": float(std.mean()), "z_above_3": float(np.mean(np.abs(z) > Z_THRESHOLD))}
