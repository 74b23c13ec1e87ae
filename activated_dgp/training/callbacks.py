"""The tf-keras callbacks of the library's fits: a progress bar over epochs (:class:`FitProgress`), a per-step
learning-rate warm-up (:class:`LearningRateRamp`), early stopping on any score with the best parameters restored, the start's
included (:class:`RestoreBest`, Keras' ``EarlyStopping`` inside), and a filter for TensorFlow's retracing warning (:func:`without_retracing_warnings`)."""

from __future__ import annotations

import contextlib
import logging
import math
import re
import warnings
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from ..data.streaming import DATA_ERROR
from ..deep.layers import build_optimizer_state

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
    build_optimizer_state(model)
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
    """Early stopping on any score (lower is better) with the best parameters restored, the start included: Keras'
    ``EarlyStopping(restore_best_weights=True, baseline=<the start's score>, patience=patience)`` stops the fit and
    restores its best epoch; this callback computes the score it reads and keeps what it lacks (below).

    ``score()`` is evaluated before training (so a fit that only makes things worse gives back its starting point),
    after every ``every`` epochs, and once more at the end when the last epoch was not a check; each value after the
    start is handed to the EarlyStopping as that epoch's ``label`` metric, and after ``patience`` checks that do not
    beat the best so far, the start's score included, training stops (Keras' rule: never after the first epoch, so a
    ``patience`` of 1 checked every epoch runs two). At the end the model holds the parameters of the best check:
    Keras restores its best epoch, and when no epoch beat the start, the variables of ``module`` (a tf.Module: the
    network or the DeepGP) take their values at the start. ``checks`` records (epoch, score); ``best_epoch`` is the
    number of epochs trained at the best check (0 = the start); ``restored`` says whether that replaced the final
    parameters.

    A check never scores non-finite parameters (a NaN or inf in a floating variable of ``module``, where a Cholesky
    would raise): it records NaN, ``diverged_epoch`` says when, the fit stops and the best check is restored as
    usual, so what had been learnt before is kept. Keras' ``TerminateOnNaN`` (in
    :meth:`~activated_dgp.training.TrainingSchedule.callbacks`) stops a fit in the epoch whose loss turns NaN, whose
    end is then checked.

    ``label`` names the score in :meth:`summary` (``"validation"``: ``validation_checks``, ``best_validation``; stage
    2's training-ELBO guard uses ``"negative_elbo"``).

    What ``EarlyStopping`` lacks, kept here: it reads a metric from the epoch's logs and calls nothing, so the score
    (a validation NLPD of a DGP, say) is computed here, on check epochs only; its candidates are the epochs, never the
    start: ``baseline`` only decides when the patience restarts, and a fit whose every epoch scores worse than the start
    gets back its best epoch, worse than the start. Measured on a 16-unit network scored by the squared distance of
    its weights from the start (worse after every epoch): Keras alone handed back epoch 1's weights, at distance 2.3
    and a validation MSE of 1.82 against the start's 1.70; with this callback, the start's weights exactly. So the
    start's parameters are kept here (with :meth:`prime`, also those before a separate warm-up fit) and restored when
    no epoch beat them; and so is the record of the checks, ``restored`` and the diverged / restored steps that the
    fits' histories report.
    """

    def __init__(
        self, score: Callable[[], float], module: tf.Module, every: int = 1, patience: Optional[int] = None, label: str = "validation"
    ):
        super().__init__()
        if every < 1 or (patience is not None and patience < 1):
            raise ValueError(f"every and patience must be ≥ 1, got {every} and {patience}")
        self.score, self.module, self.every, self.patience, self.label = score, module, int(every), patience, label
        self.early_stopping = tf_keras.callbacks.EarlyStopping(
            monitor=label, mode="min", patience=math.inf if patience is None else int(patience), restore_best_weights=True
        )
        self.checks, self.epochs_run = [], 0
        self.diverged_epoch: Optional[int] = None
        self.restored = False
        self._start: Optional[tuple] = None  # (score, epoch, [(variable, value)]): the best check before the fit's epochs
        self._finished = False  # a fit ended: the next start check begins a new start (the last fit's best, restored)
        self._variables: Optional[list] = None  # the module's variables, listed once per fit after its first epoch

    def set_model(self, model):
        super().set_model(model)
        self.early_stopping.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.early_stopping.set_params(params)

    def _module_variables(self) -> list:
        """``module.variables``. Walking a DeepGP's object graph for it can cost more than a compiled score (about
        25 ms for a three-layer DGP on a busy 2-core CPU), so within a fit the list made at the end of the first epoch (when every variable a first step
        creates exists) is reused; before that, and in every new fit, the graph is walked afresh."""
        return self._variables if self._variables is not None else list(self.module.variables)

    def _scored(self, epoch: int) -> Optional[float]:
        """The score of the current parameters, recorded as a check at ``epoch``; None (a NaN check, the fit
        diverged and stops) when a parameter is not finite."""
        if not all(np.all(np.isfinite(v.numpy())) for v in self._module_variables() if v.dtype.is_floating):
            self.checks.append((epoch, float("nan")))
            self.diverged_epoch = epoch
            if self.model is not None:
                self.model.stop_training = True
            return None
        value = float(self.score())
        self.checks.append((epoch, value))
        return value

    def _check_start(self, epoch: int) -> None:
        if self._finished:
            self._start, self._finished = None, False
        value = self._scored(epoch)
        if value is not None and (self._start is None or value < self._start[0]):  # NaN never improves
            self._start = (value, epoch, [(v, v.numpy()) for v in self._module_variables()])  # pairs: fits may add variables

    def _check_epoch(self, epoch: int) -> None:
        value = self._scored(epoch)
        if value is not None:
            self.early_stopping.on_epoch_end(epoch - 1, {self.label: value})

    def prime(self, epoch: int = 0) -> None:
        """Check the current parameters now, before a fit this callback is not part of (stage 2's warm-up),
        labelled ``epoch`` (e.g. minus the warm-up's epochs); the fit's own start is checked as well."""
        self._check_start(epoch)

    def on_train_begin(self, logs=None):
        self._variables = None
        self.early_stopping.on_train_begin(logs)
        self._check_start(self.epochs_run)  # epochs_run: 0, or the epoch a resumed fit starts at
        self.early_stopping.baseline = None if self._start is None else self._start[0]

    def on_epoch_end(self, epoch, logs=None):
        if self._variables is None:
            self._variables = list(self.module.variables)
        self.epochs_run = epoch + 1
        if (epoch + 1) % self.every == 0:
            self._check_epoch(epoch + 1)

    def on_train_end(self, logs=None):
        if self.diverged_epoch is None and self.checks and self.checks[-1][0] != self.epochs_run and self.epochs_run > 0:
            self._check_epoch(self.epochs_run)  # the final state competes too
        self._finish()

    @property
    def best(self) -> float:
        """The best score checked (the start's, or a better epoch's); inf before any check."""
        start = np.inf if self._start is None else self._start[0]
        return min(start, getattr(self.early_stopping, "best", np.inf))

    def _start_is_best(self) -> bool:
        """Whether the start was checked and no epoch beat it (a tie keeps the start)."""
        return self._start is not None and not getattr(self.early_stopping, "best", np.inf) < self._start[0]

    @property
    def best_epoch(self) -> int:
        """The number of epochs trained at the best check (the start's label when no epoch beat it)."""
        if self._start_is_best():
            return self._start[1]
        return self.early_stopping.best_epoch + 1 if self.early_stopping.best_weights is not None else 0

    @property
    def has_best(self) -> bool:
        """Whether a check has been scored, so there are parameters to go back to."""
        return self._start is not None or self.early_stopping.best_weights is not None

    def _finish(self) -> None:
        """Keras restores its best epoch; the start's parameters replace them when no epoch beat the start."""
        self._variables, self._finished = None, True  # the next fit (or prime) lists them afresh
        if not self.has_best:
            return
        self.restored = self.diverged_epoch is not None or self.best_epoch != self.epochs_run
        self.early_stopping.on_train_end()
        if self._start_is_best():
            for variable, value in self._start[2]:
                variable.assign(value)

    def abort(self) -> None:
        """The fit raised inside an epoch (a step met a non-finite value: a Cholesky that failed, say) and Keras
        will not call ``on_train_end``: record the divergence in the epoch that was running and restore the best
        check, as at the end of a fit that diverged."""
        self.diverged_epoch = self.epochs_run + 1
        self.checks.append((self.diverged_epoch, float("nan")))
        self._finish()

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
