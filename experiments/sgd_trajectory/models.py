"""What the SGD-trajectory study fits: its small CNN, trained by SGD with momentum (MAP, and the deep ensemble's
members), the SGD continuation that feeds SWA/SWAG (:class:`activated_dgp.training.SWAG`, one snapshot per epoch)
and the training-set function values of κ_SGD (every ``function_every`` steps), and the predictives evaluated per
rotation angle."""

from __future__ import annotations

from dataclasses import dataclass
import json
from pathlib import Path
import time
from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp.data import load_mnist, rotated_test_sets
from activated_dgp.metrics import classification_metrics
from activated_dgp.training import SWAG
from experiments.harness.setups import training_subset

NUM_CLASSES = 10
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4  # L2 of ½ wd ‖θ‖² in the loss (the SGD weight decay of the papers' code)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Data:
    x_train: np.ndarray  # [N, 28, 28, 1] float32 in [0, 1]
    y_train: np.ndarray  # [N] int64
    rotated: np.ndarray  # [A, T, 28, 28] uint8
    y_test: np.ndarray  # [T] int64
    train_source: str
    test_source: str


def prepare_data(config, data_dir, seed: int, cache_dir) -> Data:
    """``config.train_size`` training digits drawn with ``seed`` (all when None) and the rotated official test set."""
    data = load_mnist(data_dir)
    order = training_subset(data, config.train_size, seed)
    x = data.x_train[order].reshape(len(order), 28, 28, 1).astype(np.float32) / 255.0
    num_test = len(data.x_test) if config.test_size is None else min(config.test_size, len(data.x_test))
    rotated = rotated_test_sets(data.x_test[:num_test], config.angles, cache_dir=Path(cache_dir) / "rotated")
    return Data(x, data.y_train[order].astype(np.int64), rotated, data.y_test[:num_test].astype(np.int64),
                data.train_source, data.test_source)


def test_inputs(data: Data, angle_index: int) -> np.ndarray:
    return data.rotated[angle_index].reshape(-1, 28, 28, 1).astype(np.float32) / 255.0


def build_cnn(seed: int) -> tf_keras.Sequential:
    """conv(8, 5×5, ReLU) + maxpool(2), conv(16, 5×5, ReLU) + maxpool(2), Dense(10) logits; no batch norm (SWAG
    then needs no statistics update); float32, Glorot-uniform seeded by ``seed``."""
    init = lambda offset: tf_keras.initializers.GlorotUniform(seed=seed * 1000 + offset)  # noqa: E731
    return tf_keras.Sequential([
        tf_keras.Input((28, 28, 1)),
        tf_keras.layers.Conv2D(8, 5, activation="relu", kernel_initializer=init(0)),
        tf_keras.layers.MaxPool2D(2),
        tf_keras.layers.Conv2D(16, 5, activation="relu", kernel_initializer=init(1)),
        tf_keras.layers.MaxPool2D(2),
        tf_keras.layers.Flatten(),
        tf_keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(2)),
    ], name="cnn")


class Trainer:
    """Minibatch SGD with momentum on cross-entropy + ½ wd ‖θ‖², batch ``batch_size``, one reshuffle per epoch from
    ``numpy.random.default_rng(seed)``; ``run(epochs, lr, on_step, on_epoch)`` continues where it stopped."""

    def __init__(self, model, X, y, batch_size: int, seed: int):
        self.model, self.X, self.y, self.batch_size = model, X, y, int(batch_size)
        self.rng = np.random.default_rng(seed)
        self.optimizer = tf_keras.optimizers.SGD(0.0, momentum=MOMENTUM)
        variables = model.trainable_variables

        @tf.function(reduce_retracing=True)
        def step(x, labels):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
                total = loss + 0.5 * WEIGHT_DECAY * tf.add_n([tf.reduce_sum(v**2) for v in variables])
            self.optimizer.apply_gradients(zip(tape.gradient(total, variables), variables))
            return loss

        self._step = step

    def steps_per_epoch(self) -> int:
        return int(np.ceil(len(self.X) / self.batch_size))

    def run(self, epochs: int, learning_rate: float, on_step: Callable[[int], None] = None,
            on_epoch: Callable[[int], None] = None) -> float:
        """``epochs`` epochs at ``learning_rate``; the last epoch's mean loss."""
        self.optimizer.learning_rate.assign(learning_rate)
        count, loss = 0, 0.0
        for epoch in range(int(epochs)):
            order, losses = self.rng.permutation(len(self.X)), []
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                losses.append(float(self._step(self.X[rows], self.y[rows])))
                count += 1
                if on_step is not None:
                    on_step(count)
            loss = float(np.mean(losses))
            if on_epoch is not None:
                on_epoch(epoch + 1)
        return loss


def logits(model, X: np.ndarray, batch: int = 5000) -> np.ndarray:
    return np.concatenate([model(X[i : i + batch], training=False).numpy() for i in range(0, len(X), batch)], 0)


def softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def train_map(config, data: Data, seed: int) -> tf_keras.Sequential:
    """The MAP network: ``config.epochs`` epochs of SGD, the learning rate ``config.learning_rate`` for the first 2/3
    and a tenth of it after (a step decay, as in the papers' schedules)."""
    tf_keras.utils.set_random_seed(seed)
    model = build_cnn(seed)
    trainer = Trainer(model, data.x_train, data.y_train, config.batch_size, seed)
    first = max(1, (2 * config.epochs) // 3)
    trainer.run(first, config.learning_rate)
    loss = trainer.run(config.epochs - first, config.learning_rate / 10) if config.epochs > first else None
    log(f"MAP network of seed {seed}: {config.epochs} epochs, last epoch's loss {loss}")
    return model


def save_weights(model, path: Path) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, *model.get_weights())


def load_weights(model, path: Path):
    with np.load(path) as archive:
        model.set_weights([archive[f"arr_{i}"] for i in range(len(archive.files))])
    return model


@dataclass
class Trajectory:
    swag: SWAG  # its model holds the last iterate's weights
    function_values: np.ndarray  # [M, N, C] float32 logits on the training digits
    steps: int


def run_trajectory(config, data: Data, map_model, seed: int) -> Trajectory:
    """SGD continued from the MAP weights at the constant ``config.swag_learning_rate`` for ``config.swag_epochs``
    epochs: a SWAG snapshot after every epoch and the logits on the training digits after every
    ``config.function_every``-th step."""
    model = build_cnn(seed)
    model.set_weights(map_model.get_weights())
    swag = SWAG(model, max_rank=config.max_rank)
    trainer = Trainer(model, data.x_train, data.y_train, config.batch_size, seed + 7919)
    values: List[np.ndarray] = []
    total = config.swag_epochs * trainer.steps_per_epoch()

    def on_step(step: int) -> None:
        if step % config.function_every == 0:
            values.append(logits(model, data.x_train).astype(np.float32))
            if len(values) % 100 == 0:
                log(f"  seed {seed}: {len(values)} iterates' function values, step {step} of {total}")

    trainer.run(config.swag_epochs, config.swag_learning_rate, on_step=on_step, on_epoch=lambda epoch: swag.collect())
    return Trajectory(swag, np.stack(values), total)


def save_trajectory(trajectory: Trajectory, folder: Path) -> None:
    """The SWAG (tf.train.Checkpoint, the network's last iterate with it), the function values, then a marker."""
    folder.mkdir(parents=True, exist_ok=True)
    tf.train.Checkpoint(swag=trajectory.swag).write(str(folder / "swag"))
    np.save(folder / "function_values.npy", trajectory.function_values)
    (folder / "done.json").write_text(json.dumps({"steps": trajectory.steps}))


def load_trajectory(config, folder: Path, seed: int):
    """The saved :class:`Trajectory`, or None when the folder holds no complete one."""
    marker = folder / "done.json"
    if not marker.exists():
        return None
    model = build_cnn(seed)
    swag = SWAG(model, max_rank=config.max_rank)
    tf.train.Checkpoint(swag=swag).read(str(folder / "swag")).assert_consumed()
    return Trajectory(swag, np.load(folder / "function_values.npy"), json.loads(marker.read_text())["steps"])


def per_angle_metrics(data: Data, probabilities: Callable[[np.ndarray], np.ndarray]) -> Dict[str, list]:
    """``probabilities(inputs)`` [T, C] scored at every angle: lists (one value per angle) of accuracy,
    log_likelihood, ece and entropy (:func:`activated_dgp.metrics.classification_metrics`)."""
    out: Dict[str, list] = {}
    for index in range(len(data.rotated)):
        for name, value in classification_metrics(probabilities(test_inputs(data, index)), data.y_test).items():
            out.setdefault(name, []).append(value)
    return out
