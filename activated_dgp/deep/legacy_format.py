"""Reading saves written by activated_dgp 0.1 (formats ``activated_dgp/2`` and ``activated_dgp/3``), for one release.

Those directories hold ``config.json`` (the format, the kind, the architecture, the parameter records) and the
files it names: one ``arrays-<token>.npz`` with every parameter's unconstrained value and, when an optimiser was
saved, a ``tf.train.Checkpoint`` of it (format 3) or its variables in the arrays file (format 2). Today's
:func:`activated_dgp.saving.save` writes ``tf.train.CheckpointManager`` directories instead; :mod:`.persistence`
reads these through this module with a DeprecationWarning. The parameters are restored by their gpflow path into
the DGP rebuilt from the recorded architecture, after the same checks as today's loader (paths, shapes,
transforms, priors and Funk–Hecke spectra), so an old directory loads into the same model or raises ValueError.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Dict

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .config import ArchitectureConfig
from .introspection import check_mean_function_specs, check_spectra, compare_parameter_records, funk_hecke_spectra, parameter_record, parameters_by_path, rebuild_dgp
from .twin import build_activated_nn

#: The formats read here.
LEGACY_FORMATS = ("activated_dgp/2", "activated_dgp/3")


def is_legacy_directory(directory) -> bool:
    """Whether ``directory`` holds a ``config.json`` written by activated_dgp 0.1."""
    return (Path(directory) / "config.json").is_file()


def warn_legacy(directory) -> None:
    warnings.warn(
        f"{directory} was saved by activated_dgp 0.1 (config.json + arrays-….npz); reading that format is deprecated "
        "and goes in the next release: load it and save it again with activated_dgp.save",
        DeprecationWarning,
        stacklevel=3,
    )


def _read(directory, kind: str):
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} is not a saved {kind}: config.json is missing")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt saved {kind}: config.json: {error}") from None
    found = config.get("format") if isinstance(config, dict) else None
    if found not in LEGACY_FORMATS:
        raise ValueError(
            f"{directory} holds a saved {kind} in format {found!r}, which this version of activated_dgp does not read "
            f"(it reads {' and '.join(LEGACY_FORMATS)}; a later format needs a later activated_dgp)"
        )
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


def _restore_checkpoint(optimizer, saved: dict, directory: Path) -> None:
    """Format 3: ``tf.train.Checkpoint(optimizer=…)`` read into ``optimizer``, built as it was when saved."""
    name = str(saved.get("checkpoint", ""))
    if Path(name).name != name or not name or not (directory / f"{name}.index").is_file():
        raise ValueError(f"{directory} is not a saved dgp: its optimizer checkpoint {name!r} is missing")
    try:
        tf.train.Checkpoint(optimizer=optimizer).read(str(directory / name)).assert_consumed()
    except Exception as error:  # AssertionError (unmatched), tf.errors.OpError, IndexError (truncated): not this optimiser's
        raise ValueError(
            f"{directory}: the optimizer checkpoint {name} does not restore into a {type(optimizer).__name__} built over "
            f"the DGP's parameters: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from None
    bad = [v.name for v in optimizer.variables if v.dtype.is_floating and not np.all(np.isfinite(v.numpy()))]
    if bad:
        raise ValueError(f"{directory}: the optimizer checkpoint {name} holds NaN or inf in {bad[:3]}")


def _restore_format2(optimizer, saved: dict, arrays: dict, directory: Path) -> None:
    """Format 2: the optimiser's variables, in the order of ``optimizer.variables``, as ``optimizer/<i>`` arrays."""
    variables = list(optimizer.variables)
    records = saved.get("variables") or []
    if len(variables) != len(records):
        raise ValueError(f"{directory}: the optimiser has {len(variables)} variables, the file {len(records)}")
    for i, variable in enumerate(variables):
        variable.assign(_array(arrays, f"optimizer/{i}", variable.shape, directory))


def load_dgp(directory) -> gpflux.models.DeepGP:
    """Rebuild a DeepGP saved by :func:`save_dgp` and restore every parameter (value and trainable flag)."""
    config, architecture, arrays = _read(directory, "dgp")
    mean_functions = config.get("mean_functions")  # absent in directories saved before mean functions were
    if mean_functions is not None:
        check_mean_function_specs(mean_functions, architecture.num_layers, f"{directory} holds a corrupt saved dgp: mean functions")
    dgp = rebuild_dgp(architecture, int(config["num_data"]), mean_functions, config.get("far_field"))
    parameters = parameters_by_path(dgp)
    compare_parameter_records(config["parameters"], {path: parameter_record(p) for path, p in parameters.items()}, f"{directory} does not match its architecture")
    check_spectra({k: v for k, v in arrays.items() if k.startswith("spectrum/")}, funk_hecke_spectra(dgp), f"{directory}")
    for path, parameter in parameters.items():
        parameter.unconstrained_variable.assign(
            _array(arrays, f"parameter/{path}", parameter.unconstrained_variable.shape, directory)
        )
        gpflow.set_trainable(parameter, bool(config["parameters"][path]["trainable"]))
    return dgp


def load_optimizer(directory, dgp: gpflux.models.DeepGP):
    """The optimiser saved with ``save_dgp(…, optimizer=…)``, rebuilt over ``dgp``'s parameters (from
    :func:`load_dgp`) with its state (step count, learning rate, slots); None if none was saved.
    Compile the training model with it: ``dgp.as_training_model().compile(optimizer)``.

    It is built (``optimizer.build``) over the parameters' unconstrained variables in the recorded order,
    then its state restored: from its ``tf.train.Checkpoint`` (format 3) or its arrays (format 2)."""
    directory = Path(directory)
    config, _, arrays = _read(directory, "dgp")
    saved = config.get("optimizer")
    if saved is None:
        return None
    parameters = parameters_by_path(dgp)
    try:
        missing = [path for path in saved["parameters"] if path not in parameters]
        optimizer = tf_keras.optimizers.deserialize(saved["serialized"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt saved dgp: optimizer: {error}") from None
    if missing:
        raise ValueError(f"{directory}: the optimiser updates parameters this DGP does not have: {missing[:3]}")
    with tf.name_scope(optimizer.name):  # as Keras' apply_gradients builds it: slots named e.g. Adam/m/<variable>
        optimizer.build([parameters[path].unconstrained_variable for path in saved["parameters"]])
    if config["format"] == "activated_dgp/2":
        _restore_format2(optimizer, saved, arrays, directory)
    else:
        _restore_checkpoint(optimizer, saved, directory)
    return optimizer


def load_training_state(directory) -> dict:
    """The training ``state`` dict (epoch, logs) saved with :func:`save_dgp` (empty if none); formerly
    ``load_state``, a name that did not say which state."""
    return dict(_read(directory, "dgp")[0].get("state") or {})


def _weights(network: tf_keras.Model) -> Dict[str, tf.Variable]:
    layers = [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]
    return {f"layer{i}/{w.name.split('/')[-1].split(':')[0]}": w for i, layer in enumerate(layers) for w in layer.weights}


def load_network(directory) -> tf_keras.Sequential:
    """Rebuild a network saved by :func:`save_network` with its weights."""
    config, architecture, arrays = _read(directory, "network")
    network = build_activated_nn(architecture)
    weights = _weights(network)
    compare_parameter_records(config["parameters"], {p: dict(shape=list(w.shape), dtype=w.dtype.name) for p, w in weights.items()}, f"{directory}")
    for path, weight in weights.items():
        weight.assign(_array(arrays, f"weight/{path}", weight.shape, directory))
    return network


