"""Spectra of zonal functions: closed forms (ReLU, first-order arc-cosine) and the activation registry.

Every coefficient vector in this package is a Funk–Hecke coefficient vector
a_n = ω_d ∫ s(t) Ĉ_n(t) (1 − t²)^((d−3)/2) dt (see :mod:`activated_dgp.zonal.spherical`). This module
holds the shape functions s, the closed forms where they exist, and the activations σ(t) that
the inducing functions g_m(x) = ‖x‖ ‖w_m‖ σ(w_m·x / ‖w_m‖‖x‖) are built from (Dutordoir et al.,
2021, eq. 10).

Names: :class:`ZonalActivation` (formerly ``Activation``) is a σ of the cosine, the zonal function an
:class:`~activated_dgp.zonal.inducing_variables.ActivationFeature` is built from, not a Keras activation; the registry of
them is :data:`ACTIVATION_REGISTRY` (formerly ``ACTIVATIONS``). The old names resolve, with a DeprecationWarning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import mpmath
import numpy as np
from scipy.special import expit, gammaln

from .._deprecation import deprecated_aliases
from .funk_hecke import is_extended
from .spherical import _check_dimension, _check_truncation_level
from .funk_hecke import apply_threshold, funk_hecke_coefficients

__all__ = [
    "arc_cosine_shape",
    "zonal_matern52_shape",
    "relu_coefficients",
    "arc_cosine_coefficients",
    "ZonalActivation",
    "ACTIVATION_REGISTRY",
    "DEFAULT_ACTIVATION",
    "SAVED_DEFAULT_ACTIVATION",
    "resolve_activation",
    "register_activation",
    "registered_activation_name",
    "activation_coefficients",
]


# The shapes and activations below are *dual*: on an mpmath number they compute in mpmath, so that
# their Funk–Hecke coefficients can be integrated in extended precision (activated_dgp.zonal.funk_hecke).


def _clip_extended(t):
    return min(max(t, mpmath.mpf(-1)), mpmath.mpf(1))


def _cosines(cosine) -> np.ndarray:
    """Cosines as float64, clipped to [−1, 1] against round-off; a ValueError for NaN or values beyond
    round-off outside [−1, 1] (a shape function there is undefined, not its value at ±1)."""
    t = np.asarray(cosine, dtype=np.float64)
    if not np.all(np.abs(t) <= 1.0 + 1e-9):  # also false for NaN
        bad = t[~(np.abs(t) <= 1.0 + 1e-9)]
        raise ValueError(f"cosines must lie in [−1, 1], got {bad[:3].tolist()}")
    return np.clip(t, -1.0, 1.0)


def arc_cosine_shape(cosine: np.ndarray) -> np.ndarray:
    """s(t) = (√(1 − t²) + t (π − arccos t)) / π, the first-order arc-cosine kernel on the sphere (eq. 6)."""
    if is_extended(cosine):
        t = _clip_extended(cosine)
        return (mpmath.sqrt(1 - t * t) + t * (mpmath.pi - mpmath.acos(t))) / mpmath.pi
    t = _cosines(cosine)
    return (np.sqrt(1.0 - t * t) + t * (np.pi - np.arccos(t))) / np.pi


def zonal_matern52_shape(cosine: np.ndarray, lengthscale: float = 1.0) -> np.ndarray:
    """Matérn-5/2 of the chordal distance r = √(2 − 2t)/ℓ between points of the sphere:
    s(t) = (1 + √5 r + 5r²/3) exp(−√5 r). The restriction of a positive-definite kernel on R^d, so
    it is positive definite on S^(d−1) (all λ_n ≥ 0); this is the zonal Matérn of Fig. 5.
    """
    if is_extended(cosine):
        r = mpmath.sqrt(2 - 2 * _clip_extended(cosine)) / lengthscale
        root5 = mpmath.sqrt(5)
        return (1 + root5 * r + 5 * r * r / 3) * mpmath.exp(-root5 * r)
    t = _cosines(cosine)
    r = np.sqrt(2.0 - 2.0 * t) / lengthscale
    return (1.0 + math.sqrt(5.0) * r + 5.0 * r * r / 3.0) * np.exp(-math.sqrt(5.0) * r)


def relu_coefficients(dimension: int, truncation_level: int, *, threshold: float = 1e-9) -> np.ndarray:
    """Funk–Hecke coefficients σ_n of the ReLU σ(t) = max(0, t), closed form (eq. C.19, C.20):

        σ_0 = Γ(d/2) / (2√π Γ((d+1)/2)),
        σ_1 = Γ(d/2) Γ((d+1)/2) / (2(d−1) Γ((d−1)/2) Γ(d/2 + 1))    (= 1/(2d)),
        σ_n = (−1)^(n/2−1) Γ(d/2) Γ(n−1) / (√π 2^n Γ(n/2) Γ(n/2 + (d+1)/2)),   n = 2, 4, 6, …,
        σ_n = 0,   n = 3, 5, 7, …

    valid for every d ≥ 2 (the derivation via Rodrigues' formula does not need d odd). Evaluated
    in log-gamma form so that high levels do not overflow.
    """
    d = _check_dimension(dimension)
    truncation_level = _check_truncation_level(truncation_level)
    sigma = np.zeros(truncation_level)
    sigma[0] = math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / (2.0 * math.sqrt(math.pi))
    if truncation_level > 1:
        sigma[1] = math.exp(
            math.lgamma(d / 2) + math.lgamma((d + 1) / 2) - math.lgamma((d - 1) / 2) - math.lgamma(d / 2 + 1)
        ) / (2.0 * (d - 1))
    n = np.arange(2, truncation_level, 2, dtype=np.float64)
    log_magnitude = (
        gammaln(d / 2)
        + gammaln(n - 1)
        - 0.5 * math.log(math.pi)
        - n * math.log(2.0)
        - gammaln(n / 2)
        - gammaln(n / 2 + (d + 1) / 2)
    )
    sigma[2::2] = (-1.0) ** (n / 2 - 1) * np.exp(log_magnitude)
    return apply_threshold(sigma, d, threshold)


def arc_cosine_coefficients(dimension: int, truncation_level: int, *, threshold: float = 1e-9) -> np.ndarray:
    """Eigenvalues λ_n of the first-order arc-cosine shape function (eq. 6), closed form for every d ≥ 2:

        λ_n = 2d σ_n²,   σ_n the ReLU coefficients of :func:`relu_coefficients`.

    Derivation: for w uniform on S^(d−1), E_w[relu(w·x) relu(w·x')] = Σ_n σ_n² N_n^d Ĉ_n(x·x')
    (expand each ReLU by Funk–Hecke, then orthonormality of the harmonics and the addition
    theorem). For w ~ N(0, I_d), ‖w‖ is independent of w/‖w‖ and E‖w‖² = d, and Cho & Saul's
    E_w[relu(w·x) relu(w·x')] = ‖x‖‖x'‖ s(t)/2. Hence s(t) = 2d Σ_n σ_n² N_n^d Ĉ_n(t). This agrees
    with the paper's odd-d expansion (Table C.1) and with quadrature in every d (tests).
    """
    sigma = relu_coefficients(dimension, truncation_level, threshold=0.0)
    return apply_threshold(2.0 * dimension * sigma**2, dimension, threshold)


# ------------------------------------------------------------------------------------------------
# Activations
# ------------------------------------------------------------------------------------------------


def _relu(t):
    return max(t, mpmath.mpf(0)) if is_extended(t) else np.maximum(0.0, t)


def _softplus3(t):
    return mpmath.log1p(mpmath.exp(3 * t)) if is_extended(t) else np.logaddexp(0.0, 3.0 * t)


def _swish3(t):
    return 3 * t / (1 + mpmath.exp(-3 * t)) if is_extended(t) else 3.0 * t * expit(3.0 * t)


@dataclass(frozen=True)
class ZonalActivation:
    """An activation σ: [−1, 1] → R for activated inducing functions (eq. 10).

    :param name: a label.
    :param function: elementwise NumPy function on cosines.
    :param breakpoints: points in (−1, 1) where σ is not smooth (quadrature splits there).
    :param closed_form: optional ``(dimension, truncation_level, threshold) -> σ_n``.
    """

    name: str
    function: Callable[[np.ndarray], np.ndarray]
    breakpoints: tuple = ()
    closed_form: Optional[Callable[..., np.ndarray]] = field(default=None, compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a ZonalActivation needs a non-empty name, got {self.name!r}")
        if not callable(self.function):
            raise TypeError(f"the activation {self.name!r} needs a function of the cosine, got {type(self.function).__name__}")


ACTIVATION_REGISTRY = {
    "relu": ZonalActivation("relu", _relu, breakpoints=(0.0,), closed_form=relu_coefficients),
    # the paper's Softplus, log(1 + exp(3t)): the factor 3 puts the bend well inside [−1, 1]
    "softplus": ZonalActivation("softplus", _softplus3),
    # Swish at the same input scale as the Softplus: 3t · sigmoid(3t)
    "swish": ZonalActivation("swish", _swish3),
}


#: The library's default activation (the twin's units, the DGP's inducing functions): the zonal Swish
#: 3t·sigmoid(3t). The zonal Softplus, the paper's and the default before, is nearly affine on [−1, 1] and
#: its twin trains slower and worse than a plain network of the same shape; the Swish twin matches the plain
#: network within one standard error on 8 of 9 UCI sets (the twin-training and UCI studies,
#: protocol v6). The twin's mean propagation equals its DGP's for every registered activation.
DEFAULT_ACTIVATION = "swish"
#: What a saved architecture or layer config that does not name its activation meant when it was written:
#: the default of that time, the zonal Softplus (every writer so far names it; this keeps any other reading).
SAVED_DEFAULT_ACTIVATION = "softplus"


def resolve_activation(activation: Union[str, ZonalActivation, Callable]) -> ZonalActivation:
    """Turn a name ("relu", "softplus", "swish"), a :class:`ZonalActivation` or a callable into a ZonalActivation."""
    if isinstance(activation, ZonalActivation):
        return activation
    if isinstance(activation, str):
        key = activation.lower()
        if key not in ACTIVATION_REGISTRY:
            raise ValueError(
                f"unknown activation {activation!r}; choose one of {sorted(ACTIVATION_REGISTRY)} or pass a callable on [−1, 1]"
            )
        return ACTIVATION_REGISTRY[key]
    if callable(activation):
        registered = [act for act in ACTIVATION_REGISTRY.values() if act.function is activation]
        return registered[0] if registered else ZonalActivation(getattr(activation, "__name__", "callable"), activation)
    raise ValueError(f"activation must be a name, a ZonalActivation or a callable, got {type(activation).__name__}")


_BUILTIN_ACTIVATIONS = frozenset(ACTIVATION_REGISTRY)


def register_activation(
    name: str, function: Callable[[np.ndarray], np.ndarray], *, breakpoints: tuple = (), overwrite: bool = False
) -> ZonalActivation:
    """Add a user activation σ: [−1, 1] → R to :data:`ACTIVATION_REGISTRY` under ``name`` and return it.

    Registered activations are named in saved models and network configs (see
    :mod:`activated_dgp.deep.persistence`); a process that loads them must register the same function
    under the same name first, as with Keras custom objects. Registering an equal activation again is
    a no-op; another function under a taken name needs ``overwrite=True`` (never for the built-ins).
    """
    key = str(name).lower()
    if not key or not callable(function):
        raise ValueError(f"register_activation needs a non-empty name and a callable, got {name!r} and {function!r}")
    activation = ZonalActivation(key, function, tuple(breakpoints))
    existing = ACTIVATION_REGISTRY.get(key)
    if existing is not None and existing != activation:
        if key in _BUILTIN_ACTIVATIONS or not overwrite:
            raise ValueError(f"the activation name {key!r} is already registered to another function")
    if existing == activation:
        return existing
    ACTIVATION_REGISTRY[key] = activation
    return activation


def registered_activation_name(activation: Union[str, ZonalActivation, Callable]) -> str:
    """The registry name of ``activation``, or a ValueError if it is not the activation registered under its name
    (an unregistered callable cannot be restored by name)."""
    act = resolve_activation(activation)
    if ACTIVATION_REGISTRY.get(act.name) != act:
        raise ValueError(
            f"the activation {act.name!r} is not registered; call activated_dgp.zonal.register_activation({act.name!r}, function) "
            "here and in the process that restores it"
        )
    return act.name


def activation_coefficients(
    activation: Union[str, ZonalActivation, Callable],
    dimension: int,
    truncation_level: int,
    *,
    threshold: float = 1e-9,
    quadrature_points: int = 200,
) -> np.ndarray:
    """σ_n, n < Ñ, of an activation on S^(d−1) (eq. 11): closed form where registered, else
    :func:`~activated_dgp.zonal.funk_hecke.funk_hecke_coefficients` (method "auto": extended precision in
    high dimension for functions that accept mpmath numbers, as the registered ones do)."""
    act = resolve_activation(activation)
    if act.closed_form is not None:
        return act.closed_form(dimension, truncation_level, threshold=threshold)
    return funk_hecke_coefficients(
        act.function,
        dimension,
        truncation_level,
        breakpoints=act.breakpoints,
        quadrature_points=quadrature_points,
        threshold=threshold,
    )


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.zonal.spectra", {"Activation": ("activated_dgp.zonal.spectra", "ZonalActivation"), "ACTIVATIONS": ("activated_dgp.zonal.spectra", "ACTIVATION_REGISTRY")})
