"""The fitters: stage 1 (:func:`train_network`, the network twin on MSE / cross-entropy) and stage 2
(:func:`train_dgp`, the ELBO of a DeepGP, in memory or streamed, on one device or under a
``tf.distribute.Strategy``, with warm-up and resume), their scores (:func:`evaluate_elbo`,
:func:`validation_nlpd`) and stage 2's training-ELBO guard (:func:`guard_rows`, :func:`negative_elbo_score`)."""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Optional, Sequence

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from ..deep.diagnostics import elbo_terms, seeded_elbo
from .distributed import check_global_batch, copy_values, distributed_dataset, replicate
from ..deep.builders import network_loss, output_width
from ..deep.layers import build_optimizer_state
from ..deep.prediction import _checked_targets, predictive_log_density, seeded_log_density
from ..deep.sampling import check_dgp
from ..data.streaming import ArraySource, CsvSource, DatasetSource, as_source, data_errors, global_batches
from ..validation import check_matrix, check_targets, dgp_input_width
from .callbacks import LearningRateRamp, RestoreBest, fit_keeping_the_best, without_retracing_warnings
from .schedule import TrainingSchedule

__all__ = [
    "train_network",
    "train_dgp",
    "validation_nlpd",
    "evaluate_elbo",
    "guard_rows",
    "negative_elbo_score",
    "GUARD_ROWS",
    "GUARD_MIN_STEPS",
]


def _check_data(X, Y):
    """(X [N, D], Y [N, P]) as finite matrices of gpflow's default float with N ≥ 1; else a ValueError."""
    X, Y = check_matrix(X, "X"), check_targets(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X must be [N, D] and Y [N, P] with the same N, got {X.shape} and {Y.shape}")
    return X, Y


def _check_model_inputs(dgp: gpflux.models.DeepGP, X: np.ndarray, Y: Optional[np.ndarray] = None) -> None:
    """The DGP's own state is valid (:func:`~activated_dgp.validation.check_dgp`), X has its input width, and Y
    (when given) fits its likelihood: the output layer's P columns for real targets, one column of 0/1 labels or
    class indices 0..C−1 otherwise."""
    check_dgp(dgp)
    width = dgp_input_width(dgp)
    if width is not None and X.shape[1] != width:
        raise ValueError(f"X must have the DGP's input width {width}, got shape {X.shape}")
    if Y is not None:
        _checked_targets(dgp, Y, len(X))


def _early_stopping(schedule: TrainingSchedule, score: Optional[Callable[[], float]], module) -> Optional[RestoreBest]:
    """A :class:`RestoreBest` on ``score`` (None without validation data, which a ``patience`` needs)."""
    if score is None:
        if schedule.patience is not None:
            raise ValueError("the schedule asks for early stopping (patience) but no validation_data was given")
        return None
    return RestoreBest(score, module, every=schedule.validation_every, patience=schedule.patience)


#: Rows of stage 2's training-ELBO guard: a seeded subset of at most this many training rows.
GUARD_ROWS = 2048
#: The guard checks at most once per this many steps (and at least every ``validation_every`` epochs): a check is
#: an eager pass over ≤ GUARD_ROWS rows; checked every 3-step epoch of N = 300 the guarded fit took about 5× the
#: unguarded one, 1.45× with this cap (the stage-2 divergence benchmark).
GUARD_MIN_STEPS = 100


def guard_rows(data, seed: int = 0, count: int = GUARD_ROWS):
    """The fixed training rows (X [n, D], Y [n, P]), n = min(N, ``count``), on which stage 2's guard scores
    the ELBO: drawn without replacement with ``seed`` from in-memory (X, Y); from a block source (arrays,
    memmaps, CSV shards) from at most four seeded blocks (:meth:`~activated_dgp.data.streaming.ArraySource.sample_rows`);
    from a ``tf.data.Dataset`` its first ``count`` rows."""
    if isinstance(data, tuple):
        X, Y = data
        rows = np.sort(np.random.default_rng(seed).choice(len(X), min(count, len(X)), replace=False))
        return X[rows], Y[rows]
    return data.sample_rows(count, seed)


def negative_elbo_score(dgp: gpflux.models.DeepGP, X, Y, seed: int = 0) -> Callable[[], float]:
    """The score of stage 2's guard: −ELBO on the fixed rows (X, Y), the data term scaled to the model's N,

        −ELBO = −(N / n) Σ_(i ≤ n) E_q[log p(y_i | f_L(x_i))] + Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)]

    (Salimbeni & Deisenroth, 2017, eq. 4, on a subset), by :func:`activated_dgp.deep.diagnostics.elbo_terms` with one
    seeded draw of the hidden layers (the same draws at every check, so that checks differ by the parameters
    only; a one-layer model needs none and the score is gpflux's ``DeepGP.elbo`` on these rows)."""
    return compiled_after_checks(
        lambda: -elbo_terms(dgp, X, Y, num_samples=1, seed=seed).elbo,
        lambda: _negative_mean(seeded_elbo(dgp, X, Y, num_samples=1, seed=seed)),
    )


def _negative_mean(score: Callable[[], object]) -> Callable[[], float]:
    """−mean of what ``score()`` returns (a float, or an array of per-point log densities), as a float."""
    return lambda: -float(np.mean(score()))


#: Checks a fit scores with the eager function before it compiles the score: a trace costs about as much as several
#: eager checks, so a short fit (a test's, a few checks) stays eager and a long one (a UCI cell's stage 2: 40–200
#: checks) pays one trace.
EAGER_CHECKS = 8


def compiled_after_checks(eager: Callable[[], float], compile_score: Callable[[], Callable[[], float]],
                          eager_checks: Optional[int] = None) -> Callable[[], float]:
    """A score that calls ``eager`` for its first ``eager_checks`` calls (default :data:`EAGER_CHECKS`), then the
    function ``compile_score()`` returns (built once, at the first call after those). For a compiled twin of the eager
    function on the same seeded draws (:func:`activated_dgp.deep.prediction.seeded_log_density`,
    :func:`activated_dgp.deep.diagnostics.seeded_elbo`), whose values equal the eager ones up to rounding."""
    calls, compiled = 0, None
    eager_checks = EAGER_CHECKS if eager_checks is None else eager_checks

    def score() -> float:
        nonlocal calls, compiled
        calls += 1
        if calls <= eager_checks:
            return eager()
        if compiled is None:
            compiled = compile_score()
        return compiled()

    return score


def train_network(
    network: tf_keras.Model, X, Y, likelihood="gaussian", schedule: Optional[TrainingSchedule] = None, *, validation_data=None,
    loss: Optional[tf_keras.losses.Loss] = None,
) -> dict:
    """Stage 1: ordinary ``model.fit`` of the twin (or any network) on MSE / cross-entropy, or on ``loss`` when given
    (a tf-keras loss of (Y, network outputs), e.g. a Gaussian negative log-likelihood of a mean-and-variance network).

    With ``validation_data`` = (X_val, Y_val) the training loss on it is checked every
    ``schedule.validation_every`` epochs, the fit stops after ``schedule.patience`` checks without
    improvement, and the best weights are restored (:class:`RestoreBest`); the history then also holds
    ``validation_checks``, ``best_step`` and ``steps_run``."""
    schedule = schedule or TrainingSchedule()
    X, Y = _check_data(X, Y)
    width = getattr(network, "input_shape", None)
    if isinstance(width, tuple) and width and width[-1] is not None and width[-1] != X.shape[1]:
        raise ValueError(f"X must have the network's input width {width[-1]}, got shape {X.shape}")
    loss = network_loss(likelihood) if loss is None else loss
    output_width(likelihood, Y)  # labels fit the likelihood (0/1, class indices)
    network.compile(tf_keras.optimizers.Adam(schedule.learning_rate), loss=loss)
    score = None
    if validation_data is not None:
        X_val, Y_val = _check_data(*validation_data)
        score = lambda: float(loss(Y_val, network(X_val, training=False)))  # noqa: E731
    stopper = _early_stopping(schedule, score, network)
    callbacks = schedule.callbacks() + ([stopper] if stopper is not None else [])
    build_optimizer_state(network)
    with without_retracing_warnings():
        history = network.fit(X, Y, batch_size=schedule.batch_size, epochs=schedule.epochs, callbacks=callbacks, verbose=schedule.keras_verbose)
    record = dict(history.history)
    if stopper is not None:
        record.update(stopper.summary(schedule.steps_per_epoch(len(X))))
    return record


def validation_nlpd(dgp: gpflux.models.DeepGP, X_val, Y_val, num_samples: int = 16, seed: int = 0) -> float:
    """−mean log p(y | x) on held-out (X_val, Y_val) by :func:`activated_dgp.predictive_log_density` with
    ``num_samples`` seeded samples: the score of stage 2's early stopping (:func:`train_dgp`)."""
    return -float(np.mean(predictive_log_density(dgp, X_val, Y_val, num_samples=num_samples, seed=seed)))


def train_dgp(
    dgp: gpflux.models.DeepGP,
    X,
    Y=None,
    schedule: Optional[TrainingSchedule] = None,
    *,
    validation_data=None,
    validation_samples: int = 16,
    warmup_steps: int = 0,
    callbacks: Sequence[tf_keras.callbacks.Callback] = (),
    strategy: Optional[tf.distribute.Strategy] = None,
    num_data: Optional[int] = None,
    seed: int = 0,
    optimizer: Optional[tf_keras.optimizers.Optimizer] = None,
    initial_epoch: int = 0,
    guard: bool = True,
    guard_min_steps: int = GUARD_MIN_STEPS,
) -> dict:
    """Stage 2: maximise the ELBO over the DGP's parameters (gpflux's keras training model).

    Stage 2 never hands back parameters worse than its start on the objective it can see: with
    ``validation_data`` the validation NLPD (below); without, the ``guard`` (on by default) scores the
    training −ELBO on a fixed seeded subset of at most :data:`GUARD_ROWS` training rows, scaled to N, with
    fixed draws (:func:`negative_elbo_score`), before training (before the warm-up, if any), every
    ``schedule.validation_every`` epochs but at most once per ``guard_min_steps`` steps, and at the end,
    and restores the best check (:class:`RestoreBest`).
    The history then holds ``negative_elbo_checks`` [(step, −ELBO)], ``best_negative_elbo``, ``best_step``,
    ``restored`` (whether the final parameters were replaced) and ``restored_step``; ``check_objective``
    names the score. A check costs one eager forward pass over ≤ 2048 rows (measured in
    the stage-2 divergence benchmark). Streaming data
    are covered (the rows come from a few seeded blocks, or a ``tf.data.Dataset``'s first rows), and so
    is a ``strategy`` (the mirrored copy is scored). ``guard=False`` trains without it.

    :param guard_min_steps: the guard checks at most once per this many optimiser steps (default
        :data:`GUARD_MIN_STEPS`; 1 checks every ``validation_every`` epochs, e.g. to measure what the cap saves).
        Validation-data early stopping ignores it.

    :param validation_data: (X_val, Y_val): early stopping on the validation NLPD, −mean log p(y|x)
        by :func:`activated_dgp.predictive_log_density` with ``validation_samples`` samples and a fixed
        seed (so that checks differ by the parameters only), checked before training and every
        ``schedule.validation_every`` epochs; the best parameters are restored (:class:`RestoreBest`).
    :param warmup_steps: first train only q(u), the kernel variances and the likelihood for about this
        many steps, holding the inducing directions W and the lengthscales fixed; then everything.
        Early stopping covers the second phase (its first check is the state after the warm-up).
    :param callbacks: more tf-keras callbacks for the (second-phase) fit, e.g. progress or diagnostics.
    :param optimizer: the optimiser of the (second-phase) fit; default a new ``Adam(schedule.learning_rate)``.
        To resume an interrupted fit pass the one saved with it (:func:`activated_dgp.load_optimizer`), so
        that Adam's moments, step count and scheduled learning rate continue (a resumed optimiser still
        within ``schedule.ramp_steps`` continues the ramp; a new one passed in is used as given, unramped).
    :param initial_epoch: the epoch to resume at (Keras' ``initial_epoch``; e.g. ``load_training_state(dir)["epoch"]``
        of a :class:`activated_dgp.DGPCheckpoint`): the fit runs epochs ``initial_epoch`` … ``schedule.epochs``
        − 1, and a resumed fit (``initial_epoch`` > 0) skips the warm-up, which belongs to its start.

    Data beyond memory (:mod:`activated_dgp.data.streaming`): ``X`` may also be a ``tf.data.Dataset`` of
    (x, y) pairs (``Y`` None, ``num_data`` = its true N), an ``ArraySource`` / ``CsvSource``, or a
    ``np.memmap`` pair; these stream in global batches shuffled with ``seed``, in constant memory. The
    ELBO is always scaled by the model's ``num_data``, which must equal the data's N.

    :param strategy: a ``tf.distribute.Strategy`` (MirroredStrategy, MultiWorkerMirroredStrategy):
        data-parallel training of a mirrored copy of ``dgp``, written back at the end; the global batch
        ``schedule.batch_size`` is split equally over the replicas (:mod:`activated_dgp.training.distributed`
        explains the loss scaling). ``dgp`` itself may be built outside the strategy's scope.
    """
    schedule = schedule or TrainingSchedule()
    if isinstance(guard_min_steps, bool) or int(guard_min_steps) != guard_min_steps or guard_min_steps < 1:
        raise ValueError(f"guard_min_steps must be an integer ≥ 1, got {guard_min_steps!r}")
    if isinstance(initial_epoch, bool) or int(initial_epoch) != initial_epoch or not 0 <= initial_epoch <= schedule.epochs:
        raise ValueError(f"initial_epoch must be an integer in [0, epochs = {schedule.epochs}], got {initial_epoch!r}")
    if strategy is not None:
        check_global_batch(schedule.batch_size, strategy)
        if optimizer is not None:
            raise ValueError("optimizer= cannot be combined with a strategy: the optimiser is built in the strategy's scope")
    data = _training_data(dgp, X, Y, num_data, strategy)
    if isinstance(data, tuple):
        _check_model_inputs(dgp, *data)
    if strategy is not None:
        if warmup_steps > 0:
            raise ValueError("warmup_steps is not supported with a strategy (trainable flags of mirrored variables)")
        replica = replicate(dgp, strategy)
        record = _train_dgp(replica, data, schedule, validation_data, validation_samples, 0, callbacks, strategy, seed, None, int(initial_epoch), guard,
                            guard_min_steps)
        copy_values(replica, dgp)
        return record
    return _train_dgp(dgp, data, schedule, validation_data, validation_samples, warmup_steps, callbacks, None, seed, optimizer, int(initial_epoch), guard,
                      guard_min_steps)


def _training_data(dgp, X, Y, num_data, strategy):
    """(X, Y) checked arrays for the original in-memory path, or a streaming source."""
    streaming = isinstance(X, (tf.data.Dataset, ArraySource, CsvSource, DatasetSource, np.memmap)) or strategy is not None
    if not streaming:
        if num_data is not None and num_data != len(X):
            raise ValueError(f"num_data is {num_data} but X has {len(X)} rows")
        return _check_data(X, Y)
    source = as_source(
        X, Y, num_data=num_data if num_data is not None else (dgp.num_data if isinstance(X, tf.data.Dataset) else None),
        input_dim=_input_dim(dgp),
    )
    if dgp.num_data is not None and source.num_data != dgp.num_data:
        raise ValueError(
            f"the data have N = {source.num_data} rows but the DGP was built with num_data = {dgp.num_data}; "
            "the ELBO must be scaled by the true N"
        )
    return source


def _input_dim(dgp) -> Optional[int]:
    """D of the first layer's inputs when the kernel or inducing points say it (else None)."""
    layer = dgp.f_layers[0]
    kernel = getattr(layer.kernel, "kernel", layer.kernel)
    if isinstance(getattr(kernel, "input_dim", None), int):
        return kernel.input_dim
    inducing = getattr(layer.inducing_variable, "inducing_variable", layer.inducing_variable)
    Z = getattr(inducing, "Z", None)
    return int(Z.shape[-1]) if Z is not None else None


def _num_rows(data) -> int:
    return len(data[0]) if isinstance(data, tuple) else data.num_data


def stage2_stopper(
    module, schedule: TrainingSchedule, steps_per_epoch: int, validation_score: Optional[Callable[[], float]] = None,
    guard_score: Optional[Callable[[], Callable[[], float]]] = None, guard_min_steps: int = GUARD_MIN_STEPS,
) -> Optional[RestoreBest]:
    """Stage 2's :class:`RestoreBest` on ``module``: early stopping on ``validation_score`` (the validation NLPD) when
    there is one, checked every ``validation_every`` epochs with the schedule's ``patience``; else, when
    ``guard_score`` (a factory of the training −ELBO score, called only here) is given, the guard on it, checked every
    ``validation_every`` epochs but at most once per ``guard_min_steps`` steps; else None. A ``patience`` without a
    validation score is an error. :func:`train_dgp` and :func:`~activated_dgp.training.train_dgp_with_extractor` share it."""
    if validation_score is not None:
        return _early_stopping(schedule, validation_score, module)
    _early_stopping(schedule, None, module)  # a patience without validation data is an error
    if guard_score is None:
        return None
    every = max(schedule.validation_every, math.ceil(guard_min_steps / steps_per_epoch))
    return RestoreBest(guard_score(), module, every=every, label="negative_elbo")


def _stage2_stopper(dgp, data, schedule, validation_data, validation_samples, guard: bool, seed: int, steps_per_epoch: int,
                    guard_min_steps: int = GUARD_MIN_STEPS) -> Optional[RestoreBest]:
    """:func:`stage2_stopper` with the validation NLPD of ``validation_data`` or the guard's −ELBO
    (:func:`negative_elbo_score` on :func:`guard_rows` of ``data``)."""
    validation_score = None
    if validation_data is not None:
        X_val, Y_val = _check_data(*validation_data)
        _check_model_inputs(dgp, X_val, Y_val)
        validation_score = compiled_after_checks(
            lambda: validation_nlpd(dgp, X_val, Y_val, validation_samples, 0),
            lambda: _negative_mean(seeded_log_density(dgp, X_val, Y_val, validation_samples, 0)),
        )
    guard_score = (lambda: negative_elbo_score(dgp, *guard_rows(data, seed), seed)) if guard else None
    return stage2_stopper(dgp, schedule, steps_per_epoch, validation_score, guard_score, guard_min_steps)


def _train_dgp(dgp, data, schedule, validation_data, validation_samples, warmup_steps, callbacks, strategy, seed, optimizer, initial_epoch, guard=True,
               guard_min_steps: int = GUARD_MIN_STEPS) -> dict:
    record: dict = {}
    stopper = _stage2_stopper(dgp, data, schedule, validation_data, validation_samples, guard, seed, _steps_per_epoch(schedule, data, strategy),
                              guard_min_steps)
    if stopper is not None:
        stopper.epochs_run = initial_epoch
    if warmup_steps > 0 and initial_epoch == 0:
        frozen = [layer.inducing_variable for layer in dgp.f_layers]
        frozen += [getattr(layer.kernel, "kernel", layer.kernel).lengthscales for layer in dgp.f_layers if hasattr(getattr(layer.kernel, "kernel", layer.kernel), "lengthscales")]
        states = [[v.trainable for v in module.variables] for module in frozen]
        for module in frozen:
            gpflow.set_trainable(module, False)
        warm = TrainingSchedule(**{**schedule.__dict__, "patience": None, "epochs": max(1, math.ceil(warmup_steps / schedule.steps_per_epoch(_num_rows(data))))})
        if stopper is not None:  # the start competes too: the warm-up's epochs count before 0
            stopper.prime(-warm.epochs)
        record["warmup"] = _fit_elbo(dgp, data, warm, None, seed=seed)
        for module, state in zip(frozen, states):
            for variable, flag in zip(module.variables, state):
                variable._trainable = flag
    record.update(_fit_elbo(dgp, data, schedule, stopper, callbacks, strategy=strategy, seed=seed, optimizer=optimizer, initial_epoch=initial_epoch))
    if stopper is not None:
        record.update(stopper.summary(_steps_per_epoch(schedule, data, strategy)))
        record["check_objective"] = stopper.label
    return record


def _steps_per_epoch(schedule: TrainingSchedule, data, strategy) -> int:
    if isinstance(data, tuple):
        return schedule.steps_per_epoch(len(data[0]))
    return data.batches_per_epoch(schedule.batch_size, drop_remainder=strategy is not None)


def _fit_elbo(
    dgp, data, schedule: TrainingSchedule, stopper: Optional[RestoreBest], extra=(), *, strategy=None, seed: int = 0,
    optimizer: Optional[tf_keras.optimizers.Optimizer] = None, initial_epoch: int = 0,
) -> dict:
    """gpflux's keras training model fitted on in-memory arrays (``data`` = (X, Y)) or a streaming
    source; under ``strategy`` the model and optimiser are built in its scope (``dgp`` must be mirrored)."""
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = dgp.as_training_model()
        # the ramp: for a fresh Adam, or a resumed one (its step count continues the ramp); not for a new one passed in
        ramped = schedule.ramp_steps > 0 and (optimizer is None or int(optimizer.iterations.numpy()) > 0)
        optimizer = optimizer if optimizer is not None else tf_keras.optimizers.Adam(schedule.learning_rate)
        model.compile(optimizer, jit_compile=schedule.jit_compile)
    ramp = [LearningRateRamp(schedule.learning_rate, schedule.ramp_steps)] if ramped else []
    callbacks = ramp + schedule.callbacks() + list(extra) + ([stopper] if stopper is not None else [])
    fit = dict(epochs=schedule.epochs, verbose=schedule.keras_verbose, initial_epoch=initial_epoch)
    if isinstance(data, tuple):  # in memory (checked finite); a stream checks its own blocks
        with without_retracing_warnings():
            return fit_keeping_the_best(
                model, {"inputs": data[0], "targets": data[1]}, stopper, callbacks, batch_size=schedule.batch_size, **fit
            )
    if strategy is not None:
        dataset = distributed_dataset(data, schedule.batch_size, strategy, seed)
    else:
        batches = global_batches(data, schedule.batch_size, seed=seed)
        dataset = batches.map(lambda x, y: {"inputs": x, "targets": y}).prefetch(2)
    with data_errors(), without_retracing_warnings():
        return fit_keeping_the_best(model, dataset, stopper, callbacks, steps_per_epoch=_steps_per_epoch(schedule, data, strategy), **fit)


def evaluate_elbo(dgp: gpflux.models.DeepGP, X, Y, *, num_samples: int = 1, batch_size: int = 1024) -> float:
    """The ELBO Σ_i E_q[log p(y_i | f_L(x_i))] − Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)] of a DeepGP on (X, Y).

    Evaluated with gpflux's own ``DeepGP.elbo`` in batches of ``batch_size`` (each batch's data term
    is weighted by its share of N, so the sum is the full-data ELBO when N is the model's
    ``num_data``) and averaged over ``num_samples`` passes: layers 1..L−1 are sampled (doubly
    stochastic VI), so with one layer a single pass is exact up to the likelihood's quadrature.
    """
    if num_samples < 1 or batch_size < 1:
        raise ValueError(f"num_samples and batch_size must be ≥ 1, got {num_samples} and {batch_size}")
    X, Y = _check_data(X, Y)
    _check_model_inputs(dgp, X, Y)
    total = 0.0
    for _ in range(num_samples):
        for start in range(0, len(X), batch_size):
            X_batch, Y_batch = X[start : start + batch_size], Y[start : start + batch_size]
            total += len(X_batch) / len(X) * float(dgp.elbo((X_batch, Y_batch)))
    return total / num_samples
