"""The predictives of the linearised Laplace approximation: the latent GP f(x) ~ N(g(x, θ_MAP), J(x) Σ J(x)ᵀ) and the
predictive of y, Gaussian N(μ, J Σ Jᵀ + σ² I) exactly, Bernoulli and softmax by the probit approximation or Monte
Carlo (:mod:`~activated_dgp.eigen.laplace_likelihoods`), or by weight samples through the network (``pred_type="nn"``,
:mod:`~activated_dgp.eigen.laplace_sampling`)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from ...validation import check_positive_int
from ..laplace_likelihoods import log_predictive_density, predictive_probabilities
from ..laplace_sampling import weight_sample_predictive
from .covariance import _PosteriorCovariance


class _Predictive(_PosteriorCovariance):
    """The predictive methods of :class:`~activated_dgp.eigen.LinearisedLaplace`."""

    def _latent(self, X: np.ndarray):
        return self._outputs(X), self._latent_covariance(X, self.prior_precision)

    def _log_density(self, mean, covariance, Y) -> np.ndarray:
        return log_predictive_density(
            self.likelihood, mean, covariance, Y, self.noise_variance, self.predictive, self.num_samples, self.seed
        )

    def predict_f(self, X, full_output_cov: Optional[bool] = None):
        """Latent mean g(X, θ_MAP) [N, C] and covariance J(x) Σ J(x)ᵀ: [N, C, C] with ``full_output_cov``
        (the default for softmax), else the marginal variances [N, C]. float64 tensors."""
        mean, covariance = self._latent(self._check_X(X))
        full = self.likelihood == "softmax" if full_output_cov is None else bool(full_output_cov)
        variance = covariance if full else np.diagonal(covariance, axis1=1, axis2=2).copy()
        return tf.constant(mean), tf.constant(variance)

    def predict_y(self, X, full_output_cov: bool = False, pred_type: str = "glm", num_samples: int = 100, seed: Optional[int] = None):
        """The predictive of y: Gaussian, mean g(X) and variance J Σ Jᵀ + σ² ([N, C], or [N, C, C] with
        ``full_output_cov``); classification, class probabilities p [N, C] (p(y = 1) [N, 1] for Bernoulli,
        by the probit approximation or Monte Carlo, see :mod:`activated_dgp.eigen.laplace`) and the variance p(1 − p)
        of each class indicator. float64 tensors.

        ``pred_type="nn"`` (laplace-torch's name) is the predictive of ``num_samples`` weight samples θ ~ N(θ_MAP, Σ)
        run through the network instead (:mod:`~activated_dgp.eigen.laplace_sampling`; seeded by ``seed``, default the approximation's);
        marginal variances only."""
        if pred_type not in ("glm", "nn"):
            raise ValueError(f"unknown pred_type {pred_type!r}; use 'glm' (the linearised predictive) or 'nn' (weight samples)")
        if pred_type == "nn":
            if full_output_cov:
                raise ValueError("pred_type='nn' gives marginal variances only; use full_output_cov=False")
            mean, variance = weight_sample_predictive(self, self._check_X(X), check_positive_int(num_samples, "num_samples"),
                                                      self.seed if seed is None else int(seed))
            return tf.constant(mean), tf.constant(variance)
        mean, covariance = self._latent(self._check_X(X))
        if self.likelihood == "gaussian":
            covariance = covariance + self.noise_variance * np.eye(self.num_outputs)[None]
            variance = covariance if full_output_cov else np.diagonal(covariance, axis1=1, axis2=2).copy()
            return tf.constant(mean), tf.constant(variance)
        p = predictive_probabilities(self.likelihood, mean, covariance, self.predictive, self.num_samples, self.seed)
        return tf.constant(p), tf.constant(p * (1.0 - p))

    def predict_log_density(self, X, Y) -> tf.Tensor:
        """log p(y_i | x_i, D) [N] under ``predict_y``'s predictive (Gaussian outputs independent)."""
        X = self._check_X(X)
        Y = self._check_Y(Y, X.shape[0])
        mean, covariance = self._latent(X)
        return tf.constant(self._log_density(mean, covariance, Y))
