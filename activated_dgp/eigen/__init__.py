"""Eigenfunctions of kernels: Nyström (reference), NeuralEF, IKA, and Mercer feature-map regression."""

from .base import EigenApproximation
from .kernel_sources import (
    FeatureKernel,
    GPflowKernel,
    KernelSource,
    PrecomputedGram,
    as_kernel_source,
    nngp_kernel,
    ntk_kernel,
)

__all__ = [
    "EigenApproximation",
    "KernelSource",
    "GPflowKernel",
    "PrecomputedGram",
    "FeatureKernel",
    "nngp_kernel",
    "ntk_kernel",
    "as_kernel_source",
]
