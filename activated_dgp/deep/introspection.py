"""What a built activated model is, read back from the object: its :class:`~activated_dgp.deep.config.ArchitectureConfig`,
each layer's mean function, and a description of every gpflow Parameter; and the DGP rebuilt from them.

:func:`architecture_of_dgp` and :func:`architecture_of_network` accept exactly the models this package's
builders make (``SharedIndependent(ZonalArcCosine)`` kernels over ``ActivationFeature`` inducing variables,
registered activations and likelihoods; the twin's [ActivatedLayer, bias-free linear Dense] × L) and name,
in a ValueError, the first part that is not one. :func:`rebuild_dgp` is the inverse: the builders'
DGP of an architecture with the recorded mean functions and far-field residual. Persistence
(:mod:`activated_dgp.deep.persistence`) writes these descriptions to disk; replication across devices
(:mod:`activated_dgp.training.distributed`) rebuilds in a strategy's scope with them.
"""

from __future__ import annotations

from typing import Dict, Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from ..zonal.conditionals import SharedActivationFeature
from .config import ArchitectureConfig
from .far_field import FarFieldArcCosine, restore_far_field
from ..zonal.inducing_variables import ActivationFeature
from ..zonal.kernels import ZonalArcCosine
from .builders import build_activated_dgp, likelihood_name
from .twin import ActivatedLayer
from ..zonal.spectra import registered_activation_name

__all__ = [
    "architecture_of_dgp",
    "architecture_of_network",
    "mean_function_spec",
    "mean_function_from_spec",
    "mean_functions_of_dgp",
    "rebuild_dgp",
    "parameters_by_path",
    "parameter_record",
    "compare_parameter_records",
    "describe_transform",
    "describe_prior",
    "MEAN_FUNCTIONS",
    "funk_hecke_spectra",
    "check_spectra",
    "check_mean_function_specs",
]

# DGPs built by hand with GPflow's wrapper are accepted too; they are rebuilt with the package's.
_SHARED_INDUCING_TYPES = (gpflow.inducing_variables.SharedIndependentInducingVariables, SharedActivationFeature)
_GP_LAYER_DEFAULTS = dict(full_cov=False, full_output_cov=False, num_samples=None)


# ---------------------------------------------------------------- parameter records


def describe_transform(transform) -> str:
    """A text description of a gpflow Parameter's bijector, with its constants (e.g. ``shift(1e-06)∘softplus``)."""
    if transform is None:
        return "identity"
    bijectors = getattr(transform, "bijectors", None)
    if bijectors is not None:  # tfp Chain: applied last-to-first
        return "∘".join(describe_transform(b) for b in bijectors)
    name = type(transform).__name__.lower()
    constants = []
    for attribute in ("shift", "scale", "hinge_softness", "low", "high"):
        value = getattr(transform, attribute, None)
        if value is not None and not callable(value):
            constants.append(np.asarray(value).tolist())
    return f"{name}({', '.join(repr(c) for c in constants)})" if constants else name


def parameters_by_path(module) -> Dict[str, gpflow.Parameter]:
    """gpflow Parameters by public path (keras-internal aliases left out)."""
    return {
        path: parameter
        for path, parameter in gpflow.utilities.parameter_dict(module).items()
        if "._" not in path and isinstance(parameter, gpflow.Parameter)
    }


def describe_prior(parameter: gpflow.Parameter) -> Optional[str]:
    """A text description of a Parameter's prior (distribution, its numeric parameters, and where it applies)."""
    prior = parameter.prior
    if prior is None:
        return None
    values = {
        key: np.asarray(value).tolist()
        for key, value in sorted(getattr(prior, "parameters", {}).items())
        if isinstance(value, (int, float, np.ndarray, np.generic, tf.Tensor, tf.Variable)) and not isinstance(value, bool)
    }
    return f"{type(prior).__name__}({values}) on {parameter.prior_on.value}"


def parameter_record(parameter: gpflow.Parameter) -> dict:
    """What must agree for a value to mean the same in a rebuilt model: shape, unconstrained shape,
    transform (with its constants), prior and dtype."""
    return dict(
        shape=list(parameter.shape),
        unconstrained_shape=list(parameter.unconstrained_variable.shape),
        transform=describe_transform(parameter.transform),
        prior=describe_prior(parameter),
        dtype=parameter.dtype.name,
    )


def compare_parameter_records(saved: Dict[str, dict], built: Dict[str, dict], what: str) -> None:
    """Raise a ValueError naming the first path whose record differs (trainable flags are state, not structure)."""
    missing, unexpected = sorted(set(built) - set(saved)), sorted(set(saved) - set(built))
    if missing or unexpected:
        raise ValueError(f"{what}: parameters missing {missing[:3]}, unexpected {unexpected[:3]}")
    for path in sorted(saved):
        a = {k: v for k, v in saved[path].items() if k != "trainable"}
        b = {k: v for k, v in built[path].items() if k != "trainable"}
        if a != b:
            raise ValueError(f"{what}: parameter {path} differs: {a} vs {b}")


# ---------------------------------------------------------------- architecture of existing objects


def architecture_of_dgp(dgp: gpflux.models.DeepGP) -> ArchitectureConfig:
    """The :class:`ArchitectureConfig` of an activated DeepGP, or a ValueError naming the part that is not
    one of the registered building blocks (so that it could not be rebuilt by name)."""
    if not isinstance(dgp, gpflux.models.DeepGP):
        raise ValueError(f"expected a gpflux DeepGP, got {type(dgp).__name__}")
    try:
        likelihood = likelihood_name(dgp.likelihood_layer.likelihood)
    except ValueError as error:
        raise ValueError(f"cannot save the likelihood: {error}") from None
    units, inputs, outputs, activations, truncations, scales, whiten = [], [], [], [], [], [], set()
    for index, layer in enumerate(dgp.f_layers):
        where = f"cannot save layer {index} ({getattr(layer, 'name', type(layer).__name__)})"
        if not isinstance(layer, gpflux.layers.GPLayer):
            raise ValueError(f"{where}: it is a {type(layer).__name__}, not a gpflux GPLayer")
        kernel = getattr(layer.kernel, "kernel", None)
        kernels = (ZonalArcCosine, FarFieldArcCosine) if index == len(dgp.f_layers) - 1 else (ZonalArcCosine,)
        if type(layer.kernel) is not gpflow.kernels.SharedIndependent or type(kernel) not in kernels:
            raise ValueError(f"{where}: kernel {_name(layer.kernel, kernel)} is not SharedIndependent(ZonalArcCosine)")
        feature = getattr(layer.inducing_variable, "inducing_variable", None)
        if type(layer.inducing_variable) not in _SHARED_INDUCING_TYPES or not isinstance(feature, ActivationFeature):
            raise ValueError(
                f"{where}: inducing variable {_name(layer.inducing_variable, feature)} is not "
                "SharedIndependentInducingVariables(ActivationFeature)"
            )
        mean_function_spec(layer.mean_function, where)
        if not kernel.bias:
            raise ValueError(f"{where}: ZonalArcCosine(bias=False) is not rebuilt by the builders")
        if feature.truncation_level != kernel.truncation_level:
            raise ValueError(f"{where}: kernel and feature truncation levels differ ({kernel.truncation_level} vs {feature.truncation_level})")
        for attribute, default in _GP_LAYER_DEFAULTS.items():
            if getattr(layer, attribute) != default:
                raise ValueError(f"{where}: {attribute}={getattr(layer, attribute)!r}; only {default!r} is rebuilt")
        try:
            activations.append(registered_activation_name(feature.activation))
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        units.append(len(feature))
        inputs.append(kernel.input_dim)
        outputs.append(int(layer.num_latent_gps))
        truncations.append(feature.truncation_level)
        scales.append(kernel.lengthscales.numpy())
        whiten.add(bool(layer.whiten))
    if len(whiten) != 1:
        raise ValueError("cannot save a DGP whose layers mix whitened and non-whitened inducing outputs")
    if inputs[1:] != outputs[:-1]:
        raise ValueError(f"the layers' widths do not chain: inputs {inputs}, outputs {outputs}")
    return ArchitectureConfig(
        input_dim=inputs[0], num_layers=len(units), num_units=units, layer_widths=outputs[:-1], output_dim=outputs[-1],
        activation=activations, truncation_level=truncations, lengthscales=scales, whiten=whiten.pop(), likelihood=likelihood,
    )


#: The mean functions GPflow ships that a saved DGP restores, with the values of their parameters.
MEAN_FUNCTIONS = {
    cls.__name__: cls
    for cls in (gpflow.mean_functions.Zero, gpflow.mean_functions.Constant, gpflow.mean_functions.Identity, gpflow.mean_functions.Linear)
}


def mean_function_spec(mean_function, where: str = "cannot save the mean function") -> dict:
    """What rebuilds a layer's mean function m(x), added to its posterior mean (GPflow's ``mean_functions``):
    Zero m = 0 (its ``output_dim``), Constant m = c, Identity m = x (its ``input_dim``), Linear m = x A + b,
    with the shapes of c, A, b (their values are parameters, saved with the others). A ValueError, after
    ``where``, for any other class (a subclass included: it could not be rebuilt by name)."""
    name = type(mean_function).__name__
    if MEAN_FUNCTIONS.get(name) is not type(mean_function):
        raise ValueError(f"{where}: mean function {name}; only {', '.join(MEAN_FUNCTIONS)} are rebuilt")
    if name == "Zero":
        return dict(type=name, output_dim=int(mean_function.output_dim))
    if name == "Identity":
        return dict(type=name, input_dim=None if mean_function.input_dim is None else int(mean_function.input_dim))
    keys = ("c",) if name == "Constant" else ("A", "b")
    return dict(type=name, shapes={key: list(getattr(mean_function, key).shape) for key in keys})


def mean_function_from_spec(spec: dict):
    """The mean function that :func:`mean_function_spec` describes, with zero parameters (the saved
    values are assigned afterwards, as every parameter's)."""
    if not isinstance(spec, dict) or spec.get("type") not in MEAN_FUNCTIONS:
        raise ValueError(f"not a saved mean function: {spec!r}; expected one of {', '.join(MEAN_FUNCTIONS)}")
    cls = MEAN_FUNCTIONS[spec["type"]]
    if cls is gpflow.mean_functions.Zero:
        return cls(output_dim=int(spec.get("output_dim", 1)))
    if cls is gpflow.mean_functions.Identity:
        return cls(input_dim=spec.get("input_dim"))
    return cls(**{key: np.zeros(shape) for key, shape in spec["shapes"].items()})


def mean_functions_of_dgp(dgp: gpflux.models.DeepGP) -> list:
    """Each layer's :func:`mean_function_spec`."""
    return [
        mean_function_spec(layer.mean_function, f"cannot save layer {index} ({getattr(layer, 'name', type(layer).__name__)})")
        for index, layer in enumerate(dgp.f_layers)
    ]


def rebuild_dgp(architecture: ArchitectureConfig, num_data: int, mean_functions=None, far_field=None) -> gpflux.models.DeepGP:
    """:func:`build_activated_dgp` of ``architecture`` with the layers' mean functions rebuilt from their specs
    (None: the builders' Zero everywhere, as in directories saved before mean functions were recorded) and the
    output layer's far-field residual from its record (:func:`activated_dgp.deep.far_field.far_field_record`; None: none)."""
    dgp = restore_far_field(build_activated_dgp(architecture, num_data), far_field)
    if mean_functions is not None:
        if len(mean_functions) != len(dgp.f_layers):
            raise ValueError(f"{len(mean_functions)} mean functions for {len(dgp.f_layers)} layers")
        for layer, spec in zip(dgp.f_layers, mean_functions):
            layer.mean_function = mean_function_from_spec(spec)
    return dgp


def _name(outer, inner) -> str:
    return type(outer).__name__ + (f"({type(inner).__name__})" if inner is not None else "")


def architecture_of_network(network: tf_keras.Model, registered_only: bool = True) -> ArchitectureConfig:
    """The :class:`ArchitectureConfig` of a twin [ActivatedLayer, Dense(no bias, linear)] × L
    (``likelihood=None``), or a ValueError naming the layer that is not part of one; with
    ``registered_only`` (for saving) also for an activation that is not registered by name."""
    layers = [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]
    for index, layer in enumerate(layers):
        if index % 2 == 0 and not isinstance(layer, ActivatedLayer):
            raise ValueError(f"cannot save layer {index} {layer.name!r} ({type(layer).__name__}): expected an ActivatedLayer")
        if index % 2 == 1 and not (
            type(layer) is tf_keras.layers.Dense and not layer.use_bias and layer.activation is tf_keras.activations.linear
        ):
            raise ValueError(f"cannot save layer {index} {layer.name!r} ({type(layer).__name__}): expected a bias-free linear Dense")
    if not layers or len(layers) % 2:
        raise ValueError(f"a twin has pairs [ActivatedLayer, Dense], got {len(layers)} layers")
    activated, linear = layers[0::2], layers[1::2]
    try:
        activations = [registered_activation_name(layer.activation) if registered_only else layer.activation for layer in activated]
    except ValueError as error:
        raise ValueError(f"cannot save the network: {error}") from None
    return ArchitectureConfig(
        input_dim=int(network.input_shape[-1]), num_layers=len(activated), num_units=[layer.units for layer in activated],
        layer_widths=[layer.units for layer in linear[:-1]], output_dim=linear[-1].units, activation=activations,
        truncation_level=[layer.truncation_level for layer in activated],
        lengthscales=[np.asarray(layer.lengthscales, dtype=np.float64) for layer in activated], likelihood=None,
    )


def funk_hecke_spectra(dgp) -> Dict[str, np.ndarray]:
    """Every layer's kernel λ_n and feature σ_n: what the registered names must reproduce."""
    out = {}
    for index, layer in enumerate(dgp.f_layers):
        out[f"spectrum/{index}/kernel"] = np.asarray(layer.kernel.kernel.eigenvalues)
        out[f"spectrum/{index}/feature"] = np.asarray(layer.inducing_variable.inducing_variable.eigenvalues)
    return out


def check_spectra(saved: Dict[str, np.ndarray], built: Dict[str, np.ndarray], what: str) -> None:
    """A ValueError naming the first spectrum in ``built`` that ``saved`` lacks or that differs from it (rtol 1e-10)."""
    for key, value in built.items():
        if key not in saved or saved[key].shape != value.shape or not np.allclose(saved[key], value, rtol=1e-10, atol=1e-300):
            raise ValueError(
                f"{what}: {key} differs from the rebuilt model's (another function registered under the same activation "
                "name, or another quadrature setting)"
            )


def check_mean_function_specs(mean_functions, num_layers: int, what: str) -> None:
    """A ValueError, prefixed by ``what``, unless ``mean_functions`` is a list of ``num_layers`` mean-function specs
    that :func:`mean_function_from_spec` reads."""
    try:
        if not isinstance(mean_functions, list) or len(mean_functions) != num_layers:
            raise ValueError(f"expected a list of {num_layers}, got {mean_functions!r}")
        for spec in mean_functions:
            mean_function_from_spec(spec)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{what}: {error}") from None
