"""Bare conversion of plain 2-hidden-layer ReLU MLPs with biases: candidate remedies for the converted DGP's
sampled predictions, measured on a 2-D regression toy and on UCI concrete split 0, and the choice among them.

Each problem trains a plain network (toy: 2→32→32→1, 500 points; concrete: D→50→50→1 on standardised data, RMSEs
in standardised units), converts it with no data given to the converter (``dgp_from_keras(network, N)``, no ridge
refit) and prints, per candidate: the network's test RMSE, the converted DGP's ``predict_y`` test RMSE (default
sampling, 100 samples, seed 0), the mean propagation's RMSE against the network, the KL per data point that the
converted means carry (Σ_layers ``ConversionReport.mean_kl`` / N), the test NLPD (``predictive_log_density``) and the
conversion time (including any kernel-variance selection). Candidates, each at every ``--truncation`` level Ñ:

* ``arc_cosine``: the paper's kernel, v = 1 (the default conversion);
* ``matched``: ``relu_kernel="matched"``, λ_n ∝ |σ_n| with s(1) = 1 (``ZonalMatchedKernel``), v = 1;
* ``arc_cosine+elbo`` / ``matched+elbo``: the same, then each layer's v chosen by the ELBO on the training data
  (``select_kernel_variances``, the mean propagation kept);
* a low Ñ (``--truncation 4``) is the fourth candidate;
* ``swap`` / ``swap+elbo``: :func:`activated_dgp.make_convertible` (each ReLU block swapped for zonal Swish units at
  Ñ, refitted layer by layer to the network on the training inputs, then fine-tuned on the training data for its
  default 10,000 steps), converted exactly; its time includes the fine-tuning. ``swapped`` records the swapped
  network's own test RMSE.

The rule, fixed before the runs: among candidates whose bare `predict_y` RMSE is ≤ 1.1× the network's on both
problems, choose the one with the lowest KL per data point on concrete; ties within a factor 2 go to the cheaper one;
if none qualifies, report that plainly and change nothing in the defaults.

("Cheaper": the shorter conversion time on concrete.) Run from the repository root (a few minutes on two cores):

    TF_CPP_MIN_LOG_LEVEL=3 ADGP_DATA_DIR=DIR python -m benchmarks.bare_relu_conversion \\
        [--truncation 4 10 20] [--epochs 200] [--concrete-epochs 1000] [--problems toy concrete] \\
        [--out docs/results/relu_conversion.jsonl]

Each measured row is appended to ``--out`` as one JSON line; docs/activated_dgp.md's table comes from those records.
"""

import argparse
import json
import os
import time
import warnings

import gpflow
import numpy as np
import tf_keras

from activated_dgp import dgp_from_keras, make_convertible, predict_y, propagate_means
from activated_dgp.data.uci import Standardizer, load_uci
from activated_dgp.deep.posterior_mean import mean_kl
from activated_dgp.deep.prediction import predictive_log_density
from activated_dgp.training import select_kernel_variances

CANDIDATES = ("arc_cosine", "matched", "arc_cosine+elbo", "matched+elbo", "swap", "swap+elbo")
RULE = ("among candidates whose bare predict_y RMSE is ≤ 1.1× the network's on both problems, choose the one with the "
        "lowest KL per data point on concrete; ties within a factor 2 go to the cheaper one; if none qualifies, report "
        "that plainly and change nothing in the defaults")


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


def toy_problem(epochs: int):
    rng = np.random.default_rng(0)
    def f(X):
        return np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:] * np.cos(X[:, :1])
    X, X_test = rng.uniform(-2, 2, size=(500, 2)), rng.uniform(-2, 2, size=(500, 2))
    Y, Y_test = f(X) + 0.1 * rng.normal(size=(500, 1)), f(X_test) + 0.1 * rng.normal(size=(500, 1))
    tf_keras.utils.set_random_seed(0)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(32, "relu"),
                                   tf_keras.layers.Dense(32, "relu"), tf_keras.layers.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(X, Y, epochs=epochs, batch_size=64, verbose=0)
    return network, X, Y, X_test, Y_test


def concrete_problem(epochs: int):
    data = load_uci("concrete", os.environ.get("ADGP_DATA_DIR"))
    split = data.split(0)
    x_scale, y_scale = Standardizer.fit(data.X[split.train]), Standardizer.fit(data.y[split.train])
    X, X_test = x_scale.transform(data.X[split.train]), x_scale.transform(data.X[split.test])
    Y, Y_test = y_scale.transform(data.y[split.train]), y_scale.transform(data.y[split.test])
    tf_keras.utils.set_random_seed(0)
    network = tf_keras.Sequential([tf_keras.Input((X.shape[1],)), tf_keras.layers.Dense(50, "relu"),
                                   tf_keras.layers.Dense(50, "relu"), tf_keras.layers.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(3e-3), "mse")
    network.fit(X, Y, epochs=epochs, batch_size=32, verbose=0,
                callbacks=[tf_keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=50, min_lr=1e-5)])
    return network, X, Y, X_test, Y_test


def measure(network, X, Y, X_test, Y_test, candidate: str, level: int, made: dict) -> dict:
    """One candidate at Ñ = ``level``; ``made`` keeps ``make_convertible``'s network per Ñ for the swap candidates of one
    problem (its time is counted in the first one's seconds and added to the others')."""
    kernel, _, select = candidate.partition("+")
    start = time.perf_counter()
    original, extra, made_seconds = network, {}, 0.0
    if kernel == "swap":
        if level not in made:
            made[level] = (make_convertible(original, X, Y, truncation_level=level, seed=0).network, time.perf_counter() - start)
        network, made_seconds = made[level]
        start = time.perf_counter()
        kernel, extra = "arc_cosine", {"swapped": rmse(network(X_test).numpy(), Y_test)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the KL warning: the KL is reported below
        report = dgp_from_keras(network, len(X), truncation_level=level, relu_kernel=kernel)
    dgp = report.dgp
    variances = [1.0] * len(dgp.f_layers)
    if select:
        variances = select_kernel_variances(dgp, X, Y).variances
    seconds = time.perf_counter() - start + made_seconds
    kl = sum(mean_kl(layer) for layer in dgp.f_layers)  # after any selection: v changes the means' KL
    net_test = original(X_test).numpy().astype(np.float64)
    mean = propagate_means(dgp, X_test)[-1].numpy()
    pred, _ = predict_y(dgp, X_test, seed=0)
    nlpd = -float(np.mean(predictive_log_density(dgp, X_test, Y_test, seed=0)))
    return dict(candidate=candidate, level=level, net=rmse(net_test, Y_test), pred=rmse(pred, Y_test),
                mean_vs_net=rmse(mean, net_test), kl=kl / len(X), nlpd=nlpd, seconds=seconds,
                variances=variances, **extra)


def _plain(value):
    """A JSON-ready copy of a measured value: numbers as floats, sequences as lists of floats."""
    return float(value) if np.isscalar(value) else [float(x) for x in value]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--truncation", type=int, nargs="+", default=[4, 10, 20])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--concrete-epochs", type=int, default=1000)
    parser.add_argument("--problems", nargs="+", default=["toy", "concrete"], choices=["toy", "concrete"])
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--out", default="docs/results/relu_conversion.jsonl",
                        help="records, one JSON line per (problem, candidate, Ñ), appended as each finishes ('' writes none)")
    args = parser.parse_args()
    results = {}
    for problem in args.problems:
        start = time.perf_counter()
        data = toy_problem(args.epochs) if problem == "toy" else concrete_problem(args.concrete_epochs)
        made = {}
        print(f"{problem}: network trained in {time.perf_counter() - start:.0f} s", flush=True)
        for level in args.truncation:
            for candidate in args.candidates:
                row = measure(*data, candidate, level, made)
                results[problem, candidate, level] = row
                if args.out:
                    with open(args.out, "a") as handle:
                        handle.write(json.dumps({"problem": problem, "candidate": candidate, "truncation_level": level,
                                                 **{k: _plain(v) for k, v in row.items() if k not in ("candidate", "level")}})
                                 + "\n")
                print(f"  {problem:8s} {candidate:16s} Ñ={level:2d}  net RMSE {row['net']:.4f}  predict_y RMSE "
                      f"{row['pred']:.4f} ({row['pred'] / row['net']:.2f}×)  mean vs net {row['mean_vs_net']:.4f}  "
                      f"KL/N {row['kl']:.4g}  NLPD {row['nlpd']:.4g}  {row['seconds']:.1f} s  "
                      f"v {[float(f'{v:.3g}') for v in row['variances']]}", flush=True)
    if set(args.problems) != {"toy", "concrete"}:
        return
    print(f"\nThe rule: {RULE}.")
    keys = {(c, n) for (_, c, n) in results}
    qualified = sorted((results["concrete", c, n]["kl"], results["concrete", c, n]["seconds"], c, n) for (c, n) in keys
                       if all(results[p, c, n]["pred"] <= 1.1 * results[p, c, n]["net"] for p in ("toy", "concrete")))
    if not qualified:
        print("No candidate qualifies: none has a bare predict_y RMSE within 1.1× the network's on both problems. "
              "The defaults stay as they are.")
        return
    best_kl = qualified[0][0]
    tied = [q for q in qualified if q[0] <= 2.0 * best_kl]
    choice = min(tied, key=lambda q: q[1])
    print(f"Qualified (KL/N on concrete, seconds): {[(c, n, f'{k:.3g}', f'{s:.1f}') for k, s, c, n in qualified]}")
    print(f"Chosen: {choice[2]} at Ñ = {choice[3]}")


if __name__ == "__main__":
    gpflow.config.set_default_float(np.float64)
    main()
