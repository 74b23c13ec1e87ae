"""Saving activated DGPs and networks: their kinds for :mod:`activated_dgp.saving`, and typed shortcuts.

``activated_dgp.save(dgp, DIR)`` writes a ``tf.train.CheckpointManager`` directory (:mod:`activated_dgp.saving`)
whose header holds what rebuilds the model without the code that built it:

* a **DGP** (kind ``dgp``): its :class:`~activated_dgp.deep.config.ArchitectureConfig` (layers, units, widths,
  activations, truncation levels, lengthscale shapes, whitening, likelihood), ``num_data``, each layer's mean
  function (GPflow's Zero, Constant, Identity or Linear), the far-field residual if any, and for every gpflow
  Parameter its path, shape, transform, prior, dtype and trainable flag; every layer's Funk–Hecke spectrum is
  stored beside it. The checkpoint holds the parameters' unconstrained values, so a restored model predicts
  bit-identically.
* a **network** (kind ``network``): any tf-keras model Keras can describe as JSON (``model.to_json()``: the
  network twin of :func:`build_activated_nn`, whose ``ActivatedLayer`` is Keras-serialisable, a user's MLP or CNN),
  with its weights in the checkpoint.

Saving refuses, naming the part, anything that would not come back exactly: an unregistered likelihood, kernel,
inducing variable, mean function or activation (see :func:`activated_dgp.zonal.register_activation`), trainable
variables outside the parameters, or a network Keras cannot rebuild from its JSON. It checks this by rebuilding the
model from what it writes and comparing every parameter's path, shape, transform and prior, and every Funk–Hecke
spectrum. Loading repeats the comparison, so a directory written under another configuration (another ``positive``
bijector, another function registered under the same activation name, another float type) is a ValueError, never a
silently different model.

:func:`save_dgp` / :func:`load_dgp`, :func:`save_network` / :func:`load_network` are ``save``/``load`` with the
kind checked. Directories written by activated_dgp 0.1 (``config.json`` + ``arrays-….npz``) still load, with a
DeprecationWarning (:mod:`.legacy_format`). :class:`DGPCheckpoint` saves the DGP and the fit's optimiser every
epoch; resume with :func:`load_dgp`, :func:`load_optimizer` and ``initial_epoch=load_training_state(DIR)["epoch"]``.

The model introspection (architecture, mean-function specs, parameter records, :func:`rebuild_dgp`) lives in
:mod:`activated_dgp.deep.introspection`; its names are re-exported here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .. import saving
from .._deprecation import deprecated_aliases
from . import legacy_format
from .config import ArchitectureConfig
from .far_field import far_field_record
from .introspection import (  # noqa: F401  (re-exported: callers import these from here)
    MEAN_FUNCTIONS,
    architecture_of_dgp,
    architecture_of_network,
    check_mean_function_specs,
    check_spectra,
    compare_parameter_records,
    describe_prior,
    describe_transform,
    funk_hecke_spectra,
    mean_function_from_spec,
    mean_function_spec,
    mean_functions_of_dgp,
    parameter_record,
    parameters_by_path,
    rebuild_dgp,
)

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


# ---------------------------------------------------------------- DGP


def _describe_dgp(dgp: gpflux.models.DeepGP) -> saving.Description:
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
    spectra = funk_hecke_spectra(dgp)
    check_spectra(spectra, funk_hecke_spectra(reference), "cannot save the DGP")
    config = dict(
        dtype=np.dtype(gpflow.default_float()).name,
        architecture=architecture.to_dict(),
        num_data=int(dgp.num_data),
        mean_functions=mean_functions,
        far_field=far_field_record(dgp),
        parameters=records,
    )
    arrays = {key.replace("/", "_"): value for key, value in spectra.items()}
    return saving.Description(config=config, trackable=dgp, arrays=arrays)


def _check_dtype(config: dict, what: str) -> None:
    if config.get("dtype") != np.dtype(gpflow.default_float()).name:
        raise ValueError(
            f"{what} was saved with float type {config.get('dtype')!r} but gpflow.default_float() is "
            f"{np.dtype(gpflow.default_float()).name}; set gpflow.config.set_default_float to match"
        )


def _rebuild_dgp(config: dict, arrays: Dict[str, np.ndarray], children: dict):
    _check_dtype(config, "the DGP")
    architecture = ArchitectureConfig.from_dict(config["architecture"])
    mean_functions = config["mean_functions"]
    check_mean_function_specs(mean_functions, architecture.num_layers, "the saved DGP's mean functions are corrupt")
    dgp = rebuild_dgp(architecture, int(config["num_data"]), mean_functions, config.get("far_field"))
    parameters = parameters_by_path(dgp)
    compare_parameter_records(config["parameters"], {path: parameter_record(p) for path, p in parameters.items()}, "the saved DGP does not match its architecture")
    check_spectra({key.replace("_", "/"): value for key, value in arrays.items()}, funk_hecke_spectra(dgp), "the saved DGP")
    for path, parameter in parameters.items():
        gpflow.set_trainable(parameter, bool(config["parameters"][path]["trainable"]))
    return dgp, dgp


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


saving.register_saved_kind(
    saving.SavedKind(
        name="dgp",
        matches=lambda obj: isinstance(obj, gpflux.models.DeepGP),
        describe=_describe_dgp,
        rebuild=_rebuild_dgp,
        training_variables=_training_variables,
    )
)


# ---------------------------------------------------------------- networks


def _weight_layout(network: tf_keras.Model) -> List[tuple]:
    return [(w.name.split("/")[-1], tuple(w.shape), w.dtype.name) for w in network.weights]


def _describe_network(network: tf_keras.Model) -> saving.Description:
    if not network.built or not network.weights:
        raise ValueError(f"cannot save the network {network.name!r}: it is not built yet (call it on an input, or give it an Input)")
    try:
        text = network.to_json()
        probe = tf_keras.models.model_from_json(text)
        if not isinstance(probe, tf_keras.Model):
            raise TypeError(f"its JSON config rebuilds a {type(probe).__name__}, not a Keras model")
    except Exception as error:  # NotImplementedError (subclassed model), TypeError/ValueError (unserialisable layer)
        raise ValueError(
            f"cannot save the network {network.name!r}: Keras cannot rebuild it from its JSON config "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); a custom layer needs "
            "get_config and tf_keras.utils.register_keras_serializable"
        ) from None
    if _weight_layout(probe) != _weight_layout(network):
        raise ValueError(f"cannot save the network {network.name!r}: rebuilt from its JSON config it has other weights ({len(probe.weights)} vs {len(network.weights)})")
    return saving.Description(config=dict(keras=json.loads(text)), trackable=network)


def _rebuild_network(config: dict, arrays: Dict[str, np.ndarray], children: dict):
    network = tf_keras.models.model_from_json(json.dumps(config["keras"]))
    return network, network


saving.register_saved_kind(
    saving.SavedKind(name="network", matches=lambda obj: isinstance(obj, tf_keras.Model), describe=_describe_network, rebuild=_rebuild_network)
)


# ---------------------------------------------------------------- typed shortcuts


def save_dgp(dgp: gpflux.models.DeepGP, directory, *, optimizer=None, state: Optional[dict] = None, max_to_keep: int = 1) -> Path:
    """:func:`activated_dgp.saving.save` for an activated DeepGP (from :func:`build_activated_dgp` or
    :func:`dgp_from_keras`), optionally with the (built) tf-keras optimiser training it (``training_model.optimizer``,
    restored by :func:`load_optimizer`) and a JSON ``state`` dict (:func:`load_training_state`). Raises ValueError,
    naming the part, for anything that would not be restored exactly (module docstring)."""
    if not isinstance(dgp, gpflux.models.DeepGP):
        raise ValueError(f"expected a gpflux DeepGP, got {type(dgp).__name__}")
    return saving.save(dgp, directory, optimizer=optimizer, state=state, max_to_keep=max_to_keep)


def load_dgp(directory) -> gpflux.models.DeepGP:
    """The DeepGP saved by :func:`save_dgp` (or :func:`activated_dgp.save`), rebuilt with every parameter's value and
    trainable flag."""
    if not saving.is_saved_directory(directory) and legacy_format.is_legacy_directory(directory):
        legacy_format.warn_legacy(directory)
        return legacy_format.load_dgp(directory)
    return saving.load(directory, kind="dgp")


def load_optimizer(directory, dgp: gpflux.models.DeepGP):
    """The optimiser saved with ``save_dgp(…, optimizer=…)``, built over ``dgp``'s parameters (``dgp`` from
    :func:`load_dgp`) in the order Keras' ``fit`` builds it, with its state (step count, learning rate, slots);
    None if none was saved. Compile the training model with it: ``dgp.as_training_model().compile(optimizer)``."""
    if not saving.is_saved_directory(directory) and legacy_format.is_legacy_directory(directory):
        legacy_format.warn_legacy(directory)
        return legacy_format.load_optimizer(directory, dgp)
    return saving.load_optimizer(directory, dgp)


def load_training_state(directory) -> dict:
    """The training ``state`` dict (epoch, logs) saved with the DGP (empty if none)."""
    if not saving.is_saved_directory(directory) and legacy_format.is_legacy_directory(directory):
        legacy_format.warn_legacy(directory)
        return legacy_format.load_training_state(directory)
    return saving.load_training_state(directory)


class DGPCheckpoint(saving.SaveEveryEpochs):
    """Save the DGP, the fit's optimiser and ``{"epoch": e, "logs": …}`` to ``directory`` every ``every`` epochs of
    ``dgp.as_training_model().fit`` (e.g. ``train_dgp(…, callbacks=[DGPCheckpoint(DIR, dgp)])``), keeping
    ``max_to_keep`` checkpoints (a ``tf.train.CheckpointManager``). Resume, in any process, with :func:`load_dgp`,
    :func:`load_optimizer` and ``fit(…, initial_epoch=load_training_state(directory)["epoch"])``: the resumed fit
    continues the interrupted one's trajectory. Unlike Keras' ``BackupAndRestore`` the checkpoint carries the
    architecture, so the resuming process needs no code that built the DGP, and it is kept when the fit ends."""

    def __init__(self, directory, dgp: gpflux.models.DeepGP, every: int = 1, max_to_keep: int = 1):
        if not isinstance(dgp, gpflux.models.DeepGP):
            raise ValueError(f"expected a gpflux DeepGP, got {type(dgp).__name__}")
        super().__init__(directory, dgp, every=every, max_to_keep=max_to_keep)

    @property
    def dgp(self) -> gpflux.models.DeepGP:
        return self.obj


def save_network(network: tf_keras.Model, directory) -> Path:
    """:func:`activated_dgp.saving.save` for a tf-keras network: the twin of :func:`build_activated_nn` or any model
    Keras can rebuild from ``to_json()``."""
    if not isinstance(network, tf_keras.Model):
        raise ValueError(f"expected a tf-keras Model, got {type(network).__name__}")
    return saving.save(network, directory)


def load_network(directory) -> tf_keras.Model:
    """The network saved by :func:`save_network`, rebuilt from its Keras config with its weights."""
    if not saving.is_saved_directory(directory) and legacy_format.is_legacy_directory(directory):
        legacy_format.warn_legacy(directory)
        return legacy_format.load_network(directory)
    return saving.load(directory, kind="network")


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.deep.persistence", {"load_state": ("activated_dgp.deep.persistence", "load_training_state")})
