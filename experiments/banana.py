"""Banana classification: a network twin against its activated DGP (Dutordoir et al., 2021, Sec. 5.1, Fig. 6).

    python -m experiments banana [--figure docs/figures/banana.png] [--out docs/results/banana]
                                 [--network-epochs 300] [--dgp-epochs 1500] [--dgp-learning-rate 0.03] [--seed 0]

For one and three layers of 100 Softplus units / activated inducing variables: stage 1 fits the
network twin on the sigmoid cross-entropy, the converter turns it into an activated DGP with the
same mean, and stage 2 maximises the ELBO with a Bernoulli (logistic) likelihood
(``activated_dgp.train_two_stage``). The network's p(y=1|x) is σ(logit); the DGP's is
E_q[σ(f_L(x))] (``predict_class_probabilities``).

Writes the figure (rows: 1 and 3 layers; columns: network, DGP, and mean |p − 0.5| on circles of
growing radius) and a Markdown page with the table. "Far field": points on the circle of radius
10 · max_i ‖x_i − x̄‖ around the data mean x̄; the number reported is the mean of |p − 0.5| there
(0 = maximally uncertain, 0.5 = certain).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import TrainingSchedule, evaluate_elbo, predict_class_probabilities, train_two_stage
from activated_dgp.training import stage2_recipe
from experiments.harness import cli
from experiments.harness.artifacts import atomic_write, atomic_write_text
from experiments.harness.protocol import Protocol, from_legacy, relabel
from experiments.harness.setups import banana_dataset
from experiments.harness.study import page_path

LAYERS = (1, 3)
NUM_UNITS = 100
FAR_FACTOR = 10.0
DPI = 120


def data_spread(X) -> tuple[np.ndarray, float]:
    """(x̄ [2], max_i ‖x_i − x̄‖): the centre and radius of the smallest data-centred disc holding the data."""
    centre = X.mean(0)
    return centre, float(np.max(np.linalg.norm(X - centre, axis=1)))


def circle_points(X, factor: float, num_points: int = 256) -> np.ndarray:
    """[num_points, 2] evenly spaced on the circle of radius factor · max‖x − x̄‖ around x̄."""
    centre, radius = data_spread(X)
    angle = np.linspace(0.0, 2.0 * np.pi, num_points, endpoint=False)
    return centre + factor * radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)


def far_field(predict, X, factor: float = FAR_FACTOR, num_points: int = 256) -> float:
    """Mean |p(y=1|x) − 0.5| over :func:`circle_points` (``predict`` maps [N, 2] to probabilities [N, 1])."""
    return float(np.mean(np.abs(np.asarray(predict(circle_points(X, factor, num_points))) - 0.5)))


def network_probabilities(network: tf_keras.Model, X) -> np.ndarray:
    """σ(logit): the twin's p(y=1|x), [N, 1]."""
    return tf.sigmoid(network(np.asarray(X, dtype=np.float64))).numpy()


class _Progress(tf_keras.callbacks.Callback):
    def __init__(self, label: str, every: int, epochs: int):
        super().__init__()
        self.label, self.every, self.epochs = label, every, epochs

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0 or epoch + 1 == self.epochs:
            rate = float(tf_keras.backend.get_value(self.model.optimizer.learning_rate))
            print(f"    {self.label} epoch {epoch + 1}/{self.epochs}: loss {logs['loss']:.4f} (lr {rate:.2g})", flush=True)


@dataclass
class ProgressSchedule(TrainingSchedule):
    """A :class:`TrainingSchedule` that also prints the loss every ``every`` epochs."""

    label: str = ""
    every: int = 100

    def callbacks(self):
        return super().callbacks() + ([_Progress(self.label, self.every, self.epochs)] if self.every > 0 else [])


def run_configuration(
    X,
    Y,
    num_layers: int,
    *,
    num_units: int = NUM_UNITS,
    network_epochs: int = 300,
    dgp_epochs: int = 1500,
    dgp_learning_rate: float = 0.03,
    dgp_patience: int = 100,
    seed: int = 0,
    num_samples: int = 64,
    every: int = 0,
    progress: bool = True,
) -> dict:
    """Two-stage training of one configuration and its measurements (accuracies, far field, ELBOs)."""
    every_network = every or max(1, network_epochs // 3)
    every_dgp = every or max(1, dgp_epochs // 5)
    start = time.perf_counter()
    result = train_two_stage(
        X,
        Y,
        likelihood="bernoulli",
        architecture=dict(num_layers=num_layers, num_units=num_units, activation="softplus"),
        network_schedule=ProgressSchedule(epochs=network_epochs, label="stage 1 (network, cross-entropy)", every=every_network if progress else 0),
        dgp_schedule=ProgressSchedule(
            epochs=dgp_epochs,
            learning_rate=dgp_learning_rate,
            plateau_patience=dgp_patience,
            label="stage 2 (DGP, −ELBO/N)",
            every=every_dgp if progress else 0,
        ),
        seed=seed,
        recipe=stage2_recipe("paper", elbo_samples=1 if num_layers == 1 else 8),  # the recipe its records were made with
    )
    seconds = time.perf_counter() - start
    network = lambda Z: network_probabilities(result.network, Z)  # noqa: E731
    dgp = lambda Z: predict_class_probabilities(result.dgp, np.asarray(Z, dtype=np.float64), num_samples, seed, batch_size=2000)  # noqa: E731
    return dict(
        num_layers=num_layers,
        num_units=num_units,
        result=result,
        network=network,
        dgp=dgp,
        seconds=seconds,
        network_accuracy=float(np.mean((network(X) > 0.5) == (Y > 0.5))),
        dgp_accuracy=float(np.mean((dgp(X) > 0.5) == (Y > 0.5))),
        network_far=far_field(network, X),
        dgp_far=far_field(dgp, X),
        elbo_before=result.initial_elbo,
        elbo_after=evaluate_elbo(result.dgp, X, Y, num_samples=1 if num_layers == 1 else 8),
        conversion_mismatch=result.conversion_mismatch,
    )


GRID_EXTENT, GRID_RESOLUTION = 2.0, 90
CURVE_FACTORS = np.geomspace(1.0, 100.0, 11)  # out to 100× the data's spread

# ---- the study: one cell per depth; the figure's arrays are saved next to the records, so the page and the
# figure are redrawn from committed files alone.
KEY = ("num_layers",)


def add_options(parser) -> None:
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/banana.png"))
    parser.add_argument("--num-points", type=int, default=500)
    parser.add_argument("--network-epochs", type=int, default=300)
    parser.add_argument("--dgp-epochs", "--epochs", type=int, default=1500, dest="dgp_epochs")
    parser.add_argument("--dgp-learning-rate", type=float, default=0.03)
    parser.add_argument("--dgp-patience", type=int, default=100, help="stage-2 epochs without improvement before lr × 0.9")
    parser.add_argument("--num-samples", type=int, default=64)
    parser.add_argument("--layers", type=int, nargs="+", default=list(LAYERS))


#: The options a cell's numbers depend on: (name, its prefix in older records' protocol strings, its type).
SETTINGS = (("num_points", "n", int), ("seed", "seed", int), ("network_epochs", "net", int), ("dgp_epochs", "dgp", int),
            ("dgp_learning_rate", "lr", float), ("dgp_patience", "pat", int), ("num_samples", "S", int))


def PROTOCOL(options) -> Protocol:
    """Every setting a cell's numbers depend on: records of other settings are never mixed in. Version 2:
    ``train_two_stage``'s defaults gained the far-field residual (:mod:`activated_dgp.deep.far_field`) and the
    stage-2 guard."""
    return Protocol("2", {name: getattr(options, name) for name, _, _ in SETTINGS})


def upgrade(record: dict) -> dict:
    """A record made before the study declared a :class:`Protocol` carries the string
    ``v<version>:n<num_points>:seed<seed>:net<…>:dgp<…>:lr<…>:pat<…>:S<num_samples>``: the protocol it was made under."""
    return relabel(record, from_legacy(record.get("protocol"), SETTINGS))


def cells(options) -> list:
    return [{"num_layers": layers} for layers in options.layers]


def grid(X):
    """The map's evaluation grid around the data: ([res, res] x, [res, res] y, [res², 2] points)."""
    centre, radius = data_spread(X)
    axis = np.linspace(-GRID_EXTENT * radius, GRID_EXTENT * radius, GRID_RESOLUTION)
    grid_x, grid_y = np.meshgrid(centre[0] + axis, centre[1] + axis)
    return grid_x, grid_y, np.stack([grid_x.ravel(), grid_y.ravel()], axis=1)


def _arrays_path(options, num_layers: int) -> Path:
    return Path(options.out) / f"layers{num_layers}.npz"


def run_cell(cell, options, context) -> dict:
    X, Y = banana_dataset(options.num_points, seed=options.seed)
    run = run_configuration(X, Y, cell["num_layers"], network_epochs=options.network_epochs, dgp_epochs=options.dgp_epochs,
                            dgp_learning_rate=options.dgp_learning_rate, dgp_patience=options.dgp_patience,
                            seed=options.seed, num_samples=options.num_samples, progress=not options.quiet)
    points = grid(X)[2]
    arrays = {f"{name}_{what}": values
              for name in ("network", "dgp")
              for what, values in (("grid", np.clip(run[name](points)[:, 0], 0.0, 1.0).astype(np.float32)),
                                   ("curve", np.array([far_field(run[name], X, f) for f in CURVE_FACTORS])))}
    atomic_write(_arrays_path(options, cell["num_layers"]), lambda temporary: np.savez_compressed(temporary, **arrays))
    return {key: run[key] for key in ("num_units", "seconds", "network_accuracy", "dgp_accuracy", "network_far",
                                      "dgp_far", "elbo_before", "elbo_after", "conversion_mismatch")} | {
        "command": options.command}


def plot(X, Y, runs, arrays, path: Path) -> Path:
    """Rows: depths; columns: network p(y=1|x), DGP p(y=1|x) on the grid (data and the 0.5 contour on top), and
    mean |p − 0.5| against the circle radius in units of the spread."""
    centre, radius = data_spread(X)
    grid_x, grid_y, _ = grid(X)
    fig, axes = plt.subplots(len(runs), 3, figsize=(15, 4.6 * len(runs)), squeeze=False)
    levels = np.linspace(0.0, 1.0, 21)
    for row, (run, saved) in enumerate(zip(runs, arrays)):
        for col, name in enumerate(("network", "dgp")):
            ax = axes[row, col]
            p = saved[f"{name}_grid"].astype(np.float64).reshape(grid_x.shape)
            image = ax.contourf(grid_x, grid_y, p, levels=levels, cmap="RdBu_r", vmin=0.0, vmax=1.0)
            ax.contour(grid_x, grid_y, p, levels=[0.5], colors="black", linewidths=1.5)
            for label, marker in ((0, "o"), (1, "s")):
                mask = Y[:, 0] == label
                ax.scatter(X[mask, 0], X[mask, 1], s=9, marker=marker, c="white" if label == 0 else "black", edgecolors="grey", linewidths=0.4)
            ax.add_patch(plt.Circle(centre, radius, fill=False, ls=":", color="grey"))
            ax.set_aspect("equal")
            layers = "1 layer" if run["num_layers"] == 1 else f"{run['num_layers']} layers"
            label = "NN" if name == "network" else "DGP"
            ax.set_title(f"{label}, {layers}: p(y=1|x)   (train acc. {run[name + '_accuracy']:.3f})", fontsize=11)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, ticks=[0, 0.25, 0.5, 0.75, 1])
        ax = axes[row, 2]
        for name, label, style in (("network", "NN", "o-"), ("dgp", "DGP", "s-")):
            ax.plot(CURVE_FACTORS, saved[f"{name}_curve"], style, label=label)
        ax.axvline(FAR_FACTOR, color="grey", ls=":", label=f"far field ({FAR_FACTOR:g}× spread)")
        ax.axvline(GRID_EXTENT, color="grey", ls="--", lw=0.8, label="edge of the maps")
        ax.set_xscale("log")
        ax.set_ylim(0.0, 0.52)
        ax.set_xlabel("circle radius / max‖x − x̄‖")
        ax.set_ylabel("mean |p(y=1|x) − 0.5| on the circle")
        ax.set_title("far field: 0 = uncertain, 0.5 = certain", fontsize=11)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9, loc="lower right")
    fig.suptitle("Banana: network twin (cross-entropy) vs. activated DGP (ELBO), 100 Softplus units per layer", fontsize=13)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def page(runs, options, figure: Path) -> str:
    rows = "\n".join(
        f"| {r['num_layers']} | {r['network_accuracy']:.3f} | {r['dgp_accuracy']:.3f} | {r['network_far']:.4f} | "
        f"{r['dgp_far']:.4f} | {r['elbo_before']:.1f} | {r['elbo_after']:.1f} | {r['conversion_mismatch']:.1e} | {r['seconds']:.0f} |"
        for r in runs)
    minutes = sum(r["seconds"] for r in runs) / 60
    answers = "\n".join(
        f"  - {r['num_layers']} layer{'s' if r['num_layers'] > 1 else ''}: train accuracy {r['network_accuracy']:.3f} (network) "
        f"→ {r['dgp_accuracy']:.3f} (DGP); far-field |p − 0.5| {r['network_far']:.4f} → {r['dgp_far']:.4f}"
        for r in runs)
    reproduced = all(r["dgp_far"] < 0.05 < r["network_far"] for r in runs)
    return f"""# Banana classification: does the converted network become uncertain away from the data? (Fig. 6)

![banana](../figures/{figure.name})

- **Answer** (0 = p ≡ 0.5 on the far circle, 0.5 = certain):
{answers}
- **Against the paper** (Fig. 6: the networks are very confident even far from the data; the activated DGP trained
  on the ELBO from them expresses uncertainty there, p ≈ 0.5): {"reproduced at every depth run" if reproduced else "not reproduced at every depth run (far-field values above)"}.
- **Cost:** {minutes:.0f} min on 2 CPU cores in all (the table's seconds).

Generated by `python -m experiments report` from `docs/results/banana/records.jsonl` (the table) and
`docs/results/banana/layers*.npz` (the figure's maps and curves). Rerun the cells (about {minutes:.0f} min on
2 CPU cores; a finished depth is not rerun: delete its record to redo it):

```bash
{runs[0]['command']}
```

{options.num_points} points from `experiments.banana.banana_dataset` (two noisy crescents, noise 0.2,
standardised inputs), seed {options.seed}. Per configuration: stage 1 trains the network twin
(100 Softplus activated units per layer, bottleneck width 2 between layers) on the sigmoid
cross-entropy for {options.network_epochs} epochs (Adam 0.01, ×0.9 on a 5-epoch plateau, batch 128);
the converter gives the DGP with the same mean; stage 2 maximises the ELBO with a Bernoulli
(logistic) likelihood for {options.dgp_epochs} epochs (Adam {options.dgp_learning_rate:g}, same plateau
rule). DGP probabilities average {options.num_samples} propagated samples. Far field: mean |p − 0.5| on
256 points of the circle of radius {FAR_FACTOR:g} · max‖x − x̄‖ around the data mean (0 = p ≡ 0.5,
0.5 = p ∈ {{0, 1}}). ELBOs are totals over the data set (nats; 1-layer exact up to quadrature,
3-layer averaged over 8 sampled passes).

| layers | NN train acc. | DGP train acc. | far field NN | far field DGP | DGP ELBO before stage 2 | DGP ELBO after stage 2 | conversion mismatch | seconds |
|---|---|---|---|---|---|---|---|---|
{rows}
"""


def report(records, options) -> None:
    runs = sorted(records, key=lambda r: r["num_layers"])
    if not runs:
        return
    X, Y = banana_dataset(options.num_points, seed=options.seed)
    arrays = [dict(np.load(_arrays_path(options, r["num_layers"]))) for r in runs]
    plot(X, Y, runs, arrays, options.figure)
    target = page_path(options)
    text = page(runs, options, options.figure)
    if not target.exists() or target.read_text() != text:
        atomic_write_text(target, text)


def main(argv=None) -> list:
    return cli.main("banana", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
