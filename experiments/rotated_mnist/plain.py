"""The plain CNN a user has, on rotated MNIST: Conv2D(32, 5, ReLU) → MaxPool(2) → Conv2D(64, 5, ReLU) → MaxPool(2) →
Flatten → Dense(64, ReLU) → Dense(10, softmax), an ordinary tf-keras classifier on [N, 28, 28, 1] images, and what
the library makes of it:

* ``plain_cnn``: the network itself, trained on cross-entropy with the study's stage-1 budget (Adam at
  ``config.learning_rate``, minibatch ``config.batch_size``, ``config.epochs`` epochs, seeded by the run's seed).
* ``plain_cnn_ts``: its logits divided by the temperature T fitted on the validation images (Guo et al., 2017;
  :func:`experiments.rotated_mnist.models.fit_temperature`).
* ``plain_cnn_adgp``: the library call :func:`activated_dgp.train_two_stage` with ``network=`` the trained CNN and
  ``likelihood="softmax"``: as by default (``make_convertible="auto"``) its ReLU Dense block is first made convertible
  (:func:`activated_dgp.make_convertible` on the training images, with the study's ``config.convertible_steps``
  fine-tuning steps, by default the library's 10,000), then its
  convolutional part becomes a feature extractor g, its Dense tail an activated DGP
  (Dutordoir et al., 2021, Sec. 5.1 and 5.3: p(y | x) = ∫ softmax(f) q(f | g(x)) df), and stage 2 maximises the ELBO
  over the DGP's parameters and g's. The library's defaults (recipe, learning rate, minibatch, far field), except
  the number of stage-2 epochs, which is the study's ``config.dgp_epochs``; the validation images are passed as
  ``validation_data``. Predictions: ``TwoStageResult.predict_class_probabilities`` with the study's
  ``config.dgp_samples`` samples.
* ``plain_cnn_as_is_adgp``: the same call with ``make_convertible=False``: the ReLU Dense block converted as it is.
* ``plain_cnn_convertible_adgp``: :func:`activated_dgp.make_convertible` called by hand first (the ReLU Dense block
  swapped for zonal Swish units refitted to it and fine-tuned with its defaults, without a validation guard), then
  the same ``train_two_stage`` call.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict

import numpy as np

from experiments.harness.artifacts import atomic_write, atomic_write_text
from experiments.rotated_mnist import models
from experiments.rotated_mnist.config import LABELS, Config, log

#: units of the plain CNN's hidden Dense layer
PLAIN_WIDTH = 64


def images(x: np.ndarray) -> np.ndarray:
    """Flat images [N, 784] in [0, 1] as the plain CNN's inputs [N, 28, 28, 1] (float32, as a user's Keras model takes them)."""
    return np.asarray(x, dtype=np.float32).reshape(len(x), 28, 28, 1)


def build_plain_cnn(seed: int):
    """The plain tf-keras CNN (float32, Glorot-uniform initialisation seeded by ``seed``) with a softmax head."""
    import tf_keras

    init = lambda offset: tf_keras.initializers.GlorotUniform(seed=seed * 1000 + offset)  # noqa: E731
    return tf_keras.Sequential(
        [
            tf_keras.Input(shape=(28, 28, 1), dtype="float32"),
            tf_keras.layers.Conv2D(32, 5, activation="relu", kernel_initializer=init(1), dtype="float32"),
            tf_keras.layers.MaxPooling2D(2, dtype="float32"),
            tf_keras.layers.Conv2D(64, 5, activation="relu", kernel_initializer=init(2), dtype="float32"),
            tf_keras.layers.MaxPooling2D(2, dtype="float32"),
            tf_keras.layers.Flatten(dtype="float32"),
            tf_keras.layers.Dense(PLAIN_WIDTH, activation="relu", kernel_initializer=init(3), dtype="float32"),
            tf_keras.layers.Dense(10, activation="softmax", kernel_initializer=init(4), dtype="float32"),
        ],
        name="plain_cnn",
    )


def trained_plain_cnn(config: Config, splits: models.Splits, seed: int, checkpoint: Path):
    """The plain CNN trained as a user would (``compile`` with Adam and sparse categorical cross-entropy, ``fit``) with
    the study's stage-1 budget, or loaded from ``checkpoint``: (model, seconds spent training)."""
    import tf_keras

    tf_keras.utils.set_random_seed(seed)
    model = build_plain_cnn(seed)
    weights, record = checkpoint.with_suffix(".weights.h5"), checkpoint.with_suffix(".json")
    if record.is_file() and weights.is_file():
        model.load_weights(weights)
        log(f"  loaded {checkpoint}")
        return model, json.loads(record.read_text())["seconds"]
    log(f"seed {seed}: {LABELS['plain_cnn']}: {config.epochs} epochs on {len(splits.x_train)} images")
    model.compile(optimizer=tf_keras.optimizers.Adam(config.learning_rate), loss="sparse_categorical_crossentropy")
    progress = tf_keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: log(f"  plain CNN epoch {epoch + 1}/{config.epochs}: loss = {logs['loss']:.4f}"))
    start = time.time()
    model.fit(images(splits.x_train), splits.y_train.astype(np.int64), epochs=config.epochs, batch_size=config.batch_size,
              shuffle=True, verbose=0, callbacks=[progress])
    seconds = time.time() - start
    atomic_write(weights, lambda temporary: model.save_weights(temporary))
    atomic_write_text(record, json.dumps({"seconds": seconds}))
    return model, seconds


def two_stage(config: Config, splits: models.Splits, seed: int, network, checkpoint: Path, source=None, as_is: bool = False):
    """``train_two_stage(x_train, y_train, likelihood="softmax", network=source(), ...)`` (module docstring; ``source``
    None: ``network`` itself), or its checkpoint (the DGP and the trained extractor's weights, whose layers are
    ``network``'s convolutional part): (TwoStageResult, info with ``source``'s own info)."""
    import tf_keras

    from activated_dgp import TrainingSchedule, load_dgp, save_dgp, train_two_stage
    from activated_dgp.training import TwoStageResult
    from activated_dgp.deep.network_reading import split_convertible_head
    from activated_dgp.saving import is_saved_directory

    weights, record = checkpoint.parent / (checkpoint.name + "_extractor.weights.h5"), checkpoint.parent / (checkpoint.name + ".json")
    if is_saved_directory(checkpoint) and record.is_file() and weights.is_file():
        extractor, _ = split_convertible_head(network)
        extractor = tf_keras.models.clone_model(extractor)
        extractor.load_weights(weights)
        log(f"  loaded {checkpoint}")
        return TwoStageResult(network, load_dgp(checkpoint), extractor=extractor), json.loads(record.read_text())
    info = {}
    # "auto" swaps the ReLU block with make_convertible's defaults but the study's number of fine-tuning steps (the
    # library's 10,000 by default); a network made convertible by ``source`` has no ReLU block left and is not swapped
    swap = False if as_is else ("auto" if source is not None else dict(steps=config.convertible_steps))
    if source is not None:
        network, info = source()
    start = time.time()
    result = train_two_stage(
        images(splits.x_train), splits.y_train, likelihood="softmax", network=network,
        dgp_schedule=TrainingSchedule(epochs=config.dgp_epochs, verbose=2),
        validation_data=(images(splits.x_val), splits.y_val), seed=seed, make_convertible=swap,
    )
    info = {**info, "seconds": time.time() - start, "recipe": result.recipe, "conversion_mismatch": float(result.conversion_mismatch),
            "kernel_variances": result.kernel_variances, "elbo_loss": [float(v) for v in result.dgp_history.get("loss", [])],
            "validation_scores": result.validation_scores}
    if result.convertible is not None:
        made = result.convertible
        info.update({"convertible_losses": [made.original_loss, made.swapped_loss, made.final_loss],
                     "convertible_mismatch": list(made.layer_mismatch)})
    atomic_write(weights, lambda temporary: result.extractor.save_weights(temporary))
    atomic_write_text(record, json.dumps(info))
    save_dgp(result.dgp, checkpoint)  # its pointer, moved last, marks a complete save
    return result, info


def prediction(context, config: Config, splits: models.Splits, seed: int, model: str, tag: str):
    """(groups, predict, info) of a plain-CNN cell for :func:`experiments.rotated_mnist.cells.evaluate`: the group
    (None, None) hands ``predict`` the test images themselves, [T, 784] float32 in [0, 1]."""
    network, seconds = context.artifacts.for_seed(
        seed, "plain_cnn", lambda: trained_plain_cnn(config, splits, seed, context.artifacts.checkpoint(tag + "_plain_cnn")))
    info: Dict = {"train_seconds": seconds}
    if model in ("plain_cnn", "plain_cnn_ts"):
        logits_model = _logits(network)
        scale = 1.0
        if model == "plain_cnn_ts":
            scale = info["temperature"] = models.fit_temperature(logits_model.predict(images(splits.x_val), verbose=0), splits.y_val)
            log(f"  temperature T = {scale:.3f} (fitted on {len(splits.x_val)} validation images)")
        return [(None, None)], lambda feats: models.softmax(logits_model.predict(images(feats[0]), batch_size=1000, verbose=0) / scale), info
    source = (lambda: convertible(splits, seed, network, config.convertible_steps)) if model == "plain_cnn_convertible_adgp" else None
    result, stage2 = two_stage(config, splits, seed, network, context.artifacts.checkpoint(f"{tag}_{model}"), source,
                               as_is=model == "plain_cnn_as_is_adgp")
    info.update({f"stage2_{k}" if k == "seconds" else k: v for k, v in stage2.items()})
    info["train_seconds"] += info.get("convertible_seconds", 0.0) + stage2["seconds"]

    def predict(feats):
        probabilities = result.predict_class_probabilities(images(feats[0]), num_samples=config.dgp_samples, seed=seed, batch_size=1000)
        return probabilities / probabilities.sum(1, keepdims=True)  # Monte Carlo round-off in the class sums

    return [(None, None)], predict, info


def _logits(network):
    """The network without its final softmax: the logits model whose outputs temperature scaling divides."""
    import tf_keras

    last = network.layers[-1]
    logits = tf_keras.layers.Dense(last.units, dtype="float32", name="logits")
    model = tf_keras.Sequential([tf_keras.Input(network.input_shape[1:], dtype="float32")] + network.layers[:-1] + [logits])
    logits.set_weights(last.get_weights())
    return model


def convertible(splits: models.Splits, seed: int, network, steps: int):
    """:func:`activated_dgp.make_convertible` of the trained plain CNN with its defaults but ``steps`` fine-tuning steps
    (the study's default is the library's, 10,000): (the convertible network,
    info with the cross-entropies of the original, the swapped and the fine-tuned network on the training images)."""
    from activated_dgp import make_convertible

    log(f"seed {seed}: make_convertible of the plain CNN")
    start = time.time()
    made = make_convertible(network, images(splits.x_train), splits.y_train, steps=steps, seed=seed)
    info = {"convertible_seconds": time.time() - start, "convertible_losses": [made.original_loss, made.swapped_loss, made.final_loss],
            "convertible_mismatch": list(made.layer_mismatch)}
    log(f"  cross-entropy: original {made.original_loss:.4f}, swapped {made.swapped_loss:.4f}, fine-tuned {made.final_loss:.4f}")
    return made.network, info
