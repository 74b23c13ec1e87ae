"""SWA and SWAG: a Gaussian over a network's weights from the iterates of SGD (Maddox et al., 2019, "A Simple
Baseline for Bayesian Uncertainty in Deep Learning", Sec. 3–4; SWA: Izmailov et al., 2018).

Along an SGD trajectory the weights θ_i ∈ R^P are collected every ``collect_every`` steps or epochs (snapshots
i = 1 … n). :class:`SWAG` keeps, in float64 whatever the network's dtype,

    θ̄ = (1/n) Σ_i θ_i                 (θ_SWA, the SWA solution)
    s̄ = (1/n) Σ_i θ_i²                (element-wise squares)
    Σ_diag = max(s̄ − θ̄², 1e-30)       (the diagonal covariance, clamped as in the authors' code)
    D = [D_(n−K+1), …, D_n],  D_i = θ_i − θ̄_(i)   (the last K deviations from the running mean θ̄_(i) after
                                                   snapshot i, [P, K])

and samples (SWAG, Sec. 4.2, with ``scale`` s; the paper's 1/2 is s = 0.5, the default)

    θ̃ = θ̄ + sqrt(s) ( Σ_diag^(1/2) z₁ + D z₂ / sqrt(K − 1) ),   z₁ ~ N(0, I_P), z₂ ~ N(0, I_K),

i.e. θ̃ ~ N(θ̄, s (Σ_diag + D Dᵀ / (K − 1))) — for s = 0.5 the covariance ½ Σ_diag + D Dᵀ / (2 (K − 1)). K is the
number of deviation columns held (at most ``max_rank``, the paper's K = 20; at least 2 to sample). The Bayesian
model average of a classifier is (1/S) Σ_s softmax(g(x; θ̃_s)) over S samples (:meth:`SWAG.predict_proba`;
the paper uses S = 30). For a network with batch normalisation the statistics must be recomputed for every
sample (not done here: use it with networks without batch norm).

State. The moments, the deviation columns (a ring buffer) and the counters are ``tf.Variable`` s of the
:class:`SWAG` module, so ``tf.train.Checkpoint(swag=swag)`` saves and restores them (restore into a SWAG made
for a network of the same architecture and the same ``max_rank``).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import tensorflow as tf
import tf_keras

__all__ = ["SWAG", "SWAGCallback"]

VARIANCE_CLAMP = 1e-30  # the authors' var_clamp: Σ_diag below it is set to it


class SWAG(tf.Module):
    """First and second moments and the last K deviations of a network's trainable weights along SGD (module
    docstring), SWA's mean weights and SWAG's Gaussian sampler and predictive.

    :param model: a built tf-keras model (its ``trainable_variables`` exist).
    :param max_rank: K ≥ 2, the deviation columns kept (20 in the paper).
    :param scale: s > 0 of the sampler (0.5 in the paper and the authors' code).
    """

    def __init__(self, model, max_rank: int = 20, scale: float = 0.5, name: Optional[str] = None):
        super().__init__(name=name)
        if isinstance(max_rank, bool) or int(max_rank) != max_rank or max_rank < 2:
            raise ValueError(f"max_rank must be an integer K ≥ 2 (D Dᵀ / (K − 1) needs two columns), got {max_rank!r}")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        try:
            variables = list(model.trainable_variables)
        except (AttributeError, ValueError):  # not a model, or a tf-keras model whose weights do not exist yet
            variables = []
        if not variables:
            raise ValueError("the model has no trainable variables: build it (call it once) before making a SWAG")
        self.model = model
        self.max_rank = int(max_rank)
        self.scale = float(scale)
        self._shapes = [tuple(v.shape) for v in variables]
        self._sizes = [int(np.prod(s)) for s in self._shapes]
        P = self.num_parameters = int(sum(self._sizes))
        self._mean = tf.Variable(tf.zeros([P], tf.float64), trainable=False, name="mean")
        self._sq_mean = tf.Variable(tf.zeros([P], tf.float64), trainable=False, name="sq_mean")
        self._deviations = tf.Variable(tf.zeros([self.max_rank, P], tf.float64), trainable=False, name="deviations")
        self._count = tf.Variable(0, dtype=tf.int64, trainable=False, name="count")

    # -- collection ------------------------------------------------------------------------

    def _weights(self) -> tf.Tensor:
        return tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in self.model.trainable_variables], 0)

    def collect(self) -> None:
        """Add the model's current weights θ as snapshot n + 1: θ̄ ← (n θ̄ + θ)/(n + 1), s̄ ← (n s̄ + θ²)/(n + 1), and the
        deviation θ − θ̄ (the updated mean) replaces the oldest of the K columns once K are held."""
        theta = self._weights()
        n = tf.cast(self._count, tf.float64)
        self._mean.assign((n * self._mean + theta) / (n + 1.0))
        self._sq_mean.assign((n * self._sq_mean + theta**2) / (n + 1.0))
        slot = int(self._count.numpy()) % self.max_rank
        self._deviations[slot].assign(theta - self._mean)
        self._count.assign_add(1)

    @property
    def num_snapshots(self) -> int:
        """n, the snapshots collected."""
        return int(self._count.numpy())

    @property
    def rank(self) -> int:
        """K, the deviation columns held: min(n, max_rank)."""
        return min(self.num_snapshots, self.max_rank)

    def _require(self, snapshots: int, what: str) -> None:
        if self.num_snapshots < snapshots:
            raise ValueError(f"{what} needs at least {snapshots} collected snapshot(s), {self.num_snapshots} collected: "
                             "call collect() along the SGD trajectory (or use SWAGCallback) first")

    # -- moments ---------------------------------------------------------------------------

    def _split(self, flat) -> List[np.ndarray]:
        parts = np.split(np.asarray(flat), np.cumsum(self._sizes)[:-1])
        return [part.reshape(shape) for part, shape in zip(parts, self._shapes)]

    def mean(self) -> np.ndarray:
        """θ̄ [P] (float64), the variables flattened and concatenated in ``trainable_variables`` order."""
        self._require(1, "the SWA mean")
        return self._mean.numpy()

    def diagonal_variance(self) -> np.ndarray:
        """Σ_diag = max(s̄ − θ̄², 1e-30) [P] (module docstring)."""
        self._require(1, "the diagonal variance")
        return np.maximum(self._sq_mean.numpy() - self._mean.numpy() ** 2, VARIANCE_CLAMP)

    def deviation_matrix(self) -> np.ndarray:
        """D [P, K], the last K deviations θ_i − θ̄_(i), oldest first."""
        self._require(1, "the deviation matrix")
        n, K = self.num_snapshots, self.rank
        order = [(n - K + j) % self.max_rank for j in range(K)]
        return self._deviations.numpy()[order].T

    def covariance_factors(self):
        """(scale · Σ_diag [P], sqrt(scale / (K − 1)) D [P, K]): the sampler's covariance is
        diag(first) + second secondᵀ."""
        self._require(2, "SWAG's covariance")
        return self.scale * self.diagonal_variance(), np.sqrt(self.scale / (self.rank - 1)) * self.deviation_matrix()

    def swa_weights(self) -> List[np.ndarray]:
        """θ_SWA as a list of arrays shaped like the model's trainable variables."""
        return self._split(self.mean())

    def apply_swa(self) -> None:
        """Set the model's trainable variables to θ_SWA (no batch-norm update: for networks without it)."""
        self._assign(self.mean())

    def _assign(self, flat: np.ndarray) -> None:
        for variable, value in zip(self.model.trainable_variables, self._split(flat)):
            variable.assign(value.astype(variable.dtype.as_numpy_dtype))

    # -- sampling --------------------------------------------------------------------------

    def sample(self, num_samples: int = 1, seed: Optional[int] = None, noise=None) -> np.ndarray:
        """S flat weight samples θ̃ [S, P] of the module docstring's sampler.

        :param noise: optional [S, P + K] standard-normal draws (z₁ the first P columns, z₂ the last K), to use
            given noise instead of drawing it from ``numpy.random.default_rng(seed)``.
        """
        diagonal, factor = self.covariance_factors()
        P, K = self.num_parameters, self.rank
        if noise is None:
            if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
                raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
            noise = np.random.default_rng(seed).standard_normal((int(num_samples), P + K))
        noise = np.asarray(noise, dtype=np.float64)
        if noise.ndim != 2 or noise.shape[1] != P + K:
            raise ValueError(f"noise must be [S, P + K] = [S, {P + K}] (P = {P} weights, K = {K} columns), got shape {noise.shape}")
        if not np.all(np.isfinite(noise)):
            raise ValueError("noise contains NaN or inf")
        return self.mean()[None, :] + noise[:, :P] * np.sqrt(diagonal)[None, :] + noise[:, P:] @ factor.T

    def predict_proba(self, X, num_samples: int = 30, seed: Optional[int] = None, noise=None, logits: bool = True,
                      batch_size: int = 2048) -> np.ndarray:
        """The Bayesian model average (1/S) Σ_s p(y | x, θ̃_s) [N, C] over S weight samples (:meth:`sample`), with
        p = softmax(g(x; θ̃)) for a model that outputs logits (``logits=True``), else g's own probabilities. The
        model's weights are restored afterwards."""
        X = np.asarray(X)
        if X.ndim < 2 or X.shape[0] == 0:
            raise ValueError(f"X must be a non-empty batch of inputs [N, …], got shape {X.shape}")
        if X.dtype.kind == "f" and not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or inf")
        samples = self.sample(num_samples, seed, noise)
        saved = [v.numpy() for v in self.model.trainable_variables]
        total = None
        try:
            for theta in samples:
                self._assign(theta)
                probabilities = _batched_probabilities(self.model, X, logits, batch_size)
                total = probabilities if total is None else total + probabilities
        finally:
            for variable, value in zip(self.model.trainable_variables, saved):
                variable.assign(value)
        return total / len(samples)


def _batched_probabilities(model, X: np.ndarray, logits: bool, batch_size: int) -> np.ndarray:
    parts = []
    for start in range(0, len(X), int(batch_size)):
        output = tf.cast(model(X[start : start + int(batch_size)], training=False), tf.float64)
        parts.append((tf.nn.softmax(output) if logits else output).numpy())
    return np.concatenate(parts, 0)


class SWAGCallback(tf_keras.callbacks.Callback):
    """Collects ``swag``'s snapshots during ``model.fit``: every ``every`` epochs (``per="epoch"``) or steps
    (``per="step"``), from epoch/step ``start`` (counted from 0 within the fit) on."""

    def __init__(self, swag: SWAG, every: int = 1, per: str = "epoch", start: int = 0):
        super().__init__()
        if per not in ("epoch", "step"):
            raise ValueError(f"per must be 'epoch' or 'step', got {per!r}")
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        if isinstance(start, bool) or int(start) != start or start < 0:
            raise ValueError(f"start must be an integer ≥ 0, got {start!r}")
        self.swag, self.every, self.per, self.start = swag, int(every), per, int(start)
        self._step = 0

    def _maybe_collect(self, index: int) -> None:
        if index >= self.start and (index - self.start + 1) % self.every == 0:
            self.swag.collect()

    def on_train_batch_end(self, batch, logs=None):
        if self.per == "step":
            self._maybe_collect(self._step)
        self._step += 1

    def on_epoch_end(self, epoch, logs=None):
        if self.per == "epoch":
            self._maybe_collect(epoch)
