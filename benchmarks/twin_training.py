"""Why does the activated twin train slower and worse than a plain network of its shape?

Short seeded runs on a row-subsample of a UCI set's published split 0: every variant gets the same rows,
the same minibatch order seed, the same number of Adam steps and the same learning-rate schedule; the
validation RMSE (standardised units) is recorded every ``--check`` steps and the test RMSE of the best
check (its weights restored by :class:`activated_dgp.training.RestoreBest` inside :func:`activated_dgp.train_network`).

Variants are named ``plain`` (Dense(128, softplus) with biases, Glorot) or ``twin`` followed by changes,
e.g. ``twin:ls=sqrt`` (ℓ = √(D+1) in every layer), ``twin:lr=0.003``, ``twin:N=10``, ``twin:act=relu`` (without
``act=`` the zonal Softplus, the library default when the records were made),
``twin:wscale=3`` (initial W multiplied by 3), ``twin:init=legacy`` (rows of W ~ N(0, I/(D+1)) whatever ℓ,
the initialiser before the ℓ-aware one). Each run appends one JSON record to
``docs/results/twin_training/<dataset>.jsonl`` (or ``<out>.jsonl``); ``--report NAME ...`` writes the page
docs/results/twin_training_tables.md and the figure twin_training/curves.png from those files.

    nice -n 10 python -m benchmarks.twin_training --dataset naval --variants plain twin:ls=sqrt ...
"""

from __future__ import annotations

import json
import math
from pathlib import Path
import time

import gpflow
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import TrainingSchedule, build_activated_nn, train_network
from activated_dgp.data.uci import Standardizer, load_uci
from activated_dgp.deep import ActivatedLayer
from activated_dgp.training import split_validation
from activated_dgp.zonal.spectra import resolve_activation
from experiments.harness.blocks import write_block
from experiments.harness.cli import make_parser

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "twin_training"
NUM_LAYERS, NUM_UNITS, BATCH = 3, 128, 128


def split_data(name: str, num_train: int, seed: int):
    """(X_fit, y_fit), (X_val, y_val), (X_test, y_test): ``num_train`` seeded rows of split 0's training
    part (10 % of them held out for validation) and up to 2,000 of its test rows, standardised on the
    training rows."""
    data = load_uci(name)
    split = data.splits[0]
    rng = np.random.default_rng(seed)
    train = rng.permutation(split.train)[:num_train]
    test = rng.permutation(split.test)[:2000]
    sx, sy = Standardizer.fit(data.X[train]), Standardizer.fit(data.y[train])
    X, y = sx.transform(data.X[train]), sy.transform(data.y[train])
    fit, val = split_validation(X, y, 0.1, seed)
    return fit, val, (sx.transform(data.X[test]), sy.transform(data.y[test]))


def plain_network(input_dim: int, seed: int, activation: str = "softplus") -> tf_keras.Sequential:
    """[Dense(128, activation, bias), Dense(D, no bias)] × 2, [Dense(128), Dense(1, no bias)], Glorot."""
    rng = np.random.default_rng(seed)
    layers = [tf_keras.Input(shape=(input_dim,), dtype=gpflow.default_float())]
    for index in range(NUM_LAYERS):
        width = 1 if index == NUM_LAYERS - 1 else input_dim
        for units, options in ((NUM_UNITS, dict(activation=activation)), (width, dict(use_bias=False))):
            init = tf_keras.initializers.GlorotNormal(seed=int(rng.integers(2**31)))
            layers.append(tf_keras.layers.Dense(units, kernel_initializer=init, dtype=gpflow.default_float(), **options))
    return tf_keras.Sequential(layers)


def parse_variant(variant: str) -> tuple:
    """"twin:ls=sqrt:lr=0.003" → ("twin", {"ls": "sqrt", "lr": "0.003"})."""
    kind, *changes = variant.split(":")
    if kind not in ("plain", "twin"):
        raise ValueError(f"a variant starts with 'plain' or 'twin', got {variant!r}")
    options = dict(change.split("=", 1) for change in changes)
    unknown = set(options) - {"ls", "lr", "N", "act", "wscale", "plateau", "init"}
    if unknown:
        raise ValueError(f"unknown changes {sorted(unknown)} in {variant!r}")
    return kind, options


def build(kind: str, options: dict, input_dim: int, seed: int) -> tf_keras.Model:
    if kind == "plain":
        return plain_network(input_dim, seed, options.get("act", "softplus"))
    keywords = dict(num_layers=NUM_LAYERS, num_units=NUM_UNITS, seed=seed)
    if "ls" in options:  # else the library's default
        keywords["lengthscales"] = [math.sqrt(input_dim + 1.0) if options["ls"] == "sqrt" else float(options["ls"])] * NUM_LAYERS
    if "N" in options:
        keywords["truncation_level"] = int(options["N"])
    # without act=, the zonal Softplus: the library default when the records were made (the Swish since)
    keywords["activation"] = options.get("act", "softplus")
    network = build_activated_nn(input_dim, **keywords)
    network(np.zeros((1, input_dim)))
    for layer in network.layers:
        if hasattr(layer, "feature"):
            factor = float(options.get("wscale", 1.0))
            if options.get("init") == "legacy":  # rows ~ N(0, I/(D+1)) whatever ℓ (the initialiser before the ℓ-aware one)
                factor *= math.sqrt(np.sum(np.broadcast_to(np.asarray(layer.lengthscales, dtype=float) ** -2.0, (layer.W.shape[1],))))
            layer.W.assign(layer.W * factor)
    return network


def run(dataset: str, variant: str, num_train: int, steps: int, check: int, seed: int) -> dict:
    (X, y), (X_val, y_val), (X_test, y_test) = split_data(dataset, num_train, seed)
    kind, options = parse_variant(variant)
    tf.random.set_seed(seed)
    network = build(kind, options, X.shape[1], seed)
    schedule = TrainingSchedule.for_steps(
        steps, len(X), plateau_steps=int(options.get("plateau", 200)), batch_size=BATCH,
        learning_rate=float(options.get("lr", 0.01)), plateau_factor=0.9, min_learning_rate=1e-4,
        check_steps=check, patience_steps=10 * steps,  # no early stop: the whole curve
    )
    start = time.perf_counter()
    history = train_network(network, X, y, "gaussian", schedule, validation_data=(X_val, y_val))
    seconds = time.perf_counter() - start
    test = float(np.sqrt(np.mean((network(X_test).numpy() - y_test) ** 2)))
    per_epoch = schedule.steps_per_epoch(len(X))
    return {
        "dataset": dataset, "variant": variant, "num_train": len(X), "steps": schedule.epochs * per_epoch, "seed": seed,
        "curve": [(step, math.sqrt(mse)) for step, mse in history["validation_checks"]],
        "best_step": history["best_step"], "best_validation_rmse": math.sqrt(history["best_validation"]),
        "test_rmse": test, "final_train_mse": float(history["loss"][-1]), "seconds": seconds,
    }


def angular_energy(activation: str, input_dim: int, truncation_level: int = 20) -> dict:
    """How affine a twin unit is at initialisation: the twin's angular profile f_Ñ(t) = g̃/(‖w‖ ‖x̃‖),
    evaluated by an :class:`ActivatedLayer`, split into its orthogonal parts under the density of the cosine
    t = ŵ·x̂ between independent random directions in d = D + 1 dimensions, ∝ (1 − t²)^((d−3)/2): the
    constant (the "cone" ‖w‖ ‖x̃‖ shared by every unit), the linear part and the rest (the nonlinearity).
    Also the largest |f_Ñ − σ| on [−0.995, 0.995], the truncation error."""
    t = np.linspace(-1.0, 1.0, 4001)[1:-1]
    radius = 1.0 / np.sqrt(1.0 - t**2)  # [x, 1] = radius (t e_1 + sqrt(1 − t²) e_(D+1)), ℓ = 1
    X = np.zeros((len(t), input_dim))
    X[:, 0] = radius * t
    W = np.eye(1, input_dim + 1)
    profile = ActivatedLayer(1, activation, truncation_level, initial_W=W)(X).numpy()[:, 0] / radius
    weight = (1.0 - t**2) ** ((input_dim + 1 - 3) / 2.0)
    weight /= weight.sum()
    constant = np.sum(weight * profile)
    slope = np.sum(weight * profile * t) / np.sum(weight * t**2)
    energy = np.sum(weight * profile**2)
    rest = np.sum(weight * (profile - constant - slope * t) ** 2)
    band = np.abs(t) <= 0.995
    exact = resolve_activation(activation).function(t)
    # the most a unit can bend: σ itself on t uniform in [−1, 1] (directions aligned with the data)
    line = np.polyfit(t, exact, 1)
    ceiling = np.mean((exact - np.polyval(line, t)) ** 2) / np.mean(exact**2)
    return {
        "activation": activation, "input_dim": input_dim, "truncation_level": truncation_level,
        "constant_share": constant**2 / energy, "linear_share": slope**2 * np.sum(weight * t**2) / energy,
        "nonlinear_share": rest / energy, "cosine_sd": float(np.sqrt(np.sum(weight * t**2))),
        "max_truncation_error": float(np.max(np.abs(profile - exact)[band])), "nonlinear_share_ceiling": float(ceiling),
        "truncation_error_above_0.1_from": float(np.min(np.abs(t)[np.abs(profile - exact) > 0.1], initial=1.0)),
    }


LABELS = {
    "plain": "plain network (Dense+bias, softplus)",
    "twin:ls=sqrt": "twin, ℓ=√(D+1), softplus (the UCI twin)",
    "twin:init=legacy": "twin, ℓ=1, legacy init (old library default)",
    "twin": "twin, ℓ=1, ℓ-aware init (new library default)",
    "twin:act=relu": "twin, ℓ=1, ℓ-aware init, ReLU",
    "twin:ls=sqrt:act=relu": "twin, ℓ=√(D+1), ReLU",
    "twin:ls=sqrt:act=swish": "twin, ℓ=√(D+1), Swish",
}


def _records(dataset: str) -> list:
    path = RESULTS / f"{dataset}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _mean_se(values) -> str:
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{values.mean():.4f} ± {values.std(ddof=1) / np.sqrt(len(values)):.4f}"


def _at(curve, step):
    """The validation RMSE of the last check at or before ``step``."""
    return [rmse for s, rmse in curve if s <= step][-1]


COMPARED = ("twin:ls=sqrt", "twin:ls=sqrt:act=relu", "twin:ls=sqrt:act=swish")


def comparison(datasets) -> str:
    """Per set, the test RMSE (mean ± SE over seeds) of the plain network and of the ℓ = √(D+1) twins with each
    activation, and per twin the number of sets where it is within one SE of the plain network or better, by the
    UCI benchmark's rule (``experiments.uci.verdicts``): mean_twin ≤ mean_plain + SE_plain (the target: ≥ 8 of 9 sets)."""
    header = "| set | plain | " + " | ".join(f"`{v}`" for v in COMPARED) + " |"
    out, hits, counted = [header, "|---|" + "---|" * (1 + len(COMPARED))], dict.fromkeys(COMPARED, 0), 0
    for dataset in datasets:
        records = _records(dataset)
        test = {v: np.asarray([r["test_rmse"] for r in records if r["variant"] == v]) for v in ("plain",) + COMPARED}
        if any(len(values) < 2 for values in test.values()):
            continue  # the screen: seeded repeats of all four variants (naval_long has one seed)
        counted += 1
        se = {v: values.std(ddof=1) / np.sqrt(len(values)) for v, values in test.items()}
        cells = []
        for v in COMPARED:
            close = test[v].mean() <= test["plain"].mean() + se["plain"]
            hits[v] += bool(close)
            cells.append(_mean_se(test[v]) + (" ✓" if close else ""))
        out.append(f"| {records[0]['dataset']} | {_mean_se(test['plain'])} | " + " | ".join(cells) + " |")
    out.append(f"| **within one SE of plain, or better** | | " + " | ".join(f"**{hits[v]} of {counted}**" for v in COMPARED) + " |")
    return "### Every set: test RMSE, plain network against the ℓ = √(D+1) twin per activation\n\n" + "\n".join(out) + "\n"


def report(datasets) -> None:
    """docs/results/twin_training_tables.md (tables) and twin_training/curves.png from the JSONL records."""
    matplotlib.use("Agg")

    columns = min(4, len(datasets))
    rows = -(-len(datasets) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.2 * rows), squeeze=False)
    for axis in axes.ravel()[len(datasets):]:
        axis.set_visible(False)
    lines = ["| variant | seeds | test RMSE | best val. RMSE | best step | val. RMSE @1k | @2k | @4k | end | train MSE, last epoch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    sections = []
    for axis, dataset in zip(axes.ravel(), datasets):
        records = _records(dataset)
        variants = list(dict.fromkeys(r["variant"] for r in records))
        table = list(lines)
        for variant in variants:
            runs = [r for r in records if r["variant"] == variant]
            end = min(r["curve"][-1][0] for r in runs)
            cells = [_mean_se([r["test_rmse"] for r in runs]), _mean_se([r["best_validation_rmse"] for r in runs]),
                     f"{np.mean([r['best_step'] for r in runs]):.0f}"]
            cells += [_mean_se([_at(r["curve"], step) for r in runs]) for step in (1000, 2000, 4000, end)]
            cells.append(_mean_se([r["final_train_mse"] for r in runs]))
            table.append(f"| `{variant}` | {len(runs)} | " + " | ".join(cells) + " |")
            if variant in LABELS:
                steps = [s for s, _ in runs[0]["curve"]]
                curve = np.mean([[rmse for _, rmse in r["curve"]][: len(steps)] for r in runs], axis=0)
                axis.plot(steps, curve, label=LABELS[variant], lw=2 if variant == "plain" else 1.2)
        axis.set(yscale="log", xlabel="Adam step", ylabel="validation RMSE (standardised)", title=f"{dataset} (mean over seeds)")
        axis.set_ylim(top=1.5)
        axis.legend(fontsize=7)
        first = records[0]
        sections.append(f"### {dataset}: {first['dataset']}, {first['num_train']} fit rows, {first['steps']} steps\n\n" + "\n".join(table) + "\n")
    figure.tight_layout()
    figure.savefig(RESULTS / "curves.png", dpi=110)
    energies = [angular_energy(a, D) for D in (16, 9) for a in ("softplus", "swish", "relu")]
    # 10 significant digits: the quadrature's last digits differ between runs, and the page shows at most four
    rounded = [{key: float(f"{value:.10g}") if isinstance(value, float) else value for key, value in e.items()} for e in energies]
    (RESULTS / "angular_energy.json").write_text(json.dumps(rounded, indent=1))
    energy_table = ["| activation | D | sd of t at init | constant share | linear share | nonlinear share | nonlinear share, t ~ U[−1, 1] "
                    "| max truncation error (Ñ=20) | error > 0.1 from abs(t) = |", "|---|---|---|---|---|---|---|---|---|"]
    energy_table += [f"| {e['activation']} | {e['input_dim']} | {e['cosine_sd']:.3f} | {e['constant_share']:.3f} | {e['linear_share']:.3f} | "
                     f"{e['nonlinear_share']:.4f} | {e['nonlinear_share_ceiling']:.3f} | {e['max_truncation_error']:.1e} | "
                     f"{e['truncation_error_above_0.1_from']:.3f} |" for e in energies]
    generated = comparison(datasets) + "\n" + "\n".join(sections) + "\n### Angular energy of one unit at initialisation\n\n" + "\n".join(energy_table) + "\n"
    write_block(RESULTS.parent / "twin_training_tables.md", "twin_training", generated,
                "python -m benchmarks.twin_training --report " + " ".join(datasets), create=True)


#: The sets of the committed page, in its order
REPORT_DATASETS = ("naval", "protein", "naval_long", "yacht", "bostonHousing", "energy", "concrete", "wine-quality-red", "kin8nm",
                   "power-plant")
REPORT_BLOCKS = [("docs/results/twin_training_tables.md", "twin_training")]


def report_from_records() -> None:
    """docs/results/twin_training_tables.md and the figure from the committed records (``--report`` of the page's sets)."""
    report(REPORT_DATASETS)


def main(argv=None):
    parser = make_parser("python -m benchmarks.twin_training", __doc__.splitlines()[0])
    parser.add_argument("--dataset")
    parser.add_argument("--variants", nargs="+", default=[])
    parser.add_argument("--report", nargs="+", metavar="DATASET", help="write the page and figure from the records of these sets")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--check", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", help="records file name under docs/results/twin_training (default: the dataset)")
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(args.report)
        return
    for seed in args.seeds:
        for variant in args.variants:
            record = run(args.dataset, variant, args.num_train, args.steps, args.check, seed)
            with open(RESULTS / f"{args.out or args.dataset}.jsonl", "a") as stream:
                stream.write(json.dumps(record) + "\n")
            print(f"{args.dataset} {variant} seed {seed}: best val {record['best_validation_rmse']:.4f} at {record['best_step']}, "
                  f"test {record['test_rmse']:.4f}, {record['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
