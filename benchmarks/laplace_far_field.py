"""The NeuralEF LLA's variance near and far from the data, against eq. 22 with the exact top-k NTK eigenpairs and the
exact LLA (eq. 21), for k = 10, 20, 50, 100, with the covariance of eq. 22 and the "subspace" one.

Set-ups, each a tanh MLP trained on y = sin(2 x_1) + 0.1 ε with a Gaussian likelihood σ² = 0.01 and prior precision
δ = 1: "1-D", a 1-50-1 MLP (P = 151), x ~ U[−2, 2], N = 128, test inputs 41 points on [−2.5, 2.5] ("near") and
x = 5, 10, 20, 50 ("far"); "4-D", a 4-32-32-1 MLP (P = 1,249), x ~ U[−2, 2]⁴, N = 256, near: 41 points of U[−2, 2]⁴,
far: r u at r = 5, 10, 20, 50 along one random unit vector u. The 1-D network's training NTK has numerical rank about
10, so there every k ≥ 10 is the whole spectrum; the 4-D one's is not.
Rows (``LinearisedLaplace`` of :mod:`activated_dgp.eigen.laplace`):

* ``exact LLA``: eq. 21 with the dense GGN (``method="exact"``);
* ``eq. 22, exact eigenpairs, k``: Nyström's top-k eigenpairs of the exact NTK Gram J Jᵀ (``method="eigenfunctions"``),
  with ``covariance="eq22"`` and ``covariance="subspace"`` (the LLA with the GGN projected onto the eigenfunctions'
  parameter directions);
* ``NeuralEF, k = 10``: ``method="neuralef"`` with NeuralEF's defaults and 2,000 steps, without oversampling and with
  10 extra networks, each with both covariances.

Reported per row: the latent standard deviation at the far points, and the median and max relative error of the
near variances against the exact-eigenpair row of the same k and covariance (for NeuralEF, k = 10) and
against the exact LLA. Writes docs/results/laplace_far_field.json.

Run:  nice -n 10 python -m benchmarks.laplace_far_field                 (writes the record and the
      "laplace_far_field" block of docs/eigen.md)
      python -m benchmarks.laplace_far_field --report-only   (the block from the committed record)
"""

from __future__ import annotations

import json
from pathlib import Path
import time

import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp.eigen import FeatureKernel, LinearisedLaplace, Nystrom
from activated_dgp.eigen.laplace import COVARIANCES
from experiments.harness.blocks import write_block

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "results" / "laplace_far_field.json"
DOC = ROOT / "docs" / "eigen.md"
REPORT_COMMAND = "python -m benchmarks.laplace_far_field --report-only"
REPORT_BLOCKS = [("docs/eigen.md", "laplace_far_field")]
FAR = [5.0, 10.0, 20.0, 50.0]
KS = (10, 20, 50, 100)


PROBLEMS = {"1-D": {"D": 1, "N": 128, "widths": (50,)}, "4-D": {"D": 4, "N": 256, "widths": (32, 32)}}


def trained_network(D: int, N: int, widths, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    Y = np.sin(2 * X[:, :1]) + 0.1 * rng.normal(size=(N, 1))
    tf_keras.utils.set_random_seed(seed)
    layers = [tf_keras.Input((D,), dtype="float64")] + [tf_keras.layers.Dense(w, activation="tanh", dtype="float64") for w in widths]
    model = tf_keras.Sequential(layers + [tf_keras.layers.Dense(1, dtype="float64")])
    model.compile(tf_keras.optimizers.Adam(0.02), "mse")
    model.fit(X, Y, epochs=200, verbose=0)
    return model, X, Y


def test_inputs(D: int, seed: int = 1):
    """(near [41, D], far [4, D]) as in the module docstring."""
    if D == 1:
        return np.linspace(-2.5, 2.5, 41)[:, None], np.array(FAR)[:, None]
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=D)
    return rng.uniform(-2, 2, size=(41, D)), np.array(FAR)[:, None] * (direction / np.linalg.norm(direction))[None, :]


def main() -> dict:
    return {"command": "nice -n 10 python -m benchmarks.laplace_far_field", "prior_precision": 1.0, "noise_variance": 0.01, "far_radii": FAR,
            "problems": {name: measure(**settings) for name, settings in PROBLEMS.items()}}


def measure(D: int, N: int, widths) -> dict:
    model, X, Y = trained_network(D, N, widths)
    near, far = test_inputs(D)
    common = dict(noise_variance=0.01, prior_precision=1.0, verbose=0)

    def jacobian_features(inputs):
        with tf.GradientTape() as tape:
            outputs = model(inputs)[:, 0]
        blocks = tape.jacobian(outputs, model.trainable_variables)
        return tf.concat([tf.reshape(b, [tf.shape(inputs)[0], -1]) for b in blocks], axis=1)

    def variances(la, inputs):
        return la.predict_f(inputs)[1].numpy().ravel()

    def errors(values, truth):
        relative = np.abs(values - truth) / truth
        return float(np.median(relative)), float(np.max(relative))

    exact = LinearisedLaplace(model, method="exact", **common).fit(X, Y)
    exact_near = variances(exact, near)
    rows = [{"name": "exact LLA (eq. 21)", "far_std": np.sqrt(variances(exact, far)).tolist()}]
    reference = {}
    for k in KS:
        nystrom = Nystrom(k).fit(X, kernel=FeatureKernel(jacobian_features, 1))
        for covariance in COVARIANCES:
            la = LinearisedLaplace(model, method="eigenfunctions", eigenfunctions=nystrom, covariance=covariance, **common).fit(X, Y)
            values = variances(la, near)
            reference[(k, covariance)] = values
            rows.append({"name": f"exact eigenpairs, k = {k}, covariance {covariance}", "k": k, "covariance": covariance,
                         "far_std": np.sqrt(variances(la, far)).tolist(), "vs_eq21_median_max": errors(values, exact_near)})
            print(json.dumps(rows[-1]), flush=True)
    for oversampling in (0, 10):
        for covariance in COVARIANCES:  # the same NeuralEF training (seed, steps) for both covariances
            start = time.perf_counter()
            learnt = LinearisedLaplace(model, method="neuralef", num_eigenpairs=10, neuralef_steps=2000, covariance=covariance,
                                       neuralef_options={"oversampling": oversampling}, **common).fit(X, Y)
            seconds = time.perf_counter() - start
            values = variances(learnt, near)
            rows.append({"name": f"NeuralEF, k = 10, oversampling {oversampling}, covariance {covariance}", "k": 10,
                         "covariance": covariance, "oversampling": oversampling, "fit_seconds": round(seconds, 1),
                         "far_std": np.sqrt(variances(learnt, far)).tolist(),
                         "vs_exact_eigenpairs_median_max": errors(values, reference[(10, covariance)]),
                         "vs_eq21_median_max": errors(values, exact_near)})
            print(json.dumps(rows[-1]), flush=True)
    return {"D": D, "N": N, "P": exact.num_parameters, "rows": rows}


def markdown(record: dict) -> str:
    """The "laplace_far_field" block of docs/eigen.md from its record."""
    radii = record["far_radii"]
    lines = [f"Record: `docs/results/laplace_far_field.json` (made by `{record['command']}`); δ = {record['prior_precision']}, "
             f"σ² = {record['noise_variance']}. Latent standard deviation at distance r from the data's centre, and the median "
             "relative error of the variances at 41 test inputs among the data."]
    for name, problem in record["problems"].items():
        lines += ["", f"**{name}** (N = {problem['N']}, P = {problem['P']:,}):", "",
                  "| posterior | " + " | ".join(f"std at r = {r:g}" for r in radii) + " | near: median error vs exact eigenpairs (same k, covariance) | near: median error vs exact LLA |",
                  "|---" * (len(radii) + 3) + "|"]
        for row in problem["rows"]:
            own = row.get("vs_exact_eigenpairs_median_max")
            eq21 = row.get("vs_eq21_median_max")
            lines.append(f"| {row['name']} | " + " | ".join(f"{v:.3g}" for v in row["far_std"])
                         + f" | {'—' if own is None else f'{own[0]:.2g}'} | {'—' if eq21 is None else f'{eq21[0]:.2g}'} |")
    return "\n".join(lines)


def report_from_records() -> None:
    """The "laplace_far_field" block of docs/eigen.md from the committed record (nothing is fitted)."""
    if not OUTPUT.exists():
        print(f"{OUTPUT.relative_to(ROOT)}: no record yet; run nice -n 10 python -m benchmarks.laplace_far_field")
        return
    write_block(DOC, "laplace_far_field", markdown(json.loads(OUTPUT.read_text())), REPORT_COMMAND)


if __name__ == "__main__":
    import sys

    if "--report-only" not in sys.argv[1:]:
        OUTPUT.write_text(json.dumps(main(), indent=1) + "\n")
    report_from_records()
