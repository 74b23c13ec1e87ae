"""activated_dgp: activated deep Gaussian processes and zonal spectral machinery on GPflow/GPflux.

Public API:

* :class:`ZonalArcCosine`, :class:`ZonalKernel` — truncated zonal kernels on bias-extended inputs.
* :class:`ActivationFeature` — activated interdomain inducing variables (Kuu/Kuf registered with
  ``gpflow.covariances``); :class:`activated_dgp.conditionals.SharedActivationFeature` shares one across
  a layer's outputs, with a batched conditional.
* :func:`build_activated_dgp`, :func:`build_activated_nn`, :func:`dgp_from_keras`,
  :func:`train_two_stage` — activated DGPs in GPflux, their network twin, and the converter.
* :mod:`activated_dgp.spherical`, :mod:`activated_dgp.spectra` — Gegenbauer machinery and
  Funk–Hecke coefficients.
"""

from . import covariances as _covariances  # noqa: F401  (registers Kuu/Kuf)
from . import conditionals as _conditionals  # noqa: F401  (registers the activated layers' conditional)
from .conversion import Conversion, dgp_from_keras
from .covariances import basis_coefficients, inducing_coefficients
from .inducing_variables import ActivationFeature
from .kernels import ZonalArcCosine, ZonalKernel
from .config import ArchitectureConfig
from .models import LIKELIHOODS, activated_gp_layer, build_activated_dgp
from .nn import ActivatedLayer, build_activated_nn
from .persistence import DGPCheckpoint, load_dgp, load_network, load_optimizer, load_state, save_dgp, save_network
from .prediction import layer_moments, predict_class_probabilities, predict_y, predictive_log_density, propagate_means
from .batch_prediction import BatchPredictor
from .streaming import ArraySource, CsvSource
from .training.fitters import evaluate_elbo, train_dgp, train_network
from .training.schedule import TrainingSchedule
from .training.two_stage import TwoStageResult, train_two_stage
from .spectra import (
    ACTIVATIONS,
    Activation,
    activation_coefficients,
    arc_cosine_coefficients,
    arc_cosine_shape,
    register_activation,
    relu_coefficients,
    zonal_matern52_shape,
)
from .spherical import funk_hecke_coefficients, gegenbauer_series, num_harmonics, set_xla
from . import eigen
from .eigen import IKA, EigenfunctionFeature, FeatureRidge, LinearisedLaplace, NeuralEF, Nystrom
from . import kernel_machines
from .kernel_machines import EigenPro2, EigenPro3

__all__ = [
    "ZonalArcCosine",
    "ZonalKernel",
    "ActivationFeature",
    "ActivatedLayer",
    "build_activated_nn",
    "build_activated_dgp",
    "activated_gp_layer",
    "dgp_from_keras",
    "Conversion",
    "train_two_stage",
    "train_network",
    "train_dgp",
    "evaluate_elbo",
    "TrainingSchedule",
    "TwoStageResult",
    "ArraySource",
    "BatchPredictor",
    "CsvSource",
    "propagate_means",
    "layer_moments",
    "predictive_log_density",
    "predict_y",
    "predict_class_probabilities",
    "save_dgp",
    "load_dgp",
    "save_network",
    "load_network",
    "load_optimizer",
    "load_state",
    "DGPCheckpoint",
    "ArchitectureConfig",
    "LIKELIHOODS",
    "register_activation",
    "basis_coefficients",
    "inducing_coefficients",
    "Activation",
    "ACTIVATIONS",
    "activation_coefficients",
    "arc_cosine_coefficients",
    "arc_cosine_shape",
    "relu_coefficients",
    "zonal_matern52_shape",
    "funk_hecke_coefficients",
    "gegenbauer_series",
    "num_harmonics",
    "set_xla",
    "eigen",
    "Nystrom",
    "NeuralEF",
    "LinearisedLaplace",
    "EigenfunctionFeature",
    "IKA",
    "FeatureRidge",
    "kernel_machines",
    "EigenPro2",
    "EigenPro3",
]

__version__ = "0.1.0"
