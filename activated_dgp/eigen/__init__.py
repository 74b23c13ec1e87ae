"""Eigenfunctions of kernels: Nyström (reference), NeuralEF, IKA, and Mercer feature-map regression; the kernel of an
SGD trajectory and its function-space predictive (:mod:`~activated_dgp.eigen.trajectory`)."""

from .base import EigenApproximation, as_float64_matrix
from .kernel_sources import (
    FeatureKernel,
    GPflowKernel,
    KernelSource,
    PrecomputedFeatures,
    PrecomputedGram,
    as_kernel_source,
    nngp_kernel,
    ntk_kernel,
    rademacher_directions,
)
from .feature_regression import FeatureRidge, KernelRidge, kernel_ridge_regression, ridge_regression
from .ika import IKA, ActivationBasis, activation_basis, kmeans_filters, random_data_filters
from .neuralef import NeuralEF, StackedMLP, minibatch_rayleigh, neural_eigenfunction
from .rayleigh_ritz import generalised_eigh, span_products
from .features import EigenfunctionFeature
from .cnn_gp import cnn_forward, cnn_gp_features, sample_cnn_weights
from .nystrom import Nystrom
from .ntk import jacobian_features, jacobian_function, jacobian_kernel, ntk_gram, rademacher_matrix
from .laplace import LinearisedLaplace
from .laplace_factory import Laplace
from .trajectory import function_space_probabilities, sgd_trajectory_kernel, trajectory_eigenfunctions

__all__ = [
    "EigenApproximation",
    "as_float64_matrix",
    "KernelSource",
    "GPflowKernel",
    "PrecomputedGram",
    "PrecomputedFeatures",
    "FeatureKernel",
    "nngp_kernel",
    "ntk_kernel",
    "as_kernel_source",
    "Nystrom",
    "LinearisedLaplace",
    "Laplace",
    "jacobian_function",
    "jacobian_features",
    "jacobian_kernel",
    "ntk_gram",
    "rademacher_matrix",
    "rademacher_directions",
    "NeuralEF",
    "StackedMLP",
    "neural_eigenfunction",
    "minibatch_rayleigh",
    "span_products",
    "generalised_eigh",
    "EigenfunctionFeature",
    "cnn_gp_features",
    "cnn_forward",
    "sample_cnn_weights",
    "IKA",
    "ActivationBasis",
    "activation_basis",
    "random_data_filters",
    "kmeans_filters",
    "ridge_regression",
    "FeatureRidge",
    "KernelRidge",
    "kernel_ridge_regression",
    "sgd_trajectory_kernel",
    "trajectory_eigenfunctions",
    "function_space_probabilities",
]
