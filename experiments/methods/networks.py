"""The networks the methods are built on, and the cache that trains each of them once per split.

Every network baseline uses the *activated twin* :func:`activated_dgp.build_activated_nn` — the network the ADGP is
initialised from, [ActivatedLayer(128, zonal Swish), Dense(D, no bias)] × 2, [ActivatedLayer(128), Dense(1, no
bias)] — so that "ADGP vs NN" compares the DGP with its own initialisation. The ``plain`` network is an ordinary
network of the same shape (softplus Dense layers): what the twin's parametrisation costs in accuracy.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Callable, Dict, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import build_activated_nn, save, train_network
from activated_dgp.deep.twin import with_dropout
from experiments.harness.artifacts import ArtifactCache, atomic_write_text, restore_saved_weights
from experiments.methods.protocol import BATCH_SIZE, NUM_LAYERS, NUM_UNITS, Budget, SplitData, fit_parts
from experiments.methods.versions import network_key

DROPOUT_RATE = 0.1  # fixed-step budgets, which have no validation part to choose it on
#: The twin's zonal activation (protocol v6; the zonal Softplus until v5). The screen in
#: docs/results/twin_training.md: the Swish twin is within one SE of the plain network on 8 of 9 sets, the
#: Softplus twin on 7 (it loses naval and protein), and the Swish's truncation is exact to 1e-4.
TWIN_ACTIVATION = "swish"


def batched(function: Callable[[np.ndarray], np.ndarray], X: np.ndarray, batch: int = 2048) -> np.ndarray:
    """``function`` applied to the rows of ``X`` in batches of ``batch``, the results concatenated."""
    return np.concatenate([np.asarray(function(X[i : i + batch])) for i in range(0, len(X), batch)], axis=0)


def twin_lengthscales(input_dim: int) -> list:
    """ℓ = sqrt(D + 1) in every layer (every layer's input is D wide): standardised inputs then give
    ‖x̃‖ = ‖[x, 1]‖ / ℓ ≈ 1, the unit-sphere scale of the zonal kernel. A common ℓ leaves the angles,
    hence the function class, unchanged; it rescales each layer's output, and with ℓ = 1 that scale
    (≈ sqrt(D + 1) per layer) makes Adam's steps on V badly sized: measured on Boston (3,000 steps),
    training MSE 0.118 with ℓ = 1 against 0.035 with ℓ = sqrt(D + 1)."""
    return [math.sqrt(input_dim + 1.0)] * NUM_LAYERS


def build_twin_network(input_dim: int, seed: int) -> tf_keras.Model:
    """The benchmark's activated twin (module docstring): :func:`activated_dgp.build_activated_nn` with
    :data:`NUM_LAYERS` layers of :data:`NUM_UNITS` units and :func:`twin_lengthscales`, seeded."""
    return build_activated_nn(
        input_dim, num_layers=NUM_LAYERS, num_units=NUM_UNITS, activation=TWIN_ACTIVATION,
        lengthscales=twin_lengthscales(input_dim), seed=seed,
    )


def build_plain_network(input_dim: int, seed: int) -> tf_keras.Sequential:
    """An ordinary network of the twin's shape: [Dense(128, softplus), Dense(D, no bias)] × 2,
    [Dense(128, softplus), Dense(1, no bias)], Glorot-normal initialisation (seeded), float64."""
    rng = np.random.default_rng(seed)
    layers = [tf_keras.Input(shape=(input_dim,), dtype=gpflow.default_float())]
    for index in range(NUM_LAYERS):
        width = 1 if index == NUM_LAYERS - 1 else input_dim
        init = lambda: tf_keras.initializers.GlorotNormal(seed=int(rng.integers(2**31)))  # noqa: E731
        layers.append(tf_keras.layers.Dense(NUM_UNITS, activation="softplus", kernel_initializer=init(), dtype=gpflow.default_float()))
        layers.append(tf_keras.layers.Dense(width, use_bias=False, kernel_initializer=init(), dtype=gpflow.default_float()))
    return tf_keras.Sequential(layers, name="plain_nn")


def fine_tuning_steps(budget) -> int:
    """The fine-tuning steps of ``relu_adgp``'s ``make_convertible`` and of its control ``relu_tuned_ts``: a third of
    the budget's network steps (10,000 at converged-long), at least one."""
    return max(1, budget.nn_steps // 3)
#: The hidden width of the ``relu`` network: the plain network's unit count.
RELU_WIDTH = NUM_UNITS


def build_relu_network(input_dim: int, seed: int, outputs: int = 1) -> tf_keras.Sequential:
    """The network most users have: a 2-hidden-layer ReLU MLP with biases, [Dense(128, relu)] × 2 → Dense(outputs),
    Glorot-normal initialisation (seeded), float64 (``outputs=2``: a mean and a variance's pre-image, for
    :class:`GaussianNLL`)."""
    rng = np.random.default_rng(seed)
    init = lambda: tf_keras.initializers.GlorotNormal(seed=int(rng.integers(2**31)))  # noqa: E731
    dtype = gpflow.default_float()
    return tf_keras.Sequential(
        [tf_keras.Input(shape=(input_dim,), dtype=dtype)]
        + [tf_keras.layers.Dense(RELU_WIDTH, activation="relu", kernel_initializer=init(), dtype=dtype) for _ in range(2)]
        + [tf_keras.layers.Dense(outputs, kernel_initializer=init(), dtype=dtype)],
        name="relu_nn" if outputs == 1 else "relu_nll_nn",
    )


class GaussianNLL(tf_keras.losses.Loss):
    """−log N(y | μ(x), σ²(x)) per row for a network whose two outputs are μ and s, σ² = softplus(s) + 10⁻⁶: the proper
    scoring rule each member of a deep ensemble is trained on (Lakshminarayanan, Pritzel & Blundell 2017, eq. 1)."""

    def call(self, y_true, y_pred):
        mean, variance = mean_and_variance(y_pred)
        return 0.5 * tf.math.log(2.0 * np.pi * variance) + 0.5 * tf.square(y_true[:, 0] - mean) / variance


def mean_and_variance(outputs):
    """(μ, σ²) [N] each from a :class:`GaussianNLL` network's outputs [N, 2]."""
    return outputs[:, 0], tf.nn.softplus(outputs[:, 1]) + 1e-6


class NetworkMissing(LookupError):
    """No saved stage-1 network for a cell while the :class:`NetworkCache` is ``saved_only``."""


def network_file_name(kind: str, key: tuple, suffix: str) -> str:
    """The checkpoint file ``<kind>-seed<k>-<digest><suffix>`` of the network under ``key`` (``kind`` = key[0],
    digest: SHA-1 of ``repr(key)``). The name is built whole, never with ``Path.with_suffix``: a kind such as
    "dropout0.005" has a dot, at which ``with_suffix`` would cut, so every dropout rate and split would share
    "dropout0.h5"."""
    return f"{kind}-seed{key[1]}-{hashlib.sha1(repr(key).encode()).hexdigest()[:16]}{suffix}"


class NetworkCache(ArtifactCache):
    """The stage-1 networks of a run: saved under ``root`` (the runner's ``<out>/networks``; None: nothing is
    written) as ``<kind>-seed<k>-<digest>.saved`` (:func:`activated_dgp.save`: the Keras config and every weight,
    the twin's W included; ``.h5`` weight files of older runs are read too) and ``.json`` (the
    training history, written last: it marks a complete checkpoint), so a run interrupted after stage 1 (e.g.
    during ADGP's stage 2) resumes the cell from the saved network. The fits of the current split are also kept
    in memory, so NN, ensemble member 0, NN+TS and ADGP of one split share one network. ``saved_only``: a
    network with no checkpoint raises :class:`NetworkMissing` instead of being trained (the runner's
    ``--rescore``)."""

    def __init__(self, root=None, saved_only: bool = False):
        super().__init__(root, saved_only, name=network_file_name)
        self.memory: Dict[tuple, tuple] = {}

    def network(self, key: tuple, network: tf_keras.Model, train: Callable[[], Dict]) -> Dict:
        """Put the weights of the network under ``key`` into ``network`` (built, same architecture) and return
        its history: from memory, else from its checkpoint, else ``train()`` (which trains ``network`` in place
        and returns the history), saving the checkpoint atomically."""
        if key in self.memory:
            weights, history = self.memory[key]
            network.set_weights(weights)
            return history
        history = self._load(network, key)
        if history is None:
            if self.saved_only:
                raise NetworkMissing(f"no saved network for {key[:2]} under {self.root}")
            history = train()
            self._save(network, key, history)
        for stale in [k for k in self.memory if k[2:] != key[2:]]:  # another split or budget
            del self.memory[stale]
        self.memory[key] = (network.get_weights(), history)
        return history

    def _load(self, network: tf_keras.Model, key: tuple) -> Optional[Dict]:
        history = self.path(key[0], key, ".json")
        if history is None or not history.exists():
            return None
        if not restore_saved_weights(network, self.path(key[0], key, ".saved"), legacy_weights=self.path(key[0], key, ".h5")):
            return None
        return json.loads(history.read_text())

    def _save(self, network: tf_keras.Model, key: tuple, history: Dict) -> None:
        if self.root is None:
            return
        save(network, self.path(key[0], key, ".saved"))  # the library's one way (activated_dgp.save)
        atomic_write_text(self.path(key[0], key, ".json"), json.dumps(history))


def fit_network(kind: str, data: SplitData, budget: Budget, seed: int, networks: Optional[NetworkCache] = None,
                dropout_rate: float = DROPOUT_RATE) -> Tuple[tf_keras.Model, Dict]:
    """The ``kind`` ("twin", "plain", "relu", "relu_nll" or "dropout") network trained on MSE (``relu_nll``: on
    :class:`GaussianNLL`, two outputs) on the fit part, with early
    stopping on the validation part for a converged budget; seeded like stage 1 of ``train_two_stage``.
    ``networks`` (default: a fresh in-memory one) supplies it when it holds the network already."""
    networks = NetworkCache() if networks is None else networks
    (X, y), validation = fit_parts(data, budget)
    # keyed by the version that last changed stage 1, so checkpoints outlive versions that did not
    key = (kind if kind != "dropout" else f"dropout{dropout_rate}", seed, network_key(budget), X.shape, float(np.sum(X)), float(np.sum(y)))
    tf.random.set_seed(seed)
    input_dim = X.shape[1]
    if kind == "plain":
        network = build_plain_network(input_dim, seed)
    elif kind == "relu":
        network = build_relu_network(input_dim, seed)
    elif kind == "relu_nll":
        network = build_relu_network(input_dim, seed, outputs=2)
    else:
        network = build_twin_network(input_dim, seed)
        if kind == "dropout":
            network = with_dropout(network, dropout_rate, seed=seed)
    network(X[:1])

    def train() -> Dict:
        history = train_network(network, X, y, "gaussian", budget.schedule(budget.nn_steps, len(X)), validation_data=validation,
                                loss=GaussianNLL() if kind == "relu_nll" else None)
        return {"steps_run": history.get("steps_run", budget.epochs(budget.nn_steps, len(X)) * math.ceil(len(X) / BATCH_SIZE)),
                "best_step": history.get("best_step")}

    return network, networks.network(key, network, train)


def fit_twin(X, y, budget: Budget, seed: int) -> tf_keras.Model:
    """The activated twin trained on MSE on all of (X, y) with ``budget``'s fixed schedule."""
    tf.random.set_seed(seed)
    network = build_twin_network(X.shape[1], seed)
    train_network(network, X, y, "gaussian", budget.schedule(budget.nn_steps, len(X)))
    return network


def network_mean(network, X) -> np.ndarray:
    """The network's single output on the rows of ``X`` [N]."""
    return batched(lambda batch: network(batch).numpy(), X)[:, 0]


def training_mse(network, X, y) -> float:
    """The network's mean squared error on (X, y), at least 1e-8: the noise variance of its predictive."""
    return float(max(np.mean((network_mean(network, X) - y[:, 0]) ** 2), 1e-8))
