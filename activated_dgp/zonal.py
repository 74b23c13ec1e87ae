"""The zonal core: zonal kernels on bias-extended inputs, activated inducing variables, and the spectra behind them.

A namespace: it re-exports, from the modules that implement them (imports go down only; no implementation module
imports this one),

* kernels (:mod:`activated_dgp.kernels`): :class:`ZonalArcCosine`, :class:`ZonalKernel`;
* activated inducing variables (:mod:`activated_dgp.inducing_variables`, :mod:`activated_dgp.conditionals`) and
  their covariances (:mod:`activated_dgp.covariances`, registered with ``gpflow.covariances``):
  :class:`ActivationFeature`, :func:`basis_coefficients`, :func:`inducing_coefficients` (a layer's shared
  feature, :class:`~activated_dgp.conditionals.SharedActivationFeature`, stays in its module);
* activations σ(t) of the cosine and their registry (:mod:`activated_dgp.spectra`): :class:`ZonalActivation`,
  :data:`ACTIVATION_REGISTRY`, :func:`register_activation`, the default :data:`DEFAULT_ACTIVATION`;
* Funk–Hecke spectra (:mod:`activated_dgp.spectra`): :func:`activation_coefficients`, :func:`relu_coefficients`,
  :func:`arc_cosine_coefficients`, :func:`arc_cosine_shape`, :func:`zonal_matern52_shape`;
* Gegenbauer machinery (:mod:`activated_dgp.spherical`): :func:`funk_hecke_coefficients`,
  :func:`gegenbauer_series`, :func:`num_harmonics`, :func:`use_xla_for_gegenbauer`.

Renamed here (the old names still resolve from ``activated_dgp`` and their modules, with a DeprecationWarning):
``Activation`` → ``ZonalActivation`` (a σ of the cosine, not a Keras activation), ``ACTIVATIONS`` →
``ACTIVATION_REGISTRY`` (it is the registry :func:`register_activation` extends), ``set_xla`` →
``use_xla_for_gegenbauer`` (it switches XLA for the Gegenbauer–Clenshaw sums only, not for training).
"""

from .covariances import basis_coefficients, inducing_coefficients
from .inducing_variables import ActivationFeature
from .kernels import ZonalArcCosine, ZonalKernel
from .spectra import (
    ACTIVATION_REGISTRY,
    DEFAULT_ACTIVATION,
    ZonalActivation,
    activation_coefficients,
    arc_cosine_coefficients,
    arc_cosine_shape,
    register_activation,
    relu_coefficients,
    zonal_matern52_shape,
)
from .spherical import funk_hecke_coefficients, gegenbauer_series, num_harmonics, use_xla_for_gegenbauer

__all__ = [
    "ZonalArcCosine",
    "ZonalKernel",
    "ActivationFeature",
    "basis_coefficients",
    "inducing_coefficients",
    "ZonalActivation",
    "ACTIVATION_REGISTRY",
    "DEFAULT_ACTIVATION",
    "register_activation",
    "activation_coefficients",
    "relu_coefficients",
    "arc_cosine_coefficients",
    "arc_cosine_shape",
    "zonal_matern52_shape",
    "funk_hecke_coefficients",
    "gegenbauer_series",
    "num_harmonics",
    "use_xla_for_gegenbauer",
]
