"""Make a plain network convertible exactly: swap its units for zonal ones, then recover its accuracy on the data.

A ReLU unit relu(w·x̃) = ‖w‖ ‖x̃‖ relu(ŵ·x̂) is a zonal unit, but not one of a finite-norm RKHS: under any zonal kernel
with finite prior variance s(1) = Σ_n λ_n N_n^d, its squared norm Σ_n σ_n² N_n^d / λ_n is at least (Σ_n |σ_n| N_n^d)²
(Cauchy–Schwarz), and for the ReLU's Gegenbauer coefficients σ_n that sum diverges in input dimension d ≥ 4. The
KL of a converted ReLU layer's means (half that norm per unit) therefore grows without bound with the truncation
level Ñ. A smooth activation's coefficients decay geometrically, so its units have a bounded norm and its twin
converts exactly (Dutordoir et al., 2021, Sec. 4–5).

:func:`make_convertible` builds that twin from the user's network and data:

1. **Swap.** Every activated block of the network (a Dense layer with an activation, or a Dense followed by an
   Activation/ReLU layer) becomes an :class:`~activated_dgp.deep.twin.ActivatedLayer` with the zonal ``activation``
   (the Swish 3t·sigmoid(3t) by default), and the linear layers after it one linear map, as
   :func:`~activated_dgp.deep.conversion.dgp_from_keras` composes them.
2. **Refit, layer by layer**, on (a subset of) the data, so that each layer starts at the network's own values:
   the directions by least squares onto the network's pre-activations, W' = argmin ‖[h', 1] Wᵀ − a‖² + 10⁻⁴ N ‖W'‖²
   (the ridge keeps the refitted weights small where h' is nearly collinear, so that fine-tuning starts stably), with h' the swapped network's input to the layer and a the network's pre-activations; then each unit's
   scale by the positive least-squares factor c_m = ⟨φ_m, u_m⟩ / ⟨φ_m, φ_m⟩ (a zonal unit is positively homogeneous
   in w, so c_m φ_m is the unit with direction c_m w_m) against the network's unit outputs u_m; then the linear
   map after the units by least squares onto the network's layer outputs.
3. **Fine-tune** the swapped network on (X, Y) with the likelihood's loss (:func:`train_network`), a schedule of
   about ``steps`` minibatch steps. With ``validation_data`` and a patience it stops early and restores its best
   check; without a patience, the parameters at the start are restored if training made the loss on (X, Y) worse.
   (The validation cross-entropy is not the guard: on rotated MNIST, fine-tuning raised it, as a network's
   overconfidence does, while it raised the accuracy, and the DGP converted from the fine-tuned network scored
   better than the one from the refitted start.)

The result converts exactly: ``dgp_from_keras(result.network, N)``'s mean propagation is the swapped network's
forward pass (to round-off), and ``train_two_stage(X, Y, network=result.network)`` runs the ELBO from there. Its
accuracy is the swapped network's, which the report gives beside the original's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from ..deep.conversion import _forward
from ..deep.network_reading import _logit_chain, _plans, resolve_head_likelihood, split_convertible_head
from ..deep.likelihoods import likelihood_name, network_loss
from ..deep.twin import ActivatedLayer
from ..zonal.spectra import DEFAULT_ACTIVATION, ZonalActivation
from .extractor import _check_inputs, extracted_features
from .fitters import _check_data, train_network
from .mean_kl_penalty import network_mean_kl
from .schedule import TrainingSchedule

__all__ = ["ConvertibleNetwork", "fine_tuning_schedule", "make_convertible", "swap_to_zonal"]

#: Rows of the data used by the layer-by-layer refit (a seeded subset when there are more).
REFIT_ROWS = 4096


@dataclass
class ConvertibleNetwork:
    """What :func:`make_convertible` hands back.

    :param network: the swapped, fine-tuned tf-keras network (float64; the original's classifier head, if any, as a
        final ``Softmax``/sigmoid ``Activation`` layer): it converts exactly.
    :param original_loss: the original network's loss on (X, Y) (MSE, or cross-entropy for a classifier).
    :param swapped_loss: the swapped network's loss on (X, Y) right after the refit, before fine-tuning.
    :param final_loss: its loss on (X, Y) after fine-tuning.
    :param layer_mismatch: per GP layer, the RMS difference between the swapped and the original layer's outputs on
        the refit rows, right after the refit.
    :param history: the fine-tuning's Keras history (and early stopping's record, if any).
    :param mean_kl: per activated block of the result, the KL its converted means will carry, ½ Σ_p V_pᵀ Kuu V_p
        (:func:`~activated_dgp.training.mean_kl_penalty.network_mean_kl`; what ``kl_weight`` penalises).
    """

    network: tf_keras.Model
    original_loss: float
    swapped_loss: float
    final_loss: float
    layer_mismatch: list
    history: dict = field(default_factory=dict)
    mean_kl: list = field(default_factory=list)


def _least_squares(F: np.ndarray, T: np.ndarray, intercept: bool, ridge: float):
    """(K, b) minimising ‖F K + b − T‖² + ridge · N ‖K‖² (b = None without an intercept)."""
    A = np.concatenate([F, np.ones((len(F), 1))], axis=1) if intercept else F
    penalty = ridge * len(F) * np.eye(A.shape[1])
    if intercept:
        penalty[-1, -1] = 0.0
    C = np.linalg.solve(A.T @ A + penalty, A.T @ T)
    return (C[:-1], C[-1]) if intercept else (C, None)


class _MeanKLPenalised(tf_keras.Model):
    """The swapped network fitted on its loss plus ``factor`` · KL_means (:func:`network_mean_kl`), the penalty added
    at every call; its weights are the network's own, so the fit trains the network itself."""

    def __init__(self, network: tf_keras.Model, factor: float):
        super().__init__(name=f"{network.name}_kl_penalised", dtype=network.dtype)
        self.network, self.factor = network, float(factor)

    def call(self, inputs, training=None):
        self.add_loss(self.factor * tf.add_n(network_mean_kl(self.network)))
        return self.network(inputs, training=training)


def fine_tuning_schedule(steps: int, num_data: int) -> TrainingSchedule:
    """The fine-tuning of :func:`make_convertible` by default: about ``steps`` minibatch steps of batch 32, Adam 1e-3
    halved after 1,000 steps without improvement of the training loss (down to 1e-5), no progress bar. Give the
    original network the same schedule to compare like with like (the same extra training)."""
    return TrainingSchedule.for_steps(steps, num_data, batch_size=32, learning_rate=1e-3, plateau_factor=0.5,
                                      plateau_steps=1000, min_learning_rate=1e-5)


def swap_to_zonal(
    network: tf_keras.Model,
    X,
    activation: Union[str, ZonalActivation] = DEFAULT_ACTIVATION,
    truncation_level: int = 20,
    ridge: float = 1e-4,
    seed: int = 0,
):
    """(logit network, head, per-layer mismatch): steps 1 and 2 of :func:`make_convertible` (the swap and the
    layer-by-layer refit on the rows of X), no training. ``head`` is the likelihood name of a removed classifier head
    ("softmax", "bernoulli") or None; the returned network computes the logits (or the regression output)."""
    plans = _plans(network)  # the conversion's own errors for a network that does not convert
    _, head = _logit_chain(network)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != network.input_shape[-1] or len(X) < 1:
        raise ValueError(f"X must be [N, {network.input_shape[-1]}] with N ≥ 1 for the network {network.name!r}, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X has non-finite values (NaN or inf)")
    if len(X) > REFIT_ROWS:
        X = X[np.sort(np.random.default_rng(seed).choice(len(X), REFIT_ROWS, replace=False))]
    dtype = gpflow.default_float()
    layers, mismatch = [tf_keras.Input((X.shape[1],), dtype=dtype)], []
    original, swapped = X, X
    for index, plan in enumerate(plans):
        W = plan.units.W  # [M, D+1]: the network's pre-activations are [h, 1] Wᵀ
        pre_activations = np.concatenate([original, np.ones((len(original), 1))], axis=1) @ W.T
        units = _forward(plan.units.layers, original)
        K, b = _least_squares(swapped, pre_activations, intercept=True, ridge=ridge)
        zonal = ActivatedLayer(W.shape[0], activation, truncation_level, initial_W=np.concatenate([K.T, b[:, None]], axis=1),
                               name=f"activated_{index}")
        phi = np.asarray(zonal(swapped), dtype=np.float64)
        scale = np.sum(phi * units, axis=0) / np.maximum(np.sum(phi**2, axis=0), np.finfo(float).tiny)
        scale = np.where(scale > 0, scale, 1.0)  # a unit whose best factor is not positive keeps its directions
        zonal.W.assign(zonal.W.numpy() * scale[:, None])
        phi = phi * scale
        layers.append(zonal)
        if plan.linear:
            target = _forward(plan.layers, original)
            K, b = _least_squares(phi, target, intercept=plan.bias is not None, ridge=ridge)
            linear = tf_keras.layers.Dense(K.shape[1], use_bias=b is not None, dtype=dtype, name=f"linear_{index}")
            linear.build((None, K.shape[0]))
            linear.set_weights([K] + ([b] if b is not None else []))
            layers.append(linear)
            swapped = phi @ K + (0.0 if b is None else b)
            original = target
        else:
            swapped, original = phi, units
        mismatch.append(float(np.sqrt(np.mean((swapped - original) ** 2))))
    return tf_keras.Sequential(layers, name=f"{network.name}_zonal"), head, mismatch


def make_convertible(
    network: tf_keras.Model,
    X,
    Y,
    *,
    likelihood: Optional[str] = None,
    activation: Union[str, ZonalActivation] = DEFAULT_ACTIVATION,
    truncation_level: int = 20,
    steps: int = 10_000,
    schedule: Optional[TrainingSchedule] = None,
    validation_data=None,
    seed: int = 0,
    kl_weight: float = 0.0,
) -> ConvertibleNetwork:
    """The network with every activated block swapped for zonal units, refitted to it layer by layer and fine-tuned on
    (X, Y), so that it converts exactly (module docstring).

    :param network: a trained tf-keras network whose layers :func:`~activated_dgp.dgp_from_keras` converts (Dense
        layers with their activations, Activation/ReLU layers, Dropout; a softmax or sigmoid head), or one that starts
        with layers that do not convert (a CNN's Conv2D, pooling and Flatten layers): then only its convertible tail
        of Dense layers (:func:`~activated_dgp.deep.network_reading.split_convertible_head`) is swapped and fine-tuned, on
        the features the first layers extract (which stay as they are and are shared with the result).
    :param X: [N, D] inputs (or whatever ``network`` takes, e.g. [N, H, W, C] images); :param Y: [N, P] targets (class indices [N, 1] for a softmax head, 0/1 for a sigmoid).
    :param likelihood: the loss's likelihood; default: the network's head's ("softmax", "bernoulli"), else "gaussian".
    :param activation: the zonal activation of the swapped units (a registered name or a ZonalActivation).
    :param truncation_level: Ñ of the swapped units.
    :param steps: the fine-tuning's length in minibatch steps (batch 32, Adam 1e-3 halved after 1,000 steps without
        improvement); ignored when ``schedule`` is given. 0 skips fine-tuning.
    :param validation_data: (X_val, Y_val) for early stopping when ``schedule`` sets a patience.
    :param kl_weight: β ≥ 0: fine-tune on the loss plus β · KL_means / N, the KL the converted means will carry
        (:func:`~activated_dgp.training.mean_kl_penalty.network_mean_kl`). β = 1 is the converted DGP's ELBO per
        data point with q(u)'s covariance collapsed, its mean terms up to the loss's scale: for a Gaussian
        likelihood the loss is the MSE, so the penalty is 2σ̂² β KL_means / N with σ̂² the original network's
        training MSE; for a classifier, β KL_means / N beside the cross-entropy. 0 (the default) fine-tunes on the
        loss alone. The start is restored when fine-tuning made this objective (not the loss alone) worse.
    """
    if isinstance(kl_weight, bool) or not (np.isfinite(kl_weight) and kl_weight >= 0):
        raise ValueError(f"kl_weight must be a finite number ≥ 0, got {kl_weight!r}")
    extractor, convertible = split_convertible_head(network)  # the conversion's own error for a network with no convertible tail
    if extractor is not None:
        X = extracted_features(extractor, _check_inputs(X, "X"))
        if validation_data is not None:
            validation_data = extracted_features(extractor, _check_inputs(validation_data[0], "validation X")), validation_data[1]
        made = make_convertible(convertible, X, Y, likelihood=likelihood, activation=activation, truncation_level=truncation_level,
                                steps=steps, schedule=schedule, validation_data=validation_data, seed=seed, kl_weight=kl_weight)
        made.network = tf_keras.Sequential([tf_keras.Input(network.input_shape[1:])] + list(extractor.layers) + list(made.network.layers),
                                           name=made.network.name)
        return made
    X, Y = _check_data(X, Y)
    logits, head, mismatch = swap_to_zonal(network, X, activation, truncation_level, seed=seed)
    likelihood = resolve_head_likelihood(head, likelihood)
    loss = network_loss(likelihood)
    original_logits = tf_keras.Sequential([tf_keras.Input(network.input_shape[1:])] + _logit_chain(network)[0])

    def loss_of(model) -> float:
        return float(loss(Y, np.asarray(model(X), dtype=np.float64)))

    original_loss, swapped_loss = loss_of(original_logits), loss_of(logits)
    # the penalty's factor: β / N, times 2σ̂² for the MSE of a Gaussian likelihood (kl_weight's docstring)
    factor = kl_weight / len(X) * (2.0 * max(original_loss, 1e-12) if likelihood_name(likelihood) == "gaussian" else 1.0)

    def objective(model) -> float:
        return loss_of(model) + (factor * float(tf.add_n(network_mean_kl(model))) if factor > 0 else 0.0)

    history = {}
    if steps < 0:
        raise ValueError(f"steps must be ≥ 0, got {steps!r}")
    if schedule is None and steps > 0:
        schedule = fine_tuning_schedule(steps, len(X))
    if schedule is not None:
        start, start_objective = [w.copy() for w in logits.get_weights()], objective(logits)
        fitted = logits if factor == 0 else _MeanKLPenalised(logits, factor)
        history = train_network(fitted, X, Y, likelihood, schedule, validation_data=validation_data)
        if schedule.patience is None and objective(logits) > start_objective:  # never hand back a network worse than the start
            logits.set_weights(start)
            history["restored_start"] = True
    final_loss = loss_of(logits)
    result = logits
    if head is not None:
        dtype = gpflow.default_float()
        final = (tf_keras.layers.Softmax(name="softmax", dtype=dtype) if head == "softmax"
                 else tf_keras.layers.Activation("sigmoid", name="sigmoid", dtype=dtype))
        result = tf_keras.Sequential(list(logits.layers) + [final], name=logits.name)
        result.build((None, X.shape[1]))
    return ConvertibleNetwork(result, original_loss, swapped_loss, final_loss, mismatch, history,
                              [float(kl) for kl in network_mean_kl(logits)])
