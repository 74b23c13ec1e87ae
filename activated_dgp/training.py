"""Two-stage training (Dutordoir et al., 2021, Sec. 5.1, appendix E.1): fit the network twin on
MSE or cross-entropy, convert it to an activated DGP, then optimise the ELBO over all DGP parameters.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .conversion import dgp_from_keras
from .models import make_likelihood
from .nn import build_activated_nn
from .spectra import Activation

__all__ = ["TwoStageResult", "TrainingSchedule", "train_network", "train_dgp", "train_two_stage", "evaluate_elbo"]


@dataclass
class TrainingSchedule:
    """Adam with learning rate ``learning_rate`` reduced ×``plateau_factor`` when the training loss
    has not improved for ``plateau_patience`` epochs, down to ``min_learning_rate``; minibatch
    ``batch_size`` (appendix E.1). On a small data set an epoch is a few noisy minibatches, so a
    5-epoch plateau comes often: scale the patience with the epoch length for long runs
    (:meth:`for_steps`)."""

    epochs: int = 100
    batch_size: int = 128
    learning_rate: float = 0.01
    plateau_factor: float = 0.9
    plateau_patience: int = 5
    min_learning_rate: float = 1e-5
    verbose: int = 0

    @classmethod
    def for_steps(cls, steps: int, num_data: int, *, plateau_steps: int = 200, **options) -> "TrainingSchedule":
        """A schedule of about ``steps`` minibatch steps on ``num_data`` points: ceil(steps / steps per
        epoch) epochs (≥ 1) and a plateau patience of max(5 epochs, ``plateau_steps`` steps)."""
        if steps < 1 or num_data < 1:
            raise ValueError(f"steps and num_data must be ≥ 1, got {steps} and {num_data}")
        batch_size = options.get("batch_size", cls.batch_size)
        per_epoch = math.ceil(num_data / batch_size)
        options.setdefault("plateau_patience", max(5, math.ceil(plateau_steps / per_epoch)))
        return cls(epochs=max(1, math.ceil(steps / per_epoch)), **options)

    def callbacks(self):
        return [
            tf_keras.callbacks.ReduceLROnPlateau(
                monitor="loss", factor=self.plateau_factor, patience=self.plateau_patience, min_lr=self.min_learning_rate, verbose=0
            ),
            tf_keras.callbacks.TerminateOnNaN(),
        ]


@dataclass
class TwoStageResult:
    network: tf_keras.Model
    dgp: gpflux.models.DeepGP
    network_history: dict = field(default_factory=dict)
    dgp_history: dict = field(default_factory=dict)
    conversion_mismatch: Optional[float] = None
    initial_elbo: Optional[float] = None  # the converted DGP's ELBO before stage 2 (evaluate_elbo)


def _network_loss(likelihood: str):
    name = likelihood if isinstance(likelihood, str) else type(likelihood).__name__.lower()
    if name == "gaussian":
        return tf_keras.losses.MeanSquaredError()
    if name == "bernoulli":
        return tf_keras.losses.BinaryCrossentropy(from_logits=True)
    if name in ("softmax", "robustmax", "multiclass"):
        return tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    raise ValueError(f"no network loss for likelihood {likelihood!r}")


def _check_data(X, Y):
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(f"X must be [N, D] and Y [N, P] with the same N, got {X.shape} and {Y.shape}")
    for name, array in (("X", X), ("Y", Y)):
        bad = ~np.all(np.isfinite(array), axis=1)
        if np.any(bad):
            raise ValueError(f"{name} contains NaN or inf in rows {np.flatnonzero(bad)[:5].tolist()}")
    return X, Y


def train_network(network: tf_keras.Model, X, Y, likelihood="gaussian", schedule: Optional[TrainingSchedule] = None) -> dict:
    """Stage 1: ordinary ``model.fit`` of the twin (or any network) on MSE / cross-entropy."""
    schedule = schedule or TrainingSchedule()
    X, Y = _check_data(X, Y)
    network.compile(tf_keras.optimizers.Adam(schedule.learning_rate), loss=_network_loss(likelihood))
    history = network.fit(
        X, Y, batch_size=schedule.batch_size, epochs=schedule.epochs, callbacks=schedule.callbacks(), verbose=schedule.verbose
    )
    return history.history


def train_dgp(dgp: gpflux.models.DeepGP, X, Y, schedule: Optional[TrainingSchedule] = None) -> dict:
    """Stage 2: maximise the ELBO over all DGP parameters (gpflux's keras training model)."""
    schedule = schedule or TrainingSchedule()
    X, Y = _check_data(X, Y)
    model = dgp.as_training_model()
    model.compile(tf_keras.optimizers.Adam(schedule.learning_rate))
    history = model.fit(
        {"inputs": X, "targets": Y},
        batch_size=schedule.batch_size,
        epochs=schedule.epochs,
        callbacks=schedule.callbacks(),
        verbose=schedule.verbose,
    )
    return history.history


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
    total = 0.0
    for _ in range(num_samples):
        for start in range(0, len(X), batch_size):
            X_batch, Y_batch = X[start : start + batch_size], Y[start : start + batch_size]
            total += len(X_batch) / len(X) * float(dgp.elbo((X_batch, Y_batch)))
    return total / num_samples


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
    truncation_level: int = 20,
    lengthscales: Optional[Sequence] = None,
    whiten: bool = True,
    network_schedule: Optional[TrainingSchedule] = None,
    dgp_schedule: Optional[TrainingSchedule] = None,
    noise_variance: Optional[float] = None,
    seed: Optional[int] = None,
    elbo_samples: int = 0,
) -> TwoStageResult:
    """Network twin → activated DGP → ELBO. Defaults follow appendix E.1 (Adam 0.01, ×0.9 on
    plateau, minibatch 128); every part is overridable.

    :param Y: [N, P] targets; for "bernoulli" 0/1 labels [N, 1]; for "softmax"/"robustmax" class
        indices [N, 1] with ``num_classes`` (default: max label + 1).
    :param lengthscales: per-layer lengthscales of the twin (:func:`build_activated_nn`), copied into
        the DGP's kernels by the converter.
    :param noise_variance: initial Gaussian noise; default the network's training MSE.
    :param elbo_samples: passes of :func:`evaluate_elbo` for ``TwoStageResult.initial_elbo`` (the
        converted DGP's ELBO before stage 2); 0 (the default) skips it, leaving ``initial_elbo`` None —
        it costs that many passes over the whole data.
    """
    X, Y = _check_data(X, Y)
    if likelihood in ("softmax", "robustmax"):
        output_dim = int(num_classes or int(Y.max()) + 1)
    else:
        output_dim = Y.shape[1]
    if seed is not None:
        tf.random.set_seed(seed)
    network = build_activated_nn(
        X.shape[1],
        num_layers=num_layers,
        num_units=num_units,
        layer_widths=layer_widths,
        output_dim=1 if likelihood == "bernoulli" else output_dim,
        activation=activation,
        truncation_level=truncation_level,
        lengthscales=lengthscales,
        seed=seed,
    )
    network_history = train_network(network, X, Y, likelihood, network_schedule)
    if noise_variance is None and likelihood == "gaussian":
        noise_variance = float(max(np.mean((network(X).numpy() - Y) ** 2), 1e-4))
    make_likelihood(likelihood, output_dim)  # validates the name before converting
    conversion = dgp_from_keras(
        network, len(X), X=X[:2048], likelihood=likelihood, whiten=whiten, noise_variance=noise_variance or 0.01
    )
    initial_elbo = evaluate_elbo(conversion.dgp, X, Y, num_samples=elbo_samples) if elbo_samples > 0 else None
    dgp_history = train_dgp(conversion.dgp, X, Y, dgp_schedule)
    return TwoStageResult(network, conversion.dgp, network_history, dgp_history, conversion.max_abs_mismatch, initial_elbo)
