"""Problem setups shared by studies and benchmarks: data scaled as a study uses it, and the classic kernels of the
NeuralEF paper. Imports only the library, so a benchmark can use a study's setting without importing the study."""

from __future__ import annotations

import numpy as np

CLASSIC_KERNELS = ("polynomial", "rbf")


def mnist_arrays(data_dir=None, symmetric: bool = False):
    """MNIST as float64 rows [N, 784] with labels: pixels / 255 in [0, 1], or in [−1, 1] when ``symmetric``.
    Returns (X_train, y_train, X_test, y_test, the loaded data object)."""
    from activated_dgp.data.mnist import load_mnist

    data = load_mnist(data_dir)

    def scale(images):
        unit = np.asarray(images, dtype=np.float64).reshape(len(images), -1) / 255.0
        return 2.0 * unit - 1.0 if symmetric else unit

    return scale(data.x_train), np.asarray(data.y_train), scale(data.x_test), np.asarray(data.y_test), data


def classic_kernel(name: str):
    """(gpflow kernel, a) of NeuralEF §4.1 (Deng et al., 2022): inputs x ~ U[−a, a]; a polynomial kernel of
    degree 4, k = (xᵀy + 1.5)⁴ with a = 1, or a squared exponential of unit lengthscale and variance with a = 2."""
    import gpflow

    gpflow.config.set_default_float(np.float64)
    if name == "polynomial":
        return gpflow.kernels.Polynomial(degree=4.0, variance=1.0, offset=1.5), 1.0
    if name == "rbf":
        return gpflow.kernels.SquaredExponential(lengthscales=1.0, variance=1.0), 2.0
    raise ValueError(f"unknown kernel {name!r}; use one of {CLASSIC_KERNELS}")
