"""Saving and loading a fitted linearised Laplace approximation (:func:`activated_dgp.save` / :func:`activated_dgp.load`,
the kind ``"linearised_laplace"``): its settings, δ, σ² and fitted scalars, the GGN's arrays, the network and the
eigenfunctions as children; and the directories written by activated_dgp 0.1."""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf
import tf_keras

from ... import saving
from ...deep import persistence  # noqa: F401  (registers the kind "network", which a saved approximation holds)
from ..base import EigenApproximation
from ..kfac import KroneckerFactors
from ..neuralef import NeuralEF
from .. import ika, nystrom  # noqa: F401  (register the kinds of the eigenfunctions a saved approximation may hold)
from .settings import _EIGEN_METHODS, _LEGACY_CONFIG, _SETTINGS


def restore_fit(laplace, config: dict, arrays: dict) -> None:
    """Set the fitted state saved by :func:`describe` (or the 0.1 writer), after checking that the
    network's parameters are those it was fitted at."""
    fingerprint = float(np.sum(laplace._parameter_vector() ** 2))
    if laplace.num_parameters != config["num_parameters"] or not np.isclose(fingerprint, config["parameter_fingerprint"], rtol=1e-10, atol=0.0):
        raise ValueError("the model's parameters are not those the saved approximation was fitted at (θ_MAP differs)")
    laplace.input_dim, laplace.num_outputs = config["input_dim"], config["num_outputs"]
    laplace.prior_precision, laplace.log_evidence = config["prior_precision"], config["log_evidence"]
    laplace._log_likelihood, laplace._theta_norm2 = config["log_likelihood_at_map"], config["parameter_norm2"]
    laplace.ntk_source = config.get("ntk_source")
    laplace.noise_variance_setting = config.get("noise_variance_setting", laplace.noise_variance)
    if config.get("squared_error") is not None:
        laplace._squared_error, laplace._num_targets = config["squared_error"], config["num_targets"]
    laplace.ggn_eigenvalues = arrays["ggn_eigenvalues"]
    laplace.ggn_eigenvectors = arrays["ggn_eigenvectors"] if "ggn_eigenvectors" in arrays else None
    if laplace.method == "kron":
        laplace.kron = KroneckerFactors.from_arrays(laplace._kron_chain, arrays)
    if "validation_nll" in arrays:
        laplace.validation_nll = arrays["validation_nll"]
    if "prior_precision_grid" in arrays:
        laplace.prior_precision_grid = arrays["prior_precision_grid"]


def _as_json(value):
    """A prior precision as JSON: a number, a name, or a list (one per layer)."""
    return np.asarray(value).tolist() if isinstance(value, np.ndarray) else value


def _settings(laplace) -> dict:
    return dict(
        {name: getattr(laplace, name) for name in _SETTINGS},
        prior_precision=_as_json(laplace.prior_precision),
        prior_precision_setting=_as_json(laplace.prior_precision_setting),
        jacobian_cache_bytes=laplace.jacobian_cache_bytes,
        input_dim=laplace.input_dim,
        num_outputs=laplace.num_outputs,
        num_parameters=laplace.num_parameters,
        parameter_fingerprint=float(np.sum(laplace._parameter_vector() ** 2)),
        log_evidence=laplace.log_evidence,
        log_likelihood_at_map=laplace._log_likelihood,
        parameter_norm2=getattr(laplace, "_theta_norm2", None),
        variable_indices=laplace.variable_indices,
        ntk_source=laplace.ntk_source,
        noise_variance_setting=laplace.noise_variance_setting,
        squared_error=getattr(laplace, "_squared_error", None),
        num_targets=getattr(laplace, "_num_targets", None),
    )


def describe(laplace) -> saving.Description:
    if laplace.input_dim is None:
        raise ValueError("cannot save the LinearisedLaplace approximation: it is not fitted yet (call fit first)")
    try:
        json.dumps(laplace.neuralef_options)
    except TypeError as error:
        raise ValueError(f"cannot save the LinearisedLaplace approximation: neuralef_options must be JSON-serialisable ({error})") from None
    arrays = {"ggn_eigenvalues": laplace.ggn_eigenvalues, "prior_precision_grid": laplace.prior_precision_grid}
    if laplace.ggn_eigenvectors is not None:
        arrays["ggn_eigenvectors"] = laplace.ggn_eigenvectors
    if laplace.kron is not None:
        arrays.update(laplace.kron.arrays())
    if laplace.validation_nll is not None:
        arrays["validation_nll"] = laplace.validation_nll
    children = {"network": laplace.model}
    if laplace.method in _EIGEN_METHODS:
        if not isinstance(laplace.eigenfunctions, EigenApproximation):
            raise ValueError(
                f"cannot save the LinearisedLaplace approximation: its eigenfunctions are a {type(laplace.eigenfunctions).__name__}, "
                "which could not be rebuilt; saved eigenfunctions are a Nystrom, IKA or NeuralEF approximation"
            )
        children["eigenfunctions"] = laplace.eigenfunctions
    return saving.Description(config=_settings(laplace), arrays=arrays, children=children)


def rebuild(cls, config: dict, arrays: dict, children: dict):
    """The approximation ``describe`` saved, as a ``cls`` (:class:`~activated_dgp.eigen.LinearisedLaplace`)."""
    network, indices = children["network"], config["variable_indices"]
    laplace = cls(
        network,
        prior_precision=config["prior_precision_setting"],
        eigenfunctions=children["eigenfunctions"] if config["method"] == "eigenfunctions" else None,
        jacobian_cache_bytes=config["jacobian_cache_bytes"],
        verbose=0,
        variables=None if indices is None else [network.trainable_variables[i] for i in indices],
        **{name: config[name] for name in _SETTINGS if name in config},  # settings added later keep their defaults
    )
    restore_fit(laplace, config, arrays)
    if config["method"] == "neuralef":
        laplace.eigenfunctions = children["eigenfunctions"]
    return laplace, None


def check_same_weights(model, network) -> None:
    """A ValueError unless ``model``'s weights equal the saved ``network``'s, in order (θ_MAP)."""
    if not isinstance(model, tf_keras.Model):
        raise ValueError(f"model must be a tf-keras Model, got {type(model).__name__}")
    ours, saved = model.weights, network.weights
    if len(ours) != len(saved):
        raise ValueError(
            f"the model's parameters are not those the saved approximation was fitted at (θ_MAP differs: {len(ours)} weights, saved {len(saved)})"
        )
    for a, b in zip(ours, saved):
        if tuple(a.shape) != tuple(b.shape) or not np.array_equal(a.numpy(), b.numpy()):
            raise ValueError(f"the model's parameters are not those the saved approximation was fitted at (θ_MAP differs in {a.name})")


def load_legacy(cls, directory, model, eigenfunctions, verbose: int):
    """An approximation saved by activated_dgp 0.1: ``laplace.json`` (settings, fitted scalars), ``laplace.npz``
    (the GGN's arrays) and for ``neuralef`` a NeuralEF ``tf.train.Checkpoint`` in ``neuralef/``; the network was
    saved apart, so ``model`` is needed."""
    if model is None:
        raise ValueError(f"{directory} was saved by activated_dgp 0.1 without the network: pass model= (the fitted network)")
    with open(os.path.join(directory, _LEGACY_CONFIG)) as handle:
        config = json.load(handle)
    indices = config.get("variable_indices")
    laplace = cls(
        model,
        prior_precision=config["prior_precision_setting"],
        eigenfunctions=eigenfunctions,
        verbose=verbose,
        variables=None if indices is None else [model.trainable_variables[i] for i in indices],
        **{name: config[name] for name in _SETTINGS if name in config},  # settings added later keep their defaults
    )
    with np.load(os.path.join(directory, "laplace.npz")) as arrays:
        restore_fit(laplace, config, {name: arrays[name] for name in arrays.files})
    if laplace.method == "neuralef":
        inputs_width = laplace.input_dim + (laplace.num_outputs if laplace.num_outputs > 1 else 0)
        # 0.1 saved NeuralEF with its then default of no extra networks
        laplace.eigenfunctions = NeuralEF(laplace.num_eigenpairs, input_dim=inputs_width, **{"seed": laplace.seed, "oversampling": 0, **laplace.neuralef_options})
        tf.train.Checkpoint(model=laplace.eigenfunctions).read(os.path.join(directory, "neuralef", "ckpt")).expect_partial()
    return laplace
