"""Saving and loading a NeuralEF with ``activated_dgp.save`` / ``activated_dgp.load``: its state, the constructor's
settings and any user tf-keras networks (see :mod:`activated_dgp.eigen.neuralef`, "State")."""

from __future__ import annotations

import tf_keras

from ... import saving
from ..base import SavedState, elementwise_activation_name
from .model import NeuralEF


def _state(neuralef: NeuralEF) -> SavedState:
    return SavedState(
        eigenvalues=neuralef._eigenvalues, sigma=neuralef._sigma, eigenvalue_ema=neuralef._eigenvalue_ema,
        rayleigh_ema=neuralef._rayleigh_ema, rotation=neuralef._rotation, ritz_done=neuralef._ritz_done,
        step=neuralef._step, fit_start=neuralef._fit_start, fit_steps=neuralef._fit_steps,
        optimizer=neuralef.optimizer, networks=neuralef.stacked,
    )


def _describe_neuralef(neuralef: NeuralEF) -> saving.Description:
    options = neuralef._network_options
    config = dict(
        num_eigenpairs=neuralef.num_eigenpairs, oversampling=neuralef.num_networks - neuralef.num_eigenpairs,
        input_dim=neuralef.input_dim, width=int(options["width"]), hidden_layers=int(options["hidden_layers"]),
        activation=None, batch_size=neuralef.batch_size, learning_rate=neuralef.learning_rate, ema_decay=neuralef.ema_decay,
        estimator=neuralef.estimator, seed=neuralef.seed, jit_compile=neuralef.jit_compile, user_networks=neuralef.networks is not None,
    )
    children = {}
    if neuralef.networks is None:
        config["activation"] = elementwise_activation_name(options["activation"], "the NeuralEF's networks")
    else:
        for j, network in enumerate(neuralef.networks):
            if not isinstance(network, tf_keras.Model):
                raise ValueError(
                    f"cannot save the NeuralEF: its network {j} is a {type(network).__name__}, not a tf-keras model, so it "
                    "could not be rebuilt; save NeuralEFs with the default networks or tf-keras models (neural_eigenfunction)"
                )
            children[f"network_{j}"] = network
    return saving.Description(config=config, trackable=_state(neuralef), children=children)


def _rebuild_neuralef(config: dict, arrays: dict, children: dict):
    networks = [children[f"network_{j}"] for j in range(config["num_eigenpairs"] + config["oversampling"])] if config["user_networks"] else None
    network_options = {} if networks else dict(width=config["width"], hidden_layers=config["hidden_layers"], activation=config["activation"])
    neuralef = NeuralEF(
        config["num_eigenpairs"], networks=networks, input_dim=config["input_dim"], batch_size=config["batch_size"],
        learning_rate=config["learning_rate"], ema_decay=config["ema_decay"], estimator=config["estimator"],
        oversampling=config["oversampling"], seed=config["seed"], jit_compile=config["jit_compile"], **network_options,
    )
    return neuralef, _state(neuralef)


saving.register_saved_kind(
    saving.SavedKind(name="neuralef", matches=lambda obj: isinstance(obj, NeuralEF), describe=_describe_neuralef, rebuild=_rebuild_neuralef)
)
