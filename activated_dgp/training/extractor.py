"""Stage 2 with a feature extractor trained too: a network's layers in front of the converted dense head
(convolutional layers, say) are fitted together with the DGP on the ELBO.

:func:`activated_dgp.dgp_from_keras` converts a chain of Dense layers. A classifier whose dense head sits on a
feature extractor g (e.g. Conv2D layers) converts its head on the features g(x); stage 2 can then leave g fixed
(:func:`~activated_dgp.training.train_dgp` on the features) or train it with the DGP, which is what
:func:`train_dgp_with_extractor` does. On rotated MNIST the second keeps the ADGP's lead under dataset shift and
the first does not (the rotated-MNIST study; Dutordoir et al., 2021, Sec. 5.3, fine-tune the conv layers).
"""

from typing import Callable, Optional, Sequence

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from ..deep.diagnostics import elbo_terms
from ..deep.far_field import has_far_field, refit_far_field
from ..deep.prediction import _checked_targets
from ..deep.sampling import check_dgp
from ..validation import _rows, check_targets, dgp_input_width
from .callbacks import LearningRateRamp, RestoreBest, fit_keeping_the_best, without_retracing_warnings
from .fitters import guard_rows, stage2_stopper, validation_nlpd
from .schedule import TrainingSchedule

__all__ = ["ExtractorDGP", "extracted_features", "train_dgp_with_extractor"]


class ExtractorDGP(tf_keras.Model):
    """A feature extractor g followed by a DeepGP, fitted as one tf-keras model on

        −ELBO / N = −(1/N) [ Σ_i E_q[log p(y_i | f_L(g(x_i)))] − Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)] ]

    (Salimbeni & Deisenroth, 2017, eq. 4, with the inputs g(x)), minibatch by minibatch, over the DGP's trainable
    variables and g's (g's output is cast to gpflow's float). Its variables are g's and the DGP layers', so a
    :class:`~activated_dgp.training.RestoreBest` on it restores both.

    A training wrapper: save what it trains, the DGP (:func:`activated_dgp.save_dgp`) and g (tf-keras), each on its
    own; ``save`` and ``get_config`` say so instead of writing a model that cannot be rebuilt."""

    def __init__(self, dgp: gpflux.models.DeepGP, extractor: tf_keras.layers.Layer):
        super().__init__()
        self.deep_gp, self.extractor = dgp, extractor
        # Keras' weights files walk layers, not tf.Modules: without the DGP's layers listed here a weights file
        # would load the extractor and silently leave the DGP as built (tests/test_persistence.py)
        self.dgp_layers, self.likelihood_layer = list(dgp.f_layers), dgp.likelihood_layer
        self.loss_tracker = tf_keras.metrics.Mean(name="loss", dtype="float64")

    @property
    def metrics(self):
        return [self.loss_tracker]  # reset every epoch: the logged loss is the epoch's mean

    def call(self, inputs, training=False):
        return tf.cast(self.extractor(inputs, training=training), gpflow.default_float())

    def train_step(self, data):
        x_batch, y_batch = data
        variables = list(self.deep_gp.trainable_variables) + list(self.extractor.trainable_variables)
        with tf.GradientTape() as tape:
            loss = -self.deep_gp.elbo((self(x_batch, training=True), y_batch)) / self.deep_gp.num_data
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    def get_config(self):
        raise NotImplementedError(_NOT_SAVED)

    def save(self, *args, **kwargs):
        raise NotImplementedError(_NOT_SAVED)


_NOT_SAVED = ("ExtractorDGP is a training wrapper and is not saved as a model: save its DeepGP with "
              "activated_dgp.save_dgp and its extractor with tf-keras (weights or .keras), each on its own")


def extracted_features(extractor: Callable, X, batch_size: int = 1024) -> np.ndarray:
    """g(X) in batches of ``batch_size`` (inference mode), as a float matrix of gpflow's default float."""
    out = [np.asarray(extractor(X[start : start + batch_size], training=False)) for start in range(0, len(X), batch_size)]
    features = np.concatenate(out).astype(gpflow.default_float())
    if features.ndim != 2:
        raise ValueError(f"the extractor must map each input to a feature vector ([N, D]); it gives shape {features.shape}")
    return features


def _check_inputs(X, name: str) -> np.ndarray:
    """The extractor's inputs [N, ...] (images, say): N ≥ 1 finite numeric rows; else a ValueError naming the rows."""
    X = np.asarray(X)
    if X.ndim < 2 or len(X) == 0:
        raise ValueError(f"{name} must hold N ≥ 1 inputs along its first axis ([N, ...]), got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number):
        raise ValueError(f"{name} must be numbers, got dtype {X.dtype}")
    bad = ~np.all(np.isfinite(X.reshape(len(X), -1)), axis=1)
    if np.any(bad):
        raise ValueError(f"{name} contains NaN or inf in rows {_rows(bad)}")
    return X


def _check_widths(dgp: gpflux.models.DeepGP, extractor, X: np.ndarray) -> None:
    """The DGP's own state is valid and g's features have its input width."""
    check_dgp(dgp)
    width, got = dgp_input_width(dgp), extracted_features(extractor, X[:1]).shape[1]
    if width is not None and got != width:
        raise ValueError(f"the extractor's features must have the DGP's input width {width}, got width {got}")


def train_dgp_with_extractor(
    dgp: gpflux.models.DeepGP,
    extractor: tf_keras.layers.Layer,
    X,
    Y,
    schedule: Optional[TrainingSchedule] = None,
    *,
    validation_data=None,
    validation_samples: int = 16,
    seed: int = 0,
    guard: bool = True,
    callbacks: Sequence[tf_keras.callbacks.Callback] = (),
) -> dict:
    """Stage 2 over the DGP's parameters and the extractor g's: maximise the ELBO of the DGP on the inputs g(x)
    (:class:`ExtractorDGP`) with Adam at ``schedule.learning_rate`` (the schedule's ramp and callbacks too), on
    minibatches of ``schedule.batch_size`` shuffled with ``seed``, for ``schedule.epochs`` epochs. ``dgp`` (whose
    input width is g's output width and whose ``num_data`` is N) and ``extractor`` are changed in place; g's
    layers with ``trainable = False`` stay as they are.

    Like :func:`~activated_dgp.training.train_dgp`, it never hands back parameters worse than its start on the
    objective it can see: with ``validation_data`` = (X_val, Y_val), the validation NLPD of the DGP on g(X_val)
    (:func:`~activated_dgp.training.validation_nlpd`, ``validation_samples`` seeded samples) is checked before
    training and every ``schedule.validation_every`` epochs, training stops after ``schedule.patience`` checks
    without improvement, and the best check's parameters of both are restored; without it the ``guard`` scores the
    training −ELBO on a fixed seeded subset of the training inputs (:func:`~activated_dgp.training.guard_rows`)
    with one fixed draw, through g as it is at each check. A far-field residual on the output layer is refitted to
    the final features (:func:`activated_dgp.deep.far_field.refit_far_field`). Returns the Keras history with the
    checks' summary (``best_step``, ``restored``, …; ``check_objective`` names the score). ``callbacks``: more
    tf-keras callbacks for the fit of the :class:`ExtractorDGP` (``ModelCheckpoint`` with ``save_weights_only``, say),
    run before the early-stopping check.
    """
    schedule = schedule or TrainingSchedule()
    if not callable(extractor):
        raise TypeError(f"extractor must be a tf-keras layer or model (a callable on the inputs), got {type(extractor).__name__}")
    X = _check_inputs(X, "X")
    Y = check_targets(Y, "Y")
    if len(Y) != len(X):
        raise ValueError(f"X and Y must have the same N, got {len(X)} and {len(Y)} rows")
    if dgp.num_data is not None and dgp.num_data != len(X):
        raise ValueError(f"the data have N = {len(X)} rows but the DGP was built with num_data = {dgp.num_data}; "
                         "the ELBO must be scaled by the true N")
    _check_widths(dgp, extractor, X)
    _checked_targets(dgp, Y, len(X))
    model = ExtractorDGP(dgp, extractor)
    model(X[:1])  # built before the fit: Keras' BackupAndRestore restores into a built model only
    steps_per_epoch = schedule.steps_per_epoch(len(X))
    stopper = _stopper(model, X, Y, schedule, validation_data, validation_samples, seed, guard, steps_per_epoch)
    model.compile(tf_keras.optimizers.Adam(schedule.learning_rate))
    ramp = [LearningRateRamp(schedule.learning_rate, schedule.ramp_steps)] if schedule.ramp_steps > 0 else []
    callbacks = ramp + schedule.callbacks() + list(callbacks) + ([stopper] if stopper is not None else [])
    batch = min(schedule.batch_size, len(X))
    data = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(len(X), seed=seed, reshuffle_each_iteration=True).batch(batch)
    with without_retracing_warnings():
        record = fit_keeping_the_best(model, data, stopper, callbacks, epochs=schedule.epochs, verbose=schedule.keras_verbose)
    if stopper is not None:
        record.update(stopper.summary(steps_per_epoch))
        record["check_objective"] = stopper.label
    if has_far_field(dgp):  # the features moved: the residual's ball is refitted to them
        refit_far_field(dgp, extracted_features(extractor, X))
    return record


def _stopper(model, X, Y, schedule, validation_data, validation_samples, seed, guard, steps_per_epoch) -> Optional[RestoreBest]:
    """:func:`~activated_dgp.training.fitters.stage2_stopper` with the validation NLPD through g, else the guard's
    training −ELBO through g (on :func:`~activated_dgp.training.guard_rows`, g as it is at each check)."""
    dgp, extractor = model.deep_gp, model.extractor
    validation_score = None
    if validation_data is not None:
        X_val, Y_val = _check_inputs(validation_data[0], "validation X"), check_targets(validation_data[1], "validation Y")
        if len(X_val) != len(Y_val):
            raise ValueError(f"validation X and Y must have the same N, got {len(X_val)} and {len(Y_val)} rows")
        validation_score = lambda: validation_nlpd(dgp, extracted_features(extractor, X_val), Y_val, validation_samples, 0)  # noqa: E731

    def guard_score():
        X_rows, Y_rows = guard_rows((X, Y), seed)
        return lambda: -elbo_terms(dgp, extracted_features(extractor, X_rows), Y_rows, num_samples=1, seed=seed).elbo

    return stage2_stopper(model, schedule, steps_per_epoch, validation_score, guard_score if guard else None)
