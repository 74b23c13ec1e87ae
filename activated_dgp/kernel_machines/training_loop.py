"""The epoch loop shared by EigenPro 2 and EigenPro 3: per-epoch loss and time, a progress line that
can be switched off, and resumable training through ``tf.train.Checkpoint``.

The minibatch order of epoch e is a permutation drawn from ``numpy.random.default_rng([seed, e])``,
so a run resumed from the checkpoint written after epoch e takes exactly the steps an uninterrupted
run would have taken.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

__all__ = ["TrainingState", "TrainedWeights", "run_epochs", "DIVERGENCE_FACTOR"]

# run_epochs stops when an epoch's loss exceeds this multiple of the first epoch's. The epoch loss is the mean
# squared residual measured before each step, so the first epoch's includes the starting residual; a stable
# iteration decreases it in expectation (interpolation) or hovers at a noise floor below it (p < n), and a
# diverging one grows geometrically (MNIST, p = n: ×1e84 per epoch), so 1e3 is far above any stable
# fluctuation and stops a divergence a few epochs after it starts, before it reaches inf.
DIVERGENCE_FACTOR = 1e3


class TrainingState(tf.Module):
    """Weights α [p, L], the epoch counter and the per-epoch history, all ``tf.Variable``s; with tail averaging,
    also the running mean ᾱ of the iterates and the number of steps it holds."""

    def __init__(self, name: Optional[str] = None):
        super().__init__(name=name)
        self.weights = tf.Variable(np.zeros((0, 0)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="weights")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.losses = tf.Variable(np.zeros(0), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="losses")
        self.times = tf.Variable(np.zeros(0), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="times")
        self.averaged = tf.Variable(np.zeros((0, 0)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="averaged")
        self.averaged_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="averaged_steps")

    def ensure_weights(self, shape) -> None:
        """Zero weights of ``shape`` unless the held ones (trained or restored) already have it. (The
        variable's static shape is unknown, so the held shape is read from its value.)"""
        if self.weights.numpy().shape != tuple(shape):
            self.weights.assign(np.zeros(shape))
            self.averaged.assign(np.zeros(shape))
            self.averaged_steps.assign(0)

    def record(self, loss: float, seconds: float) -> None:
        self.losses.assign(np.append(self.losses.numpy(), loss))
        self.times.assign(np.append(self.times.numpy(), seconds))
        self.epoch.assign_add(1)

    @property
    def history(self) -> dict:
        """{"epoch": [E], "loss": [E], "seconds": [E]} of all epochs trained so far (resumes included)."""
        losses = self.losses.numpy()
        return {"epoch": np.arange(1, losses.size + 1), "loss": losses, "seconds": self.times.numpy()}


def _check_epochs(epochs) -> int:
    if int(epochs) != epochs or epochs < 0:
        raise ValueError(f"epochs must be a non-negative integer, got {epochs!r}")
    return int(epochs)


def run_epochs(
    state: TrainingState,
    checkpoint: tf.train.Checkpoint,
    epoch_fn: Callable[[np.random.Generator], float],
    epochs: int,
    seed: int,
    *,
    checkpoint_dir=None,
    progress: bool = True,
    tolerance: Optional[float] = None,
    callback: Optional[Callable[[int], bool]] = None,
    label: str = "EigenPro",
) -> None:
    """Train until ``state.epoch`` reaches ``epochs`` (or the epoch loss falls below ``tolerance``, or
    ``callback`` returns True).

    :param epoch_fn: runs one epoch given its generator and returns the epoch's mean squared
        residual (averaged over its minibatches, measured before each step).
    :param callback: called after every epoch (after its checkpoint) with the number of epochs trained so
        far; a true return value stops training, like ``stop_training`` in a Keras callback. Use it to
        evaluate the model per epoch without a ``fit`` call (and its preconditioner setup) per epoch.
    :param checkpoint_dir: if given, the latest checkpoint there is restored first and a new one
        written after every epoch.
    Raises ValueError (divergence) when an epoch's loss is non-finite or exceeds ``DIVERGENCE_FACTOR`` = 1e3
    times the first epoch's; that epoch's loss is not recorded and no checkpoint is written for it.
    """
    epochs = _check_epochs(epochs)
    manager = None
    if checkpoint_dir is not None:
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        manager = tf.train.CheckpointManager(checkpoint, str(checkpoint_dir), max_to_keep=2)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).expect_partial()
            if progress:
                print(f"{label}: resumed from {manager.latest_checkpoint} after epoch {int(state.epoch.numpy())}", flush=True)
    while int(state.epoch.numpy()) < epochs:
        epoch = int(state.epoch.numpy())
        if tolerance is not None and state.losses.numpy().size and state.losses.numpy()[-1] <= tolerance:
            break
        start = time.perf_counter()
        loss = float(epoch_fn(np.random.default_rng([seed, epoch])))
        seconds = time.perf_counter() - start
        if not np.isfinite(loss):
            raise ValueError(f"{label} diverged in epoch {epoch + 1} (non-finite loss); reduce the step size or q")
        first = state.losses.numpy()[0] if state.losses.numpy().size else None
        if first is not None and first > 0 and loss > DIVERGENCE_FACTOR * first:
            raise ValueError(
                f"{label} diverged in epoch {epoch + 1}: training loss {loss:.3e} is {loss / first:.1e}× the first epoch's "
                f"{first:.3e} (limit {DIVERGENCE_FACTOR:.0e}×); reduce the step size or q"
            )
        state.record(loss, seconds)
        if manager is not None:
            manager.save(checkpoint_number=epoch + 1)
        if progress:
            print(f"{label} epoch {epoch + 1:4d}/{epochs}  train mse {loss:.4e}  {seconds:7.2f} s", flush=True)
        if callback is not None and callback(epoch + 1):
            break


class TrainedWeights:
    """``weights`` and ``history`` of a model holding a :class:`TrainingState` as ``self.state``."""

    state: TrainingState

    @property
    def weights(self) -> np.ndarray:
        """The coefficients [p, L] (θ for EigenPro 2, α for EigenPro 3): the tail average ᾱ once it holds
        any step, otherwise the last iterate."""
        if int(self.state.averaged_steps.numpy()) > 0:
            return self.state.averaged.numpy()
        return self.state.weights.numpy()

    @property
    def history(self) -> dict:
        return self.state.history
