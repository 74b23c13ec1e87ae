"""Problem setups shared by studies and benchmarks: data scaled as a study uses it (MNIST, the banana set), the
classic kernels of the NeuralEF paper and the rotated-MNIST CNN. Part of the harness and importing only the library,
so a benchmark, or another study, uses a study's setting without importing the study."""

from __future__ import annotations

import gpflow
import numpy as np
import tf_keras

from activated_dgp.data.mnist import load_mnist
from activated_dgp.deep.twin import build_activated_nn, with_dropout

CLASSIC_KERNELS = ("polynomial", "rbf")


def mnist_arrays(data_dir=None, symmetric: bool = False):
    """MNIST as float64 rows [N, 784] with labels: pixels / 255 in [0, 1], or in [−1, 1] when ``symmetric``.
    Returns (X_train, y_train, X_test, y_test, the loaded data object)."""
    data = load_mnist(data_dir)

    def scale(images):
        unit = np.asarray(images, dtype=np.float64).reshape(len(images), -1) / 255.0
        return 2.0 * unit - 1.0 if symmetric else unit

    return scale(data.x_train), np.asarray(data.y_train), scale(data.x_test), np.asarray(data.y_test), data


def banana_dataset(num_points: int = 500, seed: int = 0, noise: float = 0.2, standardise: bool = True):
    """Two interleaving crescents ("bananas") with isotropic Gaussian noise: X [N, 2], Y [N, 1] in {0, 1}.

    Class 0: (cos t, sin t); class 1: (1 − cos t, 1/2 − sin t), t ~ U(0, π), plus N(0, noise²·I);
    half the points in each class. With ``standardise`` each input column is shifted and scaled to
    mean 0 and standard deviation 1 (the usual preprocessing; the input scale matters to the far field of the
    zonal kernel). The data of the banana and far-field studies (Dutordoir et al., 2021, Sec. 5.1).
    """
    if num_points < 2:
        raise ValueError(f"num_points must be ≥ 2, got {num_points}")
    rng = np.random.default_rng(seed)
    n0 = num_points // 2
    t = rng.uniform(0.0, np.pi, size=num_points)
    upper = np.stack([np.cos(t[:n0]), np.sin(t[:n0])], axis=1)
    lower = np.stack([1.0 - np.cos(t[n0:]), 0.5 - np.sin(t[n0:])], axis=1)
    X = np.concatenate([upper, lower]) + noise * rng.normal(size=(num_points, 2))
    Y = np.concatenate([np.zeros(n0), np.ones(num_points - n0)])[:, None]
    if standardise:
        X = (X - X.mean(0)) / X.std(0)
    order = rng.permutation(num_points)
    return X[order], Y[order]


def training_subset(data, train_size, seed: int) -> np.ndarray:
    """The indices of ``train_size`` training digits of a loaded MNIST ``data``, drawn by a permutation from
    ``numpy.random.default_rng(seed)`` (all of them, permuted, when ``train_size`` is None)."""
    order = np.random.default_rng(seed).permutation(len(data.x_train))
    if train_size is None:
        return order
    if train_size > len(order):
        raise ValueError(f"--train-size {train_size} exceeds the {len(order)} training images of {data.train_source}")
    return order[:train_size]


def classic_kernel(name: str):
    """(gpflow kernel, a) of NeuralEF §4.1 (Deng et al., 2022): inputs x ~ U[−a, a]; a polynomial kernel of
    degree 4, k = (xᵀy + 1.5)⁴ with a = 1, or a squared exponential of unit lengthscale and variance with a = 2."""
    gpflow.config.set_default_float(np.float64)
    if name == "polynomial":
        return gpflow.kernels.Polynomial(degree=4.0, variance=1.0, offset=1.5), 1.0
    if name == "rbf":
        return gpflow.kernels.SquaredExponential(lengthscales=1.0, variance=1.0), 2.0
    raise ValueError(f"unknown kernel {name!r}; use one of {CLASSIC_KERNELS}")


def lengthscales_for_unit_inputs(input_dim: int) -> np.ndarray:
    """ℓ = √D on the D input coordinates and 1 on the bias one, so that x̃ = [x / √D, 1] has norm O(1)
    for inputs with O(1) entries (the twin's output grows like ‖x̃‖)."""
    return np.concatenate([np.full(input_dim, np.sqrt(input_dim)), [1.0]])


def classifier(extractor, head):
    """The extractor followed by the head, as one tf-keras Sequential named "classifier"."""
    return tf_keras.Sequential([extractor, head], name="classifier")


def rotated_mnist_cnn(seed: int, truncation_level: int, num_units: int, width: int, dropout: float = 0.0):
    """The rotated-MNIST study's CNN (Dutordoir et al. 2021, §5.3), as (model, extractor, head): flat 784 pixels →
    two 5×5 ReLU convolutions (32 and 64 channels), each max-pooled, → flattened features [N, 1024] (float32) → the
    activated twin's two layers (``num_units`` zonal Softplus units, a bottleneck of ``width``) → 10 logits (float64);
    with ``dropout`` > 0 the head has dropout before each linear layer. Glorot-uniform convolutions seeded by ``seed``."""

    initializer = lambda offset: tf_keras.initializers.GlorotUniform(seed=seed * 1000 + offset)  # noqa: E731
    extractor = tf_keras.Sequential(
        [
            tf_keras.Input(shape=(784,), dtype="float32"),
            tf_keras.layers.Reshape((28, 28, 1)),
            tf_keras.layers.Conv2D(32, 5, activation="relu", kernel_initializer=initializer(1)),
            tf_keras.layers.MaxPooling2D(2),
            tf_keras.layers.Conv2D(64, 5, activation="relu", kernel_initializer=initializer(2)),
            tf_keras.layers.MaxPooling2D(2),
            tf_keras.layers.Flatten(),
        ],
        name="features",
    )
    num_features = int(extractor.output_shape[-1])
    twin = build_activated_nn(
        num_features,
        num_layers=2,
        num_units=num_units,
        layer_widths=[width],
        output_dim=10,
        activation="softplus",
        truncation_level=truncation_level,
        lengthscales=[lengthscales_for_unit_inputs(num_features), lengthscales_for_unit_inputs(width)],
        seed=seed,
    )
    head = with_dropout(twin, dropout, seed) if dropout > 0 else twin
    return classifier(extractor, head), extractor, head
