"""Saving and restoring: every Keras path for the network twin, activated DGPs of every registered kind,
a DGP in the middle of training with its optimiser, refusals at save time, and the architecture config.

All round trips are checked in a fresh process (one script of tests/conftest.py's fresh process loads every
artefact the module fixture writes, to keep the suite fast) against the in-memory model that wrote them. Each saved model has
parameters moved away from anything the builders would produce, so a loader that drops a parameter fails.
"""

import json
import os
import re
import shutil
import textwrap
import warnings

import gpflow
import gpflux
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras
from scipy.stats import norm

from activated_dgp import (
    build_activated_dgp,
    build_activated_nn,
    dgp_from_keras,
    load_dgp,
    predictive_log_density,
    save_dgp,
    train_dgp_with_extractor,
)
from activated_dgp.training import TrainingSchedule
from activated_dgp.deep import (
    ArchitectureConfig,
    DGPCheckpoint,
    load_network,
    load_optimizer,
    load_training_state,
    save_network,
)
from activated_dgp.deep.likelihoods import LIKELIHOOD_REGISTRY
from activated_dgp.deep.builders import LogisticBernoulli, MonteCarloSoftmax, activated_gp_layer, make_likelihood
from activated_dgp.deep import persistence
from activated_dgp.deep.persistence import architecture_of_dgp
from activated_dgp import saving
from activated_dgp.zonal import register_activation


def _saved_config(directory) -> dict:
    """The config in the latest checkpoint's header, read with TensorFlow's checkpoint reader."""
    path = tf.train.latest_checkpoint(str(directory))
    header = json.loads(tf.train.load_checkpoint(path).get_tensor("header/.ATTRIBUTES/VARIABLE_VALUE").decode())
    return header["root"]["config"]


def _checkpoint_keys(directory) -> list:
    return [name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(directory)))]

BUMP_SOURCE = "def bump(t):\n    return np.sin(3.0 * t) + 0.5 * t * t\n"
exec(BUMP_SOURCE)  # the same user activation, defined identically here and in the fresh process
register_activation("bump", bump)  # noqa: F821

EXTRACTOR_SOURCE = """
def extractor_dgp(seed, n):
    from activated_dgp import build_activated_dgp
    from activated_dgp.deep import ArchitectureConfig
    from activated_dgp.training import ExtractorDGP
    tf_keras.utils.set_random_seed(seed)
    g = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2, activation="tanh")])
    config = ArchitectureConfig(2, num_layers=1, num_units=6, lengthscales=[[1.0, 1.0, 1.0]], likelihood="gaussian")
    model = ExtractorDGP(build_activated_dgp(config, n, seed=seed), g)
    model(np.zeros((1, 3), np.float32))  # builds g
    return model


def extractor_moments(model, X):
    mean, var = model.deep_gp.f_layers[0].predict(model(X), full_cov=False)
    return np.concatenate([mean.numpy().ravel(), var.numpy().ravel()])
"""
exec(EXTRACTOR_SOURCE)  # train_dgp_with_extractor's wrapper, built identically here and in the fresh process


N = 40
PROBIT_JITTER = 1e-3  # gpflow.likelihoods.utils.inv_probit: ε + (1 − 2ε) Φ(f)

# ------------------------------------------------------------------------------------------------ helpers


def layerwise(dgp, X):
    """Each layer's predictive mean and variance at the previous layer's mean: every parameter matters."""
    out, hidden = [], X
    for layer in dgp.f_layers:
        mean, var = layer.predict(hidden, full_cov=False)
        out += [mean.numpy().ravel(), var.numpy().ravel()]
        hidden = mean
    return np.concatenate(out)


def perturb(module, rng, scale=0.3):
    """Move every parameter (unconstrained) away from its initial value."""
    for parameter in module.trainable_parameters:
        variable = parameter.unconstrained_variable
        variable.assign(variable + scale * rng.normal(size=variable.shape))


def dgp_cases(rng):
    """(name, DGP, targets for the log density) covering the issue's list."""
    X = rng.normal(size=(N, 3))
    twin = build_activated_nn(3, num_layers=2, num_units=6, lengthscales=[np.array([1.0, 2.0, 3.0, 4.0]), 1.0], seed=0)
    cases = [
        ("per_dim_lengthscales", dgp_from_keras(twin, N, X=X).dgp, rng.normal(size=(7, 1))),
        ("gaussian_converted_unwhitened", dgp_from_keras(build_activated_nn(3, num_layers=2, num_units=12, seed=2), N, whiten=False).dgp,
         rng.normal(size=(7, 1))),
    ]
    for name, likelihood, output_dim, activation, whiten in [
        ("logistic_relu_unwhitened", "bernoulli", 1, "relu", False),
        ("probit_swish", "probit", 1, "swish", True),
        ("softmax_registered_callable", "softmax", 3, "bump", True),
        ("robustmax_softplus_unwhitened", "robustmax", 3, "softplus", False),
    ]:
        config = ArchitectureConfig(
            3, num_layers=2, num_units=[5, 4], layer_widths=[2], output_dim=output_dim, activation=activation,
            truncation_level=6, lengthscales=[np.array([0.5, 1.0, 1.5, 2.0]), 1.3], whiten=whiten, likelihood=likelihood,
        )
        labels = rng.integers(0, output_dim if output_dim > 1 else 2, size=(7, 1)).astype(np.float64)
        cases.append((name, build_activated_dgp(config, N, seed=1), labels))
    for _, dgp, _ in cases:
        perturb(dgp, rng)
    gpflow.set_trainable(cases[0][1].f_layers[0].kernel.kernel.variance, False)  # a frozen parameter stays frozen
    return cases


# ------------------------------------------------------------------------------------------------ fresh process

SCRIPT = """
import json, sys
import gpflow
import numpy as np
import tensorflow as tf
import tf_keras
from activated_dgp import build_activated_nn, load_dgp, predictive_log_density
from activated_dgp.deep import load_network, load_optimizer, load_training_state
from activated_dgp.zonal import register_activation

root = sys.argv[1]
meta = json.load(open(f"{root}/meta.json"))
X = np.load(f"{root}/x.npy")
out, info = {}, {}
BUMP
register_activation("bump", bump)
EXTRACTOR

# -------- ExtractorDGP: its weights file and tf.train.Checkpoint, loaded into one built with another seed
Xe = np.load(f"{root}/xe.npy")
model = extractor_dgp(5, len(Xe))
model.load_weights(meta["extractor_weights"])
out["extractor/weights"] = extractor_moments(model, Xe)
model = extractor_dgp(6, len(Xe))
tf.train.Checkpoint(model=model).read(meta["extractor_checkpoint"]).assert_existing_objects_matched()
out["extractor/checkpoint"] = extractor_moments(model, Xe)
model = extractor_dgp(7, len(Xe))
model.load_weights(meta["extractor_model_checkpoint"])
out["extractor/model_checkpoint"] = extractor_moments(model, Xe)
from activated_dgp.training import TrainingSchedule, train_dgp_with_extractor
model = extractor_dgp(8, len(Xe))
history = train_dgp_with_extractor(model.deep_gp, model.extractor, Xe, np.sin(Xe[:, :1]).astype(np.float64),
                                   TrainingSchedule(epochs=3, batch_size=len(Xe), ramp_steps=0, learning_rate=0.05), guard=False,
                                   callbacks=[tf_keras.callbacks.BackupAndRestore(meta["extractor_backup"])])
out["extractor/backup"], info["extractor_backup_epochs_run"] = extractor_moments(model, Xe), len(history["loss"])

# -------- Keras paths: load into a twin built with ANOTHER seed, so an unrestored W shows
def fresh():
    return build_activated_nn(3, **meta["twin"], seed=99)
for name, path in meta["weights"].items():
    net = fresh()
    net.load_weights(path)
    out[f"keras/{name}"] = net(X).numpy()
    out[f"keras_W/{name}"] = net.layers[0].W.numpy()
net = tf_keras.models.load_model(meta["keras_file"])
out["keras/keras_file"], out["keras_W/keras_file"] = net(X).numpy(), net.layers[0].W.numpy()
net = fresh()
tf.train.Checkpoint(model=net).read(meta["tf_checkpoint"]).assert_existing_objects_matched()
out["keras/tf_checkpoint"], out["keras_W/tf_checkpoint"] = net(X).numpy(), net.layers[0].W.numpy()
net = load_network(meta["save_network"])
out["keras/save_network"], out["keras_W/save_network"] = net(X).numpy(), net.layers[0].W.numpy()

# -------- BackupAndRestore: the same fit, started again, resumes after the interruption
tf_keras.utils.set_random_seed(0)
net = build_activated_nn(3, **meta["twin"], seed=1)
net.compile(tf_keras.optimizers.Adam(0.05), loss="mse")
Xt, Yt = np.load(f"{root}/xt.npy"), np.load(f"{root}/yt.npy")
history = net.fit(Xt, Yt, epochs=4, batch_size=len(Xt), shuffle=False, verbose=0,
                  callbacks=[tf_keras.callbacks.BackupAndRestore(meta["backup"])])
out["backup/output"], info["backup_epochs_run"] = net(X).numpy(), len(history.history["loss"])

# -------- activated DGPs
for name in meta["dgps"]:
    dgp = load_dgp(f"{root}/dgp_{name}")
    hidden, parts = X, []
    for layer in dgp.f_layers:
        mean, var = layer.predict(hidden, full_cov=False)
        parts += [mean.numpy().ravel(), var.numpy().ravel()]
        hidden = mean
    out[f"dgp/{name}"] = np.concatenate(parts)  # the last (mean, var) are f_L's moments at the propagated means
    Y = np.load(f"{root}/y_{name}.npy")
    out[f"lpd/{name}"] = predictive_log_density(dgp, X, Y, num_samples=4, seed=5)
    likelihood = dgp.likelihood_layer.likelihood
    info[f"likelihood/{name}"] = [type(likelihood).__name__, getattr(getattr(likelihood, "invlink", None), "__name__", None)]
    info[f"trainable/{name}"] = sorted(
        path for path, p in gpflow.utilities.parameter_dict(dgp).items() if not p.trainable and "._" not in path)
    out[f"predict_y/{name}"] = np.concatenate([a.numpy() for a in likelihood.predict_mean_and_var(None, mean, var)], axis=1)
    out[f"f_moments/{name}"] = np.concatenate([mean.numpy(), var.numpy()], axis=1)

# -------- a DGP interrupted mid-training: resume with its optimiser, and (control) with a fresh one
X_fit, Y_fit = np.load(f"{root}/x_fit.npy"), np.load(f"{root}/y_fit.npy")
for label, restore in (("resumed", True), ("fresh_optimizer", False)):
    dgp = load_dgp(meta["checkpoint"])
    optimizer = load_optimizer(meta["checkpoint"], dgp) if restore else tf_keras.optimizers.Adam(0.02)
    if restore:
        info["optimizer_iterations"] = int(optimizer.iterations.numpy())
        info["optimizer_learning_rate"] = float(optimizer.learning_rate.numpy())
        info["optimizer_names"] = [v.name for v in optimizer.variables]
        for i, v in enumerate(optimizer.variables):
            out[f"optimizer/{i}"] = v.numpy()
    model = dgp.as_training_model()
    model.compile(optimizer)
    epoch = load_training_state(meta["checkpoint"])["epoch"]
    model.fit({"inputs": X_fit, "targets": Y_fit}, epochs=meta["epochs"], initial_epoch=epoch,
              batch_size=len(X_fit), shuffle=False, verbose=0)
    out[f"resume/{label}"] = np.concatenate([p.unconstrained_variable.numpy().ravel() for p in dgp.trainable_parameters])
    info[f"resume_epoch/{label}"] = epoch

np.savez(f"{root}/loaded.npz", **out)
json.dump(info, open(f"{root}/loaded.json", "w"))
"""


def _halve_learning_rate_after_first_epoch(epoch, learning_rate):
    return 0.02 if epoch >= 1 else 0.05


def _train_1_layer(dgp, X, Y, epochs, initial_epoch=0, callbacks=()):
    model = dgp.as_training_model()
    if model.optimizer is None or not initial_epoch:
        model.compile(tf_keras.optimizers.Adam(0.05))
    scheduler = tf_keras.callbacks.LearningRateScheduler(_halve_learning_rate_after_first_epoch)
    model.fit({"inputs": X, "targets": Y}, epochs=epochs, initial_epoch=initial_epoch, batch_size=len(X), shuffle=False,
              verbose=0, callbacks=[scheduler, *callbacks])


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory, interrupt_after, fresh_process):
    """Write every artefact, load them all in ONE fresh Python process; returns (expected, loaded, info, extra)."""
    gpflow.config.set_default_float(np.float64)
    root = tmp_path_factory.mktemp("persistence")
    rng = np.random.default_rng(7)
    X = rng.normal(size=(7, 3))
    np.save(root / "x.npy", X)
    expected, extra = {}, {}
    meta = {"twin": dict(num_layers=2, num_units=8, layer_widths=[2], lengthscales=[[1.0, 2.0, 3.0, 4.0], 1.5])}

    # ---- the twin, trained (W moves), saved every Keras way
    Xt = rng.normal(size=(N, 3))
    Yt = np.sin(Xt[:, :1]) + Xt[:, 1:2] ** 2
    np.save(root / "xt.npy", Xt), np.save(root / "yt.npy", Yt)
    net = build_activated_nn(3, **meta["twin"], seed=0)
    W_init = net.layers[0].W.numpy().copy()
    net.compile(tf_keras.optimizers.Adam(0.05), loss="mse")
    checkpoint = tf_keras.callbacks.ModelCheckpoint(str(root / "mc.weights.h5"), save_weights_only=True)
    net.fit(Xt, Yt, epochs=3, batch_size=N, shuffle=False, verbose=0, callbacks=[checkpoint])
    extra["W_init"], extra["W_trained"] = W_init, net.layers[0].W.numpy()
    meta["weights"] = {
        "weights_h5": str(root / "w.weights.h5"), "legacy_h5": str(root / "w.h5"), "tf_format": str(root / "tf" / "w"),
        "model_checkpoint": str(root / "mc.weights.h5"),
    }
    for name, path in meta["weights"].items():
        if name != "model_checkpoint":
            net.save_weights(path)
    meta["keras_file"] = str(root / "twin.keras")
    net.save(meta["keras_file"])
    meta["tf_checkpoint"] = tf.train.Checkpoint(model=net).write(str(root / "ckpt" / "twin"))
    meta["save_network"] = str(save_network(net, root / "net"))
    reference = net(X).numpy()
    for name in [*meta["weights"], "keras_file", "tf_checkpoint", "save_network"]:
        expected[f"keras/{name}"], expected[f"keras_W/{name}"] = reference, extra["W_trained"]

    # ---- BackupAndRestore: an uninterrupted 4-epoch fit vs one interrupted after 2 and resumed in the fresh process
    meta["backup"] = str(root / "backup")
    for interrupted in (False, True):
        tf_keras.utils.set_random_seed(0)
        twin = build_activated_nn(3, **meta["twin"], seed=1)
        twin.compile(tf_keras.optimizers.Adam(0.05), loss="mse")
        callbacks = [tf_keras.callbacks.BackupAndRestore(meta["backup"]), interrupt_after(2)] if interrupted else []
        try:
            twin.fit(Xt, Yt, epochs=4, batch_size=N, shuffle=False, verbose=0, callbacks=callbacks)
        except KeyboardInterrupt:
            extra["backup_interrupted_output"] = twin(X).numpy()
        else:
            expected["backup/output"] = twin(X).numpy()

    # ---- activated DGPs
    meta["dgps"], extra["dgps"] = [], {}
    for name, dgp, Y in dgp_cases(rng):
        save_dgp(dgp, root / f"dgp_{name}")
        np.save(root / f"y_{name}.npy", Y)
        meta["dgps"].append(name)
        extra["dgps"][name] = dgp
        expected[f"dgp/{name}"] = layerwise(dgp, X)
        expected[f"lpd/{name}"] = predictive_log_density(dgp, X, Y, num_samples=4, seed=5)

    # ---- mid-training: 2 epochs with a checkpoint per epoch, then "interrupted"; reference: 4 epochs straight
    X_fit = rng.normal(size=(N, 3))
    Y_fit = np.cos(X_fit[:, :1])
    np.save(root / "x_fit.npy", X_fit), np.save(root / "y_fit.npy", Y_fit)
    config = ArchitectureConfig(3, num_layers=1, num_units=8, lengthscales=[[1.0, 2.0, 1.0, 1.0]], likelihood="gaussian")
    meta["checkpoint"], meta["epochs"] = str(root / "checkpoint"), 4
    straight = build_activated_dgp(config, N, seed=3)
    _train_1_layer(straight, X_fit, Y_fit, epochs=4)
    expected["resume/resumed"] = np.concatenate([p.unconstrained_variable.numpy().ravel() for p in straight.trainable_parameters])
    interrupted = build_activated_dgp(config, N, seed=3)
    checkpoint = DGPCheckpoint(meta["checkpoint"], interrupted)
    try:
        _train_1_layer(interrupted, X_fit, Y_fit, epochs=4, callbacks=[checkpoint, interrupt_after(2)])
    except KeyboardInterrupt:
        pass
    # the optimiser's own variables at the interruption (the checkpoint was written just before it)
    extra["optimizer"] = [(v.name, v.numpy().copy()) for v in checkpoint.model.optimizer.variables]
    extra["checkpoint_dir"] = root / "checkpoint"
    extra["checkpointed_parameters"] = {
        path: p.unconstrained_variable.name for path, p in gpflow.utilities.parameter_dict(interrupted).items()
        if "._" not in path and p.trainable
    }

    # ---- ExtractorDGP (train_dgp_with_extractor's training wrapper): trained, saved as weights and as a checkpoint
    Xe = rng.normal(size=(N, 3)).astype(np.float32)
    np.save(root / "xe.npy", Xe)
    model = extractor_dgp(4, N)  # noqa: F821
    meta["extractor_model_checkpoint"] = str(root / "xdgp_mc.weights.h5")  # written by Keras after every epoch
    train_dgp_with_extractor(model.deep_gp, model.extractor, Xe, np.sin(Xe[:, :1]).astype(np.float64),
                             TrainingSchedule(epochs=3, batch_size=N, ramp_steps=0, learning_rate=0.05), guard=False,
                             callbacks=[tf_keras.callbacks.ModelCheckpoint(meta["extractor_model_checkpoint"], save_weights_only=True)])
    meta["extractor_weights"] = str(root / "xdgp.weights.h5")
    model.save_weights(meta["extractor_weights"])
    meta["extractor_checkpoint"] = tf.train.Checkpoint(model=model).write(str(root / "xdgp_ckpt" / "x"))
    expected["extractor/weights"] = expected["extractor/checkpoint"] = extractor_moments(model, Xe)  # noqa: F821
    expected["extractor/model_checkpoint"] = expected["extractor/weights"]  # no guard: the last epoch is the result
    # an interrupted train_dgp_with_extractor with Keras' BackupAndRestore, resumed in the fresh process (one batch
    # per epoch, so the shuffle order cannot differ between the runs)
    meta["extractor_backup"] = str(root / "xdgp_backup")
    interrupted = extractor_dgp(4, N)  # noqa: F821
    try:
        train_dgp_with_extractor(interrupted.deep_gp, interrupted.extractor, Xe, np.sin(Xe[:, :1]).astype(np.float64),
                                 TrainingSchedule(epochs=3, batch_size=N, ramp_steps=0, learning_rate=0.05), guard=False,
                                 callbacks=[tf_keras.callbacks.BackupAndRestore(meta["extractor_backup"]), interrupt_after(1)])
    except KeyboardInterrupt:
        extra["extractor_interrupted"] = extractor_moments(interrupted, Xe)  # noqa: F821
    extra["extractor_other_seeds"] = [extractor_moments(extractor_dgp(seed, N), Xe) for seed in (5, 6, 7)]  # noqa: F821

    (root / "meta.json").write_text(json.dumps(meta))
    fresh_process.run(SCRIPT.replace("BUMP\n", BUMP_SOURCE).replace("EXTRACTOR\n", EXTRACTOR_SOURCE), root)
    with np.load(root / "loaded.npz") as data:
        loaded = {key: data[key] for key in data.files}
    info = json.loads((root / "loaded.json").read_text())
    return expected, loaded, info, extra


# ------------------------------------------------------------------------------------------------ tests


KERAS_PATHS = ["weights_h5", "legacy_h5", "tf_format", "model_checkpoint", "keras_file", "tf_checkpoint", "save_network"]


@pytest.mark.parametrize("path", ["weights", "checkpoint", "model_checkpoint"])
def test_the_extractor_wrapper_round_trips_in_a_fresh_process(round_trips, path):
    """train_dgp_with_extractor's ExtractorDGP (extractor and DGP) through a tf-keras weights file, a
    tf.train.Checkpoint and Keras' ModelCheckpoint passed to the fit as a callback; its .keras / full-model save is a
    clear error (tests/test_extractor.py)."""
    expected, loaded, _, extra = round_trips
    for other in extra["extractor_other_seeds"]:  # the models loaded into start elsewhere, so a lost weight shows
        assert np.max(np.abs(other - expected[f"extractor/{path}"])) > 1e-3
    np.testing.assert_allclose(loaded[f"extractor/{path}"], expected[f"extractor/{path}"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("path", KERAS_PATHS)
def test_every_keras_saving_path_restores_W_in_a_fresh_process(round_trips, path):
    expected, loaded, _, extra = round_trips
    assert np.max(np.abs(extra["W_trained"] - extra["W_init"])) > 1e-2  # training moved W, so losing it would show
    np.testing.assert_array_equal(loaded[f"keras_W/{path}"], expected[f"keras_W/{path}"])
    np.testing.assert_array_equal(loaded[f"keras/{path}"], expected[f"keras/{path}"])


def test_the_extractor_fit_resumes_from_backup_and_restore_in_a_fresh_process(round_trips):
    """train_dgp_with_extractor(callbacks=[BackupAndRestore]) interrupted after epoch 1 of 3 here, resumed in the
    fresh process from a model built with another seed: it runs epochs 2 and 3 only and ends where the
    uninterrupted fit ended (Adam's state restored too; float round-off of the resumed graph aside)."""
    expected, loaded, info, extra = round_trips
    assert info["extractor_backup_epochs_run"] == 2
    assert np.max(np.abs(extra["extractor_interrupted"] - expected["extractor/weights"])) > 1e-3
    # the extractor's weights are float32 (Keras conv layers): multithreaded float32 reductions may sum in another
    # order on a loaded machine, which moves single weights by ~1e-8 over three epochs; not resuming moves them by >1e-3
    np.testing.assert_allclose(loaded["extractor/backup"], expected["extractor/weights"], rtol=1e-5, atol=1e-7)


def test_backup_and_restore_resumes_the_interrupted_fit(round_trips):
    expected, loaded, info, extra = round_trips
    assert info["backup_epochs_run"] == 2  # epochs 3 and 4 only: it resumed, it did not start again
    assert np.max(np.abs(extra["backup_interrupted_output"] - expected["backup/output"])) > 1e-3
    np.testing.assert_allclose(loaded["backup/output"], expected["backup/output"], rtol=1e-10, atol=1e-12)


CASES = ["per_dim_lengthscales", "gaussian_converted_unwhitened", "logistic_relu_unwhitened", "probit_swish", "softmax_registered_callable", "robustmax_softplus_unwhitened"]


@pytest.mark.parametrize("name", CASES)
def test_dgp_round_trip_in_a_fresh_process_predicts_identically(round_trips, name):
    expected, loaded, info, extra = round_trips
    np.testing.assert_array_equal(loaded[f"dgp/{name}"], expected[f"dgp/{name}"])
    np.testing.assert_allclose(loaded[f"lpd/{name}"], expected[f"lpd/{name}"], rtol=1e-12)
    dgp = extra["dgps"][name]
    likelihood = dgp.likelihood_layer.likelihood
    assert info[f"likelihood/{name}"][0] == type(likelihood).__name__
    frozen = sorted(p for p, v in gpflow.utilities.parameter_dict(dgp).items() if not v.trainable and "._" not in p)
    assert info[f"trainable/{name}"] == frozen


def test_probit_comes_back_probit(round_trips):
    """Independent truth: for a probit link p(y=1) = ∫ Φ(f) N(f; μ, σ²) df = Φ(μ / √(1 + σ²)) in closed form
    (GPflow's inv_probit keeps it off 0 and 1 as ε + (1 − 2ε)Φ, ε = 10⁻³); the logistic link differs."""
    _, loaded, info, _ = round_trips
    assert info["likelihood/probit_swish"] == ["Bernoulli", "inv_probit"]
    moments = loaded["f_moments/probit_swish"]
    closed_form = PROBIT_JITTER + (1 - 2 * PROBIT_JITTER) * norm.cdf(moments[:, 0] / np.sqrt(1.0 + moments[:, 1]))
    np.testing.assert_allclose(loaded["predict_y/probit_swish"][:, 0], closed_form, rtol=1e-10)
    logistic = LogisticBernoulli().predict_mean_and_var(None, moments[:, :1], moments[:, 1:])[0].numpy()[:, 0]
    assert np.max(np.abs(logistic - closed_form)) > 1e-3


def test_resuming_mid_training_with_the_optimiser_continues_the_same_trajectory(round_trips):
    expected, loaded, info, _ = round_trips
    assert info["resume_epoch/resumed"] == 2 and info["optimizer_iterations"] == 2  # full batch: one step per epoch
    assert info["optimizer_learning_rate"] == pytest.approx(0.02)  # the scheduled value at the interruption
    np.testing.assert_allclose(loaded["resume/resumed"], expected["resume/resumed"], rtol=1e-9, atol=1e-12)
    # control: the same parameters with a fresh Adam do not continue the trajectory (the test can fail)
    assert np.max(np.abs(loaded["resume/fresh_optimizer"] - expected["resume/resumed"])) > 1e-3


def test_optimizer_state_round_trips_through_its_checkpoint_in_a_fresh_process(round_trips):
    """Adam's step count and its m and v slots for every trainable gpflow Parameter, read from the
    optimiser's own ``variables`` before the interruption and after :func:`load_optimizer` in the fresh
    process, ordered by name: equal, and nonzero (a fresh Adam's slots are zeros, so a lost state shows)."""
    _, loaded, info, extra = round_trips
    saved = sorted(extra["optimizer"], key=lambda item: item[0])  # stable: equal names keep Keras' order
    order = sorted(range(len(info["optimizer_names"])), key=lambda i: info["optimizer_names"][i])
    assert [info["optimizer_names"][i] for i in order] == [name for name, _ in saved]
    for (name, value), i in zip(saved, order):
        np.testing.assert_array_equal(loaded[f"optimizer/{i}"], value, err_msg=name)
    names = [name for name, _ in saved]
    for variable_name in set(extra["checkpointed_parameters"].values()):  # one m and one v per trainable Parameter
        count = sum(1 for v in extra["checkpointed_parameters"].values() if v == variable_name)
        for slot in ("m", "v"):
            assert names.count(f"Adam/{slot}/{variable_name}") == count, (slot, variable_name)
    slots = [value for name, value in saved if "/m/" in name or "/v/" in name]
    assert len(slots) == 2 * len(extra["checkpointed_parameters"]) and all(np.any(value != 0) for value in slots)
    directory = extra["checkpoint_dir"]  # the slots are in the checkpoint beside the model, one checkpoint kept
    assert saving.saved_header(directory)["format"] == "activated_dgp/4"
    assert sum(1 for key in _checkpoint_keys(directory) if key.startswith("optimizer/")) >= len(saved)  # and its learning rate
    assert len(list(directory.glob("ckpt-*.index"))) == 1


# ------------------------------------------------------------------------------------------------ refusals


def _layer(kernel=None, feature=None, mean_function=None):
    layer = activated_gp_layer(np.eye(4, 3) + 0.5, 1, N)
    if kernel is None and feature is None and mean_function is None:
        return layer
    return gpflux.layers.GPLayer(
        kernel or layer.kernel, feature or layer.inducing_variable, num_data=N, num_latent_gps=1,
        mean_function=mean_function or gpflow.mean_functions.Zero(),
    )


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: gpflux.models.DeepGP([_layer()], gpflux.layers.LikelihoodLayer(gpflow.likelihoods.StudentT())), "likelihood StudentT"),
        (lambda: gpflux.models.DeepGP([_layer()], gpflux.layers.LikelihoodLayer(gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid))), "Bernoulli with link sigmoid"),
        (lambda: gpflux.models.DeepGP([_layer(kernel=gpflow.kernels.SharedIndependent(gpflow.kernels.SquaredExponential(), 1))], gpflow.likelihoods.Gaussian()), "layer 0.*SquaredExponential"),
        (lambda: gpflux.models.DeepGP([_layer(mean_function=gpflow.mean_functions.Additive(gpflow.mean_functions.Zero(), gpflow.mean_functions.Zero()))], gpflow.likelihoods.Gaussian()), "layer 0.*mean function Additive"),
        (lambda: build_activated_dgp(2, N, num_layers=2, num_units=4, activation=lambda t: np.tanh(2 * t)), "layer 0.*'<lambda>' is not registered"),
    ],
    ids=["likelihood", "logistic_gpflow_bernoulli", "kernel", "mean_function", "activation"],
)
def test_unknown_parts_are_refused_at_save_time_by_name(tmp_path, make, message):
    with pytest.raises(ValueError, match=message):
        save_dgp(make(), tmp_path / "out")
    assert not saving.is_saved_directory(tmp_path / "out")


def test_priors_are_refused(tmp_path):
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4)
    dgp.f_layers[0].kernel.kernel.variance.prior = tfp.distributions.Gamma(np.float64(2.0), np.float64(1.0))
    with pytest.raises(ValueError, match="kernel.variance differs.*Gamma"):
        save_dgp(dgp, tmp_path)


def test_network_with_unregistered_activation_is_refused(tmp_path):
    net = build_activated_nn(2, num_layers=1, num_units=4, activation=lambda t: t**3)
    with pytest.raises(ValueError, match="not registered"):
        save_network(net, tmp_path)
    with pytest.raises(ValueError, match="not registered"):
        net.get_config()


# ------------------------------------------------------------------------------------------------ load-side checks


def test_load_refuses_tampered_corrupt_and_mismatched_directories(tmp_path, monkeypatch, save_with_tampered_config):
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4, lengthscales=[np.array([1.0, 2.0, 3.0])], seed=0)
    # the architecture says scalar lengthscales, the parameters say [3]: named, not assigned
    tampered = save_with_tampered_config(dgp, "dgp", tmp_path / "tampered", lambda c: c["architecture"].update(lengthscales=[1.0]))
    with pytest.raises(ValueError, match="lengthscales differs"):
        load_dgp(tampered)
    with monkeypatch.context() as patch:
        patch.setattr(saving, "FORMAT", "activated_dgp/1")
        old = save_dgp(dgp, tmp_path / "old")
    with pytest.raises(ValueError, match="in format 'activated_dgp/1', which this version of activated_dgp does not read"):
        load_dgp(old)
    directory = save_dgp(dgp, tmp_path / "dgp")
    data = next(directory.glob("ckpt-*.data-*"))
    data.write_bytes(data.read_bytes()[:40])  # truncated
    with pytest.raises(ValueError, match="not a readable activated_dgp checkpoint|is damaged"):
        load_dgp(directory)
    next(directory.glob("ckpt-*.index")).unlink()
    with pytest.raises(ValueError, match="holds no checkpoint written by activated_dgp.save"):
        load_dgp(directory)
    with pytest.raises(ValueError, match="does not exist"):
        load_dgp(tmp_path / "missing")
    with pytest.raises(ValueError, match="holds a saved 'dgp', not a saved network"):
        load_network(save_dgp(dgp, tmp_path / "again"))


FORMAT_2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "persistence_format2")


def _fit(dgp, X, Y, optimizer, epochs, initial_epoch=0):
    model = dgp.as_training_model()
    model.compile(optimizer)
    model.fit({"inputs": X, "targets": Y}, epochs=epochs, initial_epoch=initial_epoch, batch_size=len(X), shuffle=False, verbose=0)
    return model


def _values(dgp):
    return {path: p.unconstrained_variable.numpy() for path, p in gpflow.utilities.parameter_dict(dgp).items() if "._" not in path}


@pytest.mark.filterwarnings("ignore:.*saved by activated_dgp 0.1:DeprecationWarning")
@pytest.mark.parametrize("activation_named", [True, False], ids=["as-written", "activation-field-removed"])
def test_a_format_2_directory_still_loads_and_resumes(tmp_path, activation_named):
    """tests/fixtures/persistence_format2 was written by the format-2 writer (the optimiser's variables in the
    arrays file; tests/fixtures/make_persistence_format2.py says how) after 2 of 4 epochs, with reference.npz:
    the parameters after all 4 epochs straight through. Its parameters and optimiser variables, read with
    np.load, come back exactly, with a DeprecationWarning; the resumed fit ends at the reference; resaving writes
    today's format, read without a warning.

    It was saved with the zonal Softplus, the default then. With the architecture's ``activation`` field removed it
    must still come back as the Softplus (an absent field means the default of its time, not today's Swish): the
    saved σ_n are checked at load, and the resumed fit reproduces the reference written by the old code."""
    directory = tmp_path / "format2"
    shutil.copytree(FORMAT_2, directory)
    config = json.loads((directory / "config.json").read_text())
    assert config["format"] == "activated_dgp/2" and config["architecture"]["activation"] == ["softplus"]
    if not activation_named:
        del config["architecture"]["activation"]
        (directory / "config.json").write_text(json.dumps(config))
    with np.load(directory / config["arrays"]) as data:
        arrays = {key: data[key] for key in data.files}
    with np.load(directory / "reference.npz") as data:
        reference = {key: data[key] for key in data.files}
    with pytest.warns(DeprecationWarning, match="saved by activated_dgp 0.1 .* save it again with activated_dgp.save"):
        dgp = load_dgp(directory)
    assert dgp.f_layers[0].inducing_variable.inducing_variable.activation.name == "softplus"
    for path, value in _values(dgp).items():
        np.testing.assert_array_equal(value, arrays[f"parameter/{path}"], err_msg=path)
    assert not dgp.f_layers[0].kernel.kernel.variance.trainable  # frozen before the fit: Adam was built over the rest
    optimizer = load_optimizer(directory, dgp)
    assert [v.name for v in optimizer.variables] == [record["name"] for record in config["optimizer"]["variables"]]
    for i, variable in enumerate(optimizer.variables):
        np.testing.assert_array_equal(variable.numpy(), arrays[f"optimizer/{i}"])
    assert int(optimizer.iterations.numpy()) == load_training_state(directory)["epoch"] == 2
    control = load_dgp(directory)
    _fit(control, reference["X"], reference["Y"], tf_keras.optimizers.Adam(0.05), int(reference["epochs"]), initial_epoch=2)
    _fit(dgp, reference["X"], reference["Y"], optimizer, int(reference["epochs"]), initial_epoch=2)
    for path, value in _values(dgp).items():
        np.testing.assert_allclose(value, reference[f"parameter/{path}"], rtol=1e-9, atol=1e-12, err_msg=path)
    assert max(np.max(np.abs(v - reference[f"parameter/{p}"])) for p, v in _values(control).items()) > 1e-3  # a fresh Adam does not

    save_dgp(dgp, directory, optimizer=optimizer, state={"epoch": 4})
    assert saving.saved_header(directory)["format"] == "activated_dgp/4"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*saved by activated_dgp 0.1", category=DeprecationWarning)
        restored = load_optimizer(directory, load_dgp(directory))
        assert load_training_state(directory) == {"epoch": 4}
    for a, b in zip(restored.variables, optimizer.variables, strict=True):
        assert a.name == b.name
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("version", ["activated_dgp/4", "activated_dgp/1", None])
def test_an_unknown_legacy_format_is_refused_naming_it(tmp_path, version):
    """A config.json (the 0.1 layout) naming a format the legacy reader does not know: refused by name."""
    shutil.copytree(FORMAT_2, tmp_path / "d")
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    (tmp_path / "d" / "config.json").write_text(json.dumps(dict(config, format=version)))
    for load in (load_dgp, load_training_state, lambda d: load_optimizer(d, None)):
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=f"in format {re.escape(repr(version))}, which this version of activated_dgp does not read"):
            load(tmp_path / "d")


def test_optimizer_over_a_partly_frozen_two_layer_dgp_round_trips_and_resaves_in_place(tmp_path, rng):
    """Adam built by fit over a 2-layer DGP with a frozen parameter between trainable ones: saved, loaded,
    its variables equal to the original's by name (stable order); a second save leaves one checkpoint."""
    dgp = build_activated_dgp(2, N, num_layers=2, num_units=4, layer_widths=[2], seed=0)
    gpflow.set_trainable(dgp.f_layers[0].kernel.kernel.variance, False)
    X, Y = rng.normal(size=(N, 2)), rng.normal(size=(N, 1))
    model = _fit(dgp, X, Y, tf_keras.optimizers.Adam(0.03), epochs=2)
    # the order saving records is the one Keras builds a fit's optimiser over: the training model's own
    assert [id(v) for v in persistence._training_variables(dgp)] == [id(v) for v in model.trainable_variables]
    for _ in range(2):
        save_dgp(dgp, tmp_path, optimizer=model.optimizer)
    assert [p.name for p in tmp_path.glob("ckpt-*.index")] == ["ckpt-2.index"]
    restored = load_optimizer(tmp_path, load_dgp(tmp_path))
    ours = sorted(((v.name, v.numpy()) for v in restored.variables), key=lambda item: item[0])
    theirs = sorted(((v.name, v.numpy()) for v in model.optimizer.variables), key=lambda item: item[0])
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    for (name, a), (_, b) in zip(ours, theirs):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert float(restored.learning_rate.numpy()) == pytest.approx(0.03) and int(restored.iterations.numpy()) == 2
    save_dgp(dgp, tmp_path)  # without an optimiser: the new checkpoint has none
    assert not [key for key in _checkpoint_keys(tmp_path) if key.startswith("optimizer/")] and load_optimizer(tmp_path, dgp) is None


def test_optimizers_that_cannot_be_restored_are_refused(tmp_path, rng):
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4, seed=0)
    with pytest.raises(ValueError, match="has not taken a step yet"):
        save_dgp(dgp, tmp_path / "unbuilt", optimizer=tf_keras.optimizers.Adam(0.1))
    with pytest.raises(ValueError, match="not the legacy ones"):
        save_dgp(dgp, tmp_path / "legacy", optimizer=tf_keras.optimizers.legacy.Adam(0.1))
    model = _fit(dgp, rng.normal(size=(N, 2)), rng.normal(size=(N, 1)), tf_keras.optimizers.Adam(0.1), epochs=1)
    directory = save_dgp(dgp, tmp_path / "saved", optimizer=model.optimizer)
    frozen = load_dgp(directory)
    gpflow.set_trainable(frozen.f_layers[0].kernel.kernel.variance, False)
    with pytest.raises(ValueError, match=r"the optimiser was built over (\d+) variables, this object trains (?!\1)\d+"):
        load_optimizer(directory, frozen)
    data = next(directory.glob("ckpt-*.data-*"))
    data.write_bytes(data.read_bytes()[:40])  # truncated
    with pytest.raises(ValueError, match="not a readable activated_dgp checkpoint|does not restore into a Adam"):
        load_optimizer(directory, dgp)


def test_resaving_deletes_only_its_own_checkpoints(tmp_path):
    """Saving again keeps max_to_keep checkpoints and touches no other file in the directory."""
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4, seed=0)
    (tmp_path / "notes.txt").write_text("keep")
    for _ in range(3):
        save_dgp(dgp, tmp_path, max_to_keep=2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-2.index", "ckpt-3.index"]
    assert (tmp_path / "notes.txt").read_text() == "keep"


def test_another_function_under_the_same_activation_name_is_refused_at_load(tmp_path):
    register_activation("wobble", np.sin)
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4, activation="wobble", seed=0)
    directory = save_dgp(dgp, tmp_path)
    register_activation("wobble", np.cos, overwrite=True)
    with pytest.raises(ValueError, match="spectrum/0/feature"):
        load_dgp(directory)
    with pytest.raises(ValueError, match="already registered"):
        register_activation("relu", np.cos, overwrite=True)


def test_resaving_replaces_atomically_and_leaves_one_arrays_file(tmp_path):
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4, seed=0)
    save_dgp(dgp, tmp_path, state={"epoch": 1})
    dgp.f_layers[0].q_mu.assign(dgp.f_layers[0].q_mu + 1.0)
    save_dgp(dgp, tmp_path, state={"epoch": 2})
    assert len(list(tmp_path.glob("ckpt-*.index"))) == 1
    assert load_training_state(tmp_path) == {"epoch": 2}
    np.testing.assert_array_equal(load_dgp(tmp_path).f_layers[0].q_mu.numpy(), dgp.f_layers[0].q_mu.numpy())
    assert load_optimizer(tmp_path, dgp) is None


def test_gaussian_noise_transform_is_recorded_with_its_lower_bound(tmp_path):
    dgp = build_activated_dgp(2, N, num_layers=1, num_units=4)
    config = _saved_config(save_dgp(dgp, tmp_path))
    record = config["parameters"][".likelihood_layer.likelihood.variance"]
    lower = gpflow.likelihoods.Gaussian().variance.transform.bijectors[0].shift.numpy()
    assert record["transform"] == f"shift({lower!r})∘softplus" and record["shape"] == []


# ------------------------------------------------------------------------------------------------ the config


def test_config_validates_before_anything_is_built():
    with pytest.raises(ValueError, match="unknown likelihood 'studentt'"):
        ArchitectureConfig(3, likelihood="studentt")
    with pytest.raises(ValueError, match="one latent GP"):
        ArchitectureConfig(3, output_dim=3, likelihood="probit")
    with pytest.raises(ValueError, match="classes ≥ 2"):
        ArchitectureConfig(3, output_dim=1, likelihood="softmax")
    with pytest.raises(ValueError, match="layer 1 must be a scalar or have D \\+ 1 = 3"):
        ArchitectureConfig(3, num_layers=2, layer_widths=[2], lengthscales=[1.0, [1.0, 2.0]])
    with pytest.raises(ValueError, match="positive"):
        ArchitectureConfig(3, num_layers=1, lengthscales=[-1.0])
    with pytest.raises(ValueError, match="unknown activation"):
        ArchitectureConfig(3, activation="gelu")
    with pytest.raises(ValueError, match="one entry per layer"):
        ArchitectureConfig(3, num_layers=2, num_units=[4, 4, 4])
    with pytest.raises(ValueError, match="not both"):
        build_activated_nn(ArchitectureConfig(3), num_units=4)
    with pytest.raises(ValueError, match="unknown keys"):
        ArchitectureConfig.from_dict({"input_dim": 3, "units": 4})


def test_config_round_trips_and_drives_both_builders(rng):
    config = ArchitectureConfig(
        3, num_layers=2, num_units=[6, 5], layer_widths=[2], output_dim=4, activation=["relu", "swish"],
        truncation_level=[5, 7], lengthscales=[np.array([1.0, 2.0, 3.0, 4.0]), 0.5], whiten=False, likelihood="robustmax",
    )
    assert ArchitectureConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    net = build_activated_nn(config, seed=0)
    dgp = build_activated_dgp(config, N, seed=0)
    found = architecture_of_dgp(dgp)  # the DGP builder honours every field, lengthscales included:
    assert found.replace(lengthscales=config.lengthscales) == config
    for a, b in zip(found.lengthscales, config.lengthscales):  # read back through softplus: to round-off
        np.testing.assert_allclose(a, b, rtol=1e-14)
    for index, (activated, layer) in enumerate(zip(net.layers[0::2], dgp.f_layers)):
        kernel, feature = layer.kernel.kernel, layer.inducing_variable.inducing_variable
        np.testing.assert_array_equal(activated.kernel.lengthscales.numpy(), kernel.lengthscales.numpy())
        assert feature.activation.name == activated.activation.name == config.activation[index]
        assert kernel.truncation_level == activated.truncation_level == config.truncation_level[index]
        assert activated.W.shape == feature.W.shape == (config.num_units[index], config.input_widths[index] + 1)
        assert layer.whiten is False and layer.num_latent_gps == config.output_widths[index]
    assert type(dgp.likelihood_layer.likelihood) is gpflow.likelihoods.MultiClass
    keywords = build_activated_nn(3, num_layers=2, num_units=[6, 5], layer_widths=[2], output_dim=4, activation=["relu", "swish"],
                                  truncation_level=[5, 7], lengthscales=[np.array([1.0, 2.0, 3.0, 4.0]), 0.5], seed=0)
    for a, b in zip(net.get_weights(), keywords.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_likelihood_registry_builds_what_it_names():
    assert set(LIKELIHOOD_REGISTRY) == {"gaussian", "bernoulli", "probit", "softmax", "robustmax"}
    probit, latent = make_likelihood("probit", 1)
    assert type(probit) is gpflow.likelihoods.Bernoulli and latent == 1
    f = np.array([[-1.0], [0.3], [2.0]])
    np.testing.assert_allclose(probit.invlink(f).numpy(), PROBIT_JITTER + (1 - 2 * PROBIT_JITTER) * norm.cdf(f), rtol=1e-12)
    assert type(make_likelihood("bernoulli", 1)[0]) is LogisticBernoulli
    assert type(make_likelihood("softmax", 3)[0]) is MonteCarloSoftmax
    for name in LIKELIHOOD_REGISTRY:
        built = make_likelihood(name, 3 if name in ("softmax", "robustmax") else 1)[0]
        assert [entry for entry in LIKELIHOOD_REGISTRY.values() if entry.matches(built)] == [LIKELIHOOD_REGISTRY[name]]


def test_the_default_activation_is_saved_by_name_and_a_nameless_one_means_softplus(tmp_path, rng):
    """Models built with today's default (the zonal Swish) save ``"swish"`` explicitly, in save_dgp's and
    save_network's config.json and in the twin layer's Keras config; a config without the field means the
    zonal Softplus, the default when it was written. Independent truth for the Softplus: the layer equals
    ‖w‖ ‖x̃‖ log(1 + e^(3t)) computed here (Ñ = 20 truncation error < 1e-4 at D = 3)."""
    dgp_config = _saved_config(save_dgp(build_activated_dgp(3, 20, num_layers=2, num_units=4, seed=0), tmp_path / "d"))
    network = build_activated_nn(3, num_layers=2, num_units=4, seed=0)
    network_layers = _saved_config(save_network(network, tmp_path / "n"))["keras"]["config"]["layers"]
    activated = [layer["config"]["activation"] for layer in network_layers if layer["class_name"].endswith("ActivatedLayer")]
    assert dgp_config["architecture"]["activation"] == activated == ["swish", "swish"]
    assert network.layers[0].get_config()["activation"] == "swish"

    values = dict(dgp_config["architecture"])
    del values["activation"]
    assert ArchitectureConfig.from_dict(values).activation == ("softplus", "softplus")
    config = network.layers[0].get_config()
    del config["activation"]
    layer = type(network.layers[0]).from_config(config)
    X = rng.normal(size=(40, 3))
    layer(X)
    W = network.layers[0].W.numpy()
    layer.W.assign(W)
    x_tilde = np.hstack([X, np.ones((40, 1))])  # ℓ = 1
    radius = np.linalg.norm(x_tilde, axis=1)[:, None] * np.linalg.norm(W, axis=1)[None, :]
    t = (x_tilde @ W.T) / radius
    np.testing.assert_allclose(layer(X).numpy(), radius * np.logaddexp(0.0, 3.0 * t), atol=1e-4 * radius.max())
