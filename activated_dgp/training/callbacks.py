"""The tf-keras callbacks of the library's fits: a progress bar over epochs (:class:`FitProgress`), a per-step
learning-rate warm-up (:class:`LearningRateRamp`), early stopping on any score with the best parameters restored
(:class:`RestoreBest`), and a filter for TensorFlow's retracing warning (:func:`without_retracing_warnings`)."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from ..data.streaming import DATA_ERROR

__all__ = ["FitProgress", "LearningRateRamp", "RestoreBest", "fit_keeping_the_best", "without_retracing_warnings"]


class FitProgress(tf_keras.callbacks.Callback):
    """One Keras ``Progbar`` over a fit's epochs (not Keras' per-epoch step bar), with the latest loss and learning
    rate; on a terminal it redraws in place, elsewhere (logs) it writes a line at most every ``interval`` seconds.

    Built on Keras' own ``Progbar``; Keras' ``ProgbarLogger`` (``fit(verbose=1)``) instead draws a new bar of steps
    for every epoch, which fills a log with one bar per epoch on a long fit."""

    def __init__(self, interval: float = 10.0):
        super().__init__()
        self.interval = float(interval)
        self._bar = None

    def on_train_begin(self, logs=None):
        epochs = self.params.get("epochs")
        self._bar = tf_keras.utils.Progbar(epochs, unit_name="epoch", interval=self.interval, stateful_metrics=["loss", "lr"])

    def on_epoch_end(self, epoch, logs=None):
        values = [(name, float(value)) for name, value in (logs or {}).items() if name in ("loss", "lr", "val_loss")]
        self._bar.update(epoch + 1, values=values, finalize=epoch + 1 >= (self.params.get("epochs") or 0))


class _NoRetracingWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def without_retracing_warnings():
    """Drop TensorFlow's "N out of the last N calls … triggered tf.function retracing" warning during one of the
    library's own fits. Each fit builds a new Keras model whose train function is traced once, by design; after a
    few fits (``train_two_stage`` in a loop, a study's cells) TensorFlow counts those first traces as retracing and
    warns about something the user cannot act on. The filter is on TensorFlow's logger for this call only."""
    logger, dropped = tf.get_logger(), _NoRetracingWarning()
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)


class LearningRateRamp(tf_keras.callbacks.Callback):
    """Linear learning-rate warm-up: at step t = 1 … ``steps`` of the fit the optimiser's learning rate is
    ``target · t / steps``, then left alone (Goyal et al., 2017, sec. 2.2, "gradual warmup"), so that
    ReduceLROnPlateau acts after the ramp (a reduction it makes during the ramp is overwritten at the next
    step). t is the optimiser's own step count + 1, so an optimiser saved mid-ramp and resumed continues it.

    Not Keras' ``LearningRateScheduler``: that one sets the rate once per epoch from the epoch index, while the ramp
    is per step (an epoch of a small data set is a few steps, of a large one thousands); and not a
    ``LearningRateSchedule`` as Adam's rate, which would silently override ``ReduceLROnPlateau``'s reductions."""

    def __init__(self, target: float, steps: int):
        super().__init__()
        if steps < 1 or not target > 0:
            raise ValueError(f"steps must be ≥ 1 and target > 0, got {steps} and {target}")
        self.target, self.steps = float(target), int(steps)

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy()) + 1
        if step <= self.steps:
            self.model.optimizer.learning_rate.assign(self.target * step / self.steps)


# what tf.debugging.assert_all_finite (CheckNumerics) says when a tensor inside a step is not finite
_NON_FINITE = re.compile(r"Tensor had (NaN|Inf) values")


def _what_tensorflow_said(message: str) -> str:
    """The line of a graph-execution error that says what failed (not "Graph execution error:", the node's
    traceback or the op's name)."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    said = [line for line in lines if not line.startswith(("Graph execution error", "Detected at node", "File "))]
    return said[-1] if said else message.strip()


def fit_keeping_the_best(model: tf_keras.Model, data, stopper: Optional["RestoreBest"], callbacks, **fit_kwargs) -> dict:
    """``model.fit(data, callbacks=callbacks, **fit_kwargs)``'s history, for data already checked to be finite
    (a streaming source checks its blocks itself and raises its own error, which passes through).

    A step that raises on a non-finite value (TensorFlow's ``CheckNumerics``: a NaN from a Cholesky of a Kuu that
    training made singular, say) ends the fit there instead of unwinding through the caller. The stopper records the
    divergence and restores its best check (:meth:`RestoreBest.abort`), the history keeps the epochs that finished,
    its ``"error"`` holds TensorFlow's message, and a warning says so. Without a stopper to go back to the error is
    raised as a ``FloatingPointError`` that says where and why."""
    progress = tf_keras.callbacks.History()
    try:
        model.fit(data, callbacks=[progress] + list(callbacks), **fit_kwargs)
    except tf.errors.InvalidArgumentError as error:
        if not _NON_FINITE.search(str(error.message)) or DATA_ERROR in str(error.message):
            raise  # a shape error, or a stream's bad data (streaming.data_errors names it): not the fit's divergence
        message = _what_tensorflow_said(str(error.message))
        epoch = len(progress.epoch) + fit_kwargs.get("initial_epoch", 0) + 1
        if stopper is None or not stopper.has_best:
            raise FloatingPointError(
                f"the fit met a non-finite value in epoch {epoch} and has no check to go back to (no validation data and "
                f"no guard): {message}"
            ) from error
        stopper.abort()
        best = stopper.best_epoch
        warnings.warn(
            f"the fit met a non-finite value in epoch {epoch} and stopped there; the parameters of its best check "
            f"(epoch {best}) were restored. TensorFlow said: {message}",
            stacklevel=3,
        )
        return {**progress.history, "error": message}
    return dict(progress.history)


class RestoreBest(tf_keras.callbacks.Callback):
    """Early stopping on any score (lower is better) with the best parameters restored.

    ``score()`` is evaluated before training (so a fit that only makes things worse gives back its
    starting point), after every ``every`` epochs, and once more at the end when the last epoch was not a
    check; after ``patience`` checks without improvement training stops. At the end every variable of
    ``module`` (a tf.Module: the network or the DeepGP) takes its value at the best check. ``checks``
    records (epoch, score); ``best_epoch`` is the number of epochs trained at the best check (0 = the
    start); ``restored`` says whether that replaced the final parameters.

    A fit that diverges (a NaN or inf in any floating variable of ``module`` at a check or at the end of an
    epoch) is stopped there without scoring the broken state; its checks record NaN, ``diverged_epoch`` says
    when, and the best check is restored as usual, so what had been learnt before is kept.

    ``label`` names the score in :meth:`summary` (``"validation"``: ``validation_checks``,
    ``best_validation``; stage 2's training-ELBO guard uses ``"negative_elbo"``).

    Not Keras' ``EarlyStopping(restore_best_weights=True)``: that reads a metric from the epoch-end logs and never
    scores the start (its first candidate is the state after epoch 1), whereas this calls ``score()`` itself, checks
    the start (with :meth:`prime`, the state before a separate warm-up fit too), stops on a NaN parameter, snapshots
    the variables of a ``tf.Module`` (the gpflow Parameters) rather than one Keras model's weights, and records the
    checks, ``restored`` and the diverged / restored steps that the fits' histories report.
    """

    def __init__(
        self, score: Callable[[], float], module: tf.Module, every: int = 1, patience: Optional[int] = None, label: str = "validation"
    ):
        super().__init__()
        if every < 1 or (patience is not None and patience < 1):
            raise ValueError(f"every and patience must be ≥ 1, got {every} and {patience}")
        self.score, self.module, self.every, self.patience, self.label = score, module, int(every), patience, label
        self.checks, self.best, self.best_epoch, self.epochs_run = [], np.inf, 0, 0
        self.diverged_epoch: Optional[int] = None
        self.restored = False
        self._best_values, self._since = None, 0
        self._variables: Optional[list] = None  # the module's variables, listed once per fit after its first epoch

    def _module_variables(self) -> list:
        """``module.variables``. Walking a DeepGP's object graph for it can cost more than a small data set's epoch, so
        within a fit the list made at the end of the first epoch (when every variable a first step creates exists)
        is reused; before that, and in every new fit, the graph is walked afresh."""
        return self._variables if self._variables is not None else list(self.module.variables)

    def _finite(self) -> bool:
        return all(np.all(np.isfinite(v.numpy())) for v in self._module_variables() if v.dtype.is_floating)

    def _stop(self) -> None:
        if self.model is not None:
            self.model.stop_training = True

    def _check(self, epoch: int, finite: bool) -> None:
        if not finite:
            self.checks.append((epoch, float("nan")))
            self.diverged_epoch = epoch
            self._stop()
            return
        value = float(self.score())
        self.checks.append((epoch, value))
        if value < self.best:  # NaN never improves
            self.best, self.best_epoch, self._since = value, epoch, 0
            self._best_values = [(v, v.numpy()) for v in self._module_variables()]  # pairs: fits may add variables
        else:
            self._since += 1
            if self.patience is not None and self._since >= self.patience:
                self._stop()

    def prime(self, epoch: int = 0) -> None:
        """Check the current parameters now, before a fit this callback is not part of (stage 2's warm-up),
        labelled ``epoch`` (e.g. minus the warm-up's epochs); the fit's own start is checked as well."""
        self._check(epoch, self._finite())

    def on_train_begin(self, logs=None):
        self._variables = None
        self._check(self.epochs_run, self._finite())  # epochs_run: 0, or the epoch a resumed fit starts at

    def on_epoch_end(self, epoch, logs=None):
        if self._variables is None:
            self._variables = list(self.module.variables)
        self.epochs_run = epoch + 1
        finite = self._finite()
        if (epoch + 1) % self.every == 0 or not finite:
            self._check(epoch + 1, finite)

    def on_train_end(self, logs=None):
        self._variables = None  # the next fit (or prime) lists them afresh
        if self.diverged_epoch is None and self.checks and self.checks[-1][0] != self.epochs_run and self.epochs_run > 0:
            self._check(self.epochs_run, self._finite())  # the final state competes too
        if self.has_best:
            self.restored = self.diverged_epoch is not None or self.best_epoch != self.epochs_run
            self._restore_best()

    @property
    def has_best(self) -> bool:
        """Whether a check has been scored, so there are parameters to go back to."""
        return self._best_values is not None

    def _restore_best(self) -> None:
        for variable, value in self._best_values:
            variable.assign(value)

    def abort(self) -> None:
        """The fit raised inside an epoch (a step met a non-finite value: a Cholesky that failed, say) and Keras
        will not call ``on_train_end``: record the divergence in the epoch that was running and restore the best
        check, as at the end of a fit that diverged."""
        self.diverged_epoch = self.epochs_run + 1
        self.checks.append((self.diverged_epoch, float("nan")))
        self._variables = None
        if self.has_best:
            self.restored = True
            self._restore_best()

    def summary(self, steps_per_epoch: int) -> dict:
        return {
            f"{self.label}_checks": [(e * steps_per_epoch, v) for e, v in self.checks],
            "best_step": self.best_epoch * steps_per_epoch,
            "steps_run": self.epochs_run * steps_per_epoch,
            f"best_{self.label}": self.best,
            "diverged_step": None if self.diverged_epoch is None else self.diverged_epoch * steps_per_epoch,
            "restored": self.restored,
            "restored_step": self.best_epoch * steps_per_epoch if self.restored else None,
        }
