"""The networks of NeuralEF's eigenfunctions (Deng et al., 2022, App. B): one tf-keras MLP per eigenfunction
(:func:`neural_eigenfunction`), or k of them evaluated together (:class:`StackedMLP`)."""

from __future__ import annotations

from typing import Callable, List, Optional, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from ..base import elementwise_activation


def _check_sizes(**sizes) -> None:
    for what, value in sizes.items():
        smallest = 0 if what == "hidden_layers" else 1
        if int(value) != value or value < smallest:
            raise ValueError(f"{what} must be an integer ≥ {smallest}, got {value!r}")


def neural_eigenfunction(
    input_dim: int,
    width: int = 32,
    hidden_layers: int = 2,
    activation: Union[str, Callable] = "sin_cos",
    seed: Optional[int] = None,
    dtype=None,
) -> tf_keras.Sequential:
    """The default network of one eigenfunction: an MLP [N, D] → [N, 1] with ``hidden_layers`` Dense
    layers of ``width`` units and a linear output (App. B: width 32, half sin and half cos units).

    :param activation: one of ``sin_cos, sin, tanh, relu, softplus, gelu`` or a callable.
    """
    activation = elementwise_activation(activation)
    _check_sizes(input_dim=input_dim, width=width, hidden_layers=hidden_layers)
    dtype = dtype or gpflow.default_float()
    initializer = lambda offset: tf_keras.initializers.GlorotUniform(seed=None if seed is None else seed + offset)  # noqa: E731
    layers: List[tf_keras.layers.Layer] = [tf_keras.Input(shape=(int(input_dim),), dtype=dtype)]
    for layer in range(int(hidden_layers)):
        layers.append(
            tf_keras.layers.Dense(int(width), activation=activation, kernel_initializer=initializer(layer), dtype=dtype)
        )
    layers.append(tf_keras.layers.Dense(1, kernel_initializer=initializer(int(hidden_layers)), dtype=dtype))
    return tf_keras.Sequential(layers)


class StackedMLP(tf.Module):
    """k independent MLPs [N, D] → [N, 1] evaluated together with batched matrix products: [N, D] → [N, k].

    Network j has its own weights W_l[j], [n_(l−1), n_l], and biases b_l[j], [n_l], (He-normal
    initialised, as in the paper's code: N(0, 2/fan_in), zero biases), ``hidden_layers`` hidden layers of ``width`` units and a linear output:
    the same functions as k separate :func:`neural_eigenfunction` models, in about one k-th of the ops.
    """

    def __init__(
        self,
        num_networks: int,
        input_dim: int,
        width: int = 32,
        hidden_layers: int = 2,
        activation: Union[str, Callable] = "sin_cos",
        seed: int = 0,
        name: Optional[str] = None,
    ):
        super().__init__(name=name)
        self._activation = elementwise_activation(activation)
        self.activation = activation
        _check_sizes(input_dim=input_dim, width=width, hidden_layers=hidden_layers)
        k = int(num_networks)
        sizes = [int(input_dim)] + [int(width)] * int(hidden_layers) + [1]
        rng = np.random.default_rng(seed)
        self.kernels, self.biases = [], []
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            weights = rng.normal(0.0, np.sqrt(2.0 / fan_in), (k, fan_in, fan_out))
            self.kernels.append(tf.Variable(weights, dtype=tf.float64, name=f"kernel_{layer}"))
            self.biases.append(tf.Variable(np.zeros((k, 1, fan_out)), dtype=tf.float64, name=f"bias_{layer}"))

    def __call__(self, X) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        h = tf.einsum("nd,kdh->knh", X, self.kernels[0]) + self.biases[0]  # [k, N, n_1]
        for W, b in zip(self.kernels[1:], self.biases[1:]):
            h = tf.matmul(self._activation(h), W) + b
        return tf.transpose(h[..., 0])  # [N, k]
