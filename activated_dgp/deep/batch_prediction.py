"""Compiled Monte Carlo predictions of a DeepGP on many points, in batches of bounded memory.

For a batch of B points, S samples are propagated through layers 1..L−1 (as in
:func:`activated_dgp.deep.prediction.sample_layers`) and the last layer's Gaussian q(f_L | h^(s)) is
integrated against the likelihood:

    E[y | x]   ≈ (1/S) Σ_s m_s(x),                    m_s, v_s = moments of p(y | h^(s)),
    Var[y | x] ≈ (1/S) Σ_s v_s(x) + (1/S) Σ_s m_s(x)² − E[y | x]²,
    log p(y | x) ≈ log (1/S) Σ_s ∫ p(y | f) q(f | h^(s)) df.

One ``tf.function`` evaluates a whole batch (all S samples at once, [S·B, ·] tensors); the draws are
stateless normals seeded by (seed, first row of the batch, layer), so results do not depend on the
order in which batches are evaluated, and the same seed gives the same numbers. Memory is
O(S · B · M · P) for the batch (the per-output q_sqrt products L_pᵀA of every layer, one [S·B, P_ℓ·M_ℓ] matrix in
:mod:`activated_dgp.zonal.conditionals`) plus the outputs [N, P]; inputs may be a memmap. The cost per point is dominated by those products, S · Σ_ℓ P_ℓ M_ℓ² multiply-adds.
"""

from __future__ import annotations

from typing import Tuple

import gpflux
import numpy as np
import tensorflow as tf

from .prediction import propagate_samples
from ..validation import dgp_input_width

__all__ = ["BatchPredictor"]


class BatchPredictor:
    """Predictions of ``dgp`` with ``num_samples`` samples, ``batch_size`` points per compiled call.

    :param dgp: a gpflux DeepGP (float64 or float32 parameters).
    :param num_samples: S ≥ 1.
    :param batch_size: B ≥ 1 points per call; memory ∝ S · B. The default, 64, keeps the per-layer
        q_sqrt products, [S·B, P·M] (16 MiB at P = 8, M = 128, S = 32, float64), near the caches: with GPflow's
        conditional, on 2 CPU cores B = 32–64 predicted about 1.8× as many points per second as B = 1,024
        (``python -m benchmarks.prediction`` has a row for B = 1,024).
    """

    def __init__(self, dgp: gpflux.models.DeepGP, num_samples: int = 32, batch_size: int = 64):
        if int(num_samples) != num_samples or num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.dgp, self.num_samples, self.batch_size = dgp, int(num_samples), int(batch_size)
        self.likelihood = dgp.likelihood_layer.likelihood
        # GPflow/gpflux code needs no AutoGraph conversion (activated_dgp.deep.layers): traced as written
        self._moments = tf.function(self._batch_moments, reduce_retracing=True, autograph=False)
        self._log_density = tf.function(self._batch_log_density, reduce_retracing=True, autograph=False)

    def _last_layer(self, X: tf.Tensor, seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """Flattened moments of f_L, [S·B, P_L] each, given the samples of layers 1..L−1."""

        def normal(layer, shape, dtype):
            return tf.random.stateless_normal(shape, seed=seed + tf.constant([0, 1], seed.dtype) * layer, dtype=dtype)

        _, mean, var = propagate_samples(self.dgp, X, self.num_samples, normal)
        width = mean.shape[-1]
        return tf.reshape(mean, [-1, width]), tf.reshape(var, [-1, width])

    def _batch_moments(self, X: tf.Tensor, seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """E[y | x] and Var[y | x], [B, P], by the law of total variance over the S samples."""
        f_mean, f_var = self._last_layer(X, seed)
        y_mean, y_var = self.likelihood.predict_mean_and_var(None, f_mean, f_var)
        shape = tf.concat([[self.num_samples, -1], tf.shape(y_mean)[-1:]], 0)
        y_mean, y_var = tf.reshape(y_mean, shape), tf.reshape(y_var, shape)
        mean = tf.reduce_mean(y_mean, 0)
        return mean, tf.reduce_mean(y_var, 0) + tf.reduce_mean(tf.square(y_mean - mean), 0)

    def _batch_log_density(self, X: tf.Tensor, Y: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        """log (1/S) Σ_s p(y | h^(s)), [B]."""
        f_mean, f_var = self._last_layer(X, seed)
        Y = tf.tile(tf.cast(Y, f_mean.dtype), [self.num_samples, 1])
        log_density = tf.reshape(self.likelihood.predict_log_density(None, f_mean, f_var, Y), [self.num_samples, -1])
        return tf.reduce_logsumexp(log_density, 0) - tf.math.log(tf.cast(self.num_samples, log_density.dtype))

    def _batches(self, X, Y=None):
        X = X if isinstance(X, np.ndarray) else np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be a matrix [N, D], got shape {X.shape}")
        width = dgp_input_width(self.dgp)
        if width is not None and X.shape[1] != width:
            raise ValueError(f"X has {X.shape[1]} columns but the DGP's first layer takes D = {width}")
        if Y is not None and (np.ndim(Y) != 2 or len(Y) != len(X)):
            raise ValueError(f"Y must be [N, P] with N = {len(X)}, got shape {np.shape(Y)}")
        dtype = self.dgp.f_layers[0].q_mu.dtype.as_numpy_dtype
        for start in range(0, len(X), self.batch_size):
            X_batch = np.asarray(X[start : start + self.batch_size], dtype=dtype)
            if not np.all(np.isfinite(X_batch)):
                rows = start + np.flatnonzero(~np.all(np.isfinite(X_batch), axis=1))[:5]
                raise ValueError(f"X contains NaN or inf in rows {rows.tolist()}")
            Y_batch = None if Y is None else np.asarray(Y[start : start + self.batch_size], dtype=dtype)
            yield start, X_batch, Y_batch

    def predict_y(self, X, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance of y, [N, P] each, X [N, D] (an array or a memmap)."""
        means, variances = [], []
        for start, X_batch, _ in self._batches(X):
            mean, var = self._moments(tf.constant(X_batch), tf.constant([seed, start], tf.int64))
            means.append(mean.numpy())
            variances.append(var.numpy())
        return np.concatenate(means), np.concatenate(variances)

    def predictive_log_density(self, X, Y, seed: int = 0) -> np.ndarray:
        """log p(y | x) per point, [N]; −mean is the NLPD."""
        parts = [
            self._log_density(tf.constant(X_batch), tf.constant(Y_batch), tf.constant([seed, start], tf.int64)).numpy()
            for start, X_batch, Y_batch in self._batches(X, Y)
        ]
        return np.concatenate(parts)
