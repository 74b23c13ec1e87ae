"""The optimiser schedule of both training stages (:class:`TrainingSchedule`): Adam, learning-rate plateaus,
minibatches, early-stopping cadence and the stage-2 warm-up ramp."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import tf_keras

from .callbacks import FitProgress

__all__ = ["TrainingSchedule"]


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
    directions W can wreck its mean.

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
