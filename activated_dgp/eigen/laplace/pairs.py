"""The matrix-valued NTK of a C-output network as a scalar kernel on pairs (x, c) (Deng et al. 2022, "NeuralEF",
§3.2): κ((x, c), (x', c')) = ∂_θ g_c(x) · ∂_θ g_c'(x'), the pair's class given as a one-hot vector after x."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

class _OutputSelector(tf.Module):
    """The network as a scalar function on pairs: (x, one-hot c) [M, D + C] → g_c(x) [M, 1], so that the
    matrix-valued NTK becomes a scalar kernel on X × {1..C} (NeuralEF §3.2)."""

    def __init__(self, model, input_dim: int, num_outputs: int):
        super().__init__()
        self.model, self.input_dim, self.num_outputs = model, int(input_dim), int(num_outputs)

    @property
    def trainable_variables(self):
        return tuple(self.model.trainable_variables)

    def __call__(self, inputs):
        inputs = tf.convert_to_tensor(inputs, tf.float64)
        outputs = tf.cast(self.model(inputs[:, : self.input_dim], training=False), tf.float64)
        return tf.reduce_sum(outputs * inputs[:, self.input_dim :], axis=1, keepdims=True)


def pair_inputs(X: np.ndarray, num_outputs: int) -> np.ndarray:
    """The inputs of the multi-output eigenfunctions: rows (x_n, e_c) for n = 1..N, c = 1..C (n-major),
    [N C, D + C]; X itself when C = 1."""
    if num_outputs == 1:
        return X
    return np.concatenate([np.repeat(X, num_outputs, axis=0), np.tile(np.eye(num_outputs), (X.shape[0], 1))], axis=1)
