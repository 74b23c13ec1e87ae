"""The seeded standard normal draws of the Monte Carlo predictions: generators for the eager functions
(:class:`SeededDraws`, :func:`likelihood_draws`) and counter-based draws that depend on (seed, row) only, for the
batched, compiled ones (:func:`row_normals`, :class:`RowDraws`)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

__all__ = ["SeededDraws", "RowDraws", "row_normals", "likelihood_draws"]


def likelihood_draws(seed: Optional[int]) -> tf.random.Generator:
    """The generator of a Monte Carlo likelihood's own draws: for a seeded prediction it is split off
    ``seed``'s generator, so its stream is independent of the layer samples' draws; unseeded, it is
    TensorFlow's global generator.

    Never GPflow's own ``tf.random.normal``: in eager mode, after ``tf.random.set_seed``, every call of an
    unseeded random op gets a fresh op seed, and TensorFlow caches one kernel per seed. Predicting 10,000
    rotated-MNIST images (softmax, 10 samples) leaked ≈ 1.7 GB that way, and the three-seed run ran out of memory."""
    return tf.random.get_global_generator() if seed is None else tf.random.Generator.from_seed(seed).split(1)[0]


class SeededDraws:
    """The draws of a seeded prediction, reusable inside a compiled function: ``normal`` (the layer samples' standard
    normals, for :func:`propagate_samples`) and ``likelihood`` (a Monte Carlo likelihood's, :func:`likelihood_draws`).
    ``reset(seed)`` puts both generators where ``tf.random.Generator.from_seed(seed)`` and ``likelihood_draws(seed)``
    start, so a compiled evaluation after it draws exactly what the eager functions draw with that seed."""

    def __init__(self, seed: int):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = int(seed)
        self.layers, self.likelihood = tf.random.Generator.from_seed(self.seed), likelihood_draws(self.seed)

    def normal(self, layer, shape, dtype) -> tf.Tensor:
        return self.layers.normal(shape, dtype=dtype)

    def reset(self, seed: int) -> None:
        self.layers.reset_from_seed(seed)
        self.likelihood.reset(likelihood_draws(seed).state)


#: The draw stream of a Monte Carlo likelihood's own draws in :class:`RowDraws` (layer ℓ's samples use stream ℓ).
_LIKELIHOOD_STREAM = -1
#: Layer ℓ's inducing draws in :class:`RowDraws` use stream ``_INDUCING_STREAM − ℓ``.
_INDUCING_STREAM = -2


def row_normals(seed, stream, start, num_rows, row_shape, dtype) -> tf.Tensor:
    """Standard normals [num_rows, *row_shape] for rows start, …, start + num_rows − 1 of a prediction, row r's values
    a function of (seed, stream, r) only.

    The rows are consecutive blocks of one Philox stream keyed by (seed, stream) (TensorFlow's stateless normals,
    Box–Muller on each 128-bit counter value: 4 float32 normals per counter value; a row is padded to a whole number
    of counter values); a batch starts the stream at its first row's counter. So the draws, and the results of a
    prediction made from them, do not depend on how its rows are split into batches.

    The normals are drawn in float32 and returned in ``dtype`` (float64 or float32): float64's Box–Muller costs
    twice as much per draw, and a float32 normal's resolution (about 6e-8 relative) is far below the Monte Carlo
    error of any prediction made from them (about 1/√S of the spread for S samples)."""
    dtype = tf.as_dtype(dtype)
    if dtype not in (tf.float64, tf.float32):
        raise ValueError(f"row_normals draws float64 or float32, got {dtype.name}")
    per_counter = 4
    seed, stream, start, num_rows = (tf.cast(value, tf.int64) for value in (seed, stream, start, num_rows))
    row_shape = tf.cast(row_shape, tf.int64)
    width = tf.reduce_prod(row_shape)
    padded = width + tf.math.floormod(-width, per_counter)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.stack([seed, stream]))
    low = counter[0] + tf.cast(start * padded // per_counter, tf.uint64)  # 128-bit counter + offset, with the carry
    counter = tf.stack([low, counter[1] + tf.cast(low < counter[0], tf.uint64)])
    values = tf.raw_ops.StatelessRandomNormalV2(shape=tf.reshape(num_rows * padded, [1]), key=key, counter=counter, alg=1, dtype=tf.float32)
    values = tf.cast(tf.reshape(values, tf.stack([num_rows, padded]))[:, :width], dtype)
    return tf.reshape(values, tf.concat([[num_rows], row_shape], 0))


class RowDraws:
    """The standard normal draws of rows start, …, start + B − 1 of a prediction with S samples, by
    :func:`row_normals` (each row's draws depend on (seed, row) only): ``layer_normal(layer, shape, dtype)`` for the
    samples of layer ``layer`` in :func:`propagate_samples` (shape [S·B, P], sample-major rows s·B + b), and
    ``normal(shape, dtype)`` for a Monte Carlo likelihood's draws (:func:`integrate_likelihood`, shape [Q, S·B, P])."""

    def __init__(self, seed, start, num_rows, num_samples: int):
        self.seed, self.start, self.num_rows, self.num_samples = seed, start, num_rows, num_samples

    def _draws(self, stream, leading, width, dtype) -> tf.Tensor:
        """[B, *leading, S, P] normals of ``stream``."""
        shape = tf.concat([tf.cast(leading, tf.int64), tf.cast(tf.stack([self.num_samples, width]), tf.int64)], 0)
        return row_normals(self.seed, stream, self.start, self.num_rows, shape, dtype)

    def layer_normal(self, layer, shape, dtype) -> tf.Tensor:
        z = self._draws(layer, tf.zeros([0], tf.int64), shape[-1], dtype)  # [B, S, P]
        return tf.reshape(tf.transpose(z, [1, 0, 2]), shape)

    def normal(self, shape, dtype) -> tf.Tensor:
        z = self._draws(_LIKELIHOOD_STREAM, shape[:1], shape[-1], dtype)  # [B, Q, S, P]
        return tf.reshape(tf.transpose(z, [1, 2, 0, 3]), shape)

    def inducing_normal(self, layer, shape, dtype) -> tf.Tensor:
        """[S, P, M] normals for layer ``layer``'s inducing draws: sample s's are a function of (seed, layer, s) only,
        shared by every row and batch of the prediction."""
        return row_normals(self.seed, _INDUCING_STREAM - layer, 0, shape[0], shape[1:], dtype)
