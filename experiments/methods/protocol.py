"""The protocol every method of :mod:`experiments.methods` is fitted under: the architecture's sizes, the training
schedule and the optimisation budgets (the versions of the methods' definitions, and the
:class:`~experiments.harness.protocol.Protocol` a record is stamped with: :mod:`experiments.methods.versions`).

**Converged protocol** (budgets with ``converged=True``, the default for the published results): a seeded
10 % validation part of each training split is held out (the same rows for every method); every fit — each
network (NN, dropout, each ensemble member, ADGP's stage 1) and each ELBO fit (classic DGP, ADGP's stage 2)
— trains on the other 90 %, is checked on the validation part every max(1 epoch, 50 steps), stops after
500 steps without improvement under a cap (``nn_steps`` / ``dgp_steps``) and restores its best parameters
(:class:`activated_dgp.training.RestoreBest`). Networks are scored by their MSE, ELBO fits by the validation
NLPD. The steps run and the best step are recorded. Fixed-step budgets (``tiny`` … ``large``) train on the
whole training part for a fixed number of steps, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Tuple

import numpy as np

from activated_dgp import TrainingSchedule

NUM_LAYERS = 3
NUM_UNITS = 128
BATCH_SIZE = 128
VALIDATION_FRACTION = 0.1
PREDICT_BATCH = 256
PLATEAU_STEPS = 200  # the plateau patience in minibatch steps (at least 5 epochs)
MIN_LEARNING_RATE = 1e-4

CHECK_STEPS = 50  # a validation check every this many steps (at least once per epoch)
PATIENCE_STEPS = 500  # early stopping after this many steps without a better validation score


def protocol_schedule(
    cap_steps: int, num_train: int, *, learning_rate: float = 0.01, early_stopping: bool = True, patience_steps: int = PATIENCE_STEPS
) -> TrainingSchedule:
    """The converged protocol's schedule: Adam ``learning_rate`` ×0.9 on a plateau of max(5 epochs, 200
    steps), floor 1e-4; at most ``cap_steps`` steps; with ``early_stopping`` a validation check every
    max(1 epoch, 50 steps) and a patience of ``patience_steps`` (500) steps, best parameters restored."""
    return TrainingSchedule.for_steps(
        cap_steps, num_train, plateau_steps=PLATEAU_STEPS, batch_size=BATCH_SIZE, learning_rate=learning_rate,
        plateau_factor=0.9, min_learning_rate=MIN_LEARNING_RATE,
        **(dict(check_steps=CHECK_STEPS, patience_steps=patience_steps) if early_stopping else {}),
    )


@dataclass(frozen=True)
class Budget:
    """Optimisation budget in gradient steps (minibatches of 128), the same for every dataset; a fit runs
    ceil(steps / ceil(N_train / 128)) epochs (at least 1), so small sets get many epochs and large ones few.

    :param nn_steps: steps of each network fit (every NN baseline, ensemble member, and ADGP's stage 1).
    :param dgp_steps: ELBO steps (ADGP's stage 2 and the classic DGP).
    :param mc_samples: MC-dropout passes and DGP samples per test point.
    :param patience_steps: early stopping's patience in steps (converged budgets), for every fit.
    """

    name: str
    nn_steps: int
    dgp_steps: int
    mc_samples: int = 32
    converged: bool = False
    patience_steps: int = PATIENCE_STEPS

    def epochs(self, steps: int, num_train: int) -> int:
        return self.schedule(steps, num_train).epochs

    def schedule(self, steps: int, num_train: int) -> TrainingSchedule:
        """Adam 0.01 ×0.9 on a plateau of max(5 epochs, 200 steps), floor 1e-4 (1 % of the start); for a
        ``converged`` budget ``steps`` is a cap and the fit stops early on the validation part."""
        return protocol_schedule(steps, num_train, early_stopping=self.converged, patience_steps=self.patience_steps)


BUDGETS = {
    "converged": Budget("converged", nn_steps=10000, dgp_steps=3000, mc_samples=32, converged=True),
    # Networks and ELBO fits given 4x the patience and 3x the caps: the check that "converged" is converged
    # (docs/results/stage2.md, "Is stage 1 converged?"): naval's twin stopped at step 2,812 with patience 500.
    "converged-long": Budget("converged-long", nn_steps=30000, dgp_steps=10000, mc_samples=32, converged=True, patience_steps=2000),
    "converged-quick": Budget("converged-quick", nn_steps=300, dgp_steps=150, mc_samples=8, converged=True),
    "converged-tiny": Budget("converged-tiny", nn_steps=40, dgp_steps=16, mc_samples=4, converged=True),  # tests
    "tiny": Budget("tiny", nn_steps=20, dgp_steps=8, mc_samples=4),
    "small": Budget("small", nn_steps=600, dgp_steps=150, mc_samples=16),
    "medium": Budget("medium", nn_steps=2000, dgp_steps=1000, mc_samples=32),
    "large": Budget("large", nn_steps=10000, dgp_steps=5000, mc_samples=64),
}


@dataclass
class SplitData:
    """One split, standardised on its training part: X [N, D], y [N, 1]; ``y_scale`` = s_y of the targets."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    y_scale: float
    seed: int
    validation_kind: str = "random"  # how the validation part is cut: "random", "slab" or "mixed" (the *_slab, *_mixed methods)

    def validation_split(self):
        """(X_fit, y_fit), (X_val, y_val): the seeded 10 % validation part of the training split that every method of
        the converged protocol stops on (the same rows for every method), or, for ``validation_kind="slab"``, a
        covariate-shifted slab of the same size, or for ``"mixed"`` half of each
        (:func:`activated_dgp.training.split_validation`)."""
        from activated_dgp.training import split_validation

        return split_validation(self.X_train, self.y_train, VALIDATION_FRACTION, self.seed, kind=self.validation_kind)


Prediction = Tuple[np.ndarray, np.ndarray, Dict]  # means [S, N], variances [S, N], extra fields


def shifted_validation(data: SplitData, budget: Budget, kind: str, method: str) -> SplitData:
    """The split with its validation part cut by ``kind`` ("slab", "mixed") for ``method``, one of the shifted-validation
    methods, which need a converged budget (a budget without a validation part is a clear error)."""
    if not budget.converged:
        raise ValueError(f"{method} needs a converged budget (its validation part); got {budget.name!r}")
    return replace(data, validation_kind=kind)


def fit_parts(data: SplitData, budget: Budget):
    """(X_fit, y_fit) and the validation part (None for a fixed-step budget, which trains on all)."""
    if budget.converged:
        return data.validation_split()
    return (data.X_train, data.y_train), None
