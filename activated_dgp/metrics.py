"""Scores of predictive distributions, shared by the experiment runners.

Classification (Sec. 5.3, Fig. 8; Ovadia et al., 2019 [53]) — every function takes the predictive class
probabilities ``probabilities`` [N, C] (rows summing to 1) and integer ``labels`` [N]:

* :func:`accuracy` — mean of 1[argmax_c p_ic = y_i].
* :func:`classification_log_likelihood` — the test log-likelihood (TLL), (1/N) Σ_i log p_(i, y_i).
* :func:`expected_calibration_error` — ECE = Σ_b (|B_b| / N) |acc(B_b) − conf(B_b)| over equal-width
  confidence bins (Guo et al., 2017, eq. 3; 15 bins by default), confidence = max_c p_ic.
* :func:`predictive_entropy` — H[p_i] = −Σ_c p_ic log p_ic (nats), per point.

Regression (Sec. 5.2, Fig. 7, appendix E.1) — predictive distributions that are Gaussian or uniform mixtures of
Gaussians, means and variances [S, N] (S components, e.g. MC-dropout passes, ensemble members or DGP samples):

* :func:`gaussian_mixture_log_density` — log p(y_i) = log (1/S) Σ_s N(y_i; μ_si, σ²_si), per point.
* :func:`regression_metrics` — RMSE = sqrt(mean (y − E[y])²) and NLPD = −mean log p(y_i), with the mixture mean
  E[y] = (1/S) Σ_s μ_s; with ``scale`` s_y also both in original units (RMSE·s_y, NLPD + log s_y) when the
  targets were standardised y = (y_orig − m_y) / s_y.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import scipy.special
import scipy.stats

__all__ = [
    "accuracy",
    "classification_log_likelihood",
    "expected_calibration_error",
    "predictive_entropy",
    "classification_metrics",
    "gaussian_mixture_log_density",
    "probability_integral_transform",
    "regression_calibration",
    "regression_metrics",
    "homoscedastic_gaussian_nlpd",
]

# Probabilities are floored here before taking logs, so that a (numerically) zero probability of the
# true class gives a large finite penalty, log(1e-300) ≈ −690.8, rather than −inf.
_TINY = 1e-300


def _check(probabilities, labels=None) -> Tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"probabilities must be [N, C] with C ≥ 2 classes, got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("probabilities contain NaN or inf")
    if np.any(p < -1e-12) or np.any(np.abs(p.sum(1) - 1.0) > 1e-6):
        raise ValueError("probabilities must be non-negative with rows summing to 1 (within 1e-6)")
    if labels is None:
        return p, None
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (p.shape[0],):
        raise ValueError(f"labels must be [N] = [{p.shape[0]}], got shape {y.shape}")
    if not np.all(y == np.round(y)) or y.min(initial=0) < 0 or y.max(initial=0) >= p.shape[1]:
        raise ValueError(f"labels must be integers in 0..{p.shape[1] - 1}")
    return p, y.astype(np.int64)


def accuracy(probabilities, labels) -> float:
    p, y = _check(probabilities, labels)
    return float(np.mean(np.argmax(p, 1) == y))


def classification_log_likelihood(probabilities, labels) -> float:
    """(1/N) Σ_i log p(y_i | x_i), the test log-likelihood (higher is better; −TLL is the NLPD)."""
    p, y = _check(probabilities, labels)
    return float(np.mean(np.log(np.maximum(p[np.arange(len(y)), y], _TINY))))


def expected_calibration_error(probabilities, labels, num_bins: int = 15) -> float:
    """ECE with ``num_bins`` equal-width bins of the confidence max_c p_ic over [0, 1].

    Bin b holds the confidences in ((b−1)/B, b/B] (the first bin also holds 0); empty bins add nothing.
    """
    # Kept by hand rather than tfp.stats.expected_calibration_error: in TFP 0.25 that function raises
    # InvalidArgumentError ("expected a double tensor but is a float tensor") on float64 logits, and float32 logits
    # would put ~1e-7 round-off into a score the studies record to more digits.
    if int(num_bins) != num_bins or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    p, y = _check(probabilities, labels)
    confidence = p.max(1)
    correct = (np.argmax(p, 1) == y).astype(np.float64)
    bins = np.clip(np.ceil(confidence * num_bins).astype(np.int64) - 1, 0, num_bins - 1)
    gap = np.bincount(bins, weights=correct - confidence, minlength=num_bins)
    return float(np.sum(np.abs(gap)) / len(y))  # Σ_b |B_b|/N · |mean(correct − conf) in B_b|


def predictive_entropy(probabilities) -> np.ndarray:
    """H[p_i] = −Σ_c p_ic log p_ic in nats, [N] (0 log 0 = 0)."""
    p, _ = _check(probabilities)
    safe = np.where(p > 0, p, 1.0)
    return -np.sum(np.where(p > 0, p * np.log(safe), 0.0), axis=1)


def classification_metrics(probabilities, labels, num_bins: int = 15) -> dict:
    """accuracy, log_likelihood (TLL), ece and entropy (mean predictive entropy) in one dict."""
    return {
        "accuracy": accuracy(probabilities, labels),
        "log_likelihood": classification_log_likelihood(probabilities, labels),
        "ece": expected_calibration_error(probabilities, labels, num_bins),
        "entropy": float(np.mean(predictive_entropy(probabilities))),
    }


def _mixture_moments(y, means, variances):
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    mu = np.asarray(means, dtype=np.float64)
    var = np.broadcast_to(np.asarray(variances, dtype=np.float64), mu.shape if mu.ndim > 1 else (1,) + mu.shape)
    mu = mu.reshape(1, -1) if mu.ndim == 1 else mu.reshape(mu.shape[0], -1)
    var = np.reshape(var, mu.shape)
    if mu.shape[1] != y.shape[0]:
        raise ValueError(f"means must be [N] or [S, N] with N = {y.shape[0]}, got shape {np.shape(means)}")
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(var))):
        raise ValueError("predictive means or variances contain NaN or inf")
    if np.any(var <= 0):
        raise ValueError("predictive variances must be positive")
    return y, mu, var


def gaussian_mixture_log_density(y, means, variances) -> np.ndarray:
    """log p(y_i) = log (1/S) Σ_s N(y_i; μ_si, σ²_si), [N], by log-sum-exp over the S components.

    :param y: [N] or [N, 1] targets. :param means: [N] (one Gaussian) or [S, N] (or [S, N, 1]).
    :param variances: positive, broadcastable to ``means`` (e.g. a scalar noise variance).
    """
    y, mu, var = _mixture_moments(y, means, variances)
    log_components = scipy.stats.norm.logpdf(y[None], loc=mu, scale=np.sqrt(var))
    return scipy.special.logsumexp(log_components, axis=0) - np.log(mu.shape[0])


def probability_integral_transform(y, means, variances) -> np.ndarray:
    """u_i = F_i(y_i) = (1/S) Σ_s Φ((y_i − μ_si)/σ_si), [N]: each target's value under its predictive CDF (the
    PIT). Under a calibrated predictive the u_i are uniform on [0, 1] (Dawid 1984; Gneiting, Balabdaoui and
    Raftery 2007). Shapes as :func:`gaussian_mixture_log_density`."""
    y, mu, var = _mixture_moments(y, means, variances)
    return np.mean(scipy.special.ndtr((y[None] - mu) / np.sqrt(var)), axis=0)


def regression_calibration(y, means, variances, levels=None) -> dict:
    """Calibration of a (mixture-)Gaussian regression prediction from its PIT values u_i:

    * ``coverage_90``: the fraction of targets inside the central 90 % predictive interval, i.e. with
      0.05 ≤ u_i ≤ 0.95 (0.90 when calibrated; below it, over-confident);
    * ``calibration_error``: mean over the levels p_j (default 0.05, 0.10, …, 0.95) of |#{u_i ≤ p_j}/N − p_j|,
      the mean absolute gap of the PIT's empirical CDF from the uniform one (Kuleshov, Fenner and Ermon 2018
      use the squared gap; the absolute one reads in probability units).
    """
    u = probability_integral_transform(y, means, variances)
    levels = np.linspace(0.05, 0.95, 19) if levels is None else np.asarray(levels, dtype=np.float64)
    empirical = np.mean(u[None, :] <= levels[:, None], axis=1)
    return {"coverage_90": float(np.mean((u >= 0.05) & (u <= 0.95))), "calibration_error": float(np.mean(np.abs(empirical - levels)))}


def homoscedastic_gaussian_nlpd(rmse) -> np.ndarray:
    """½ log(2π e · RMSE²): the NLPD of N(y_i; μ_i, σ²) at its best constant variance σ² = MSE, given the means'
    RMSE. Two predictions' NLPD difference thus splits into an accuracy part, log(RMSE_a / RMSE_b), and the
    difference of each one's NLPD above this reference (what its predictive variances gain, or lose, against the
    best constant variance around the same means)."""
    rmse = np.asarray(rmse, dtype=np.float64)
    if not np.all(np.isfinite(rmse)) or np.any(rmse <= 0):
        raise ValueError(f"rmse must be positive and finite, got {rmse!r}")
    return 0.5 * np.log(2 * np.pi * np.e * rmse**2)


def regression_metrics(y, means, variances, scale: float = 1.0) -> dict:
    """rmse and nlpd of a (mixture-)Gaussian prediction on the given scale, and rmse_original,
    nlpd_original in original units for targets standardised by ``scale`` = s_y (a density picks
    up the Jacobian 1/s_y: NLPD_orig = NLPD + log s_y); with the ``coverage_90`` and
    ``calibration_error`` of :func:`regression_calibration` (scale-free)."""
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    y_flat, mu, _ = _mixture_moments(y, means, variances)
    rmse = float(np.sqrt(np.mean((y_flat - mu.mean(0)) ** 2)))
    nlpd = float(-np.mean(gaussian_mixture_log_density(y, means, variances)))
    return {"rmse": rmse, "nlpd": nlpd, "rmse_original": rmse * scale, "nlpd_original": nlpd + float(np.log(scale)),
            **regression_calibration(y, means, variances)}
