"""Bad inputs at every public entry point (the top level, activated_dgp.zonal and .deep, and the data loaders).

Each case must end in a *typed* error that names the problem — ``ValueError``, ``TypeError``,
``FileNotFoundError`` or GPflow's ``ShapeMismatchError`` — never in a silent NaN and never in an exception
from deep inside TensorFlow or NumPy (``InvalidArgumentError``, ``AttributeError``, ``ZeroDivisionError`` …).
The few cases documented as evaluated without checks (the per-minibatch kernel evaluations) are marked.

The table in docs/reliability.md is generated from these cases and compared with the file, so a changed
error shows up in review:

    ADGP_WRITE_RELIABILITY=1 python -m pytest -q tests/test_reliability.py    # rewrite the table
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import gpflow
import gpflux
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from check_shapes.exceptions import ShapeMismatchError

import activated_dgp as adgp
from activated_dgp import data as adgp_data

DOC = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"
TYPED = (ValueError, TypeError, FileNotFoundError, ShapeMismatchError)
#: Public names with no inputs to get wrong (registries, result records, modules).
NO_INPUTS = {
    "LIKELIHOOD_REGISTRY": "registry (dict of names)",
    "DEFAULT_ACTIVATION": "constant (the default activation's registered name)",
    "ACTIVATION_REGISTRY": "registry (dict of names)",
    "ConversionReport": "result record",
    "TwoStageResult": "result record",
    "eigen": "module (its classes are listed)",
    "kernel_machines": "module (its classes are listed)",
    "zonal": "module (its names are listed)",
    "deep": "module (its names are listed)",
    "training": "module (its names are listed)",
    "data": "module (its loaders are listed)",
    "saving": "module (save and load are listed)",
}
#: the namespaces whose names, with the top level's, are the public entry points
NAMESPACES = (adgp, adgp.zonal, adgp.deep)
UNCHECKED = "NaN result, by design"  # the per-minibatch hot path: values are checked at the entry points


class Context:
    """Small models and files shared by the cases (built once)."""

    def __init__(self, root: Path):
        rng = np.random.default_rng(0)
        self.root = root
        self.X = rng.normal(size=(12, 2))
        self.Y = np.sin(self.X[:, :1])
        self.labels = (self.X[:, :1] > 0).astype(float)
        self.nan_X = self.X.copy()
        self.nan_X[3, 1] = np.nan
        self.inf_Y = self.Y.copy()
        self.inf_Y[5, 0] = np.inf
        self.wide_X = rng.normal(size=(12, 3))
        self.empty_X = np.zeros((0, 2))
        self.text_X = self.X.astype(str)
        self.W = rng.normal(size=(4, 3))
        self.zero_W = self.W.copy()
        self.zero_W[1] = 0.0
        self.kernel = adgp.ZonalArcCosine(2, 4)
        self.feature = adgp.ActivationFeature(self.W, "relu", 4)
        self.network = adgp.build_activated_nn(2, num_layers=1, num_units=4, truncation_level=4, seed=0)
        self.dgp = self.new_dgp()
        self.dgp_zero_W = self.new_dgp()
        self.dgp_zero_W.f_layers[0].inducing_variable.inducing_variable.W.assign(self.zero_W)
        self.saved_dgp = adgp.save_dgp(self.dgp, root / "dgp")
        self.saved_network = adgp.deep.save_network(self.network, root / "network")
        self.truncated_checkpoint = self.copy_saved("truncated_checkpoint", truncate=True)
        self.no_index = self.copy_saved("no_index", drop_index=True)
        self.uci_truncated = self.uci_folder("uci_truncated", "0.1 0.2 0.3\n0.4 0.5\n")
        self.uci_text = self.uci_folder("uci_text", "0.1 0.2 0.3\n0.4 abc 0.6\n")
        self.mnist_dir = root / "mnist"
        self.mnist_dir.mkdir()
        self.idx_truncated = self.mnist_dir / "t10k-images-idx3-ubyte"  # 2 images announced, 100 bytes given
        self.idx_truncated.write_bytes(bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28]) + bytes(100))
        (self.mnist_dir / "t10k-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 2, 3, 7]))

    def new_dgp(self, **options):
        return adgp.build_activated_dgp(2, 12, num_layers=1, num_units=4, truncation_level=4, seed=0, **options)

    def copy_saved(self, name: str, truncate: bool = False, drop_index: bool = False) -> Path:
        target = self.root / name
        target.mkdir()
        for path in self.saved_dgp.iterdir():
            content = path.read_bytes()
            if ".data-" in path.name and truncate:
                content = content[: len(content) // 2]
            if path.suffix == ".index" and drop_index:
                continue
            (target / path.name).write_bytes(content)
        return target

    def uci_folder(self, name: str, rows: str) -> Path:
        folder = self.root / name
        folder.mkdir()
        (folder / "data.txt").write_text(rows)
        (folder / "index_features.txt").write_text("0 1\n")
        (folder / "index_target.txt").write_text("2\n")
        return folder


def _extractor(width: int):
    """A feature extractor (Dense 2 → width) for train_dgp_with_extractor's cases."""
    return tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(width)])


def _schedule(**options):
    return adgp.TrainingSchedule(epochs=1, batch_size=4, **options)


def _swag(snapshots: int):
    """A SWAG of the tanh network with ``snapshots`` snapshots collected (the weights moved between them)."""
    network = _tanh_network()
    swag = adgp.training.SWAG(network, max_rank=3)
    for step in range(snapshots):
        network.layers[0].kernel.assign_add(0.01 * (step + 1) * np.ones(network.layers[0].kernel.shape))
        swag.collect()
    return swag


def _tanh_network():
    return tf_keras.Sequential([
        tf_keras.Input((2,), dtype="float64"),
        tf_keras.layers.Dense(4, "tanh", dtype="float64", name="tanh_hidden"),  # fixed names: the table is compared
        tf_keras.layers.Dense(1, use_bias=False, dtype="float64", name="linear_out"),
    ])


class _Subclassed(tf_keras.Model):
    def __init__(self):
        super().__init__(name="subclassed")
        self.hidden = tf_keras.layers.Dense(3, dtype="float64")

    def call(self, inputs):
        return self.hidden(inputs)


def _subclassed_network():
    network = _Subclassed()
    network(np.zeros((1, 2)))
    return network


def _two_output_twin():
    return adgp.build_activated_nn(2, num_layers=1, num_units=4, truncation_level=4, output_dim=2, seed=0)


def _student_t_dgp(c):
    return gpflux.models.DeepGP(list(c.new_dgp().f_layers), gpflux.layers.LikelihoodLayer(gpflow.likelihoods.StudentT()))


def _fitted_nystrom(c):
    return adgp.eigen.Nystrom(2, kernel=gpflow.kernels.SquaredExponential()).fit(c.X)


# (entry point, bad input, call(context) -> result); a case whose call returns must give no NaN.
CASES = [
    # ------------------------------------------------------------------ kernels and features
    ("ZonalArcCosine", "truncation level Ñ = 0", lambda c: adgp.ZonalArcCosine(2, 0)),
    ("ZonalArcCosine", "input_dim = 0", lambda c: adgp.ZonalArcCosine(0, 4)),
    ("ZonalArcCosine", "lengthscales of the wrong length", lambda c: adgp.ZonalArcCosine(2, 4, lengthscales=[1.0, 2.0])),
    ("ZonalArcCosine", "negative lengthscale", lambda c: adgp.ZonalArcCosine(2, 4, lengthscales=-1.0)),
    ("ZonalArcCosine", "NaN variance", lambda c: adgp.ZonalArcCosine(2, 4, variance=np.nan)),
    ("ZonalMatchedKernel", "truncation level Ñ = 0", lambda c: adgp.zonal.ZonalMatchedKernel(2, 0)),
    ("ZonalMatchedKernel", "input_dim = 0", lambda c: adgp.zonal.ZonalMatchedKernel(0, 4)),
    ("LikelihoodLayer", "a likelihood's name, not a gpflow likelihood", lambda c: adgp.deep.LikelihoodLayer("gaussian")),
    ("ZonalArcCosine.K", "wrong width", lambda c: c.kernel.K(c.wide_X)),
    ("ZonalArcCosine.K", "a vector, not [N, D]", lambda c: c.kernel.K(c.X[0])),
    ("ZonalArcCosine.K", "NaN in X (hot path: unchecked)", lambda c: c.kernel.K(c.nan_X)),
    ("ZonalKernel", "shape function not positive definite", lambda c: adgp.zonal.ZonalKernel(lambda t: -t, 2, 4)),
    ("ZonalKernel", "shape function returning NaN", lambda c: adgp.zonal.ZonalKernel(lambda t: np.log(t - 2), 2, 4)),
    ("ActivationFeature", "W with a zero-norm row", lambda c: adgp.ActivationFeature(c.zero_W, "relu", 4)),
    ("ActivationFeature", "W with NaN", lambda c: adgp.ActivationFeature(np.full((2, 3), np.nan), "relu", 4)),
    ("ActivationFeature", "W a vector", lambda c: adgp.ActivationFeature(np.ones(3), "relu", 4)),
    ("ActivationFeature", "W of strings", lambda c: adgp.ActivationFeature(c.W.astype(str), "relu", 4)),
    ("ActivationFeature", "truncation level Ñ = 0", lambda c: adgp.ActivationFeature(c.W, "relu", 0)),
    ("ActivationFeature", "unknown activation name", lambda c: adgp.ActivationFeature(c.W, "tanhh", 4)),
    ("Kuu / Kuf (gpflow.covariances)", "W width ≠ kernel's D + 1", lambda c: gpflow.covariances.Kuu(adgp.ActivationFeature(np.ones((3, 4)), "relu", 4), c.kernel)),
    ("Kuu / Kuf (gpflow.covariances)", "X of the wrong width", lambda c: gpflow.covariances.Kuf(c.feature, c.kernel, c.wide_X)),
    ("basis_coefficients", "feature and kernel of different d", lambda c: adgp.zonal.basis_coefficients(adgp.ActivationFeature(np.ones((3, 4)), "relu", 4), c.kernel)),
    ("inducing_coefficients", "feature and kernel of different d", lambda c: adgp.zonal.inducing_coefficients(adgp.ActivationFeature(np.ones((3, 4)), "relu", 4), c.kernel)),
    # ------------------------------------------------------------------ architecture and builders
    ("ActivatedLayer", "units = 0", lambda c: adgp.deep.ActivatedLayer(0)),
    ("ActivatedLayer", "initial W with a zero-norm row", lambda c: adgp.deep.ActivatedLayer(4, initial_W=c.zero_W)(c.X)),
    ("ActivatedLayer", "initial W of the wrong shape", lambda c: adgp.deep.ActivatedLayer(4, initial_W=np.ones((4, 5)))(c.X)),
    ("ActivatedLayer", "unknown activation name", lambda c: adgp.deep.ActivatedLayer(4, "tanhh")),
    ("ActivatedLayer", "truncation level Ñ = 0", lambda c: adgp.deep.ActivatedLayer(4, truncation_level=0)(c.X)),
    ("build_activated_nn", "input_dim = 0", lambda c: adgp.build_activated_nn(0)),
    ("build_activated_nn", "truncation level Ñ = 0", lambda c: adgp.build_activated_nn(2, truncation_level=0)),
    ("build_activated_nn", "lengthscales for 2 of 3 layers", lambda c: adgp.build_activated_nn(2, lengthscales=[1.0, 1.0])),
    ("build_activated_nn", "config and keywords both", lambda c: adgp.build_activated_nn(adgp.deep.ArchitectureConfig(2), num_layers=2)),
    ("activated_gp_layer", "W a vector, not [M, D + 1]", lambda c: adgp.activated_gp_layer(np.ones(3), 1, 10)),
    ("activated_gp_layer", "zero row in W", lambda c: adgp.activated_gp_layer(np.zeros((2, 3)), 1, 10)),
    ("activated_gp_layer", "num_data = 0", lambda c: adgp.activated_gp_layer(np.ones((2, 3)), 1, 0)),
    ("build_activated_dgp", "unknown likelihood name", lambda c: adgp.build_activated_dgp(2, 10, likelihood="poisson")),
    ("build_activated_dgp", "softmax with one class", lambda c: adgp.build_activated_dgp(2, 10, likelihood="softmax", output_dim=1)),
    ("build_activated_dgp", "truncation level Ñ = 0", lambda c: adgp.build_activated_dgp(2, 10, truncation_level=0)),
    ("build_activated_dgp", "num_data = 0", lambda c: adgp.build_activated_dgp(2, 0, num_layers=1, num_units=4)),
    ("ArchitectureConfig", "bernoulli with output_dim = 3", lambda c: adgp.deep.ArchitectureConfig(2, output_dim=3, likelihood="bernoulli")),
    ("ArchitectureConfig", "num_layers = 0", lambda c: adgp.deep.ArchitectureConfig(2, num_layers=0)),
    ("ArchitectureConfig", "unknown activation name", lambda c: adgp.deep.ArchitectureConfig(2, activation="tanhh")),
    ("ArchitectureConfig.from_dict", "unknown keys", lambda c: adgp.deep.ArchitectureConfig.from_dict({"input_dim": 2, "depth": 3})),
    ("dgp_from_keras", "a tanh network", lambda c: adgp.dgp_from_keras(_tanh_network(), 12)),
    ("dgp_from_keras", "2 outputs, bernoulli likelihood", lambda c: adgp.dgp_from_keras(_two_output_twin(), 12, likelihood="bernoulli")),
    ("dgp_from_keras", "X of the wrong width", lambda c: adgp.dgp_from_keras(c.network, 12, X=c.wide_X)),
    ("dgp_from_keras", "NaN in X", lambda c: adgp.dgp_from_keras(c.network, 12, X=c.nan_X)),
    ("dgp_from_keras", "kernel_variance 'largest'", lambda c: adgp.dgp_from_keras(c.network, 12, kernel_variance="largest")),
    # ------------------------------------------------------------------ training
    ("TrainingSchedule", "batch_size = 0", lambda c: adgp.TrainingSchedule(batch_size=0)),
    ("TrainingSchedule", "negative learning rate", lambda c: adgp.TrainingSchedule(learning_rate=-0.1)),
    ("train_network", "NaN in X", lambda c: adgp.train_network(c.network, c.nan_X, c.Y, schedule=_schedule())),
    ("train_network", "inf in Y", lambda c: adgp.train_network(c.network, c.X, c.inf_Y, schedule=_schedule())),
    ("train_network", "X of the wrong width", lambda c: adgp.train_network(c.network, c.wide_X, c.Y, schedule=_schedule())),
    ("train_network", "empty X", lambda c: adgp.train_network(c.network, c.empty_X, c.Y[:0], schedule=_schedule())),
    ("train_network", "X of strings", lambda c: adgp.train_network(c.network, c.text_X, c.Y, schedule=_schedule())),
    ("train_network", "X and Y of different lengths", lambda c: adgp.train_network(c.network, c.X, c.Y[:5], schedule=_schedule())),
    ("train_network", "bernoulli labels 0.5", lambda c: adgp.train_network(c.network, c.X, c.Y * 0 + 0.5, "bernoulli", _schedule())),
    ("train_network", "unknown likelihood name", lambda c: adgp.train_network(c.network, c.X, c.Y, "poisson", _schedule())),
    ("train_dgp", "NaN in X", lambda c: adgp.train_dgp(c.new_dgp(), c.nan_X, c.Y, _schedule())),
    ("train_dgp", "X of the wrong width", lambda c: adgp.train_dgp(c.new_dgp(), c.wide_X, c.Y, _schedule())),
    ("train_dgp", "empty X", lambda c: adgp.train_dgp(c.new_dgp(), c.empty_X, c.Y[:0], _schedule())),
    ("train_dgp", "zero-norm row in W", lambda c: adgp.train_dgp(c.dgp_zero_W, c.X, c.Y, _schedule())),
    ("train_dgp", "initial_epoch beyond the epochs", lambda c: adgp.train_dgp(c.new_dgp(), c.X, c.Y, _schedule(), initial_epoch=3)),
    ("train_dgp", "patience without validation data", lambda c: adgp.train_dgp(c.new_dgp(), c.X, c.Y, _schedule(patience=2))),
    ("train_dgp_with_extractor", "NaN in X", lambda c: adgp.train_dgp_with_extractor(c.new_dgp(), _extractor(2), c.nan_X, c.Y, _schedule())),
    ("train_dgp_with_extractor", "features of the wrong width", lambda c: adgp.train_dgp_with_extractor(c.new_dgp(), _extractor(3), c.X, c.Y, _schedule())),
    ("train_dgp_with_extractor", "extractor not callable", lambda c: adgp.train_dgp_with_extractor(c.new_dgp(), "conv", c.X, c.Y, _schedule())),
    ("train_dgp_with_extractor", "fewer rows than the DGP's N", lambda c: adgp.train_dgp_with_extractor(c.new_dgp(), _extractor(2), c.X[:6], c.Y[:6], _schedule())),
    ("make_convertible", "NaN in X", lambda c: adgp.make_convertible(c.network, c.nan_X, c.Y, steps=0)),
    ("make_convertible", "X of the wrong width", lambda c: adgp.make_convertible(c.network, c.wide_X, c.Y, steps=0)),
    ("make_convertible", "a tanh network", lambda c: adgp.make_convertible(_tanh_network(), c.X, c.Y, steps=0)),
    ("make_convertible", "negative steps", lambda c: adgp.make_convertible(c.network, c.X, c.Y, steps=-1)),
    ("train_two_stage", "NaN in X", lambda c: adgp.train_two_stage(c.nan_X, c.Y)),
    ("train_two_stage", "unknown likelihood name", lambda c: adgp.train_two_stage(c.X, c.Y, likelihood="poisson")),
    ("train_two_stage", "bernoulli labels 0.5", lambda c: adgp.train_two_stage(c.X, c.Y * 0 + 0.5, likelihood="bernoulli")),
    ("train_two_stage", "class label ≥ num_classes", lambda c: adgp.train_two_stage(c.X, c.labels * 3, likelihood="softmax", architecture=dict(output_dim=2))),
    ("train_two_stage", "softmax with one class", lambda c: adgp.train_two_stage(c.X, c.labels * 0, likelihood="softmax")),
    ("train_two_stage", "truncation level Ñ = 0", lambda c: adgp.train_two_stage(c.X, c.Y, architecture=dict(truncation_level=0))),
    ("train_two_stage", "validation data of another width", lambda c: adgp.train_two_stage(c.X, c.Y, validation_data=(c.wide_X, c.Y))),
    ("train_two_stage", "unknown stage-2 recipe", lambda c: adgp.train_two_stage(c.X, c.Y, recipe="best")),
    ("train_two_stage", "noise_variance 'guess'", lambda c: adgp.train_two_stage(c.X, c.Y, recipe=adgp.training.stage2_recipe(noise_variance="guess"))),
    ("evaluate_elbo", "NaN in X", lambda c: adgp.evaluate_elbo(c.dgp, c.nan_X, c.Y)),
    ("evaluate_elbo", "X of the wrong width", lambda c: adgp.evaluate_elbo(c.dgp, c.wide_X, c.Y)),
    ("evaluate_elbo", "zero-norm row in W", lambda c: adgp.evaluate_elbo(c.dgp_zero_W, c.X, c.Y)),
    ("evaluate_elbo", "num_samples = 0", lambda c: adgp.evaluate_elbo(c.dgp, c.X, c.Y, num_samples=0)),
    # ------------------------------------------------------------------ prediction
    ("propagate_means", "NaN in X", lambda c: adgp.propagate_means(c.dgp, c.nan_X)),
    ("propagate_means", "X of the wrong width", lambda c: adgp.propagate_means(c.dgp, c.wide_X)),
    ("propagate_means", "zero-norm row in W", lambda c: adgp.propagate_means(c.dgp_zero_W, c.X)),
    ("layer_moments", "empty X", lambda c: adgp.deep.layer_moments(c.dgp, c.empty_X)),
    ("layer_moments", "num_samples = 0", lambda c: adgp.deep.layer_moments(c.dgp, c.X, num_samples=0)),
    ("layer_moments", "not a DeepGP", lambda c: adgp.deep.layer_moments(c.network, c.X)),
    ("predictive_log_density", "Y with 2 columns for 1 output", lambda c: adgp.predictive_log_density(c.dgp, c.X, np.hstack([c.Y, c.Y]))),
    ("predictive_log_density", "inf in Y", lambda c: adgp.predictive_log_density(c.dgp, c.X, c.inf_Y)),
    ("predictive_log_density", "X and Y of different lengths", lambda c: adgp.predictive_log_density(c.dgp, c.X, c.Y[:5])),
    ("predict_y", "X of strings", lambda c: adgp.predict_y(c.dgp, c.text_X)),
    ("predict_y", "a vector, not [N, D]", lambda c: adgp.predict_y(c.dgp, c.X[0])),
    ("predict_y", "batch_size = 0", lambda c: adgp.predict_y(c.dgp, c.X, batch_size=0)),
    ("predict_y", "NaN in X, batched", lambda c: adgp.predict_y(c.dgp, c.nan_X, batch_size=4)),
    ("predict_class_probabilities", "zero-norm row in W", lambda c: adgp.predict_class_probabilities(c.dgp_zero_W, c.X)),
    ("predict_class_probabilities", "empty X", lambda c: adgp.predict_class_probabilities(c.dgp, c.empty_X)),
    # ------------------------------------------------------------------ persistence
    ("save_dgp", "unregistered likelihood (StudentT)", lambda c: adgp.save_dgp(_student_t_dgp(c), c.root / "student")),
    ("save_dgp", "not a DeepGP", lambda c: adgp.save_dgp(c.network, c.root / "not_dgp")),
    ("save_network", "a subclassed model", lambda c: adgp.deep.save_network(_subclassed_network(), c.root / "subclassed")),
    ("save_network", "unregistered activation", lambda c: adgp.deep.save_network(adgp.build_activated_nn(2, num_layers=1, num_units=3, activation=np.tanh), c.root / "lambda")),
    ("save", "an object of no saved kind", lambda c: adgp.save(object(), c.root / "object")),
    ("save", "max_to_keep = 0", lambda c: adgp.save(c.dgp, c.root / "keep0", max_to_keep=0)),
    ("save", "an IKA with a callable basis", lambda c: adgp.save(adgp.eigen.IKA(2, basis=np.tanh), c.root / "ika")),
    ("save", "a Nystrom on a kernel of no saved class", lambda c: adgp.save(adgp.eigen.Nystrom(2, kernel=gpflow.kernels.Polynomial()), c.root / "nystrom")),
    ("load", "missing directory", lambda c: adgp.load(c.root / "missing")),
    ("load", "truncated checkpoint", lambda c: adgp.load(c.truncated_checkpoint)),
    ("load_dgp", "missing directory", lambda c: adgp.load_dgp(c.root / "missing")),
    ("load_dgp", "truncated checkpoint", lambda c: adgp.load_dgp(c.truncated_checkpoint)),
    ("load_dgp", "checkpoint index missing", lambda c: adgp.load_dgp(c.no_index)),
    ("load_dgp", "a saved network", lambda c: adgp.load_dgp(c.saved_network)),
    ("load_network", "a saved DGP", lambda c: adgp.deep.load_network(c.saved_dgp)),
    ("load_optimizer", "missing directory", lambda c: adgp.deep.load_optimizer(c.root / "missing", c.dgp)),
    ("load_training_state", "checkpoint index missing", lambda c: adgp.deep.load_training_state(c.no_index)),
    ("ArraySource", "X and Y with different N", lambda c: adgp.data.ArraySource(c.X, c.Y[:5])),
    ("ArraySource", "empty X", lambda c: adgp.data.ArraySource(c.empty_X, c.Y[:0])),
    ("ArraySource.from_npy", "missing .npy file", lambda c: adgp.data.ArraySource.from_npy(c.root / "absent_x.npy", c.root / "absent_y.npy")),
    ("CsvSource", "no shards", lambda c: adgp.data.CsvSource([])),
    ("CsvSource", "missing shard", lambda c: adgp.data.CsvSource([c.root / "absent.csv"])),
    ("BatchPredictor", "num_samples = 0", lambda c: adgp.deep.BatchPredictor(c.dgp, num_samples=0)),
    ("BatchPredictor.predict_y", "NaN in X", lambda c: adgp.deep.BatchPredictor(c.dgp, num_samples=2).predict_y(c.nan_X)),
    ("BatchPredictor.predict_y", "X of the wrong width", lambda c: adgp.deep.BatchPredictor(c.dgp, num_samples=2).predict_y(c.wide_X)),
    ("DGPCheckpoint", "every = 0", lambda c: adgp.deep.DGPCheckpoint(c.root / "checkpoint", c.dgp, every=0)),
    # ------------------------------------------------------------------ spectra and spherical machinery
    ("register_activation", "a built-in name for another function", lambda c: adgp.zonal.register_activation("relu", np.tanh)),
    ("register_activation", "not a function", lambda c: adgp.zonal.register_activation("mine", 3.0)),
    ("ZonalActivation", "not a function", lambda c: adgp.zonal.ZonalActivation("three", 3.0)),
    ("ZonalActivation", "empty name", lambda c: adgp.zonal.ZonalActivation("", np.tanh)),
    ("activation_coefficients", "unknown activation name", lambda c: adgp.zonal.activation_coefficients("tanhh", 3, 4)),
    ("activation_coefficients", "truncation level Ñ = 0", lambda c: adgp.zonal.activation_coefficients("relu", 3, 0)),
    ("activation_coefficients", "dimension d = 1", lambda c: adgp.zonal.activation_coefficients("softplus", 1, 4)),
    ("arc_cosine_coefficients", "truncation level Ñ = 0", lambda c: adgp.zonal.arc_cosine_coefficients(3, 0)),
    ("arc_cosine_coefficients", "dimension d = 1", lambda c: adgp.zonal.arc_cosine_coefficients(1, 4)),
    ("relu_coefficients", "truncation level Ñ = 0", lambda c: adgp.zonal.relu_coefficients(3, 0)),
    ("arc_cosine_shape", "cosine outside [−1, 1]", lambda c: adgp.zonal.arc_cosine_shape(np.array([0.5, 1.5]))),
    ("arc_cosine_shape", "NaN cosine", lambda c: adgp.zonal.arc_cosine_shape(np.array([np.nan]))),
    ("zonal_matern52_shape", "cosine outside [−1, 1]", lambda c: adgp.zonal.zonal_matern52_shape(np.array([0.5, -1.5]))),
    ("funk_hecke_coefficients", "truncation level Ñ = 0", lambda c: adgp.zonal.funk_hecke_coefficients(np.cos, 3, 0)),
    ("funk_hecke_coefficients", "shape function returning NaN", lambda c: adgp.zonal.funk_hecke_coefficients(lambda t: np.log(t - 2), 3, 4)),
    ("gegenbauer_series", "negative α", lambda c: adgp.zonal.gegenbauer_series(tf.constant([0.5]), np.ones(3), -1.0)),
    ("gegenbauer_series", "NaN coefficients", lambda c: adgp.zonal.gegenbauer_series(tf.constant([0.5]), np.array([1.0, np.nan]), 0.5)),
    ("num_harmonics", "negative level", lambda c: adgp.zonal.num_harmonics(-1, 3)),
    ("num_harmonics", "dimension d = 1", lambda c: adgp.zonal.num_harmonics(2, 1)),
    ("use_xla_for_gegenbauer", "not a bool", lambda c: adgp.zonal.use_xla_for_gegenbauer("no")),
    # ------------------------------------------------------------------ eigen module and kernel machines
    ("Nystrom", "num_eigenpairs = 0", lambda c: adgp.eigen.Nystrom(0)),
    ("Nystrom.fit", "NaN in X", lambda c: adgp.eigen.Nystrom(2, kernel=gpflow.kernels.SquaredExponential()).fit(c.nan_X)),
    ("Nystrom.fit", "fewer points than eigenpairs", lambda c: adgp.eigen.Nystrom(5, kernel=gpflow.kernels.SquaredExponential()).fit(c.X[:3])),
    ("Nystrom.__call__", "X of the wrong width", lambda c: _fitted_nystrom(c)(c.wide_X)),
    ("Nystrom.__call__", "NaN in X (hot path: unchecked)", lambda c: _fitted_nystrom(c)(c.nan_X)),
    ("NeuralEF", "num_eigenpairs = 0", lambda c: adgp.eigen.NeuralEF(0, kernel=gpflow.kernels.SquaredExponential(), input_dim=2)),
    ("NeuralEF.fit", "NaN in X", lambda c: adgp.eigen.NeuralEF(2, kernel=gpflow.kernels.SquaredExponential(), input_dim=2).fit(c.nan_X, num_steps=1)),
    ("training.SWAG", "max_rank = 1", lambda c: adgp.training.SWAG(_tanh_network(), max_rank=1)),
    ("training.SWAG", "a model without weights yet", lambda c: adgp.training.SWAG(tf_keras.Sequential([tf_keras.layers.Dense(2)]))),
    ("training.SWAG.swa_weights", "no snapshots collected", lambda c: adgp.training.SWAG(_tanh_network()).swa_weights()),
    ("training.SWAG.sample", "one snapshot (K < 2 deviation columns)", lambda c: _swag(1).sample(2, seed=0)),
    ("training.SWAG.sample", "noise of the wrong width", lambda c: _swag(3).sample(noise=np.zeros((2, 3)))),
    ("training.SWAG.predict_proba", "NaN in X", lambda c: _swag(3).predict_proba(c.nan_X, num_samples=2)),
    ("training.SWAGCallback", "per 'batch'", lambda c: adgp.training.SWAGCallback(_swag(1), per="batch")),
    ("eigen.sgd_trajectory_kernel", "one iterate", lambda c: adgp.eigen.sgd_trajectory_kernel(np.zeros((1, 12)))),
    ("eigen.trajectory_eigenfunctions", "X of another length than the function values", lambda c: adgp.eigen.trajectory_eigenfunctions(c.X, np.ones((3, 5)))),
    ("eigen.function_space_probabilities", "eigenpairs for 1 of 2 outputs", lambda c: adgp.eigen.function_space_probabilities(np.zeros((3, 2)), [np.zeros((3, 1))], [np.ones(1)])),
    ("IKA", "basis not callable", lambda c: adgp.eigen.IKA(2, basis=3.0)),
    ("LinearisedLaplace", "unknown method", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), method="kronecker")),
    ("LinearisedLaplace", "negative prior precision", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), prior_precision=-1.0)),
    ("LinearisedLaplace", "unknown noise setting", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), noise_variance="ml")),
    ("LinearisedLaplace", "covariance of another method", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), method="exact", covariance="subspace")),
    ("LinearisedLaplace.fit", "low rank not below P", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), method="lowrank", num_eigenpairs=10_000, verbose=0).fit(c.X, c.Y)),
    ("LinearisedLaplace.fit", "NaN in X", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), verbose=0).fit(c.nan_X, c.Y)),
    ("LinearisedLaplace.fit", "labels not 0/1 for bernoulli", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), likelihood="bernoulli", verbose=0).fit(c.X, c.Y)),
    ("LinearisedLaplace.predict_y", "weight samples of eq. 22", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), method="eigenfunctions", eigenfunctions=adgp.eigen.Nystrom(2).fit(c.X, kernel=gpflow.kernels.SquaredExponential()), verbose=0).fit(c.X, c.Y).predict_y(c.X, pred_type="nn")),
    ("LinearisedLaplace", "layerwise prior for the last layer", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network(), method="last_layer", prior_structure="layerwise")),
    ("LinearisedLaplace.predict_f", "before fit", lambda c: adgp.eigen.LinearisedLaplace(_tanh_network()).predict_f(c.X)),
    ("IKA.fit", "NaN in the samples", lambda c: adgp.eigen.IKA(2, basis=adgp.eigen.ika.activation_basis(c.X[:6])).fit(c.nan_X, gpflow.kernels.SquaredExponential())),
    ("EigenfunctionFeature", "eigenfunctions not callable", lambda c: adgp.eigen.EigenfunctionFeature(3.0, c.X)),
    ("EigenfunctionFeature", "NaN in the samples", lambda c: adgp.eigen.EigenfunctionFeature(_fitted_nystrom(c), c.nan_X)),
    ("FeatureRidge", "negative regularisation", lambda c: adgp.eigen.FeatureRidge(lambda X: X, -1.0)),
    ("FeatureRidge.fit", "NaN in X", lambda c: adgp.eigen.FeatureRidge(lambda X: X, 0.1).fit(c.nan_X, c.Y)),
    ("EigenPro2", "not a gpflow kernel", lambda c: adgp.kernel_machines.EigenPro2("rbf")),
    ("EigenPro2.fit", "NaN in X", lambda c: adgp.kernel_machines.EigenPro2(gpflow.kernels.SquaredExponential()).fit(c.nan_X, c.Y, progress=False)),
    ("EigenPro3", "not a gpflow kernel", lambda c: adgp.kernel_machines.EigenPro3("rbf", c.X)),
    ("EigenPro3.fit", "targets of another length", lambda c: adgp.kernel_machines.EigenPro3(gpflow.kernels.SquaredExponential(), c.X[:4]).fit(c.X, c.Y[:5], progress=False)),
    # ------------------------------------------------------------------ data files (activated_dgp.data)
    ("data.load_uci_folder", "truncated data file (a short row)", lambda c: adgp_data.load_uci_folder(c.uci_truncated)),
    ("data.load_uci_folder", "corrupt data file (text in a number)", lambda c: adgp_data.load_uci_folder(c.uci_text)),
    ("data.load_uci_folder", "missing folder", lambda c: adgp_data.load_uci_folder(c.root / "nowhere")),
    ("data.read_idx", "truncated IDX file", lambda c: adgp_data.read_idx(c.idx_truncated)),
    ("data.load_mnist", "directory with a truncated IDX file", lambda c: adgp_data.load_mnist(c.mnist_dir)),
    ("data.resolve_data_dir", "missing directory", lambda c: adgp_data.resolve_data_dir(c.root / "nowhere")),
]


def _has_nan(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return bool(np.any(~np.isfinite(value)))
    if isinstance(value, float):
        return not np.isfinite(value)
    return False


def _message(error: BaseException, root: Path) -> str:
    text = str(error).strip()
    if isinstance(error, ShapeMismatchError):  # GPflow's multi-line report: the function and every argument
        function = re.search(r"Function: (\S+)", text)
        arguments = re.findall(r"Argument: (\S+)\s+Expected: ([^\n]+)\n\s*Actual:\s+([^\n]+)", text)
        parts = [f"{name} expected {expected.strip()}, got {actual.strip()}" for name, expected, actual in arguments]
        text = f"{function.group(1) if function else 'check_shapes'}: " + "; ".join(parts) if parts else text
    text = text.replace(str(root), "DIR").split("\n")[0]
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    text = re.sub(r"arrays-[0-9a-f]+\.npz", "arrays-….npz", text)
    return (text[:157] + "…" if len(text) > 160 else text).replace("|", "\\|")


def run_case(call, context: Context):
    """(outcome, text): a typed error, a result without NaN ("accepted"), or a failure ("UNTYPED", "SILENT NaN")."""
    try:
        result = call(context)
    except TYPED as error:
        return type(error).__name__, _message(error, context.root)
    except Exception as error:  # noqa: BLE001 — what this test exists to catch
        return "UNTYPED", f"{type(error).__module__}.{type(error).__name__}: {_message(error, context.root)}"
    return ("SILENT NaN", "a result with NaN or inf") if _has_nan(result) else ("accepted", "finite result")


def render(rows) -> str:
    lines = [
        "# Bad inputs at the public entry points",
        "",
        "<!-- generated by tests/test_reliability.py: ADGP_WRITE_RELIABILITY=1 python -m pytest -q tests/test_reliability.py -->",
        "",
        "Every public name of `activated_dgp`, `activated_dgp.zonal` and `activated_dgp.deep` (and the data loaders of",
        "`activated_dgp.data`) with each bad input",
        "tried and what it gets. The test fails on any untyped exception (one from deep inside TensorFlow or NumPy)",
        "and on any NaN result, except where marked *" + UNCHECKED + "*: the kernel evaluations K and Kuf (and the",
        "eigenfunctions an `EigenfunctionFeature`'s Kuf evaluates) run on every minibatch, so they check shapes",
        "(once per trace) but not values; the entry points that feed them",
        "(construction, fit, predict, conversion) check values once. `DIR` stands for the directory used.",
        "",
        "| entry point | bad input | outcome | message |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{entry}` | {bad} | {outcome} | {message} |" for entry, bad, outcome, message in rows]
    lines += ["", "Public names without inputs to get wrong: " + ", ".join(f"`{k}` ({v})" for k, v in sorted(NO_INPUTS.items())) + "."]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    gpflow.config.set_default_float(np.float64)
    return Context(tmp_path_factory.mktemp("reliability"))


def test_every_public_name_is_in_the_table():
    covered = {entry.split(".")[0].split(" ")[0] for entry, _, _ in CASES} | set(NO_INPUTS)
    covered |= {"gpflow"}
    missing = sorted({name for namespace in NAMESPACES for name in namespace.__all__} - covered)
    assert not missing, f"public names without bad-input cases: {missing}"


def test_bad_inputs_get_typed_errors_and_the_table_is_current(context, monkeypatch):
    from activated_dgp.zonal import spectra

    # the messages list the registered activations: only the built-in ones, whatever other tests registered
    builtin = {name: act for name, act in spectra.ACTIVATION_REGISTRY.items() if name in spectra._BUILTIN_ACTIVATIONS}
    monkeypatch.setattr(spectra, "ACTIVATION_REGISTRY", builtin)
    rows, failures = [], []
    for entry, bad, call in CASES:
        outcome, message = run_case(call, context)
        if outcome == "SILENT NaN" and "hot path" in bad:
            outcome, message = UNCHECKED, "checked at the entry points instead"
        rows.append((entry, bad, outcome, message))
        if outcome in ("UNTYPED", "SILENT NaN"):
            failures.append(f"{entry} / {bad}: {outcome}: {message}")
    text = render(rows)
    if os.environ.get("ADGP_WRITE_RELIABILITY") == "1":
        DOC.write_text(text)
    assert not failures, "\n".join(failures)
    assert DOC.is_file() and DOC.read_text() == text, "docs/reliability.md is stale: regenerate it (see this module's docstring)"


def test_default_float_is_respected_and_float64_only_parts_refuse_others():
    """Under float32 the DGP, its twin and the converter compute in float32; the eigen module and the kernel
    machines, which need float64, say so instead of failing inside TensorFlow (conftest restores float64)."""
    gpflow.config.set_default_float(np.float32)
    X = np.random.default_rng(0).normal(size=(10, 2))
    dgp = adgp.build_activated_dgp(2, 10, num_layers=2, num_units=4, truncation_level=4, seed=0)
    mean, _ = adgp.predict_y(dgp, X, num_samples=2, seed=0)
    assert mean.dtype == np.float32 and np.all(np.isfinite(mean))
    network = adgp.build_activated_nn(2, num_layers=2, num_units=4, truncation_level=4, seed=0)
    assert network(X.astype(np.float32)).dtype == tf.float32
    assert adgp.dgp_from_keras(network, 10, X=X).max_abs_mismatch < 1e-4
    for make in (lambda: adgp.eigen.NeuralEF(2, input_dim=2), lambda: adgp.kernel_machines.EigenPro2(gpflow.kernels.SquaredExponential()), lambda: adgp.eigen.FeatureRidge(np.sin, 0.1)):
        with pytest.raises(TypeError, match="float64"):
            make()
