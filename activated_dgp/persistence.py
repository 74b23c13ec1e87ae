"""Save an activated DGP or its network twin to a directory and restore it in another process.

A saved directory holds ``config.json`` and one ``arrays-<token>.npz`` that it names:

* ``architecture``: the :class:`~activated_dgp.config.ArchitectureConfig` (layers, units, widths,
  activations, truncation levels, lengthscale shapes, whitening, likelihood) that rebuilds the model
  with this package's builders;
* ``mean_functions``: each layer's mean function (GPflow's Zero, Constant, Identity or Linear; a
  directory without this entry, written before it existed, has Zero everywhere);
* ``parameters``: for every gpflow Parameter (DGP) or Keras weight (network), by its path: shape,
  transform, dtype and trainable flag. The arrays file holds DGP parameters as their *unconstrained*
  values, the optimiser's state itself, so a restored model predicts bit-identically and a restored
  optimiser continues the same trajectory;
* optionally the optimiser (class, config incl. the current learning rate, and its slot variables
  in the order of the parameters they belong to) and a JSON ``state`` (e.g. the epoch), for resuming.

Saving refuses, naming the part, anything the builders cannot rebuild exactly: an unregistered
likelihood, kernel, inducing variable, mean function (GPflow's Zero, Constant, Identity and Linear are
restored) or activation (see
:func:`activated_dgp.zonal.register_activation`), or trainable variables outside the parameters. It checks
this by building the model from its recorded architecture and comparing every parameter's path,
shape, transform and prior (e.g. one added by the user) and every Funk–Hecke spectrum. Loading repeats the comparison, so a
directory written under another configuration (another ``positive`` bijector, another function
registered under the same activation name, another float type) is a ValueError, never a silently
different model. ``config.json`` is replaced atomically after its arrays file is complete, so an
interrupted save leaves the previous one readable (GPflux issue #74 asks for this kind of saving).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Dict, Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from ._deprecation import deprecated_aliases
from .conditionals import SharedActivationFeature
from .config import ArchitectureConfig
from .far_field import FarFieldArcCosine, far_field_record, restore_far_field
from .inducing_variables import ActivationFeature
from .kernels import ZonalArcCosine
from .models import build_activated_dgp, likelihood_name
from .nn import ActivatedLayer, build_activated_nn
from .spectra import registered_activation_name

__all__ = [
    "save_dgp",
    "load_dgp",
    "load_optimizer",
    "load_training_state",
    "save_network",
    "load_network",
    "architecture_of_dgp",
    "architecture_of_network",
    "mean_function_spec",
    "mean_functions_of_dgp",
    "rebuild_dgp",
    "DGPCheckpoint",
]

FORMAT = "activated_dgp/2"
# DGPs built by hand with GPflow's wrapper are saved too; they are rebuilt with the package's.
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


def _parameters(module) -> Dict[str, gpflow.Parameter]:
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


def _record(parameter: gpflow.Parameter) -> dict:
    return dict(
        shape=list(parameter.shape),
        unconstrained_shape=list(parameter.unconstrained_variable.shape),
        transform=describe_transform(parameter.transform),
        prior=describe_prior(parameter),
        dtype=parameter.dtype.name,
    )


def _compare(saved: Dict[str, dict], built: Dict[str, dict], what: str) -> None:
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
    output layer's far-field residual from its record (:func:`activated_dgp.far_field.far_field_record`; None: none)."""
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


# ---------------------------------------------------------------- files


def _json_default(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _write(directory, config: dict, arrays: Dict[str, np.ndarray]) -> Path:
    """Write the arrays to a new file, then replace config.json (atomically) to point at it, then drop the old file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    previous = None
    try:
        previous = json.loads((directory / "config.json").read_text()).get("arrays")
    except (OSError, ValueError, AttributeError):
        pass
    name = f"arrays-{uuid.uuid4().hex[:12]}.npz"
    with open(directory / name, "wb") as handle:
        np.savez(handle, **arrays)
    text = json.dumps(dict(format=FORMAT, arrays=name, **config), indent=1, default=_json_default)
    (directory / "config.json.tmp").write_text(text)
    (directory / "config.json.tmp").replace(directory / "config.json")
    if previous and previous != name and Path(previous).name == previous:
        (directory / previous).unlink(missing_ok=True)
    return directory


def _read(directory, kind: str):
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} is not a saved {kind}: config.json is missing")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt saved {kind}: config.json: {error}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        found = config.get("format") if isinstance(config, dict) else None
        raise ValueError(f"{directory} does not hold a saved {kind} in format {FORMAT} (found format {found!r})")
    if config.get("kind") != kind:
        raise ValueError(f"{directory} holds a saved {config.get('kind')!r}, not a saved {kind}")
    name = str(config.get("arrays", ""))
    if Path(name).name != name or not (directory / name).is_file():
        raise ValueError(f"{directory} is not a saved {kind}: its arrays file {name!r} is missing")
    try:
        with np.load(directory / name, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except Exception as error:  # zipfile.BadZipFile, OSError, ValueError, EOFError: all mean a corrupt file
        raise ValueError(f"{directory} holds a corrupt saved {kind}: {name}: {error}") from None
    try:
        architecture = ArchitectureConfig.from_dict(config["architecture"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"{directory} holds a corrupt saved {kind}: architecture: {error}") from None
    if config.get("dtype") != np.dtype(gpflow.default_float()).name:
        raise ValueError(
            f"{directory} was saved with float type {config.get('dtype')!r} but gpflow.default_float() is "
            f"{np.dtype(gpflow.default_float()).name}; set gpflow.config.set_default_float to match"
        )
    return config, architecture, arrays


def _array(arrays: dict, key: str, shape, directory) -> np.ndarray:
    if key not in arrays:
        raise ValueError(f"{directory}: the arrays file has no entry {key!r}")
    value = arrays[key]
    if list(value.shape) != list(shape):
        raise ValueError(f"{directory}: {key} has shape {list(value.shape)}, expected {list(shape)}")
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise ValueError(f"{directory}: {key} contains NaN or inf")
    return value


# ---------------------------------------------------------------- DGP


def _spectra(dgp) -> Dict[str, np.ndarray]:
    """Every layer's kernel λ_n and feature σ_n: what the registered names must reproduce."""
    out = {}
    for index, layer in enumerate(dgp.f_layers):
        out[f"spectrum/{index}/kernel"] = np.asarray(layer.kernel.kernel.eigenvalues)
        out[f"spectrum/{index}/feature"] = np.asarray(layer.inducing_variable.inducing_variable.eigenvalues)
    return out


def _check_spectra(saved: Dict[str, np.ndarray], built: Dict[str, np.ndarray], what: str) -> None:
    for key, value in built.items():
        if key not in saved or saved[key].shape != value.shape or not np.allclose(saved[key], value, rtol=1e-10, atol=1e-300):
            raise ValueError(
                f"{what}: {key} differs from the rebuilt model's (another function registered under the same activation "
                "name, or another quadrature setting)"
            )


def _optimizer_arrays(optimizer, parameters: Dict[str, gpflow.Parameter]):
    """(record, arrays) of a built tf-keras optimizer whose variables all belong to ``parameters``."""
    index = getattr(optimizer, "_index_dict", None)
    if index is None or not hasattr(optimizer, "_var_key"):
        raise ValueError(f"cannot save the optimizer {type(optimizer).__name__}: only built tf-keras optimizers are supported")
    by_key = {optimizer._var_key(p.unconstrained_variable): path for path, p in parameters.items()}
    unknown = [key for key in index if key not in by_key]
    if unknown:
        raise ValueError(f"cannot save the optimizer: it updates {len(unknown)} variables that are not parameters of this model")
    order = [by_key[key] for key, _ in sorted(index.items(), key=lambda item: item[1])]
    variables = list(optimizer.variables)
    record = dict(
        serialized=tf_keras.optimizers.serialize(optimizer),
        parameters=order,
        variables=[dict(name=v.name, shape=list(v.shape), dtype=v.dtype.name) for v in variables],
    )
    return record, {f"optimizer/{i}": v.numpy() for i, v in enumerate(variables)}


def save_dgp(dgp: gpflux.models.DeepGP, directory, *, optimizer=None, state: Optional[dict] = None) -> Path:
    """Write an activated DeepGP (from :func:`build_activated_dgp` or :func:`dgp_from_keras`).

    :param optimizer: optionally the (built) tf-keras optimiser training it, e.g. ``training_model.optimizer``,
        restored by :func:`load_optimizer`.
    :param state: optionally a JSON-serialisable dict (epoch, history), returned by :func:`load_training_state`.
    Raises ValueError, naming the part, for anything that could not be restored exactly (module docstring).
    """
    architecture = architecture_of_dgp(dgp)
    parameters = _parameters(dgp)
    covered = {id(p.unconstrained_variable) for p in parameters.values()}
    stray = [v.name for v in dgp.trainable_variables if id(v) not in covered]
    if stray:
        raise ValueError(f"cannot save the DGP: trainable variables outside its gpflow Parameters: {stray[:3]}")
    records = {path: dict(_record(p), trainable=bool(p.trainable)) for path, p in parameters.items()}
    mean_functions = mean_functions_of_dgp(dgp)
    reference = rebuild_dgp(architecture, int(dgp.num_data), mean_functions, far_field_record(dgp))
    _compare(records, {path: _record(p) for path, p in _parameters(reference).items()}, "cannot save the DGP as rebuilt from its architecture")
    spectra = _spectra(dgp)
    _check_spectra(spectra, _spectra(reference), "cannot save the DGP")
    arrays = {f"parameter/{path}": p.unconstrained_variable.numpy() for path, p in parameters.items()}
    arrays.update(spectra)
    config = dict(
        kind="dgp",
        dtype=np.dtype(gpflow.default_float()).name,
        architecture=architecture.to_dict(),
        num_data=int(dgp.num_data),
        mean_functions=mean_functions,
        far_field=far_field_record(dgp),
        parameters=records,
        state=dict(state or {}),
    )
    if optimizer is not None:
        config["optimizer"], optimizer_arrays = _optimizer_arrays(optimizer, parameters)
        arrays.update(optimizer_arrays)
    try:
        json.dumps(config, default=_json_default)
    except TypeError as error:
        raise ValueError(f"cannot save: state or optimizer config is not JSON-serialisable ({error})") from None
    return _write(directory, config, arrays)


def load_dgp(directory) -> gpflux.models.DeepGP:
    """Rebuild a DeepGP saved by :func:`save_dgp` and restore every parameter (value and trainable flag)."""
    config, architecture, arrays = _read(directory, "dgp")
    mean_functions = config.get("mean_functions")  # absent in directories saved before mean functions were
    try:
        if mean_functions is not None:
            if not isinstance(mean_functions, list) or len(mean_functions) != architecture.num_layers:
                raise ValueError(f"expected a list of {architecture.num_layers}, got {mean_functions!r}")
            for spec in mean_functions:
                mean_function_from_spec(spec)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt saved dgp: mean functions: {error}") from None
    dgp = rebuild_dgp(architecture, int(config["num_data"]), mean_functions, config.get("far_field"))
    parameters = _parameters(dgp)
    _compare(config["parameters"], {path: _record(p) for path, p in parameters.items()}, f"{directory} does not match its architecture")
    _check_spectra({k: v for k, v in arrays.items() if k.startswith("spectrum/")}, _spectra(dgp), f"{directory}")
    for path, parameter in parameters.items():
        parameter.unconstrained_variable.assign(
            _array(arrays, f"parameter/{path}", parameter.unconstrained_variable.shape, directory)
        )
        gpflow.set_trainable(parameter, bool(config["parameters"][path]["trainable"]))
    return dgp


def load_optimizer(directory, dgp: gpflux.models.DeepGP):
    """The optimiser saved with ``save_dgp(…, optimizer=…)``, rebuilt over ``dgp``'s parameters (from
    :func:`load_dgp`) with its state (step count, learning rate, slots); None if none was saved.
    Compile the training model with it: ``dgp.as_training_model().compile(optimizer)``."""
    config, _, arrays = _read(directory, "dgp")
    saved = config.get("optimizer")
    if saved is None:
        return None
    parameters = _parameters(dgp)
    missing = [path for path in saved["parameters"] if path not in parameters]
    if missing:
        raise ValueError(f"{directory}: the optimiser updates parameters this DGP does not have: {missing[:3]}")
    optimizer = tf_keras.optimizers.deserialize(saved["serialized"])
    optimizer.build([parameters[path].unconstrained_variable for path in saved["parameters"]])
    variables = list(optimizer.variables)
    if len(variables) != len(saved["variables"]):
        raise ValueError(f"{directory}: the optimiser has {len(variables)} variables, the file {len(saved['variables'])}")
    for i, variable in enumerate(variables):
        variable.assign(_array(arrays, f"optimizer/{i}", variable.shape, directory))
    return optimizer


def load_training_state(directory) -> dict:
    """The training ``state`` dict (epoch, logs) saved with :func:`save_dgp` (empty if none); formerly
    ``load_state``, a name that did not say which state."""
    return dict(_read(directory, "dgp")[0].get("state") or {})


class DGPCheckpoint(tf_keras.callbacks.Callback):
    """Save the DGP, its optimiser and ``{"epoch": e, "logs": …}`` to ``directory`` every ``every`` epochs
    of ``dgp.as_training_model().fit`` (for ``train_dgp(…, callbacks=[…])``). Resume with
    :func:`load_dgp`, :func:`load_optimizer` and ``fit(…, initial_epoch=load_training_state(directory)["epoch"])``."""

    def __init__(self, directory, dgp: gpflux.models.DeepGP, every: int = 1):
        super().__init__()
        if int(every) != every or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.directory, self.dgp, self.every = Path(directory), dgp, int(every)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0:
            logs = {key: float(value) for key, value in (logs or {}).items()}
            save_dgp(self.dgp, self.directory, optimizer=self.model.optimizer, state=dict(epoch=epoch + 1, logs=logs))


# ---------------------------------------------------------------- network twin


def _weights(network: tf_keras.Model) -> Dict[str, tf.Variable]:
    layers = [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]
    return {f"layer{i}/{w.name.split('/')[-1].split(':')[0]}": w for i, layer in enumerate(layers) for w in layer.weights}


def save_network(network: tf_keras.Model, directory) -> Path:
    """Write a network twin from :func:`build_activated_nn` ([ActivatedLayer, Dense(no bias)] × L)."""
    architecture = architecture_of_network(network)
    weights = _weights(network)
    records = {path: dict(shape=list(w.shape), dtype=w.dtype.name, trainable=bool(w.trainable)) for path, w in weights.items()}
    reference = {path: dict(shape=list(w.shape), dtype=w.dtype.name) for path, w in _weights(build_activated_nn(architecture)).items()}
    _compare(records, reference, "cannot save the network as rebuilt from its architecture")
    config = dict(kind="network", dtype=np.dtype(gpflow.default_float()).name, architecture=architecture.to_dict(), parameters=records)
    return _write(directory, config, {f"weight/{path}": w.numpy() for path, w in weights.items()})


def load_network(directory) -> tf_keras.Sequential:
    """Rebuild a network saved by :func:`save_network` with its weights."""
    config, architecture, arrays = _read(directory, "network")
    network = build_activated_nn(architecture)
    weights = _weights(network)
    _compare(config["parameters"], {p: dict(shape=list(w.shape), dtype=w.dtype.name) for p, w in weights.items()}, f"{directory}")
    for path, weight in weights.items():
        weight.assign(_array(arrays, f"weight/{path}", weight.shape, directory))
    return network


# old names, deprecated for one release (issue 34)
__getattr__ = deprecated_aliases("activated_dgp.persistence", {"load_state": ("activated_dgp.persistence", "load_training_state")})
