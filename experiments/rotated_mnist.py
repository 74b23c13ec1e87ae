"""Rotated MNIST: dataset shift by rotating the test digits 0°…180° (Dutordoir et al., 2021, Sec. 5.3, Fig. 8, E.2).

    python -m experiments.rotated_mnist --data-dir ../shared/data --out docs/results/rotated_mnist \\
        --seeds 0 1 2 --epochs 10

Models (appendix E.2): a CNN feature extractor conv(32, 5)+maxpool(2), conv(64, 5)+maxpool(2) (ReLU, valid
padding, 1024 features) followed by a dense part of two layers of 128 Softplus units and 10 heads. The dense
part is the activated network twin of :func:`activated_dgp.build_activated_nn` — [ActivatedLayer(128),
Dense(128, no bias), ActivatedLayer(128), Dense(10, no bias)] — so that it converts exactly to an activated DGP.

* ``nn``: the CNN + twin trained on cross-entropy (Adam, minibatch 256).
* ``nn_dropout``: the same with Dropout before each activated layer, trained separately and evaluated by
  Monte Carlo dropout (``--dropout-samples`` passes).
* ``nn_ts``: ``nn`` with its logits divided by a temperature T fitted on the held-out validation split by
  minimising the NLL (Guo et al., 2017).
* ``adgp``: ``nn``'s dense part converted to two activated GP layers (ZonalArcCosine + Softplus
  ActivationFeature, :func:`activated_dgp.dgp_from_keras`, Softmax likelihood) and trained further on the ELBO
  with the convolutional layers FROZEN at their stage-1 values (the DGP is trained on their features).
  Predictions average ``--dgp-samples`` samples propagated through the DGP.
* ``adgp_ft`` (``--finetune-conv``): as ``adgp``, but stage 2 trains the convolutional layers together with
  the DGP on the ELBO (:func:`finetune_dgp_and_extractor`), to measure fine-tuning against freezing.

Metrics per angle (:mod:`activated_dgp.metrics`): accuracy, test log-likelihood, ECE (15 bins) and mean
predictive entropy. One record per (dataset, model, seed) in ``<out>/records.jsonl`` (resumable: finished
cells are skipped; trained networks and DGPs are checkpointed under ``--cache-dir`` so an interrupted seed
does not retrain them). ``--report-only`` rewrites the generated part of ``docs/results/rotated_mnist.md`` and
``docs/figures/rotated_mnist.png`` from the records.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from experiments.records import ResultStore, pending  # noqa: E402

MODELS = ("nn", "nn_dropout", "nn_ts", "adgp", "adgp_ft")
LABELS = {"nn": "NN", "nn_dropout": "NN + Dropout", "nn_ts": "NN + TS", "adgp": "ADGP", "adgp_ft": "ADGP + conv fine-tuned"}
ANGLES = tuple(range(0, 181, 15))
METRICS = ("accuracy", "log_likelihood", "ece", "entropy")
METRIC_LABELS = {
    "accuracy": "accuracy",
    "log_likelihood": "test log-likelihood",
    "ece": "expected calibration error (15 bins)",
    "entropy": "mean predictive entropy (nats)",
}
KEY_FIELDS = ("dataset", "model", "seed")
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "results" / "rotated_mnist.md"
FIGURE = REPO / "docs" / "figures" / "rotated_mnist.png"
BEGIN, END = "<!-- BEGIN GENERATED: python -m experiments.rotated_mnist --report-only -->", "<!-- END GENERATED -->"


@dataclass(frozen=True)
class Config:
    """Everything that changes the numbers; records made under another config are not mixed in."""

    dataset: str = "mnist"
    epochs: int = 10  # stage 1 (networks)
    dgp_epochs: int = 10  # stage 2 (ELBO)
    batch_size: int = 256
    learning_rate: float = 1e-3
    dgp_learning_rate: float = 1e-3
    num_units: int = 128
    width: int = 128
    # the paper's Ñ = 20; the records of docs/results/rotated_mnist/ were made with Ñ = 8, before the Softplus
    # coefficients at d = 1025 were computed in extended precision (float64 quadrature gave round-off from n = 8 on)
    truncation_level: int = 20
    dropout: float = 0.1
    dropout_samples: int = 20
    dgp_samples: int = 10
    validation_fraction: float = 0.1
    train_size: Optional[int] = None  # None: every training image the source has
    test_size: Optional[int] = None  # None: the whole test set
    angles: tuple = ANGLES

    def digest(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------- data


@dataclass
class Splits:
    x_train: np.ndarray  # [N, 784] in [0, 1]
    y_train: np.ndarray  # [N, 1] float64 labels
    x_val: np.ndarray
    y_val: np.ndarray
    rotated: np.ndarray  # [A, T, 28, 28] uint8
    y_test: np.ndarray  # [T] int64
    train_source: str
    test_source: str


def prepare_data(config: Config, data_dir, seed: int, cache_dir) -> Splits:
    """Train/validation split of (a subset of) the training images for ``seed``, and the rotated test sets."""
    from activated_dgp.data import load_mnist, rotated_test_sets

    data = load_mnist(data_dir, dataset=config.dataset)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.x_train))
    if config.train_size is not None:
        if config.train_size > len(order):
            raise ValueError(f"--train-size {config.train_size} exceeds the {len(order)} training images of {data.train_source}")
        order = order[: config.train_size]
    num_val = int(round(config.validation_fraction * len(order)))
    val, train = order[:num_val], order[num_val:]
    x = data.x_train.reshape(len(data.x_train), -1).astype(np.float64) / 255.0
    y = data.y_train.astype(np.float64)[:, None]
    num_test = len(data.x_test) if config.test_size is None else min(config.test_size, len(data.x_test))
    rotated = rotated_test_sets(data.x_test[:num_test], config.angles, cache_dir=Path(cache_dir) / "rotated")
    return Splits(x[train], y[train], x[val], y[val], rotated, data.y_test[:num_test], data.train_source, data.test_source)


def as_inputs(images: np.ndarray) -> np.ndarray:
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


# ---------------------------------------------------------------- models


def build_classifier(config: Config, seed: int, dropout: float = 0.0):
    """(model, extractor, head): flat 784 → conv features [N, 1024] (float32) → twin logits [N, 10] (float64)."""
    import tf_keras

    from activated_dgp.nn import build_activated_nn, with_dropout

    initializer = lambda offset: tf_keras.initializers.GlorotUniform(seed=seed * 1000 + offset)  # noqa: E731
    extractor = tf_keras.Sequential(
        [
            tf_keras.Input(shape=(784,), dtype="float32"),
            tf_keras.layers.Reshape((28, 28, 1)),
            tf_keras.layers.Conv2D(32, 5, activation="relu", kernel_initializer=initializer(1)),
            tf_keras.layers.MaxPooling2D(2),
            tf_keras.layers.Conv2D(64, 5, activation="relu", kernel_initializer=initializer(2)),
            tf_keras.layers.MaxPooling2D(2),
            tf_keras.layers.Flatten(),
        ],
        name="features",
    )
    num_features = int(extractor.output_shape[-1])
    twin = build_activated_nn(
        num_features,
        num_layers=2,
        num_units=config.num_units,
        layer_widths=[config.width],
        output_dim=10,
        activation="softplus",
        truncation_level=config.truncation_level,
        lengthscales=[_lengthscales(num_features), _lengthscales(config.width)],
        seed=seed,
    )
    head = with_dropout(twin, dropout, seed) if dropout > 0 else twin
    model = tf_keras.Sequential([extractor, head], name="classifier")
    return model, extractor, head


def _lengthscales(input_dim: int) -> np.ndarray:
    """ℓ = √D on the D input coordinates and 1 on the bias one, so that x̃ = [x / √D, 1] has norm O(1)
    for inputs with O(1) entries (the twin's output grows like ‖x̃‖)."""
    return np.concatenate([np.full(input_dim, np.sqrt(input_dim)), [1.0]])


def _schedule(config: Config, epochs: int, learning_rate: float):
    from activated_dgp import TrainingSchedule

    return TrainingSchedule(epochs=epochs, batch_size=config.batch_size, learning_rate=learning_rate, verbose=2)


def trained_classifier(config: Config, splits: Splits, seed: int, dropout: float, checkpoint: Path):
    """Stage 1, or its checkpoint: (extractor, head, seconds spent training)."""
    import tf_keras

    from activated_dgp import train_network

    tf_keras.utils.set_random_seed(seed)
    model, extractor, head = build_classifier(config, seed, dropout)
    weights, record = checkpoint.with_suffix(".weights.h5"), checkpoint.with_suffix(".json")
    if weights.is_file() and record.is_file():
        model.load_weights(weights)  # every weight, the activated layers' W included (they are Keras weights)
        log(f"  loaded {weights}")
        return extractor, head, json.loads(record.read_text())["seconds"]
    start = time.time()
    train_network(model, splits.x_train, splits.y_train, "softmax", _schedule(config, config.epochs, config.learning_rate))
    seconds = time.time() - start
    weights.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"seconds": seconds}))
    partial = checkpoint.with_suffix(".partial.weights.h5")  # renamed when complete: an interrupted save is not loaded
    model.save_weights(partial)
    partial.replace(weights)
    return extractor, head, seconds


def features(extractor, x: np.ndarray) -> np.ndarray:
    return extractor.predict(x, batch_size=1000, verbose=0).astype(np.float64)


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """T > 0 minimising the validation NLL of softmax(logits / T) (Guo et al., 2017), over log T ∈ [−5, 5]."""
    from scipy.optimize import minimize_scalar
    from scipy.special import log_softmax

    labels = np.asarray(labels).astype(np.int64).ravel()

    def nll(log_t):
        return -np.mean(log_softmax(logits / np.exp(log_t), axis=1)[np.arange(len(labels)), labels])

    return float(np.exp(minimize_scalar(nll, bounds=(-5.0, 5.0), method="bounded").x))


def finetune_dgp_and_extractor(dgp, extractor, x: np.ndarray, y: np.ndarray, config: Config, seed: int) -> dict:
    """Stage 2 with the convolutional layers trained too: Adam on −ELBO/N over the DGP's variables and the
    extractor's (the ELBO of :meth:`gpflux.models.DeepGP.elbo` on minibatches of features extractor(x))."""
    import tensorflow as tf
    import tf_keras

    optimizer = tf_keras.optimizers.Adam(config.dgp_learning_rate)
    variables = list(dgp.trainable_variables) + list(extractor.trainable_variables)

    @tf.function
    def step(x_batch, y_batch):
        with tf.GradientTape() as tape:
            feats = tf.cast(extractor(x_batch, training=True), tf.float64)
            loss = -dgp.elbo((feats, y_batch)) / dgp.num_data
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    rng = np.random.default_rng(seed)
    x32, losses = x.astype(np.float32), []
    for epoch in range(config.dgp_epochs):
        order = rng.permutation(len(x))
        batches = [order[i : i + config.batch_size] for i in range(0, len(x) - config.batch_size + 1, config.batch_size)]
        losses.append(float(np.mean([step(x32[b], y[b]).numpy() for b in batches])))
        log(f"  fine-tune epoch {epoch + 1}/{config.dgp_epochs}: −ELBO/N = {losses[-1]:.4f}")
    return {"loss": losses}


def trained_adgp(config: Config, splits: Splits, extractor, head, seed: int, checkpoint: Path, finetune: bool = False):
    """Stage 2, or its checkpoint: the twin's dense part converted and trained on the ELBO, on frozen
    features or (``finetune``) together with ``extractor``, which is then changed in place."""
    import tensorflow as tf

    from activated_dgp import dgp_from_keras, load_dgp, save_dgp, train_dgp

    extractor_weights = checkpoint.parent / (checkpoint.name + "_extractor.weights.h5")
    record = checkpoint.parent / (checkpoint.name + ".json")
    if (checkpoint / "config.json").is_file() and record.is_file() and (not finetune or extractor_weights.is_file()):
        log(f"  loaded {checkpoint}")
        info = json.loads(record.read_text())
        if finetune:
            extractor.load_weights(extractor_weights)
        return load_dgp(checkpoint), info
    train_features = features(extractor, splits.x_train)
    conversion = dgp_from_keras(head, len(train_features), X=train_features[:512], likelihood="softmax")
    log(f"  converted: max |DGP mean − network logits| = {conversion.max_abs_mismatch:.2e}")
    tf.random.set_seed(seed)
    start = time.time()
    if finetune:
        history = finetune_dgp_and_extractor(conversion.dgp, extractor, splits.x_train, splits.y_train, config, seed)
        extractor_weights.parent.mkdir(parents=True, exist_ok=True)
        extractor.save_weights(extractor_weights)
    else:
        history = train_dgp(conversion.dgp, train_features, splits.y_train, _schedule(config, config.dgp_epochs, config.dgp_learning_rate))
    info = {
        "seconds": time.time() - start,
        "conversion_mismatch": conversion.max_abs_mismatch,
        "elbo_loss": [float(v) for v in history.get("loss", [])],
    }
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(info))
    save_dgp(conversion.dgp, checkpoint)  # its config.json, written last and atomically, marks a complete checkpoint
    return conversion.dgp, info


def softmax(logits: np.ndarray) -> np.ndarray:
    from scipy.special import softmax as _softmax

    return _softmax(logits, axis=1)


def dropout_probabilities(head, feats: np.ndarray, samples: int, batch: int = 2000) -> np.ndarray:
    """Monte Carlo dropout: the mean of ``samples`` softmax outputs with dropout active."""
    out = []
    for start in range(0, len(feats), batch):
        chunk = feats[start : start + batch]
        out.append(np.mean([softmax(head(chunk, training=True).numpy()) for _ in range(samples)], axis=0))
    return np.concatenate(out)


def adgp_probabilities(dgp, feats: np.ndarray, samples: int, seed: int, batch: int = 1000) -> np.ndarray:
    """p(y | x) averaged over ``samples`` propagated DGP samples (:func:`activated_dgp.predict_class_probabilities`)."""
    from activated_dgp import predict_class_probabilities

    probabilities = predict_class_probabilities(dgp, feats, samples, seed, batch_size=batch)
    return probabilities / probabilities.sum(1, keepdims=True)  # Monte Carlo round-off in the class sums


# ---------------------------------------------------------------- runner


def run_seed(config: Config, splits: Splits, seed: int, models: Sequence[str], store: ResultStore, cache: Path, extra: Dict) -> None:
    """Train what ``models`` need for one seed, evaluate them at every angle, and append one record per model."""
    from activated_dgp.metrics import classification_metrics

    tag = f"{config.dataset}_{config.digest()}_seed{seed}"
    results = {model: {metric: [] for metric in METRICS} for model in models}
    info = {model: {} for model in models}
    groups = []  # (extractor, {model: predict(features) -> probabilities})
    if any(m in models for m in ("nn", "nn_ts", "adgp", "adgp_ft")):
        log(f"seed {seed}: stage 1, NN")
        extractor, head, seconds = trained_classifier(config, splits, seed, 0.0, cache / f"{tag}_nn")
        predictors = {}
        logits = lambda f: head(f).numpy()  # noqa: E731
        if "nn" in models:
            predictors["nn"] = lambda f: softmax(logits(f))
            info["nn"] = {"train_seconds": seconds}
        if "nn_ts" in models:
            temperature = fit_temperature(logits(features(extractor, splits.x_val)), splits.y_val)
            log(f"  temperature T = {temperature:.3f} (fitted on {len(splits.x_val)} validation images)")
            predictors["nn_ts"] = lambda f: softmax(logits(f) / temperature)
            info["nn_ts"] = {"train_seconds": seconds, "temperature": temperature}
        if "adgp" in models:
            log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers frozen)")
            dgp, dgp_info = trained_adgp(config, splits, extractor, head, seed, cache / f"{tag}_adgp")
            predictors["adgp"] = lambda f: adgp_probabilities(dgp, f, config.dgp_samples, seed)
            info["adgp"] = {"train_seconds": seconds + dgp_info["seconds"], **dgp_info}
        groups.append((extractor, predictors))
        if "adgp_ft" in models:
            log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers fine-tuned)")
            extractor_ft, head_ft, _ = trained_classifier(config, splits, seed, 0.0, cache / f"{tag}_nn")  # a copy to tune
            dgp_ft, ft_info = trained_adgp(config, splits, extractor_ft, head_ft, seed, cache / f"{tag}_adgp_ft", finetune=True)
            groups.append((extractor_ft, {"adgp_ft": lambda f: adgp_probabilities(dgp_ft, f, config.dgp_samples, seed)}))
            info["adgp_ft"] = {"train_seconds": seconds + ft_info["seconds"], **ft_info}
    if "nn_dropout" in models:
        log(f"seed {seed}: stage 1, NN + Dropout({config.dropout})")
        extractor_d, head_d, seconds = trained_classifier(config, splits, seed, config.dropout, cache / f"{tag}_dropout")
        groups.append((extractor_d, {"nn_dropout": lambda f: dropout_probabilities(head_d, f, config.dropout_samples)}))
        info["nn_dropout"] = {"train_seconds": seconds}
    eval_seconds = {model: 0.0 for model in models}
    for index, angle in enumerate(config.angles):
        x = as_inputs(splits.rotated[index])
        line = []
        for extractor, predictors in groups:
            start = time.time()
            feats = features(extractor, x)
            shared = (time.time() - start) / len(predictors)
            for model, predict in predictors.items():
                start = time.time()
                scores = classification_metrics(predict(feats), splits.y_test)
                eval_seconds[model] += shared + time.time() - start
                for metric in METRICS:
                    results[model][metric].append(scores[metric])
                line.append(f"{model} acc {scores['accuracy']:.3f} tll {scores['log_likelihood']:.3f}")
        log(f"  seed {seed} angle {angle:3d}°: " + "; ".join(line))
    for model in models:
        record = dict(
            dataset=config.dataset, model=model, seed=seed, angles=list(config.angles), **results[model],
            **info[model], eval_seconds=eval_seconds[model], config=asdict(config), **extra,
            train_size=len(splits.x_train), validation_size=len(splits.x_val), num_test=len(splits.y_test),
        )
        store.append(record)
        log(f"seed {seed}: recorded {model}")


def check_config(store: ResultStore, config: Config) -> None:
    for record in store.records():
        if record.get("dataset") == config.dataset and record.get("config") != json.loads(json.dumps(asdict(config))):
            raise ValueError(
                f"{store.path} holds {config.dataset} records made with another configuration "
                f"({record.get('config')}); use another --out or the same flags"
            )


# ---------------------------------------------------------------- report


def aggregate(records: List[Dict], dataset: str) -> Dict[str, Dict[str, np.ndarray]]:
    """model → metric → [seeds, angles] array."""
    table: Dict[str, Dict[str, np.ndarray]] = {}
    for model in MODELS:
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        if rows:
            table[model] = {metric: np.array([r[metric] for r in rows]) for metric in METRICS}
            table[model]["seeds"] = np.array([r["seed"] for r in rows])
    return table


def plot(table, angles, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for axis, metric in zip(axes, METRICS):
        for model, values in table.items():
            mean, std = values[metric].mean(0), values[metric].std(0)
            axis.plot(angles, mean, marker="o", markersize=3, label=f"{LABELS[model]} ({len(values['seeds'])} seeds)")
            axis.fill_between(angles, mean - std, mean + std, alpha=0.2)
        axis.set_xlabel("rotation (degrees)")
        axis.set_title(METRIC_LABELS[metric], fontsize=10)
        axis.set_xticks(angles[::2])
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cell(values: np.ndarray, digits: int) -> str:
    return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}" if len(values) > 1 else f"{values.mean():.{digits}f}"


def report_markdown(records: List[Dict], dataset: str, figure: Path) -> str:
    table = aggregate(records, dataset)
    if not table:
        return "No finished records yet.\n"
    first = next(r for r in records if r["dataset"] == dataset)
    angles = first["angles"]
    config = first["config"]
    seeds = ", ".join(f"{LABELS[m]}: seeds {sorted(v['seeds'].tolist())}" for m, v in table.items())
    lines = [
        f"Generated from {sum(len(v['seeds']) for v in table.values())} records ({seeds}).",
        "",
        f"- command: `{first.get('command', '?')}`",
        f"- training images: {first['train_size']} (+ {first['validation_size']} held out for validation; "
        f"source: {first.get('train_source', '?')})",
        f"- test images per angle: {first['num_test']} (source: {first.get('test_source', '?')}), "
        f"angles {angles[0]}°…{angles[-1]}° every {angles[1] - angles[0]}°",
        f"- configuration: `{json.dumps({k: v for k, v in config.items() if k != 'angles'})}`",
        "",
        f"![rotated {dataset}](../figures/{figure.name})",
        "",
        "Mean ± standard deviation over seeds (population std).",
        "",
        "**Averaged over all angles**",
        "",
        "| model | accuracy | test log-likelihood | ECE | entropy | train s (per seed) | eval s (per seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, values in table.items():
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        lines.append(
            f"| {LABELS[model]} | "
            + " | ".join(_cell(values[m].mean(1), 3) for m in METRICS)
            + f" | {np.mean([r.get('train_seconds', np.nan) for r in rows]):.0f} | {np.mean([r['eval_seconds'] for r in rows]):.0f} |"
        )
    for metric in METRICS:
        lines += ["", f"**{METRIC_LABELS[metric]}**", "", "| angle | " + " | ".join(LABELS[m] for m in table) + " |",
                  "|---" * (len(table) + 1) + "|"]
        for index, angle in enumerate(angles):
            lines.append(f"| {angle}° | " + " | ".join(_cell(v[metric][:, index], 3) for v in table.values()) + " |")
    if "adgp" in table and len(table) > 1:
        others = [m for m in table if m != "adgp"]
        best_other = np.max([table[m]["log_likelihood"].mean(0) for m in others], axis=0)
        adgp = table["adgp"]["log_likelihood"].mean(0)
        spread = np.ptp([table[m]["accuracy"].mean(0) for m in table], axis=0)
        lines += [
            "",
            "**Checks of the paper's claims** (on seed means)",
            "",
            f"- accuracy spread across models (max − min of the means) per angle: median {np.median(spread):.3f}, "
            f"largest {spread.max():.3f} (at {angles[int(np.argmax(spread))]}°).",
            f"- ADGP has the best test log-likelihood at {int(np.sum(adgp > best_other))} of {len(angles)} angles; "
            f"ADGP − best other model: " + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - best_other)) + ".",
        ]
        nn = table.get("nn")
        if nn is not None:
            lines.append(
                "- ADGP − NN (its initialisation) test log-likelihood: "
                + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - nn["log_likelihood"].mean(0)))
                + "."
            )
    return "\n".join(lines) + "\n"


def write_report(store: ResultStore, dataset: str, doc: Path = DOC, figure: Path = FIGURE) -> None:
    records = store.records()
    table = aggregate(records, dataset)
    if table:
        angles = next(r for r in records if r["dataset"] == dataset)["angles"]
        plot(table, angles, figure, f"Rotated {dataset.replace('_', '-').upper() if dataset == 'mnist' else 'Fashion-MNIST'}: mean ± std over seeds")
        log(f"wrote {figure}")
    generated = f"{BEGIN}\n{report_markdown(records, dataset, figure)}{END}"
    doc.parent.mkdir(parents=True, exist_ok=True)
    if doc.is_file() and BEGIN in doc.read_text() and END in doc.read_text():
        text = doc.read_text()
        head, rest = text.split(BEGIN, 1)
        text = head + generated + rest.split(END, 1)[1]
    else:
        text = f"# Rotated {dataset}\n\n{generated}\n"
    doc.write_text(text)
    log(f"wrote {doc}")


# ---------------------------------------------------------------- command line


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="directory with MNIST IDX files or mnist.npz (or $ADGP_DATA_DIR)")
    parser.add_argument("--dataset", choices=("mnist", "fashion_mnist"), default="mnist")
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "rotated_mnist"), help="records directory")
    parser.add_argument("--cache-dir", default=None, help="rotated test sets and checkpoints (default ~/.cache/activated_dgp)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=[m for m in MODELS if m != "adgp_ft"])
    parser.add_argument("--finetune-conv", action="store_true",
                        help="also run adgp_ft: stage 2 trains the convolutional layers with the DGP (measured against adgp, frozen)")
    parser.add_argument("--truncation-level", type=int, default=Config.truncation_level, help="Ñ of the activated GP layers")
    parser.add_argument("--epochs", type=int, default=Config.epochs, help="stage-1 (network) epochs")
    parser.add_argument("--dgp-epochs", type=int, default=None, help="stage-2 (ELBO) epochs; default --epochs")
    parser.add_argument("--train-size", type=int, default=None, help="training images used (train + validation); default all")
    parser.add_argument("--test-size", type=int, default=None, help="test images per angle; default all 10,000")
    parser.add_argument("--dgp-samples", type=int, default=Config.dgp_samples)
    parser.add_argument("--dropout-samples", type=int, default=Config.dropout_samples)
    parser.add_argument("--angles", type=int, nargs="+", default=list(ANGLES))
    parser.add_argument("--doc", default=str(DOC), help="results markdown whose generated block is rewritten")
    parser.add_argument("--figure", default=str(FIGURE))
    parser.add_argument("--report-only", action="store_true", help="only rewrite the doc and figure from the records")
    args = parser.parse_args(argv)

    from activated_dgp.data.mnist import default_cache_dir

    config = Config(
        dataset=args.dataset, epochs=args.epochs, dgp_epochs=args.dgp_epochs if args.dgp_epochs is not None else args.epochs,
        train_size=args.train_size, test_size=args.test_size, dgp_samples=args.dgp_samples,
        dropout_samples=args.dropout_samples, angles=tuple(args.angles), truncation_level=args.truncation_level,
    )
    if args.finetune_conv and "adgp_ft" not in args.models:
        args.models = [*args.models, "adgp_ft"]
    if len(config.angles) < 2:
        raise ValueError("give at least two --angles")
    store = ResultStore(Path(args.out) / "records.jsonl", KEY_FIELDS)
    if not args.report_only:
        check_config(store, config)
        cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        command = "python -m experiments.rotated_mnist " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        cells = [dict(dataset=config.dataset, model=m, seed=s) for s in args.seeds for m in args.models]
        todo = pending(store, cells)
        log(f"{len(cells) - len(todo)} of {len(cells)} (model, seed) cells already recorded in {store.path}")
        for seed in args.seeds:
            models = [c["model"] for c in todo if c["seed"] == seed]
            if not models:
                continue
            start = time.time()
            splits = prepare_data(config, args.data_dir, seed, cache)
            extra = dict(train_source=splits.train_source, test_source=splits.test_source, command=command)
            log(f"seed {seed}: {len(splits.x_train)} train / {len(splits.x_val)} validation images, "
                f"{len(splits.y_test)} test images × {len(config.angles)} angles; models {models}")
            run_seed(config, splits, seed, models, store, cache / "rotated_mnist", extra)
            log(f"seed {seed} done in {time.time() - start:.0f} s")
    write_report(store, config.dataset, Path(args.doc), Path(args.figure))


if __name__ == "__main__":
    main()
