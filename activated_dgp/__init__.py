"""activated_dgp: activated deep Gaussian processes and zonal spectral machinery on GPflow/GPflux.

Public API:

* :class:`ZonalArcCosine`, :class:`ZonalKernel` — truncated zonal kernels on bias-extended inputs.
* :class:`ActivationFeature` — activated interdomain inducing variables (Kuu/Kuf registered with
  ``gpflow.covariances``).
* :mod:`activated_dgp.spherical`, :mod:`activated_dgp.spectra` — Gegenbauer machinery and
  Funk–Hecke coefficients.
"""

from . import covariances as _covariances  # noqa: F401  (registers Kuu/Kuf)
from .covariances import basis_coefficients, inducing_coefficients
from .inducing_variables import ActivationFeature
from .kernels import ZonalArcCosine, ZonalKernel
from .spectra import (
    ACTIVATIONS,
    Activation,
    activation_coefficients,
    arc_cosine_coefficients,
    arc_cosine_shape,
    relu_coefficients,
    zonal_matern52_shape,
)
from .spherical import funk_hecke_coefficients, gegenbauer_series, num_harmonics, set_xla

__all__ = [
    "ZonalArcCosine",
    "ZonalKernel",
    "ActivationFeature",
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
]

__version__ = "0.1.0"
