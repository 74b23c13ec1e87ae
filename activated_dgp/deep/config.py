"""One description of an activated architecture, shared by the network twin, the DGP and persistence.

An activated DGP of L layers (Dutordoir et al., 2021, Fig. 1) maps [N, D_1] → [N, P_L] through layers

    layer ℓ:  [N, D_ℓ] → [N, P_ℓ],   D_1 = input_dim,  D_(ℓ+1) = P_ℓ,  P_L = output_dim,

each with M_ℓ activated inducing functions (twin: M_ℓ activated units) on x̃ = [x, 1] / ℓ_ℓ, whose
lengthscales ℓ_ℓ are a scalar or D_ℓ + 1 values. :class:`ArchitectureConfig` records exactly this (like
gpflux's ``architectures.Config``), validated once at construction, so that
:func:`~activated_dgp.build_activated_nn`, :func:`~activated_dgp.build_activated_dgp` and
:mod:`~activated_dgp.deep.persistence` cannot disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from .likelihoods import LIKELIHOOD_REGISTRY, likelihood_name
from ..zonal.spectra import (
    DEFAULT_ACTIVATION,
    SAVED_DEFAULT_ACTIVATION,
    ZonalActivation,
    registered_activation_name,
    resolve_activation,
)
from ..validation import check_positive_int

__all__ = ["ArchitectureConfig", "as_config", "initial_directions"]


def _per_layer(value, num_layers: int, what: str) -> tuple:
    """One entry per layer: a scalar (or string / callable) is repeated, a sequence must have L entries."""
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0):
        value = tuple(value)
    else:
        return (value,) * num_layers
    if len(value) != num_layers:
        raise ValueError(f"{what} needs one entry per layer ({num_layers}), got {len(value)}")
    return value


def _lengthscale(value, input_width: int, layer: int):
    array = np.asarray(value, dtype=np.float64)
    if array.ndim > 1 or (array.ndim == 1 and array.shape[0] != input_width + 1):
        raise ValueError(
            f"lengthscales of layer {layer} must be a scalar or have D + 1 = {input_width + 1} entries "
            f"(its {input_width} inputs + 1 bias), got shape {array.shape}"
        )
    if not (np.all(np.isfinite(array)) and np.all(array > 0)):
        raise ValueError(f"lengthscales of layer {layer} must be positive and finite, got {array}")
    return float(array) if array.ndim == 0 else tuple(float(v) for v in array)


def initial_directions(num_units: int, input_dim: int, rng: np.random.Generator, lengthscales=None) -> np.ndarray:
    """W [M, D+1] with rows w ~ N(0, I / ((D+1) S)), S = Σ_i ℓ_i⁻² over the D + 1 entries of x̃ = [x, 1]/ℓ.

    For inputs with unit second moments E‖x̃‖² = S and E‖w‖² = 1/S, so a unit's scale ‖w‖ ‖x̃‖ (the
    factor in front of its zonal activation, eq. 14) is ≈ 1 whatever ℓ: the twin starts with the same
    outputs for every common ℓ (a common ℓ changes no angle). ``lengthscales`` None means S = 1, the
    scale of ℓ = √(D+1) (rows ~ N(0, I/(D+1)), Glorot-like); zero rows have probability 0.
    """
    scales = np.asarray(1.0 if lengthscales is None else lengthscales, dtype=np.float64)
    if scales.ndim > 1 or scales.size not in (1, input_dim + 1) or not np.all(np.isfinite(scales) & (scales > 0)):
        raise ValueError(f"lengthscales must be a positive scalar or D + 1 = {input_dim + 1} positive values, got {lengthscales!r}")
    scales = np.broadcast_to(scales, (input_dim + 1,))
    inverse_square_sum = 1.0 if lengthscales is None else float(np.sum(scales**-2.0))
    return rng.normal(size=(num_units, input_dim + 1)) / np.sqrt((input_dim + 1.0) * inverse_square_sum)


@dataclass(frozen=True)
class ArchitectureConfig:
    """The architecture of an activated network twin / activated DGP (see the module docstring).

    :param input_dim: D_1, the number of input columns.
    :param num_layers: L ≥ 1.
    :param num_units: M_ℓ, activated units (= inducing variables) per layer: one number or L.
    :param layer_widths: P_1..P_(L−1), the bottleneck widths; default ``input_dim`` each.
    :param output_dim: P_L: regression outputs, 1 for "bernoulli"/"probit", the number of classes (≥ 2)
        for "softmax"/"robustmax".
    :param activation: a registered name (:data:`activated_dgp.zonal.ACTIVATION_REGISTRY`, extended by
        :func:`activated_dgp.zonal.register_activation`), a ZonalActivation or a callable; one or one per layer.
        Only registered ones can be saved. Default: the zonal Swish 3t·sigmoid(3t)
        (:data:`~activated_dgp.zonal.spectra.DEFAULT_ACTIVATION`), whose twin trains like a plain network where the
        zonal Softplus log(1 + e^(3t)), the paper's and the default before, did not (docs/activated_dgp.md,
        "Choosing the activation"); pass ``"softplus"`` or ``"relu"`` for those.
    :param truncation_level: Ñ_ℓ ≥ 1 (levels n < Ñ): one or one per layer.
    :param lengthscales: ℓ_ℓ, one entry per layer, each a scalar or D_ℓ + 1 values; default 1.
    :param whiten: whitened inducing outputs in the DGP.
    :param likelihood: a name from :data:`activated_dgp.deep.likelihoods.LIKELIHOOD_REGISTRY` (checked here, before any
        training), a gpflow likelihood, or None for a network that is used without one.

    Sequences are normalised at construction to tuples with one entry per layer (``num_units``,
    ``activation``, ``truncation_level``, ``lengthscales``), ``layer_widths`` to L − 1 entries and
    names to lower case, so two configs of the same architecture compare equal.
    """

    input_dim: int
    num_layers: int = 3
    num_units: Union[int, Sequence[int]] = 128
    layer_widths: Optional[Sequence[int]] = None
    output_dim: int = 1
    activation: Union[str, ZonalActivation, Callable, Sequence] = DEFAULT_ACTIVATION
    truncation_level: Union[int, Sequence[int]] = 20
    lengthscales: Optional[Sequence] = None
    whiten: bool = True
    likelihood: Any = "gaussian"

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen dataclass)
        input_dim = check_positive_int(self.input_dim, "input_dim")
        L = check_positive_int(self.num_layers, "num_layers")
        output_dim = check_positive_int(self.output_dim, "output_dim")
        units = tuple(check_positive_int(m, "num_units") for m in _per_layer(self.num_units, L, "num_units"))
        widths = (input_dim,) * (L - 1) if self.layer_widths is None else tuple(self.layer_widths)
        if len(widths) != L - 1:
            raise ValueError(f"{L} layers need {L - 1} layer_widths, got {len(widths)}")
        widths = tuple(check_positive_int(p, "layer_widths") for p in widths)
        activations = tuple(resolve_activation(a) for a in _per_layer(self.activation, L, "activation"))
        activations = tuple(a.name if _is_registered(a) else a for a in activations)
        truncations = tuple(check_positive_int(n, "truncation_level") for n in _per_layer(self.truncation_level, L, "truncation_level"))
        scales = _per_layer(1.0 if self.lengthscales is None else self.lengthscales, L, "lengthscales")
        inputs = (input_dim,) + widths
        scales = tuple(_lengthscale(value, inputs[index], index) for index, value in enumerate(scales))
        if not isinstance(self.whiten, (bool, np.bool_)):
            raise ValueError(f"whiten must be True or False, got {self.whiten!r}")
        likelihood = self.likelihood
        if likelihood is not None:
            if isinstance(likelihood, str):
                likelihood = likelihood_name(likelihood)
                LIKELIHOOD_REGISTRY[likelihood].latent_gps(output_dim)  # output_dim fits the likelihood
            elif not hasattr(likelihood, "variational_expectations"):
                raise ValueError(f"likelihood must be a registered name, a gpflow likelihood or None, got {likelihood!r}")
        for name, value in (
            ("input_dim", input_dim), ("num_layers", L), ("output_dim", output_dim), ("num_units", units),
            ("layer_widths", widths), ("activation", activations), ("truncation_level", truncations),
            ("lengthscales", scales), ("whiten", bool(self.whiten)), ("likelihood", likelihood),
        ):
            set_(name, value)

    # ------------------------------------------------------------------ per-layer views

    @property
    def input_widths(self) -> Tuple[int, ...]:
        """D_ℓ, the input width of each layer."""
        return (self.input_dim,) + self.layer_widths

    @property
    def output_widths(self) -> Tuple[int, ...]:
        """P_ℓ, the output width of each layer (the last one is ``output_dim``)."""
        return self.layer_widths + (self.output_dim,)

    def layers(self):
        """Per layer ℓ: dict(num_units, input_dim, output_dim, activation, truncation_level, lengthscales)."""
        return [
            dict(
                num_units=m, input_dim=d, output_dim=p, activation=a, truncation_level=n,
                lengthscales=np.asarray(s, dtype=np.float64),
            )
            for m, d, p, a, n, s in zip(
                self.num_units, self.input_widths, self.output_widths, self.activation, self.truncation_level, self.lengthscales
            )
        ]

    # ------------------------------------------------------------------ serialisation

    def to_dict(self) -> dict:
        """A JSON-safe dict that :meth:`from_dict` turns back into an equal config; a ValueError naming the
        part when an activation or the likelihood is not registered (it could not be restored by name)."""
        return dict(
            input_dim=self.input_dim,
            num_layers=self.num_layers,
            num_units=list(self.num_units),
            layer_widths=list(self.layer_widths),
            output_dim=self.output_dim,
            activation=[registered_activation_name(a) for a in self.activation],
            truncation_level=list(self.truncation_level),
            lengthscales=[list(s) if isinstance(s, tuple) else s for s in self.lengthscales],
            whiten=self.whiten,
            likelihood=None if self.likelihood is None else likelihood_name(self.likelihood),
        )

    @classmethod
    def from_dict(cls, values: dict) -> "ArchitectureConfig":
        """The inverse of :meth:`to_dict`; unknown keys, or a missing ``input_dim``, are a ValueError.

        A dict without ``activation`` means :data:`~activated_dgp.zonal.spectra.SAVED_DEFAULT_ACTIVATION` ("softplus"),
        the default when saved formats 2 and 3 were introduced, not today's default: a saved model comes back
        with the activation it was trained with (:meth:`to_dict` always names it; this covers any other writer)."""
        if not isinstance(values, dict):
            raise ValueError(f"an architecture must be a dict, got {type(values).__name__}")
        names = {f.name for f in fields(cls)}
        unknown, missing = set(values) - names, {"input_dim"} - set(values)
        if unknown or missing:
            raise ValueError(f"not an ArchitectureConfig: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
        return cls(**{"activation": SAVED_DEFAULT_ACTIVATION, **values})

    def replace(self, **changes) -> "ArchitectureConfig":
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ArchitectureConfig(**values)


def as_config(first: Union[int, ArchitectureConfig], **keywords) -> ArchitectureConfig:
    """The builders' two spellings in one: an :class:`ArchitectureConfig` as it is, or ``input_dim`` with
    architecture keywords (None = the config's default). Both at once is a ValueError."""
    given = {name: value for name, value in keywords.items() if value is not None}
    if isinstance(first, ArchitectureConfig):
        if given:
            raise ValueError(f"pass the architecture either as an ArchitectureConfig or as keywords, not both (got {sorted(given)})")
        return first
    return ArchitectureConfig(first, **given)


def _is_registered(activation: ZonalActivation) -> bool:
    try:
        registered_activation_name(activation)
        return True
    except ValueError:
        return False
