"""What the SGD-trajectory study runs: one cell per (method, seed), its options and configuration, and
:func:`run_cell`, which builds (or loads from the artifact cache) what the cell's method needs
(:mod:`experiments.sgd_trajectory.models`) and scores it at every rotation angle."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from activated_dgp.data.mnist import default_cache_dir
from activated_dgp.eigen import function_space_probabilities, trajectory_eigenfunctions
from experiments.harness.protocol import Protocol, config_digest, relabel_config_digest
from experiments.harness.store import portable_path
from experiments.harness.rotation_figures import angles_config
from experiments.sgd_trajectory import models

KEY = ("method", "seed")
METHODS = ("map", "swa", "swag", "ensemble", "neuralef")
LABELS = {"map": "MAP", "swa": "SWA", "swag": "SWAG", "ensemble": "Deep ensemble", "neuralef": "SWA + NeuralEF (κ_SGD)"}
ANGLES = tuple(range(0, 181, 15))
ENSEMBLE_SEED_STRIDE = 10_000  # member k of seed s has seed s + k · stride (member 0 is the MAP network)


@dataclass(frozen=True)
class Config:
    """Everything that changes the numbers: the records' protocol settings; its digest names the cached artifacts."""

    train_size: Optional[int] = 5000
    test_size: Optional[int] = None
    angles: tuple = ANGLES
    batch_size: int = 128
    epochs: int = 15  # MAP
    learning_rate: float = 0.05
    swag_epochs: int = 50  # the SGD continuation: one SWAG snapshot per epoch
    swag_learning_rate: float = 0.01
    function_every: int = 2  # steps between the function values of κ_SGD
    max_rank: int = 20  # SWAG's K
    swag_samples: int = 30  # S of SWAG's model average
    eigenpairs: int = 10  # per class
    neuralef_steps: int = 1000
    neuralef_width: int = 32  # App. B's width
    mc_samples: int = 256  # function samples of SWA + NeuralEF
    ensemble_size: int = 5

    def digest(self) -> str:
        return config_digest(asdict(self))


def add_options(parser) -> None:
    defaults = Config()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--train-size", type=int, default=defaults.train_size, help="training digits (default %(default)s)")
    parser.add_argument("--test-size", type=int, default=None, help="test digits per angle (default: the whole test set)")
    parser.add_argument("--angles", type=int, nargs="+", default=list(ANGLES))
    for name in ("epochs", "swag_epochs", "function_every", "max_rank", "swag_samples", "eigenpairs", "neuralef_steps",
                 "neuralef_width", "mc_samples", "ensemble_size", "batch_size"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name), help="default %(default)s")
    for name in ("learning_rate", "swag_learning_rate"):
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name), help="default %(default)s")
    parser.add_argument("--reference", type=Path, default=Path("docs/results/rotated_mnist_controls"),
                        help="rotated-MNIST records whose ADGP and deep ensemble the page shows for reference (default %(default)s)")
    parser.add_argument("--figure", type=Path, default=None, help="the figure (default <out>.png)")


def config_from(options) -> Config:
    return angles_config(Config, options)


def PROTOCOL(options) -> Protocol:
    """Version 1 with the configuration as its settings."""
    return Protocol("1", asdict(config_from(options)))


def upgrade(record: Dict) -> Dict:
    """A record made before the study declared a :class:`Protocol` carries ``v1:<its configuration's digest>``
    (:meth:`Config.digest`) and the configuration itself: the protocol it was made under."""
    return relabel_config_digest(record)


def cells(options) -> List[Dict]:
    return [dict(method=m, seed=s) for s in options.seeds for m in options.methods]


def _data(options, context, config: Config, seed: int) -> models.Data:
    return context.artifacts.in_memory("data", seed, lambda: models.prepare_data(config, options.data_dir, seed, default_cache_dir()),
                                       group=seed)


def _network(context, config: Config, data: models.Data, seed: int, member: int = 0):
    """MAP network ``member`` of ``seed`` (member 0: the MAP row; seed s + member · stride), trained or loaded."""
    member_seed = seed + member * ENSEMBLE_SEED_STRIDE

    def build():
        network = models.build_cnn(member_seed)
        return context.artifacts.get_or_build(
            "network", [config.digest(), seed, member], ".npz", lambda: models.train_map(config, data, member_seed),
            save=models.save_weights, load=lambda path: models.load_weights(network, path))

    return context.artifacts.in_memory(f"network{member}", seed, build, group=seed)


def _trajectory(context, config: Config, data: models.Data, seed: int) -> models.Trajectory:
    def build():
        folder = context.artifacts.path("trajectory", [config.digest(), seed], "")
        saved = models.load_trajectory(config, folder, seed) if folder is not None else None
        if saved is not None:
            return saved
        trajectory = models.run_trajectory(config, data, _network(context, config, data, seed), seed)
        if folder is not None:
            models.save_trajectory(trajectory, folder)
        return trajectory

    return context.artifacts.in_memory("trajectory", seed, build, group=seed)


def run_cell(cell, options, context) -> Dict:
    config = config_from(options)
    seed, method = cell["seed"], cell["method"]
    data = _data(options, context, config, seed)
    extra: Dict = {}
    if method == "map":
        network = _network(context, config, data, seed)
        scores = models.per_angle_metrics(data, lambda X: models.softmax(models.logits(network, X)))
    elif method == "ensemble":
        members = [_network(context, config, data, seed, k) for k in range(config.ensemble_size)]
        scores = models.per_angle_metrics(data, lambda X: np.mean([models.softmax(models.logits(m, X)) for m in members], 0))
    else:
        trajectory = _trajectory(context, config, data, seed)
        swag = trajectory.swag
        extra = {"snapshots": swag.num_snapshots, "parameters": swag.num_parameters, "steps": trajectory.steps}
        if method == "swa":
            swag.apply_swa()
            scores = models.per_angle_metrics(data, lambda X: models.softmax(models.logits(swag.model, X)))
        elif method == "swag":
            scores = models.per_angle_metrics(data, lambda X: swag.predict_proba(X, config.swag_samples, seed=seed))
            extra["stored_floats"] = swag.num_parameters * (swag.rank + 2)
        else:
            scores, more = _neuralef(config, data, trajectory, seed, context)
            extra.update(more)
    return {**scores, **extra, "angles": list(config.angles), "config": asdict(config),
            "train_size": len(data.y_train), "test_size": len(data.y_test),
            "train_source": data.train_source, "test_source": portable_path(data.test_source, str(context.data())),
            "command": options.command}


def _neuralef(config: Config, data: models.Data, trajectory: models.Trajectory, seed: int, context):
    """SWA + NeuralEF: per class the top eigenpairs of κ_SGD learnt by NeuralEF on the training digits, the SWA
    network as the mean, and the Monte-Carlo predictive of :func:`activated_dgp.eigen.function_space_probabilities`.
    Also records the eigenvalues of the dense κ_SGD (from the SVD of the centred function values) for comparison."""
    values = trajectory.function_values
    M, N, C = values.shape
    X = data.x_train.reshape(N, -1).astype(np.float64)
    eigenfunctions, learnt, exact, captured = [], [], [], []
    for c in range(C):
        context.progress(f"  NeuralEF on κ_SGD of class {c} ({M} iterates, {N} digits, {config.neuralef_steps} steps)")
        model = trajectory_eigenfunctions(X, values[:, :, c], num_eigenpairs=config.eigenpairs, num_steps=config.neuralef_steps,
                                          seed=seed * 100 + 10 * c, width=config.neuralef_width, schedule="cosine")[0]
        eigenfunctions.append(model)
        learnt.append(model.eigenvalues.numpy().tolist())
        centred = values[:, :, c].astype(np.float64) - values[:, :, c].mean(0, dtype=np.float64)
        spectrum = np.linalg.svd(centred, compute_uv=False) ** 2 / (M * N)  # eigenvalues of K / N, K = ΦᵀΦ / M
        exact.append(spectrum[: config.eigenpairs].tolist())
        captured.append(float(np.sum(model.eigenvalues.numpy()) / np.sum(spectrum)))
    swag = trajectory.swag
    swag.apply_swa()

    def probabilities(X_test):
        flat = X_test.reshape(len(X_test), -1).astype(np.float64)
        return function_space_probabilities(models.logits(swag.model, X_test), [m(flat).numpy() for m in eigenfunctions],
                                            [m.eigenvalues.numpy() for m in eigenfunctions], config.mc_samples, seed=seed)

    stored = sum(int(sum(np.prod(v.shape) for v in m.trainable_variables)) + m.num_networks for m in eigenfunctions)
    return models.per_angle_metrics(data, probabilities), {
        "iterates": M, "eigenvalues": learnt, "exact_eigenvalues": exact, "variance_captured": captured,
        "stored_floats": stored + swag.num_parameters,
    }
