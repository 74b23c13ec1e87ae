"""The models of the UCI regression benchmark (Dutordoir et al., 2021, Sec. 5.2, Fig. 7, appendix E.1).

One configuration for every dataset: 3 layers, 128 hidden units (= inducing variables) per layer, narrow
layers as wide as the input, the zonal Swish (Softplus until protocol v5), Adam with learning rate 0.01 reduced ×0.9 when the training loss
plateaus (max(5 epochs, 200 steps)), minibatch 128. Every method sees standardised inputs and targets
(:class:`SplitData`) and returns its predictive distribution on the test inputs as a uniform mixture of
Gaussians, means and variances [S, N] (S = 1 for a single Gaussian), scored by
:func:`activated_dgp.metrics.regression_metrics`.

**Converged protocol** (budgets with ``converged=True``, the default for the published results): a seeded
10 % validation part of each training split is held out (the same rows for every method); every fit — each
network (NN, dropout, each ensemble member, ADGP's stage 1) and each ELBO fit (classic DGP, ADGP's stage 2)
— trains on the other 90 %, is checked on the validation part every max(1 epoch, 50 steps), stops after
500 steps without improvement under a cap (``nn_steps`` / ``dgp_steps``) and restores its best parameters
(:class:`activated_dgp.training.RestoreBest`). Networks are scored by their MSE, ELBO fits by the validation
NLPD. The steps run and the best step are recorded. Fixed-step budgets (``tiny`` … ``large``) train on the
whole training part for a fixed number of steps, as before.

All network baselines use the *activated twin* :func:`activated_dgp.build_activated_nn` — the network
the ADGP is initialised from, [ActivatedLayer(128, zonal Swish), Dense(D, no bias)] × 2,
[ActivatedLayer(128), Dense(1, no bias)] — so that "ADGP vs NN" compares the DGP with its own initialisation:

* ``nn`` — the twin on MSE; predictive N(f(x), σ²) with σ² = its MSE on the data it trained on. It *is*
  the ADGP's initialisation (one cached fit per split serves NN, NN+TS, ensemble member 0 and ADGP).
* ``dropout`` — the twin with Dropout(p) after every activated layer, active at test time (MC dropout,
  Gal & Ghahramani 2016): a mixture over ``mc_samples`` passes, each N(f_t(x), 1/τ). As in their
  protocol, the dropout rate p ∈ {0.005, 0.01, 0.05, 0.1} and the model precision τ are chosen on the
  validation part: one network per rate, τ maximising that network's validation log-likelihood of the
  mixture (their eq. 8), and the rate whose network scores best. Fixed-step budgets (no validation
  part): p = 0.1 and 1/τ = training MSE of the MC mean.
* ``ensemble`` — 5 twins from different seeds (member 0 is ``nn``'s network); mixture of N(f_k(x), σ_k²),
  σ_k² = member k's training MSE.
* ``nn_ts`` — temperature scaling for regression (Guo et al. 2017 [51] adapted): the NN's network;
  predictive N(f(x), T σ²_train) with T fitted on the validation part by minimising the validation NLL,
  whose minimiser is T = MSE_val / MSE_train (closed form).
* ``dgp`` — a classic doubly-stochastic DGP (Salimbeni & Deisenroth 2017 [5]) in gpflux: GPLayers with
  ``gpflow.kernels.ArcCosine(order=1)`` and ordinary inducing points (k-means of the training inputs), identity
  mean functions in the hidden layers, hidden q_sqrt scaled by 1e-5, Gaussian noise initialised at
  :data:`DGP_INITIAL_NOISE` (0.1 of the standardised targets' variance; the paper's 0.01 until v5) — gpflux's
  ``build_constant_input_dim_deep_gp`` with the arc-cosine kernel in place of the squared exponential.
* ``adgp`` — :func:`activated_dgp.train_two_stage` from the NN's network, with the library's ``validation`` recipe
  (chosen from the stage-2 diagnosis, docs/results/stage2.md); prediction by ``mc_samples`` samples
  propagated through the layers.
* ``adgp_paper``, ``adgp_elbo``, ``adgp_floor`` — the other stage-2 recipes of issue 36's screen (run only when
  named; :data:`STAGE2_RECIPES`): the paper's v = 1 without early stopping, v chosen on the ELBO, and the
  validation choice with a floor :data:`RECIPE_FLOOR` on v. Each is ``adgp``'s path with other stage-2 options, and
  its record also scores the same fit with the far-field residual switched off (``extra.far_field_off``).
* ``plain`` — an ordinary network of the same shape, [Dense(128, softplus), Dense(D, no bias)] × 2,
  [Dense(128, softplus), Dense(1, no bias)]: what the twin's parametrisation costs in accuracy.
* ``plain_adgp`` — the plain network converted approximately (``dgp_from_keras``: zonal Softplus
  log(1 + e^(3t)) in place of softplus, V refitted by ridge regression) and trained like ``adgp``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Optional, Tuple

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras
from scipy.cluster.vq import kmeans2

from activated_dgp import TrainingSchedule, build_activated_nn, train_dgp, train_network, train_two_stage
from activated_dgp.training import STAGE2_RECIPES as LIBRARY_RECIPES
from activated_dgp.eigen import LinearisedLaplace
from activated_dgp.metrics import regression_metrics
from activated_dgp.deep.far_field import far_field_switched_off, has_far_field
from activated_dgp.deep.twin import with_dropout
from activated_dgp.deep.prediction import sample_layers
from experiments.harness.artifacts import ArtifactCache, atomic_write, atomic_write_text

NUM_LAYERS = 3
NUM_UNITS = 128
BATCH_SIZE = 128
DROPOUT_RATE = 0.1  # fixed-step budgets, which have no validation part to choose it on
DROPOUT_RATES = (0.005, 0.01, 0.05, 0.1)  # Gal & Ghahramani's grid, chosen on the validation part
ENSEMBLE_SIZE = 5
VALIDATION_FRACTION = 0.1
PREDICT_BATCH = 256
PLATEAU_STEPS = 200  # the plateau patience in minibatch steps (at least 5 epochs)
MIN_LEARNING_RATE = 1e-4
#: The twin's zonal activation (protocol v6; the zonal Softplus until v5). The screen in
#: docs/results/twin_training.md: the Swish twin is within one SE of the plain network on 8 of 9 sets, the
#: Softplus twin on 7 (it loses naval and protein), and the Swish's truncation is exact to 1e-4.
TWIN_ACTIVATION = "swish"


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

    def key(self) -> str:
        """The configuration that results depend on, for the records' key (never mix settings)."""
        return (
            f"{self.name}:nn{self.nn_steps}:dgp{self.dgp_steps}:mc{self.mc_samples}:"
            + (f"early-stopping(val {VALIDATION_FRACTION}, check {CHECK_STEPS}, patience {self.patience_steps})" if self.converged else "fixed-steps")
            + f":{PROTOCOL_VERSION}"
        )


# bump when a method's definition changes, and list what it changed in METHOD_CHANGES. The report shows, per
# (dataset, method), the newest version that has records, and names the cells still on an older one.
PROTOCOL_VERSION = "v6"
#: What each protocol version changed: method names, "network" (stage-1 training, which keys the network
#: checkpoints) or "*" (everything; v2 is the first version these records carry over from). A record still counts
#: under the current version when its method has not changed since its own (:func:`upgrade_record`); every other
#: record is kept apart by its protocol key. v3: ADGP's kernel-variance grid extends past 1e-3 while the validation
#: NLPD improves (it sat at the floor on most layers; naval wants ~1e-5).
#: v4: ADGP's noise variance is chosen jointly with the output layer's v (``noise_variance="selected"``; on
#: yacht the v3 search, at a fixed noise, missed the pair where both move).
#: v5: the classic DGP's noise starts at 0.1 instead of 0.01 (:data:`DGP_INITIAL_NOISE`).
#: v6: the twin's activation is the zonal Swish (:data:`TWIN_ACTIVATION`, docs/results/twin_training.md), which
#: changes every twin-based network (NN, NN+TS, dropout, ensemble, ADGP's stage 1); ADGP's and plain→ADGP's
#: stage 2 ramps a fresh Adam's learning rate over 100 steps and adds the far-field residual (the library's
#: defaults since the twelfth session; the record also scores the same fit without the residual). The classic
#: DGP keeps its v5 definition: its schedule pins ``ramp_steps=0``, as Salimbeni & Deisenroth train it.
#: The stage-2 recipe candidates of issue 36 (:data:`RECIPE_METHODS`) first exist in v6 and are listed under it, so
#: that no record older than their definition could ever be carried over to them.
RECIPE_METHODS = ("adgp_paper", "adgp_elbo", "adgp_floor")
#: The ADGP ensemble of issue 36 first exists in v6 as well.
ENSEMBLE_METHODS = ("adgp_ensemble",)
METHOD_CHANGES = {
    "v2": ("*",), "v3": ("adgp", "plain_adgp"), "v4": ("adgp", "plain_adgp"), "v5": ("dgp",),
    "v6": ("network", "nn", "nn_ts", "dropout", "ensemble", "adgp", "plain_adgp", *RECIPE_METHODS, *ENSEMBLE_METHODS),
}


def last_change(name: str) -> int:
    """The latest protocol version, up to the current one, that changed ``name`` (a method or "network")."""
    current = int(PROTOCOL_VERSION[1:])
    return max(int(v[1:]) for v, names in METHOD_CHANGES.items() if int(v[1:]) <= current and (name in names or "*" in names))


def version_number(protocol) -> int:
    """The version at the end of a protocol key ("…:v6" → 6; −1 without one)."""
    tail = str(protocol).rpartition(":")[2]
    return int(tail[1:]) if tail[:1] == "v" and tail[1:].isdigit() else -1


def upgrade_record(record: Dict) -> Dict:
    """``record`` with its protocol key moved to the newest version, up to :data:`PROTOCOL_VERSION`, that has
    not changed its method since the record's own version (``upgraded_from`` says from which); unchanged when
    that is its own version. A v3 NN record thus counts under v5 (NN changed in v6), not under v6."""
    protocol = record.get("protocol")
    own = version_number(protocol) if isinstance(protocol, str) else -1
    if own < 0:
        return record
    head, _, version = protocol.rpartition(":")
    current, name = version_number(PROTOCOL_VERSION), str(record.get("method"))
    later = [int(v[1:]) for v, names in METHOD_CHANGES.items() if own < int(v[1:]) <= current and (name in names or "*" in names)]
    target = min(later) - 1 if later else current
    if target <= own:
        return record
    return {**record, "protocol": f"{head}:v{target}", "upgraded_from": version}

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

    def validation_split(self):
        """(X_fit, y_fit), (X_val, y_val): the seeded 10 % validation part of the training split that
        every method of the converged protocol stops on (the same rows for every method)."""
        from activated_dgp.training import split_validation

        return split_validation(self.X_train, self.y_train, VALIDATION_FRACTION, self.seed)


Prediction = Tuple[np.ndarray, np.ndarray, Dict]  # means [S, N], variances [S, N], extra fields


def _batched(function: Callable[[np.ndarray], np.ndarray], X: np.ndarray, batch: int = 2048) -> np.ndarray:
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
    written) as ``<kind>-seed<k>-<digest>.h5`` (every Keras weight, the twin's W included) and ``.json`` (the
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
        network.load_weights(str(self.path(key[0], key, ".h5")))
        return json.loads(history.read_text())

    def _save(self, network: tf_keras.Model, key: tuple, history: Dict) -> None:
        if self.root is None:
            return
        atomic_write(self.path(key[0], key, ".h5"), lambda temporary: network.save_weights(str(temporary)))
        atomic_write_text(self.path(key[0], key, ".json"), json.dumps(history))


def fit_parts(data: SplitData, budget: Budget):
    """(X_fit, y_fit) and the validation part (None for a fixed-step budget, which trains on all)."""
    if budget.converged:
        return data.validation_split()
    return (data.X_train, data.y_train), None


def fit_network(kind: str, data: SplitData, budget: Budget, seed: int, networks: Optional[NetworkCache] = None,
                dropout_rate: float = DROPOUT_RATE) -> Tuple[tf_keras.Model, Dict]:
    """The ``kind`` ("twin", "plain" or "dropout") network trained on MSE on the fit part, with early
    stopping on the validation part for a converged budget; seeded like stage 1 of ``train_two_stage``.
    ``networks`` (default: a fresh in-memory one) supplies it when it holds the network already."""
    networks = NetworkCache() if networks is None else networks
    (X, y), validation = fit_parts(data, budget)
    # keyed by the version that last changed stage 1, so checkpoints outlive versions that did not
    network_protocol = budget.key().rpartition(":")[0] + f":v{last_change('network')}"
    key = (kind if kind != "dropout" else f"dropout{dropout_rate}", seed, network_protocol, X.shape, float(np.sum(X)), float(np.sum(y)))
    tf.random.set_seed(seed)
    input_dim = X.shape[1]
    if kind == "plain":
        network = build_plain_network(input_dim, seed)
    else:
        network = build_twin_network(input_dim, seed)
        if kind == "dropout":
            network = with_dropout(network, dropout_rate, seed=seed)
    network(X[:1])

    def train() -> Dict:
        history = train_network(network, X, y, "gaussian", budget.schedule(budget.nn_steps, len(X)), validation_data=validation)
        return {"steps_run": history.get("steps_run", budget.epochs(budget.nn_steps, len(X)) * math.ceil(len(X) / BATCH_SIZE)),
                "best_step": history.get("best_step")}

    return network, networks.network(key, network, train)


def _fit_twin(X, y, budget: Budget, seed: int) -> tf_keras.Model:
    """The activated twin trained on MSE on all of (X, y) with ``budget``'s fixed schedule."""
    tf.random.set_seed(seed)
    network = build_twin_network(X.shape[1], seed)
    train_network(network, X, y, "gaussian", budget.schedule(budget.nn_steps, len(X)))
    return network


def _network_mean(network, X) -> np.ndarray:
    return _batched(lambda batch: network(batch).numpy(), X)[:, 0]


def _training_mse(network, X, y) -> float:
    return float(max(np.mean((_network_mean(network, X) - y[:, 0]) ** 2), 1e-8))


def _network_prediction(kind: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    network, history = fit_network(kind, data, budget, data.seed, networks)
    (X, y), _ = fit_parts(data, budget)
    noise = _training_mse(network, X, y)
    return _network_mean(network, data.X_test)[None], np.full((1, len(data.X_test)), noise), {"train_mse": noise, "network": history}


def predict_nn(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _network_prediction("twin", data, budget, networks)


def predict_plain(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _network_prediction("plain", data, budget, networks)


def build_dropout_twin(input_dim: int, seed: int, rate: float = DROPOUT_RATE) -> tf_keras.Model:
    """The activated twin with Dropout(rate) after every activated (wide) layer."""
    twin = build_twin_network(input_dim, seed)
    return with_dropout(twin, rate, seed=seed)


def mixture_noise_variance(means: np.ndarray, y: np.ndarray) -> float:
    """MC dropout's model precision τ (Gal & Ghahramani 2016, eq. 8), as the noise variance 1/τ that
    maximises the validation log-likelihood of the mixture (1/T) Σ_t N(y; f_t(x), 1/τ); means [T, N]."""
    from scipy.optimize import minimize_scalar

    from activated_dgp.metrics import gaussian_mixture_log_density

    def loss(log_variance):
        return -float(np.mean(gaussian_mixture_log_density(y, means, np.full_like(means, np.exp(log_variance)))))

    result = minimize_scalar(loss, bounds=(np.log(1e-8), np.log(100.0)), method="bounded")
    return float(np.exp(result.x))


def predict_dropout(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    (X, y), validation = fit_parts(data, budget)

    def mc_means(network, inputs):  # [T, N] passes with dropout on
        return np.stack([_batched(lambda b: network(b, training=True).numpy(), inputs)[:, 0] for _ in range(budget.mc_samples)])

    if validation is None:  # fixed-step budgets: p = 0.1, 1/τ = the training MSE of the MC-mean prediction
        network, history = fit_network("dropout", data, budget, data.seed, networks)
        rows = np.random.default_rng(data.seed).permutation(len(X))[:2000]
        noise = float(max(np.mean((mc_means(network, X[rows]).mean(0) - y[rows, 0]) ** 2), 1e-8))
        means = mc_means(network, data.X_test)
        return means, np.full_like(means, noise), {"noise_variance": noise, "tau": 1.0 / noise, "network": history, "dropout_rate": DROPOUT_RATE}

    from activated_dgp.metrics import gaussian_mixture_log_density

    candidates = []
    for rate in DROPOUT_RATES:
        network, history = fit_network("dropout", data, budget, data.seed, networks, dropout_rate=rate)
        validation_means = mc_means(network, validation[0])
        noise = mixture_noise_variance(validation_means, validation[1][:, 0])
        score = float(np.mean(gaussian_mixture_log_density(validation[1][:, 0], validation_means, np.full_like(validation_means, noise))))
        candidates.append((score, rate, noise, history, network))
    score, rate, noise, history, network = max(candidates, key=lambda candidate: candidate[0])
    means = mc_means(network, data.X_test)  # test passes for the chosen rate only
    return means, np.full_like(means, noise), {
        "noise_variance": noise, "tau": 1.0 / noise, "network": history, "dropout_rate": rate,
        "validation_log_likelihood": {str(c[1]): c[0] for c in candidates},
    }


def predict_ensemble(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    means, variances, histories = [], [], []
    (X, y), _ = fit_parts(data, budget)
    for member in range(ENSEMBLE_SIZE):
        network, history = fit_network("twin", data, budget, data.seed + 1000 * member, networks)
        means.append(_network_mean(network, data.X_test))
        variances.append(np.full(len(data.X_test), _training_mse(network, X, y)))
        histories.append(history)
    return np.stack(means), np.stack(variances), {"members": ENSEMBLE_SIZE, "networks": histories}


def predict_nn_ts(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    if budget.converged:  # the NN's own network (trained on the fit part, stopped on the validation part)
        network, history = fit_network("twin", data, budget, data.seed, networks)
        (X_fit, y_fit), (X_val, y_val) = data.validation_split()
    else:
        (X_fit, y_fit), (X_val, y_val) = data.validation_split()
        network, history = _fit_twin(X_fit, y_fit, budget, data.seed), {}
    train_mse = _training_mse(network, X_fit, y_fit)
    val_mse = float(max(np.mean((_network_mean(network, X_val) - y_val[:, 0]) ** 2), 1e-8))
    temperature = val_mse / train_mse  # argmin_T of the validation NLL of N(f(x), T·MSE_train)
    noise = temperature * train_mse
    means = _network_mean(network, data.X_test)[None]
    return means, np.full_like(means, noise), {"temperature": temperature, "train_mse": train_mse, "validation_mse": val_mse, "network": history}


def dgp_mixture(dgp: gpflux.models.DeepGP, X, num_samples: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Predictive mixture of a Gaussian-likelihood DeepGP: per propagated sample s the last layer's
    N(μ_s(x), σ²_s(x) + σ²_noise); means, variances [S, N]. Batched over test points for memory."""
    noise = float(dgp.likelihood_layer.likelihood.variance.numpy())
    means, variances = [], []
    for start in range(0, len(X), PREDICT_BATCH):
        _, mean, var = sample_layers(dgp, X[start : start + PREDICT_BATCH], num_samples, seed=seed + start)
        means.append(mean.numpy()[..., 0])
        variances.append(var.numpy()[..., 0] + noise)
    return np.concatenate(means, 1), np.concatenate(variances, 1)


#: The floor of ``adgp_floor``: the library's ``floor`` recipe (why 1e-2: ``activated_dgp.training.recipes.FLOOR``).
RECIPE_FLOOR = LIBRARY_RECIPES["floor"].kernel_variance_floor


#: The ADGP methods' stage-2 recipes (converged budgets): method → the library's recipe name
#: (:data:`activated_dgp.training.STAGE2_RECIPES`). ``adgp`` is the validation-chosen candidate; the others run
#: only when named. ``adgp_paper`` — the paper's recipe (Dutordoir et al. 2021, Sec. 5.2 and appendix E.1: "first
#: train the mean of the approximate posterior w.r.t. the MSE, and then optimise all parameters w.r.t. the ELBO", Adam
#: 0.01 ×0.9 on plateaus, minibatch 128; no validation part, stopping rule or step count is stated): v = 1 at
#: conversion, noise = the network's validation MSE, stage 2 for the budget's full ``dgp_steps`` with no early
#: stopping. It differs from the paper in: the step count (the budget's cap, the paper gives none); stage 2 trains on
#: the 90 % fit part (the shared early-stopped network was trained there, the validation part only sets the starting
#: noise); the library's stage-2 defaults (a 100-step learning-rate ramp, the divergence guard that restores the best
#: training −ELBO check, the far-field residual, also scored without); and the twin (zonal Swish, not Softplus).
#: ``adgp_elbo`` — v and the noise chosen jointly on the ELBO of the fit part, early stopping as ``adgp``.
#: ``adgp_floor`` — ``adgp`` with v ≥ :data:`RECIPE_FLOOR` (``kernel_variance_floor``).
STAGE2_RECIPES = {"adgp": "validation", "adgp_paper": "paper", "adgp_elbo": "elbo", "adgp_floor": "floor"}


def recipe_options(method: str) -> Dict:
    """What ``method``'s recipe sets, as the records keep it (``extra.options``; the fit itself is handed the recipe):
    the UCI methods always have a validation part, so the paper's noise starts from the network's validation MSE."""
    recipe = LIBRARY_RECIPES[STAGE2_RECIPES[method]]
    options = {"kernel_variance": recipe.kernel_variance, "noise_variance": recipe.noise_variance or "validation"}
    if recipe.kernel_variance_floor is not None:
        options["kernel_variance_floor"] = recipe.kernel_variance_floor
    return options


def _elbo_fit_summary(history: dict) -> dict:
    """What a record keeps of an early-stopped ELBO fit (``RestoreBest.summary``): steps run, best step restored,
    its validation NLPD, and the step where the fit diverged (None if it did not)."""
    return {k: history.get(k) for k in ("steps_run", "best_step", "best_validation", "diverged_step")}


def _adgp(kind: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None, recipe: str = "adgp",
          seed: Optional[int] = None, off_mixture: Optional[list] = None) -> Prediction:
    """Convert the split's ``kind`` network of ``seed`` (default the split's) and train it through ``recipe``'s stage
    2; the test mixture, and in the extras the same fit scored with the far-field residual switched off (whose
    mixture is appended to ``off_mixture`` when a list is given)."""
    if recipe != "adgp" and not budget.converged:
        raise ValueError(f"the stage-2 recipe {recipe!r} needs a converged budget (its validation part); got {budget.name!r}")
    seed = data.seed if seed is None else seed
    network, history = fit_network(kind, data, budget, seed, networks)
    (X, y), validation = fit_parts(data, budget)
    chosen = LIBRARY_RECIPES[STAGE2_RECIPES[recipe]] if validation is not None else LIBRARY_RECIPES["paper"]
    options = recipe_options(recipe) if validation is not None else {}
    schedule = budget.schedule(budget.dgp_steps, len(X)) if chosen.early_stopping else protocol_schedule(budget.dgp_steps, len(X), early_stopping=False)
    result = train_two_stage(
        X, y, likelihood="gaussian", network=network, validation_data=validation, recipe=chosen,
        dgp_schedule=schedule, seed=seed,
    )
    init_noise = _training_mse(network, X, y)
    init = regression_metrics(data.y_test, _network_mean(network, data.X_test), init_noise, data.y_scale)
    means, variances = dgp_mixture(result.dgp, data.X_test, budget.mc_samples, seed)
    extra = {}
    if has_far_field(result.dgp):
        with far_field_switched_off(result.dgp):  # the same samples through the hidden layers: issue 32's paired cell
            off = dgp_mixture(result.dgp, data.X_test, budget.mc_samples, seed)
        extra["far_field_off"] = regression_metrics(data.y_test, *off, data.y_scale)
        if off_mixture is not None:
            off_mixture.append(off)
    extra.update({
        "init_rmse": init["rmse"],
        "init_nlpd": init["nlpd"],
        "conversion_mismatch": result.conversion_mismatch,
        "kernel_variances": result.kernel_variances,
        "initial_noise_variance": result.initial_noise_variance,
        "noise_variance": float(result.dgp.likelihood_layer.likelihood.variance.numpy()),
        "final_loss": float(result.dgp_history["loss"][-1]) if result.dgp_history.get("loss") else None,
        "network": history,
        "dgp": _elbo_fit_summary(result.dgp_history),
        "options": {k: str(v) for k, v in options.items()},
    })
    if recipe != "adgp":
        extra["stage2_early_stopping"] = schedule.patience is not None
    # the predictive σ on training rows, against the test σ of the record (the shift diagnosis): after every other
    # prediction, so that it changes none of them
    rows = np.sort(np.random.default_rng(seed).permutation(len(data.X_train))[:TRAIN_STD_ROWS])
    extra["train_std"] = float(mixture_mean_std(*dgp_mixture(result.dgp, data.X_train[rows], budget.mc_samples, seed))[1].mean())
    return means, variances, extra


def predict_adgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks)


def predict_plain_adgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("plain", data, budget, networks)


def predict_adgp_paper(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_paper")


def predict_adgp_elbo(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_elbo")


def predict_adgp_floor(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_floor")


#: The stage-2 recipe of ``adgp_ensemble`` (issue 36, item 3): ``adgp``'s, the library's ``validation`` recipe, which is
#: what the default ``by_likelihood`` resolves to for a Gaussian likelihood (activated_dgp.training.recipes): each
#: member is trained as ``train_two_stage`` trains a regression ADGP by default. Changing it is a protocol change of
#: ``adgp_ensemble``.
ADGP_ENSEMBLE_RECIPE = "adgp"


def predict_adgp_ensemble(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None,
                          members: int = ENSEMBLE_SIZE) -> Prediction:
    """An ensemble of ADGPs: each of the ``ensemble`` method's ``members`` (:data:`ENSEMBLE_SIZE`) twins (seeds split seed +
    1000·m, the same cached networks) converted and trained through :data:`ADGP_ENSEMBLE_RECIPE`'s stage 2. The
    prediction is the uniform mixture over members of each member's uniform mixture over its samples,
    p(y|x) = (1/M) Σ_m (1/S) Σ_s N(y; μ_ms(x), σ²_ms(x)): every member has the same S, so the components of all
    members are simply stacked. ``far_field_off`` scores the same stack with every member's residual switched off."""
    means, variances, extras, off = [], [], [], []
    for member in range(members):
        mean, variance, extra = _adgp("twin", data, budget, networks, recipe=ADGP_ENSEMBLE_RECIPE,
                                      seed=data.seed + 1000 * member, off_mixture=off)
        means.append(mean), variances.append(variance), extras.append(extra)
    info = {"members": members, "recipe": ADGP_ENSEMBLE_RECIPE, "member_extras": extras}
    if len(off) == members:
        info["far_field_off"] = regression_metrics(data.y_test, np.concatenate([m for m, _ in off]),
                                                   np.concatenate([v for _, v in off]), data.y_scale)
    return np.concatenate(means), np.concatenate(variances), info


#: The classic DGP's initial noise variance (targets standardised). Salimbeni & Deisenroth start at 0.01 and run
#: 20,000 full-batch steps; under early stopping that start fails on noisy sets: the softplus-parametrised noise grows
#: ~10x slower from 0.01 than from 0.1, the means over-fit meanwhile, and the fit stops near its start (wine split 0:
#: best step 55, noise 0.013, test NLPD 1.472; from 0.1: best step 2,420, noise 0.55, NLPD 1.170).
DGP_INITIAL_NOISE = 0.1


def build_classic_dgp(X: np.ndarray, seed: int, num_layers: int = NUM_LAYERS, num_inducing: int = NUM_UNITS) -> gpflux.models.DeepGP:
    """Salimbeni & Deisenroth's DGP as gpflux builds it, with an ARD arc-cosine kernel (order 1) per layer."""
    num_data, input_dim = X.shape
    rng = np.random.default_rng(seed)
    rows = rng.choice(num_data, size=min(num_data, 20000), replace=False)
    np.random.seed(seed)  # kmeans2 "points" initialisation
    if num_data >= num_inducing:
        centroids, _ = kmeans2(X[rows], k=num_inducing, minit="points", seed=seed)
    else:
        centroids = X[rng.choice(num_data, size=num_inducing, replace=True)] + 1e-3 * rng.normal(size=(num_inducing, input_dim))
    layers = []
    for index in range(num_layers):
        last = index == num_layers - 1
        output_dim = 1 if last else input_dim
        base = gpflow.kernels.ArcCosine(order=1, variance=1.0, weight_variances=np.ones(input_dim), bias_variance=1.0)
        kernel = gpflux.helpers.construct_basic_kernel(base, output_dim=output_dim, share_hyperparams=True)
        inducing = gpflux.helpers.construct_basic_inducing_variables(
            num_inducing=num_inducing, input_dim=input_dim, share_variables=True, z_init=centroids.copy()
        )
        mean = gpflow.mean_functions.Zero() if last else gpflow.mean_functions.Identity()
        layer = gpflux.layers.GPLayer(kernel, inducing, num_data, mean_function=mean, name=f"gp_{index}")
        if not last:
            layer.q_sqrt.assign(layer.q_sqrt * 1e-5)
        layers.append(layer)
    return gpflux.models.DeepGP(layers, gpflux.layers.LikelihoodLayer(gpflow.likelihoods.Gaussian(DGP_INITIAL_NOISE)))


def predict_dgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    (X, y), validation = fit_parts(data, budget)
    tf.random.set_seed(data.seed)
    dgp = build_classic_dgp(X, data.seed)
    schedule = replace(budget.schedule(budget.dgp_steps, len(X)), ramp_steps=0)  # v5's definition, as the paper trains it
    history = train_dgp(dgp, X, y, schedule, validation_data=validation)
    means, variances = dgp_mixture(dgp, data.X_test, budget.mc_samples, data.seed)
    extra = {
        "noise_variance": float(dgp.likelihood_layer.likelihood.variance.numpy()),
        "final_loss": float(history["loss"][-1]) if history.get("loss") else None,
        "dgp": _elbo_fit_summary(history),
    }
    return means, variances, extra


#: LLA on the NN's own network (NeuralEF paper §4.3, Table 2 at CPU scale; issue 33): the same twin, θ_MAP its
#: early-stopped weights; noise σ² = its training MSE (the NN's own predictive noise); prior precision by the
#: Laplace evidence (exact, last layer) or, for the NeuralEF method, on the validation part. The exact GGN only where
#: the twin has at most LLA_EXACT_MAX_PARAMETERS parameters (P × P eigendecomposition).
LLA_EXACT_MAX_PARAMETERS = 5000
LLA_EIGENPAIRS = 20
LLA_NEURALEF_STEPS = 2000


def twin_parameter_count(input_dim: int) -> int:
    """P of the benchmark's twin for D inputs."""
    return int(build_twin_network(input_dim, 0).count_params())


def applicable(method: str, input_dim: int) -> bool:
    """Whether ``method`` runs on a dataset of ``input_dim`` inputs (the exact LLA needs P ≤ the limit)."""
    return method != "lla_exact" or twin_parameter_count(input_dim) <= LLA_EXACT_MAX_PARAMETERS


def _lla(method: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    network, history = fit_network("twin", data, budget, data.seed, networks)
    (X, y), validation = fit_parts(data, budget)
    noise = _training_mse(network, X, y)
    eigen = method == "neuralef"
    prior = ("validation" if validation is not None else 1.0) if eigen else "marginal_likelihood"
    lla = LinearisedLaplace(
        network, likelihood="gaussian", noise_variance=noise, prior_precision=prior, method=method,
        num_eigenpairs=LLA_EIGENPAIRS, neuralef_steps=LLA_NEURALEF_STEPS, seed=data.seed,
        max_parameters=LLA_EXACT_MAX_PARAMETERS, verbose=0,
    )
    lla.fit(X, y, validation_data=validation if prior == "validation" else None,
            checkpoint_dir=_neuralef_checkpoints(networks, network, data.seed) if eigen else None)
    means, variances = (np.asarray(t)[:, 0][None] for t in lla.predict_y(data.X_test))
    return means, variances, {
        "noise_variance": noise, "prior_precision": float(lla.prior_precision), "prior_precision_by": str(prior),
        "num_parameters": lla.num_parameters, "network": history,
        **({"num_eigenpairs": LLA_EIGENPAIRS, "neuralef_steps": LLA_NEURALEF_STEPS} if eigen else {}),
        **({"log_evidence": float(lla.log_evidence)} if lla.log_evidence is not None else {}),
    }


def _neuralef_checkpoints(networks: Optional[NetworkCache], network: tf_keras.Model, seed: int) -> Optional[str]:
    """Where the NeuralEF LLA of ``network`` checkpoints its training (resumable; None without a saving cache):
    next to the run's networks, keyed by a digest of θ_MAP and the LLA settings, so no other network's training
    is ever resumed."""
    if networks is None:
        return None
    weights = hashlib.sha1(b"".join(np.asarray(w, dtype=np.float64).tobytes() for w in network.get_weights())).hexdigest()
    key = ("lla-neuralef", seed, weights, LLA_EIGENPAIRS, LLA_NEURALEF_STEPS)
    return networks.checkpoint_dir(key[0], key)


def predict_lla_last_layer(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("last_layer", data, budget, networks)


def predict_lla_exact(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("exact", data, budget, networks)


def predict_lla_neuralef(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("neuralef", data, budget, networks)


METHODS: Dict[str, Callable[[SplitData, Budget, NetworkCache], Prediction]] = {
    "nn": predict_nn,
    "dropout": predict_dropout,
    "ensemble": predict_ensemble,
    "nn_ts": predict_nn_ts,
    "dgp": predict_dgp,
    "adgp": predict_adgp,
    "plain": predict_plain,
    "plain_adgp": predict_plain_adgp,
    "lla_last_layer": predict_lla_last_layer,
    "lla_exact": predict_lla_exact,
    "lla_neuralef": predict_lla_neuralef,
    "adgp_paper": predict_adgp_paper,
    "adgp_elbo": predict_adgp_elbo,
    "adgp_floor": predict_adgp_floor,
    "adgp_ensemble": predict_adgp_ensemble,
}
LABELS = {
    "nn": "NN",
    "dropout": "NN+Dropout",
    "ensemble": "NN Ensemble",
    "nn_ts": "NN+TS",
    "dgp": "DGP",
    "adgp": "ADGP",
    "plain": "plain NN",
    "plain_adgp": "plain→ADGP",
    "lla_last_layer": "LLA last layer",
    "lla_exact": "LLA exact",
    "lla_neuralef": "LLA NeuralEF",
    "adgp_paper": "ADGP paper (v=1)",
    "adgp_elbo": "ADGP ELBO-v",
    "adgp_floor": "ADGP v-floor",
    "adgp_ensemble": "ADGP Ensemble",
}


def mixture_mean_std(means: np.ndarray, variances: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation [N] of the uniform mixture (1/S) Σ_s N(μ_s, σ²_s) per point (means, variances
    [S, N]): μ = mean_s μ_s, σ² = mean_s σ²_s + mean_s (μ_s − μ)² (the law of total variance)."""
    means, variances = np.asarray(means, np.float64), np.asarray(variances, np.float64)
    return means.mean(0), np.sqrt(variances.mean(0) + means.var(0))


#: |z| = |y − μ|/σ beyond which a test point counts as a surprise (0.27 % of a calibrated Gaussian's points)
Z_THRESHOLD = 3.0


def shift_diagnostics(y: np.ndarray, means: np.ndarray, variances: np.ndarray) -> Dict[str, float]:
    """From a test prediction (means, variances [S, N]; y [N] or [N, 1], standardised): ``test_std``, the mean over
    points of the predictive mixture's σ, and ``z_above_3``, the share of points with |y − μ|/σ > :data:`Z_THRESHOLD`
    (μ, σ of :func:`mixture_mean_std`)."""
    mean, std = mixture_mean_std(means, variances)
    z = (np.asarray(y, np.float64).reshape(-1) - mean) / std
    return {"test_std": float(std.mean()), "z_above_3": float(np.mean(np.abs(z) > Z_THRESHOLD))}


#: ADGP's predictive σ on training rows is measured on at most this many of them (a seeded subset)
TRAIN_STD_ROWS = 1000


def run_method(method: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Dict:
    """Fit ``method`` on the split and score it: rmse, nlpd (standardised), rmse_original, nlpd_original,
    seconds, the epochs used, and method-specific extras. ``networks``: the run's stage-1 networks (saved and
    reused; default a fresh in-memory cache)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    gpflow.config.set_default_float(np.float64)
    tf_keras.backend.clear_session()
    start = time.perf_counter()
    means, variances, extra = METHODS[method](data, budget, NetworkCache() if networks is None else networks)
    scores = regression_metrics(data.y_test, means, variances, data.y_scale)
    return {
        **scores,
        **shift_diagnostics(data.y_test, means, variances),
        "seconds": round(time.perf_counter() - start, 2),
        "budget": asdict(budget),
        "protocol": budget.key(),
        "extra": extra,
    }


__all__ = [
    "Budget",
    "BUDGETS",
    "SplitData",
    "METHODS",
    "LABELS",
    "run_method",
    "NetworkCache",
    "NetworkMissing",
    "fit_network",
    "fit_parts",
    "build_twin_network",
    "build_classic_dgp",
    "build_dropout_twin",
    "build_plain_network",
    "dgp_mixture",
    "mixture_noise_variance",
    "protocol_schedule",
]
