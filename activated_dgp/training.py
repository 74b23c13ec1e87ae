"""Two-stage training (Dutordoir et al., 2021, Sec. 5.1, appendix E.1): fit the network twin on
MSE or cross-entropy, convert it to an activated DGP, then optimise the ELBO over all DGP parameters.
"""

from __future__ import annotations

import contextlib
import logging
import math

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .config import ArchitectureConfig
from .conversion import NOISE_FACTORS, dgp_from_keras, rescale_kernel_variance, select_kernel_variances
from .far_field import add_far_field, far_field_options, refit_far_field
from .distributed import check_global_batch, copy_values, distributed_dataset, replicate
from .models import likelihood_name, network_loss, output_width
from .streaming import ArraySource, CsvSource, DatasetSource, as_source, data_errors, global_batches
from .nn import build_activated_nn
from .spectra import Activation
from .prediction import check_dgp
from .validation import check_matrix, check_targets, dgp_input_width

__all__ = [
    "TwoStageResult",
    "TrainingSchedule",
    "RestoreBest",
    "LearningRateRamp",
    "split_validation",
    "train_network",
    "train_dgp",
    "validation_nlpd",
    "train_two_stage",
    "evaluate_elbo",
    "guard_rows",
    "negative_elbo_score",
    "GUARD_ROWS",
    "GUARD_MIN_STEPS",
]


@dataclass
class TrainingSchedule:
    """Adam with learning rate ``learning_rate`` reduced ×``plateau_factor`` when the training loss
    has not improved for ``plateau_patience`` epochs, down to ``min_learning_rate``; minibatch
    ``batch_size`` (appendix E.1). On a small data set an epoch is a few noisy minibatches, so a
    5-epoch plateau comes often: scale the patience with the epoch length for long runs
    (:meth:`for_steps`).

    Early stopping: given validation data and ``patience``, a fit stops once the validation score (the
    loss for a network, the NLPD for a DGP) has not improved for ``patience`` checks, one check every
    ``validation_every`` epochs, and the parameters of the best check are restored; ``epochs`` is
    then the cap.

    ``ramp_steps`` (stage 2, :func:`train_dgp`, only): a fresh Adam's learning rate rises linearly from
    ``learning_rate / ramp_steps`` to ``learning_rate`` over its first ``ramp_steps`` steps
    (:class:`LearningRateRamp`); 0 turns it off. Adam's first steps are ≈ ``learning_rate`` per coordinate in
    the sign of the gradient, whatever the curvature, and one such step on a converted network's inducing
    directions W can wreck its mean (docs/results/stage2.md, "Divergence").

    ``jit_compile``: compile the DGP's ELBO step (forward, gradient, Adam update) with XLA through
    Keras' ``compile(jit_compile=True)``. Off by default: on CPU, XLA's own Cholesky and triangular
    solves are far slower than LAPACK's (docs/scaling.md), while the Clenshaw sums of Kuf/Kuu are
    XLA-compiled either way."""

    epochs: int = 100
    batch_size: int = 128
    learning_rate: float = 0.01
    plateau_factor: float = 0.9
    plateau_patience: int = 5
    min_learning_rate: float = 1e-5
    verbose: int = 1  # 1: one progress bar over the fit's epochs (FitProgress); 2: Keras' line per epoch; 0: silent
    patience: Optional[int] = None
    validation_every: int = 1
    jit_compile: bool = False  # XLA-compile the whole ELBO step (see docs/scaling.md: slower on CPU)
    ramp_steps: int = 100  # stage 2 only: linear learning-rate warm-up of a fresh Adam (LearningRateRamp)

    def __post_init__(self):
        def integer(name, value, smallest):
            if isinstance(value, bool) or int(value) != value or value < smallest:
                raise ValueError(f"{name} must be an integer ≥ {smallest}, got {value!r}")

        integer("epochs", self.epochs, 1)
        integer("batch_size", self.batch_size, 1)
        integer("plateau_patience", self.plateau_patience, 0)
        if self.verbose not in (0, 1, 2) or isinstance(self.verbose, bool):
            raise ValueError(f"verbose must be 0 (silent), 1 (a progress bar over the epochs) or 2 (a line per epoch), got {self.verbose!r}")
        integer("validation_every", self.validation_every, 1)
        integer("ramp_steps", self.ramp_steps, 0)
        if self.patience is not None:
            integer("patience", self.patience, 1)
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be positive and finite, got {self.learning_rate!r}")
        if not 0 < self.plateau_factor < 1:
            raise ValueError(f"plateau_factor must lie in (0, 1), got {self.plateau_factor!r}")
        if not self.min_learning_rate >= 0:
            raise ValueError(f"min_learning_rate must be ≥ 0, got {self.min_learning_rate!r}")

    @classmethod
    def for_steps(
        cls,
        steps: int,
        num_data: int,
        *,
        plateau_steps: int = 200,
        check_steps: Optional[int] = None,
        patience_steps: Optional[int] = None,
        **options,
    ) -> "TrainingSchedule":
        """A schedule of about ``steps`` minibatch steps on ``num_data`` points: ceil(steps / steps per
        epoch) epochs (≥ 1) and a plateau patience of max(5 epochs, ``plateau_steps`` steps). With
        ``patience_steps``, early stopping: a validation check every ``check_steps`` steps (at least
        every epoch) and a patience of ``patience_steps`` steps, in checks."""
        if steps < 1 or num_data < 1:
            raise ValueError(f"steps and num_data must be ≥ 1, got {steps} and {num_data}")
        batch_size = options.get("batch_size", cls.batch_size)
        per_epoch = math.ceil(num_data / batch_size)
        options.setdefault("plateau_patience", max(5, math.ceil(plateau_steps / per_epoch)))
        if patience_steps is not None:
            every = max(1, math.ceil((check_steps or per_epoch) / per_epoch))
            options.setdefault("validation_every", every)
            options.setdefault("patience", max(1, math.ceil(patience_steps / (every * per_epoch))))
        return cls(epochs=max(1, math.ceil(steps / per_epoch)), **options)

    def steps_per_epoch(self, num_data: int) -> int:
        return math.ceil(num_data / self.batch_size)

    def callbacks(self):
        return [
            tf_keras.callbacks.ReduceLROnPlateau(
                monitor="loss", factor=self.plateau_factor, patience=self.plateau_patience, min_lr=self.min_learning_rate, verbose=0
            ),
            tf_keras.callbacks.TerminateOnNaN(),
        ] + ([FitProgress()] if self.verbose == 1 else [])

    @property
    def keras_verbose(self) -> int:
        """The ``verbose`` handed to Keras' ``fit``: 2 (a line per epoch) as asked, else 0 (``verbose=1`` shows
        :class:`FitProgress` instead of Keras' per-step bar, which repeats once per epoch)."""
        return 2 if self.verbose == 2 else 0


class FitProgress(tf_keras.callbacks.Callback):
    """One Keras ``Progbar`` over a fit's epochs (not Keras' per-epoch step bar), with the latest loss and learning
    rate; on a terminal it redraws in place, elsewhere (logs) it writes a line at most every ``interval`` seconds."""

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
    step). t is the optimiser's own step count + 1, so an optimiser saved mid-ramp and resumed continues it."""

    def __init__(self, target: float, steps: int):
        super().__init__()
        if steps < 1 or not target > 0:
            raise ValueError(f"steps must be ≥ 1 and target > 0, got {steps} and {target}")
        self.target, self.steps = float(target), int(steps)

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy()) + 1
        if step <= self.steps:
            self.model.optimizer.learning_rate.assign(self.target * step / self.steps)


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

    def _finite(self) -> bool:
        return all(np.all(np.isfinite(v.numpy())) for v in self.module.variables if v.dtype.is_floating)

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
            self._best_values = [(v, v.numpy()) for v in self.module.variables]  # pairs: fits may add variables
        else:
            self._since += 1
            if self.patience is not None and self._since >= self.patience:
                self._stop()

    def prime(self, epoch: int = 0) -> None:
        """Check the current parameters now, before a fit this callback is not part of (stage 2's warm-up),
        labelled ``epoch`` (e.g. minus the warm-up's epochs); the fit's own start is checked as well."""
        self._check(epoch, self._finite())

    def on_train_begin(self, logs=None):
        self._check(self.epochs_run, self._finite())  # epochs_run: 0, or the epoch a resumed fit starts at

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_run = epoch + 1
        finite = self._finite()
        if (epoch + 1) % self.every == 0 or not finite:
            self._check(epoch + 1, finite)

    def on_train_end(self, logs=None):
        if self.diverged_epoch is None and self.checks and self.checks[-1][0] != self.epochs_run and self.epochs_run > 0:
            self._check(self.epochs_run, self._finite())  # the final state competes too
        if self._best_values is not None:
            self.restored = self.diverged_epoch is not None or self.best_epoch != self.epochs_run
            for variable, value in self._best_values:
                variable.assign(value)

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


@dataclass
class TwoStageResult:
    network: tf_keras.Model
    dgp: gpflux.models.DeepGP
    network_history: dict = field(default_factory=dict)
    dgp_history: dict = field(default_factory=dict)
    conversion_mismatch: Optional[float] = None
    initial_elbo: Optional[float] = None  # the converted DGP's ELBO before stage 2 (evaluate_elbo)
    kernel_variances: Optional[list] = None  # per layer, after conversion (chosen when kernel_variance="elbo")
    initial_noise_variance: Optional[float] = None


def _check_data(X, Y):
    """(X [N, D], Y [N, P]) as finite matrices of gpflow's default float with N ≥ 1; else a ValueError."""
    X, Y = check_matrix(X, "X"), check_targets(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X must be [N, D] and Y [N, P] with the same N, got {X.shape} and {Y.shape}")
    return X, Y


def _check_model_inputs(dgp: gpflux.models.DeepGP, X: np.ndarray) -> None:
    """The DGP's own state is valid (:func:`~activated_dgp.validation.check_dgp`) and X has its input width."""
    check_dgp(dgp)
    width = dgp_input_width(dgp)
    if width is not None and X.shape[1] != width:
        raise ValueError(f"X must have the DGP's input width {width}, got shape {X.shape}")


def _early_stopping(schedule: "TrainingSchedule", score: Optional[Callable[[], float]], module) -> Optional[RestoreBest]:
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
#: unguarded one, 1.45× with this cap (docs/results/stage2/divergence_cost.json).
GUARD_MIN_STEPS = 100


def guard_rows(data, seed: int = 0, count: int = GUARD_ROWS):
    """The fixed training rows (X [n, D], Y [n, P]), n = min(N, ``count``), on which stage 2's guard scores
    the ELBO: drawn without replacement with ``seed`` from in-memory (X, Y); from a block source (arrays,
    memmaps, CSV shards) from at most four seeded blocks (:meth:`~activated_dgp.streaming.ArraySource.sample_rows`);
    from a ``tf.data.Dataset`` its first ``count`` rows."""
    if isinstance(data, tuple):
        X, Y = data
        rows = np.sort(np.random.default_rng(seed).choice(len(X), min(count, len(X)), replace=False))
        return X[rows], Y[rows]
    return data.sample_rows(count, seed)


def negative_elbo_score(dgp: gpflux.models.DeepGP, X, Y, seed: int = 0) -> Callable[[], float]:
    """The score of stage 2's guard: −ELBO on the fixed rows (X, Y), the data term scaled to the model's N,

        −ELBO = −(N / n) Σ_(i ≤ n) E_q[log p(y_i | f_L(x_i))] + Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)]

    (Salimbeni & Deisenroth, 2017, eq. 4, on a subset), by :func:`activated_dgp.diagnostics.elbo_terms` with one
    seeded draw of the hidden layers (the same draws at every check, so that checks differ by the parameters
    only; a one-layer model needs none and the score is gpflux's ``DeepGP.elbo`` on these rows)."""
    from .diagnostics import elbo_terms

    return lambda: -elbo_terms(dgp, X, Y, num_samples=1, seed=seed).elbo


def train_network(
    network: tf_keras.Model, X, Y, likelihood="gaussian", schedule: Optional[TrainingSchedule] = None, *, validation_data=None
) -> dict:
    """Stage 1: ordinary ``model.fit`` of the twin (or any network) on MSE / cross-entropy.

    With ``validation_data`` = (X_val, Y_val) the training loss on it is checked every
    ``schedule.validation_every`` epochs, the fit stops after ``schedule.patience`` checks without
    improvement, and the best weights are restored (:class:`RestoreBest`); the history then also holds
    ``validation_checks``, ``best_step`` and ``steps_run``."""
    schedule = schedule or TrainingSchedule()
    X, Y = _check_data(X, Y)
    width = getattr(network, "input_shape", None)
    if isinstance(width, tuple) and width and width[-1] is not None and width[-1] != X.shape[1]:
        raise ValueError(f"X must have the network's input width {width[-1]}, got shape {X.shape}")
    loss = network_loss(likelihood)
    output_width(likelihood, Y)  # labels fit the likelihood (0/1, class indices)
    network.compile(tf_keras.optimizers.Adam(schedule.learning_rate), loss=loss)
    score = None
    if validation_data is not None:
        X_val, Y_val = _check_data(*validation_data)
        score = lambda: float(loss(Y_val, network(X_val, training=False)))  # noqa: E731
    stopper = _early_stopping(schedule, score, network)
    callbacks = schedule.callbacks() + ([stopper] if stopper is not None else [])
    with without_retracing_warnings():
        history = network.fit(X, Y, batch_size=schedule.batch_size, epochs=schedule.epochs, callbacks=callbacks, verbose=schedule.keras_verbose)
    record = dict(history.history)
    if stopper is not None:
        record.update(stopper.summary(schedule.steps_per_epoch(len(X))))
    return record


def validation_nlpd(dgp: gpflux.models.DeepGP, X_val, Y_val, num_samples: int = 16, seed: int = 0) -> float:
    """−mean log p(y | x) on held-out (X_val, Y_val) by :func:`activated_dgp.predictive_log_density` with
    ``num_samples`` seeded samples: the score of stage 2's early stopping (:func:`train_dgp`)."""
    from .prediction import predictive_log_density

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
) -> dict:
    """Stage 2: maximise the ELBO over the DGP's parameters (gpflux's keras training model).

    Stage 2 never hands back parameters worse than its start on the objective it can see: with
    ``validation_data`` the validation NLPD (below); without, the ``guard`` (on by default) scores the
    training −ELBO on a fixed seeded subset of at most :data:`GUARD_ROWS` training rows, scaled to N, with
    fixed draws (:func:`negative_elbo_score`), before training (before the warm-up, if any), every
    ``schedule.validation_every`` epochs but at most once per :data:`GUARD_MIN_STEPS` steps, and at the end,
    and restores the best check (:class:`RestoreBest`).
    The history then holds ``negative_elbo_checks`` [(step, −ELBO)], ``best_negative_elbo``, ``best_step``,
    ``restored`` (whether the final parameters were replaced) and ``restored_step``; ``check_objective``
    names the score. A check costs one eager forward pass over ≤ 2048 rows (measured in
    docs/results/stage2/divergence_cost.json). Streaming data
    are covered (the rows come from a few seeded blocks, or a ``tf.data.Dataset``'s first rows), and so
    is a ``strategy`` (the mirrored copy is scored). ``guard=False`` trains without it.

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
    :param initial_epoch: the epoch to resume at (Keras' ``initial_epoch``; e.g. ``load_state(dir)["epoch"]``
        of a :class:`activated_dgp.DGPCheckpoint`): the fit runs epochs ``initial_epoch`` … ``schedule.epochs``
        − 1, and a resumed fit (``initial_epoch`` > 0) skips the warm-up, which belongs to its start.

    Data beyond memory (:mod:`activated_dgp.streaming`): ``X`` may also be a ``tf.data.Dataset`` of
    (x, y) pairs (``Y`` None, ``num_data`` = its true N), an ``ArraySource`` / ``CsvSource``, or a
    ``np.memmap`` pair; these stream in global batches shuffled with ``seed``, in constant memory. The
    ELBO is always scaled by the model's ``num_data``, which must equal the data's N.

    :param strategy: a ``tf.distribute.Strategy`` (MirroredStrategy, MultiWorkerMirroredStrategy):
        data-parallel training of a mirrored copy of ``dgp``, written back at the end; the global batch
        ``schedule.batch_size`` is split equally over the replicas (:mod:`activated_dgp.distributed`
        explains the loss scaling). ``dgp`` itself may be built outside the strategy's scope.
    """
    schedule = schedule or TrainingSchedule()
    if isinstance(initial_epoch, bool) or int(initial_epoch) != initial_epoch or not 0 <= initial_epoch <= schedule.epochs:
        raise ValueError(f"initial_epoch must be an integer in [0, epochs = {schedule.epochs}], got {initial_epoch!r}")
    if strategy is not None:
        check_global_batch(schedule.batch_size, strategy)
        if optimizer is not None:
            raise ValueError("optimizer= cannot be combined with a strategy: the optimiser is built in the strategy's scope")
    data = _training_data(dgp, X, Y, num_data, strategy)
    if isinstance(data, tuple):
        _check_model_inputs(dgp, data[0])
    if strategy is not None:
        if warmup_steps > 0:
            raise ValueError("warmup_steps is not supported with a strategy (trainable flags of mirrored variables)")
        replica = replicate(dgp, strategy)
        record = _train_dgp(replica, data, schedule, validation_data, validation_samples, 0, callbacks, strategy, seed, None, int(initial_epoch), guard)
        copy_values(replica, dgp)
        return record
    return _train_dgp(dgp, data, schedule, validation_data, validation_samples, warmup_steps, callbacks, None, seed, optimizer, int(initial_epoch), guard)


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


def _stage2_stopper(dgp, data, schedule, validation_data, validation_samples, guard: bool, seed: int, steps_per_epoch: int) -> Optional[RestoreBest]:
    """Early stopping on the validation NLPD with validation data; else, with ``guard``, a :class:`RestoreBest`
    on the training −ELBO (:func:`negative_elbo_score` on :func:`guard_rows`), checked every ``validation_every``
    epochs but at most once per :data:`GUARD_MIN_STEPS` steps."""
    if validation_data is not None:
        X_val, Y_val = _check_data(*validation_data)
        return _early_stopping(schedule, lambda: validation_nlpd(dgp, X_val, Y_val, validation_samples, 0), dgp)
    _early_stopping(schedule, None, dgp)  # a patience without validation data is an error
    if not guard:
        return None
    every = max(schedule.validation_every, math.ceil(GUARD_MIN_STEPS / steps_per_epoch))
    return RestoreBest(negative_elbo_score(dgp, *guard_rows(data, seed), seed), dgp, every=every, label="negative_elbo")


def _train_dgp(dgp, data, schedule, validation_data, validation_samples, warmup_steps, callbacks, strategy, seed, optimizer, initial_epoch, guard=True) -> dict:
    record: dict = {}
    stopper = _stage2_stopper(dgp, data, schedule, validation_data, validation_samples, guard, seed, _steps_per_epoch(schedule, data, strategy))
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
    fit = dict(epochs=schedule.epochs, callbacks=callbacks, verbose=schedule.keras_verbose, initial_epoch=initial_epoch)
    if isinstance(data, tuple):
        with without_retracing_warnings():
            history = model.fit({"inputs": data[0], "targets": data[1]}, batch_size=schedule.batch_size, **fit)
        return dict(history.history)
    if strategy is not None:
        dataset = distributed_dataset(data, schedule.batch_size, strategy, seed)
    else:
        batches = global_batches(data, schedule.batch_size, seed=seed)
        dataset = batches.map(lambda x, y: {"inputs": x, "targets": y}).prefetch(2)
    with data_errors(), without_retracing_warnings():
        history = model.fit(dataset, steps_per_epoch=_steps_per_epoch(schedule, data, strategy), **fit)
    return dict(history.history)


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
    _check_model_inputs(dgp, X)
    total = 0.0
    for _ in range(num_samples):
        for start in range(0, len(X), batch_size):
            X_batch, Y_batch = X[start : start + batch_size], Y[start : start + batch_size]
            total += len(X_batch) / len(X) * float(dgp.elbo((X_batch, Y_batch)))
    return total / num_samples


def split_validation(X, Y, fraction: float, seed: Optional[int] = None):
    """A seeded random split of (X, Y) into (X_fit, Y_fit), (X_val, Y_val) with round(fraction·N) ≥ 1
    validation rows."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction!r}")
    order = np.random.default_rng(seed).permutation(len(X))
    num_val = max(1, int(round(fraction * len(X))))
    if num_val >= len(X):
        raise ValueError(f"{len(X)} rows are too few to hold out {fraction:.0%} for validation")
    val, fit = order[:num_val], order[num_val:]
    return (X[fit], Y[fit]), (X[val], Y[val])


def train_two_stage(
    X,
    Y,
    *,
    likelihood: str = "gaussian",
    num_classes: Optional[int] = None,
    num_layers: int = 3,
    num_units: Union[int, Sequence[int]] = 128,
    layer_widths: Optional[Sequence[int]] = None,
    activation: Union[str, Activation, Callable] = "softplus",
    truncation_level: Union[int, Sequence[int]] = 20,
    lengthscales: Optional[Sequence] = None,
    whiten: bool = True,
    network_schedule: Optional[TrainingSchedule] = None,
    dgp_schedule: Optional[TrainingSchedule] = None,
    noise_variance: Union[None, float, str] = None,
    kernel_variance: Union[float, str] = 1.0,
    warmup_steps: int = 0,
    validation_data=None,
    validation_fraction: float = 0.0,
    seed: Optional[int] = None,
    elbo_samples: int = 0,
    network: Optional[tf_keras.Model] = None,
    dgp_callbacks: Sequence[tf_keras.callbacks.Callback] = (),
    strategy: Optional[tf.distribute.Strategy] = None,
    far_field: Union[bool, dict] = True,
) -> TwoStageResult:
    """Network twin → activated DGP → ELBO. Defaults follow appendix E.1 (Adam 0.01, ×0.9 on
    plateau, minibatch 128); every part is overridable. docs/results/stage2.md measures the options.

    :param Y: [N, P] targets; for "bernoulli" 0/1 labels [N, 1]; for "softmax"/"robustmax" class
        indices [N, 1] with ``num_classes`` (default: max label + 1).
    :param lengthscales: per-layer lengthscales of the twin (:func:`build_activated_nn`), copied into
        the DGP's kernels by the converter.
    :param noise_variance: initial Gaussian noise: a number, "train" (the network's training MSE, the
        default without validation data) or "validation" (its MSE on the validation part, the default
        with it), or "selected": the validation MSE, then chosen jointly with the output layer's kernel
        variance by the ``kernel_variance`` search (``noise_factors`` of :func:`select_kernel_variances`).
    :param kernel_variance: each layer's kernel variance at conversion, or "elbo" / "validation" to
        choose it by maximising the ELBO / the validation log density, with the mean propagation kept
        (:func:`select_kernel_variances`).
    :param warmup_steps: stage-2 steps with W and the lengthscales frozen before all parameters train
        (:func:`train_dgp`).
    :param validation_data: (X_val, Y_val) for early stopping of each stage whose schedule sets a
        ``patience`` (best parameters restored), and for ``noise_variance="validation"``; or
        ``validation_fraction`` of (X, Y) is held out (seeded by ``seed``).
    :param dgp_callbacks: tf-keras callbacks for stage 2; one with a ``set_dgp(dgp)`` method is handed
        the converted DeepGP before stage 2 starts.
    :param network: a network to start from instead of building and training a twin (stage 1 is
        then skipped).
    :param elbo_samples: passes of :func:`evaluate_elbo` for ``TwoStageResult.initial_elbo`` (the
        converted DGP's ELBO before stage 2); 0 (the default) skips it, leaving ``initial_elbo`` None —
        it costs that many passes over the whole data.
    :param strategy: a ``tf.distribute.Strategy`` for stage 2 (:func:`train_dgp`); stage 1, the
        network twin, trains on one device.
    :param far_field: give the output layer the far-field residual after conversion (the default True, or a
        dict with ``order`` / ``scale``; :func:`activated_dgp.far_field.add_far_field`): zero variance on the
        training data's ball, growing like ρ^(2q+1) outside it, the mean unchanged (docs/results/far_field.md);
        False gives the plain activated DGP.
    """
    far_field = far_field_options(far_field)
    X, Y = _check_data(X, Y)
    config = ArchitectureConfig(  # validates the architecture and the likelihood before any training
        X.shape[1], num_layers=num_layers, num_units=num_units, layer_widths=layer_widths,
        output_dim=output_width(likelihood, Y, num_classes), activation=activation,
        truncation_level=truncation_level, lengthscales=lengthscales, whiten=whiten, likelihood=likelihood,
    )
    gaussian = likelihood_name(config.likelihood) == "gaussian"
    if isinstance(noise_variance, str) and noise_variance not in ("train", "validation", "selected"):
        raise ValueError(f"noise_variance must be a number, 'train', 'validation' or 'selected', got {noise_variance!r}")
    select_noise = noise_variance == "selected"
    if select_noise and not (gaussian and kernel_variance in ("elbo", "validation")):
        raise ValueError("noise_variance='selected' needs a Gaussian likelihood and kernel_variance='elbo' or 'validation'")
    if validation_data is None and validation_fraction > 0:
        (X, Y), validation_data = split_validation(X, Y, validation_fraction, seed)
    if validation_data is not None:
        validation_data = _check_data(*validation_data)
        if validation_data[0].shape[1] != X.shape[1] or validation_data[1].shape[1] != Y.shape[1]:
            raise ValueError(
                f"validation_data must have the widths of (X, Y), {X.shape[1]} and {Y.shape[1]}; got "
                f"{validation_data[0].shape[1]} and {validation_data[1].shape[1]}"
            )
    if isinstance(kernel_variance, str) and kernel_variance not in ("elbo", "validation"):
        raise ValueError(f"kernel_variance must be a positive number, 'elbo' or 'validation', got {kernel_variance!r}")
    for name, value in (("noise_variance", noise_variance), ("kernel_variance", kernel_variance)):
        if value in ("validation", "selected") and validation_data is None:
            raise ValueError(f"{name}={value!r} needs validation_data or a validation_fraction")
    if seed is not None:
        tf.random.set_seed(seed)
    network_history = {}
    if network is None:
        network = build_activated_nn(config, seed=seed)
        stop_network = network_schedule is not None and network_schedule.patience is not None
        network_history = train_network(
            network, X, Y, config.likelihood, network_schedule, validation_data=validation_data if stop_network else None
        )
    if gaussian and not isinstance(noise_variance, (int, float)):
        source = validation_data if (noise_variance in ("validation", "selected") or (noise_variance is None and validation_data is not None)) else (X, Y)
        noise_variance = float(max(np.mean((network(source[0]).numpy() - source[1]) ** 2), 1e-4))
    conversion = dgp_from_keras(
        network, len(X), X=X[:2048], likelihood=config.likelihood, whiten=config.whiten, noise_variance=noise_variance or 0.01
    )
    noise_factors = NOISE_FACTORS if select_noise else None
    if kernel_variance == "elbo":
        select_kernel_variances(conversion.dgp, X, Y, seed=seed or 0, noise_factors=noise_factors)
    elif kernel_variance == "validation":
        select_kernel_variances(conversion.dgp, *validation_data, objective="validation", seed=seed or 0, noise_factors=noise_factors)
    elif kernel_variance != 1.0:
        for layer in conversion.dgp.f_layers:
            rescale_kernel_variance(layer, float(kernel_variance))
    if far_field is not None:
        add_far_field(conversion.dgp, X, **far_field)
    if select_noise:  # the noise stage 2 starts from, as the joint search left it
        noise_variance = float(conversion.dgp.likelihood_layer.likelihood.variance.numpy())
    variances = [float(layer.kernel.kernel.variance.numpy()) for layer in conversion.dgp.f_layers]
    initial_elbo = evaluate_elbo(conversion.dgp, X, Y, num_samples=elbo_samples) if elbo_samples > 0 else None
    for callback in dgp_callbacks:  # e.g. diagnostics that want to see the converted model
        if hasattr(callback, "set_dgp"):
            callback.set_dgp(conversion.dgp)
    stop_dgp = dgp_schedule is not None and dgp_schedule.patience is not None
    dgp_history = train_dgp(
        conversion.dgp, X, Y, dgp_schedule, validation_data=validation_data if stop_dgp else None,
        warmup_steps=warmup_steps, callbacks=dgp_callbacks, strategy=strategy, seed=seed or 0,
    )
    if far_field is not None and len(conversion.dgp.f_layers) > 1:  # stage 2 moved the hidden representations
        refit_far_field(conversion.dgp, X)
    return TwoStageResult(
        network,
        conversion.dgp,
        network_history,
        dgp_history,
        conversion.max_abs_mismatch,
        initial_elbo,
        variances,
        noise_variance if gaussian else None,
    )
