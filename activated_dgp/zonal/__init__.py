"""The zonal core: zonal kernels on bias-extended inputs, activated inducing variables, and the spectra behind them.

Modules, each importing only from those above it:

* :mod:`~activated_dgp.zonal.spherical` — harmonic counts N_n^d, normalised Gegenbauer polynomials Ĉ_n and their
  Clenshaw sums Σ a_n N_n^d Ĉ_n(t) (:func:`gegenbauer_series`, :func:`num_harmonics`,
  :func:`use_xla_for_gegenbauer`);
* :mod:`~activated_dgp.zonal.funk_hecke` — Funk–Hecke coefficients a_n of a zonal function by quadrature, float64
  where that is exact and extended precision (mpmath) where it is not (:func:`funk_hecke_coefficients`);
* :mod:`~activated_dgp.zonal.spectra` — activations σ(t) of the cosine, their registry and their spectra
  (:class:`ZonalActivation`, :data:`ACTIVATION_REGISTRY`, :func:`register_activation`,
  :func:`activation_coefficients`, :func:`relu_coefficients`, :func:`arc_cosine_coefficients`,
  :func:`arc_cosine_shape`, :func:`zonal_matern52_shape`);
* :mod:`~activated_dgp.zonal.kernels` — :class:`ZonalArcCosine`, :class:`ZonalKernel`, :class:`ZonalMatchedKernel` (λ_n ∝ |σ_n|);
* :mod:`~activated_dgp.zonal.inducing_variables` — :class:`ActivationFeature`;
* :mod:`~activated_dgp.zonal.covariances` — Kuu and Kuf, registered with ``gpflow.covariances``
  (:func:`basis_coefficients`, :func:`inducing_coefficients`);
* :mod:`~activated_dgp.zonal.conditionals` — the activated layers' shared feature and conditional, registered with
  ``gpflow.conditionals``;
* :mod:`~activated_dgp.zonal.owned_conditional` — the algebra of the activated layers' own training step (marginals and
  KL from q_sqrt's unconstrained vector).

Renamed names (the old ones still resolve from ``activated_dgp`` and their modules, with a DeprecationWarning):
``Activation`` → ``ZonalActivation`` (a σ of the cosine, not a Keras activation), ``ACTIVATIONS`` →
``ACTIVATION_REGISTRY`` (it is the registry :func:`register_activation` extends), ``set_xla`` →
``use_xla_for_gegenbauer`` (it switches XLA for the Gegenbauer–Clenshaw sums only, not for training).
"""

from . import conditionals as _conditionals  # noqa: F401  (registers the activated layers' conditional)
from .covariances import basis_coefficients, inducing_coefficients
from .inducing_variables import ActivationFeature
from .kernels import ZonalArcCosine, ZonalKernel, ZonalMatchedKernel
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
from .funk_hecke import funk_hecke_coefficients
from .spherical import gegenbauer_series, num_harmonics, use_xla_for_gegenbauer

__all__ = [
    "ZonalArcCosine",
    "ZonalKernel",
    "ZonalMatchedKernel",
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
