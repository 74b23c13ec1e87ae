"""What the rotated-MNIST LLA study runs: one cell per (method, seed), its options and configuration, and
:func:`run_cell`, which trains (or loads) the seed's MAP network, fits the cell's linearised Laplace approximation
(:class:`activated_dgp.eigen.LinearisedLaplace`) and scores its predictive at every rotation angle."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import tf_keras
from scipy.special import softmax

from activated_dgp import TrainingSchedule, train_network
from activated_dgp.data import load_mnist, rotated_test_sets
from activated_dgp.data.mnist import default_cache_dir
from activated_dgp.eigen import LinearisedLaplace
from activated_dgp.metrics import classification_metrics

from experiments.harness.protocol import Protocol, config_digest, relabel_config_digest
from experiments.harness.store import portable_path
from experiments.harness.setups import rotated_mnist_cnn, training_subset
from experiments.harness.rotation_figures import angles_config

KEY = ("method", "seed")
NEURALEF_SIZES = (10, 20, 50)
METHODS = ("map", "last_layer", "kron", "diagonal") + tuple(f"neuralef_{k}" for k in NEURALEF_SIZES)
#: the methods run by default: the NeuralEF LLAs run when named, because NeuralEF's fit on the CNN's empirical NTK
#: takes the longest of all (its memory is linear in the Jacobian batch: activated_dgp.eigen.laplace, "Memory")
DEFAULT_METHODS = ("map", "last_layer", "kron", "diagonal")
LABELS = {"map": "MAP", "last_layer": "Last-layer LLA", "kron": "KFAC LLA", "diagonal": "Diag LLA",
          **{f"neuralef_{k}": f"NeuralEF LLA (k = {k})" for k in NEURALEF_SIZES}}
ANGLES = tuple(range(0, 181, 15))


@dataclass(frozen=True)
class Config:
    """Everything that changes the numbers (its digest is part of the records' protocol)."""

    train_size: Optional[int] = 2000
    test_size: Optional[int] = 500  # test digits per angle
    angles: tuple = ANGLES
    num_units: int = 32  # the CNN's activated head (experiments.harness.setups.rotated_mnist_cnn)
    width: int = 16
    truncation_level: int = 10
    epochs: int = 10
    batch_size: int = 128
    learning_rate: float = 1e-3
    lla_batch_size: int = 32  # points per Jacobian evaluation of the LLA
    predictive_samples: int = 1000  # Monte Carlo samples of the softmax predictive
    neuralef_steps: int = 500

    def digest(self) -> str:
        return config_digest(asdict(self))


def add_options(parser) -> None:
    defaults = Config()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS),
                        help="default: %(default)s; the NeuralEF LLAs (neuralef_10, …) run when named: their fit takes the longest")
    parser.add_argument("--train-size", type=int, default=defaults.train_size, help="training digits (default %(default)s)")
    parser.add_argument("--test-size", type=int, default=defaults.test_size, help="test digits per angle (default %(default)s)")
    parser.add_argument("--angles", type=int, nargs="+", default=list(ANGLES))
    for name in ("num_units", "width", "truncation_level", "epochs", "batch_size", "lla_batch_size", "predictive_samples", "neuralef_steps"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name), help="default %(default)s")
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate, help="default %(default)s")
    parser.add_argument("--figure", type=Path, default=None, help="the figure (default <out>.png)")


def config_from(options) -> Config:
    return angles_config(Config, options)


def PROTOCOL(options) -> Protocol:
    """Version 1 with the configuration as its settings."""
    config = config_from(options)
    return Protocol("1", {**asdict(config), "angles": list(config.angles)})


def upgrade(record: Dict) -> Dict:
    """A record made before the study declared a :class:`Protocol` carries ``v1:<its configuration's digest>``
    (:meth:`Config.digest`) and the configuration itself: the protocol it was made under."""
    return relabel_config_digest(record)


def cells(options) -> List[Dict]:
    return [dict(method=m, seed=s) for s in options.seeds for m in options.methods]


@dataclass
class Data:
    x_train: np.ndarray  # [N, 784] float64 in [0, 1]
    y_train: np.ndarray  # [N, 1] float64 class indices
    rotated: np.ndarray  # [A, T, 28, 28] uint8
    y_test: np.ndarray  # [T] int64
    train_source: str
    test_source: str


def prepare_data(config: Config, data_dir, seed: int) -> Data:
    """``config.train_size`` training digits drawn with ``seed`` (all when None) and the official test set's first
    ``config.test_size`` digits rotated by every angle."""

    data = load_mnist(data_dir)
    order = training_subset(data, config.train_size, seed)
    x = data.x_train[order].reshape(len(order), -1).astype(np.float64) / 255.0
    num_test = len(data.x_test) if config.test_size is None else min(config.test_size, len(data.x_test))
    rotated = rotated_test_sets(data.x_test[:num_test], config.angles, cache_dir=Path(default_cache_dir()) / "rotated")
    return Data(x, data.y_train[order].astype(np.float64)[:, None], rotated, data.y_test[:num_test].astype(np.int64),
                data.train_source, data.test_source)


def map_network(context, config: Config, data: Data, seed: int):
    """The seed's MAP CNN (:func:`experiments.harness.setups.rotated_mnist_cnn`, Adam on the cross-entropy), trained or loaded."""
    def build():
        tf_keras.utils.set_random_seed(seed)
        model, _, _ = rotated_mnist_cnn(seed, config.truncation_level, config.num_units, config.width)
        model(data.x_train[:1].astype(np.float32))

        def train():
            context.progress(f"  training the MAP CNN of seed {seed} ({len(data.y_train)} digits, {config.epochs} epochs)")
            schedule = TrainingSchedule(epochs=config.epochs, batch_size=config.batch_size, learning_rate=config.learning_rate, verbose=0)
            train_network(model, data.x_train, data.y_train, "softmax", schedule)
            return model

        def load(path):
            with np.load(path) as saved:
                model.set_weights([saved[f"w{i}"] for i in range(len(saved.files))])
            return model

        def save(network, path):
            with open(path, "wb") as handle:
                np.savez(handle, **{f"w{i}": w for i, w in enumerate(network.get_weights())})

        return context.artifacts.get_or_build("network", [config.digest(), seed], ".npz", train, save=save, load=load)

    return context.artifacts.in_memory("network", seed, build, group=seed)


def laplace(method: str, network, config: Config, seed: int):
    """The cell's :class:`~activated_dgp.eigen.LinearisedLaplace` of the MAP network (not fitted): the softmax
    likelihood, the prior precision by the Laplace evidence, the Monte Carlo predictive; kron with the activated
    head's diagonal blocks (``kron_fallback="diagonal"``), NeuralEF with k eigenpairs and eq. 22."""

    options = dict(likelihood="softmax", prior_precision="marginal_likelihood", batch_size=config.lla_batch_size,
                   num_samples=config.predictive_samples, seed=seed, verbose=1)
    if method.startswith("neuralef_"):
        return LinearisedLaplace(network, method="neuralef", num_eigenpairs=int(method.split("_")[1]),
                                 neuralef_steps=config.neuralef_steps, **options)
    return LinearisedLaplace(network, method=method, **({"kron_fallback": "diagonal"} if method == "kron" else {}), **options)


def per_angle_metrics(data: Data, probabilities) -> Dict[str, list]:
    """``probabilities(inputs [T, 784])`` [T, C] scored at every angle: lists (one value per angle) of accuracy,
    log_likelihood, ece and entropy (:func:`activated_dgp.metrics.classification_metrics`)."""

    out: Dict[str, list] = {}
    for images in data.rotated:
        inputs = images.reshape(len(images), -1).astype(np.float64) / 255.0
        for name, value in classification_metrics(probabilities(inputs), data.y_test).items():
            out.setdefault(name, []).append(value)
    return out


def run_cell(cell, options, context) -> Dict:

    config = config_from(options)
    seed, method = cell["seed"], cell["method"]
    data = context.artifacts.in_memory("data", seed, lambda: prepare_data(config, options.data_dir, seed), group=seed)
    network = map_network(context, config, data, seed)
    extra: Dict = {"parameters": int(network.count_params())}
    if method == "map":
        scores = per_angle_metrics(data, lambda X: softmax(network(X.astype(np.float32), training=False).numpy().astype(np.float64), axis=1))
    else:
        context.progress(f"  fitting the {LABELS[method]} of seed {seed}")
        # NeuralEF's training (the longest part) checkpoints under the artifacts and resumes from them
        checkpoints = context.artifacts.checkpoint_dir("neuralef", [config.digest(), seed, method]) if method.startswith("neuralef_") else None
        la = laplace(method, network, config, seed).fit(data.x_train, data.y_train, checkpoint_dir=checkpoints)
        scores = per_angle_metrics(data, lambda X: la.predict_y(X)[0].numpy())
        extra.update(prior_precision=float(la.prior_precision), log_evidence=float(la.log_evidence),
                     posterior_parameters=int(la.num_parameters))
    return {**scores, **extra, "angles": list(config.angles), "config": asdict(config),
            "train_size": len(data.y_train), "test_size": len(data.y_test),
            "train_source": data.train_source, "test_source": portable_path(data.test_source, str(context.data())),
            "command": options.command}
