"""Kernel machines trained by EigenPro: EigenPro 2 (kernel regression, K(X, X) θ = y) and EigenPro 3
(kernel networks with centers decoupled from the data), preconditioned by Nyström or by any eigen-module
approximation (IKA, NeuralEF). See docs/kernel_machines.md."""

from .blocks import ActivatedBasis, KernelCenters, KernelGram
from .centers import CENTER_METHODS, choose_centers
from .eigenpro2 import EigenPro2, EigenPro2Solver
from .eigenpro3 import PROJECTIONS, UPDATES, EigenPro3, ExactProjection
from .preconditioner import Preconditioner, batch_step, fit_nystrom, step_schedule
from .span import SpanEigenfunctions

__all__ = [
    "EigenPro2",
    "EigenPro2Solver",
    "EigenPro3",
    "ExactProjection",
    "Preconditioner",
    "fit_nystrom",
    "step_schedule",
    "batch_step",
    "SpanEigenfunctions",
    "KernelCenters",
    "ActivatedBasis",
    "KernelGram",
    "choose_centers",
    "CENTER_METHODS",
    "PROJECTIONS",
    "UPDATES",
]
