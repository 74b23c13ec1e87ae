"""Save an activated DGP or its network twin to a directory and restore it in another process.

A saved directory holds ``config.json`` and the files it names: one ``arrays-<token>.npz`` and, when an
optimiser was saved, one TensorFlow checkpoint ``optimizer-<token>`` (``.index`` + ``.data-…``). The config has

* ``format``: ``activated_dgp/3`` (written since the optimiser moved into a TensorFlow checkpoint);
  ``activated_dgp/2`` directories (the optimiser's variables in the arrays file) are still read, and
  any other format is a ValueError naming it;
* ``architecture``: the :class:`~activated_dgp.deep.config.ArchitectureConfig` (layers, units, widths,
  activations, truncation levels, lengthscale shapes, whitening, likelihood) that rebuilds the model
  with this package's builders (:func:`activated_dgp.deep.introspection.rebuild_dgp`);
* ``mean_functions``: each layer's mean function (GPflow's Zero, Constant, Identity or Linear; a
  directory without this entry, written before it existed, has Zero everywhere);
* ``parameters``: for every gpflow Parameter (DGP) or Keras weight (network), by its path: shape,
  transform, dtype and trainable flag. The arrays file holds DGP parameters as their *unconstrained*
  values, the optimiser's state itself, so a restored model predicts bit-identically;
* optionally ``optimizer`` (its Keras serialisation, the parameter paths it was built over, in order, and
  its checkpoint) and a JSON ``state`` (e.g. the epoch), for resuming: a restored optimiser continues the
  same trajectory.

Why the parameter values stay in the arrays file and only the optimiser is a ``tf.train.Checkpoint``: the
npz is keyed by gpflow parameter path, which :mod:`activated_dgp.deep.introspection` checks against the
rebuilt model, and is readable without TensorFlow; a checkpoint of the DGP would key the same values by
the attribute graph of gpflux's and tf-keras' internals, which a gpflux release may rename. The
optimiser has no such public description, so its state is written the way TensorFlow writes it:
``tf.train.Checkpoint(optimizer=optimizer)``. The model is not put in that checkpoint: tf-keras' (2.11+)
optimisers track their slots in their own lists, in the order of the variables they were built over,
not through links to the model's variables, so the model there would only duplicate the npz. That
order is what ``optimizer.parameters`` records: Keras builds a ``fit``'s optimiser over the training
model's ``trainable_variables`` (as its ``BackupAndRestore`` does before restoring), and saving checks,
by building a new optimiser of the same class over that order, that its variables have the saved one's
names and shapes; :func:`load_optimizer` builds over the rebuilt DGP's parameters in that order and then
restores the checkpoint. No private tf-keras attribute is read.

Saving refuses, naming the part, anything the builders cannot rebuild exactly: an unregistered
likelihood, kernel, inducing variable, mean function (GPflow's Zero, Constant, Identity and Linear are
restored) or activation (see
:func:`activated_dgp.zonal.register_activation`), or trainable variables outside the parameters. It checks
this by building the model from its recorded architecture and comparing every parameter's path,
shape, transform and prior (e.g. one added by the user) and every Funk–Hecke spectrum. Loading repeats the comparison, so a
directory written under another configuration (another ``positive`` bijector, another function
registered under the same activation name, another float type) is a ValueError, never a silently
different model. ``config.json`` is replaced atomically after its arrays file and checkpoint are
complete, so an interrupted save leaves the previous one readable (GPflux issue #74 asks for this kind
of saving); it is the one pointer to a consistent set of files, which is why the checkpoint is written
with ``tf.train.Checkpoint.write`` under a name the config gives rather than through a
``tf.train.CheckpointManager``, whose own index file would be a second pointer.

The model introspection (architecture, mean-function specs, parameter records, :func:`rebuild_dgp`) lives
in :mod:`activated_dgp.deep.introspection`; its names are re-exported here for existing callers.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .._deprecation import deprecated_aliases
from .config import ArchitectureConfig
from .far_field import far_field_record
from .introspection import (  # noqa: F401  (re-exported: callers import these from here)
    MEAN_FUNCTIONS,
    architecture_of_dgp,
    architecture_of_network,
    compare_parameter_records,
    describe_prior,
    describe_transform,
    mean_function_from_spec,
    mean_function_spec,
    mean_functions_of_dgp,
    parameter_record,
    parameters_by_path,
    rebuild_dgp,
)
from .twin import build_activated_nn
from ..validation import check_positive_int

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

FORMAT = "activated_dgp/3"
#: The formats this version reads: 2 differs only in keeping the optimiser's variables in the arrays file.
READABLE_FORMATS = ("activated_dgp/2", FORMAT)


# ---------------------------------------------------------------- files


def _json_default(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _write(directory, config: dict, arrays: Dict[str, np.ndarray], checkpoint: Optional[tf.train.Checkpoint] = None) -> Path:
    """Write the arrays (and ``checkpoint``, if any) to new files, then replace config.json (atomically) to
    point at them, then drop the files the previous config.json pointed at."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    previous = []
    try:
        old = json.loads((directory / "config.json").read_text())
        previous = [old.get("arrays"), (old.get("optimizer") or {}).get("checkpoint")]
    except (OSError, ValueError, AttributeError):
        pass
    token = uuid.uuid4().hex[:12]
    name = f"arrays-{token}.npz"
    with open(directory / name, "wb") as handle:
        np.savez(handle, **arrays)
    config = dict(format=FORMAT, arrays=name, **config)
    if checkpoint is not None:
        config["optimizer"] = dict(config["optimizer"], checkpoint=f"optimizer-{token}")
        checkpoint.write(str(directory / config["optimizer"]["checkpoint"]))
    text = json.dumps(config, indent=1, default=_json_default)
    (directory / "config.json.tmp").write_text(text)
    (directory / "config.json.tmp").replace(directory / "config.json")
    for old_name in previous:  # only names this module writes: a tampered config cannot make it delete anything else
        if isinstance(old_name, str) and re.fullmatch(r"arrays-[0-9a-f]{12}\.npz|optimizer-[0-9a-f]{12}", old_name) and token not in old_name:
            for path in [directory / old_name, directory / f"{old_name}.index", *directory.glob(f"{old_name}.data-*")]:
                path.unlink(missing_ok=True)
    return directory


def _read(directory, kind: str):
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} is not a saved {kind}: config.json is missing")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt saved {kind}: config.json: {error}") from None
    found = config.get("format") if isinstance(config, dict) else None
    if found not in READABLE_FORMATS:
        raise ValueError(
            f"{directory} holds a saved {kind} in format {found!r}, which this version of activated_dgp does not read "
            f"(it reads {' and '.join(READABLE_FORMATS)}; a later format needs a later activated_dgp)"
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


def _training_variables(dgp: gpflux.models.DeepGP) -> List[tf.Variable]:
    """The variables Keras builds a ``fit``'s optimiser over: the training model's ``trainable_variables``,
    which are its layers' trainable weights in layer order (the f-layers, then the likelihood layer), each once."""
    seen, out = set(), []
    for layer in [*dgp.f_layers, dgp.likelihood_layer]:
        for variable in layer.trainable_weights:
            if id(variable) not in seen:
                seen.add(id(variable))
                out.append(variable)
    return out


def _same_layout(probe, optimizer) -> bool:
    """Whether ``optimizer``'s variables match ``probe``'s in order, shape, dtype and name (up to the name scope
    that Keras adds when it builds an optimiser inside ``apply_gradients``, e.g. ``Adam/m/<variable>``)."""
    ours, theirs = list(probe.variables), list(optimizer.variables)
    return len(ours) == len(theirs) and all(
        a.shape == b.shape and a.dtype == b.dtype and (b.name == a.name or b.name.endswith("/" + a.name)) for a, b in zip(ours, theirs)
    )


def _optimizer_record(optimizer, dgp: gpflux.models.DeepGP, parameters: Dict[str, gpflow.Parameter]) -> dict:
    """The optimiser's class and config, and the parameter paths it was built over in order (module docstring),
    checked by building a new one of the same class over them: its variables must have the same names and shapes."""
    if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
        raise ValueError(
            f"cannot save the optimizer {type(optimizer).__name__}: only tf-keras optimizers (tf_keras.optimizers.Optimizer, "
            "not the legacy ones) are supported"
        )
    path_of = {id(p.unconstrained_variable): path for path, p in parameters.items()}
    outside = [v.name for v in _training_variables(dgp) if id(v) not in path_of]
    if outside:
        raise ValueError(f"cannot save the optimizer: the training model trains variables outside the DGP's parameters: {outside[:3]}")
    order = [path_of[id(v)] for v in _training_variables(dgp)]
    serialized = tf_keras.optimizers.serialize(optimizer)
    probe = tf_keras.optimizers.deserialize(serialized)
    probe.build([parameters[path].unconstrained_variable for path in order])
    if not _same_layout(probe, optimizer):
        raise ValueError(
            f"cannot save the optimizer: its {len(optimizer.variables)} variables are not those of a {type(optimizer).__name__} "
            f"built over the DGP's {len(order)} trainable parameters in training order ({len(probe.variables)} variables): "
            "it has not taken a step yet, was built over other variables, or a trainable flag changed after it was built"
        )
    return dict(serialized=serialized, parameters=order)


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


def save_dgp(dgp: gpflux.models.DeepGP, directory, *, optimizer=None, state: Optional[dict] = None) -> Path:
    """Write an activated DeepGP (from :func:`build_activated_dgp` or :func:`dgp_from_keras`).

    :param optimizer: optionally the (built) tf-keras optimiser training it, e.g. ``training_model.optimizer``,
        restored by :func:`load_optimizer`.
    :param state: optionally a JSON-serialisable dict (epoch, history), returned by :func:`load_training_state`.
    Raises ValueError, naming the part, for anything that could not be restored exactly (module docstring).
    """
    architecture = architecture_of_dgp(dgp)
    parameters = parameters_by_path(dgp)
    covered = {id(p.unconstrained_variable) for p in parameters.values()}
    stray = [v.name for v in dgp.trainable_variables if id(v) not in covered]
    if stray:
        raise ValueError(f"cannot save the DGP: trainable variables outside its gpflow Parameters: {stray[:3]}")
    records = {path: dict(parameter_record(p), trainable=bool(p.trainable)) for path, p in parameters.items()}
    mean_functions = mean_functions_of_dgp(dgp)
    reference = rebuild_dgp(architecture, int(dgp.num_data), mean_functions, far_field_record(dgp))
    compare_parameter_records(records, {path: parameter_record(p) for path, p in parameters_by_path(reference).items()}, "cannot save the DGP as rebuilt from its architecture")
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
        config["optimizer"] = _optimizer_record(optimizer, dgp, parameters)
    try:
        json.dumps(config, default=_json_default)
    except TypeError as error:
        raise ValueError(f"cannot save: state or optimizer config is not JSON-serialisable ({error})") from None
    return _write(directory, config, arrays, None if optimizer is None else tf.train.Checkpoint(optimizer=optimizer))


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
    parameters = parameters_by_path(dgp)
    compare_parameter_records(config["parameters"], {path: parameter_record(p) for path, p in parameters.items()}, f"{directory} does not match its architecture")
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


class DGPCheckpoint(tf_keras.callbacks.Callback):
    """Save the DGP, its optimiser and ``{"epoch": e, "logs": …}`` to ``directory`` (:func:`save_dgp`) every
    ``every`` epochs of ``dgp.as_training_model().fit`` (for ``train_dgp(…, callbacks=[…])``). Resume, in any
    process, with :func:`load_dgp`, :func:`load_optimizer` and ``fit(…, initial_epoch=load_training_state(directory)["epoch"])``:
    the resumed fit continues the interrupted one's trajectory.

    Why not tf-keras' own callbacks: ``BackupAndRestore`` writes a ``tf.train.Checkpoint`` of the Keras
    training model and restores it into the *same* model object graph at the start of the next ``fit``, so
    the resuming process must first build an identical DGP itself (the checkpoint carries no architecture),
    and it deletes the backup when the fit ends (unless ``delete_checkpoint=False``); ``ModelCheckpoint``
    with ``save_weights_only`` writes weights without the architecture or the optimiser, and without it fails
    on a gpflux training model (Keras' whole-model serialisation cannot pickle its layers' symbolic tensors,
    "Cannot pickle Tensor", tf-keras 2.21). This callback writes the
    architecture with the weights, keyed by gpflow parameter path and checked against the rebuilt model,
    and the optimiser as a ``tf.train.Checkpoint``, into one directory whose config is replaced atomically:
    at most one complete checkpoint, as ``BackupAndRestore`` keeps, but one that :func:`load_dgp` can
    open without the code that built the model."""

    def __init__(self, directory, dgp: gpflux.models.DeepGP, every: int = 1):
        super().__init__()
        self.directory, self.dgp, self.every = Path(directory), dgp, check_positive_int(every, "every")

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
    compare_parameter_records(records, reference, "cannot save the network as rebuilt from its architecture")
    config = dict(kind="network", dtype=np.dtype(gpflow.default_float()).name, architecture=architecture.to_dict(), parameters=records)
    return _write(directory, config, {f"weight/{path}": w.numpy() for path, w in weights.items()})


def load_network(directory) -> tf_keras.Sequential:
    """Rebuild a network saved by :func:`save_network` with its weights."""
    config, architecture, arrays = _read(directory, "network")
    network = build_activated_nn(architecture)
    weights = _weights(network)
    compare_parameter_records(config["parameters"], {p: dict(shape=list(w.shape), dtype=w.dtype.name) for p, w in weights.items()}, f"{directory}")
    for path, weight in weights.items():
        weight.assign(_array(arrays, f"weight/{path}", weight.shape, directory))
    return network


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.deep.persistence", {"load_state": ("activated_dgp.deep.persistence", "load_training_state")})
