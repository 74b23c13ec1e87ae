"""The shared problem setups, re-exported from :mod:`experiments.harness.setups` (import them from there)."""

from experiments.harness.setups import (CLASSIC_KERNELS, classic_kernel, classifier, lengthscales_for_unit_inputs,  # noqa: F401
                                        mnist_arrays, rotated_mnist_cnn)
