"""What the rotated-MNIST LLA rows can afford to cover: the time of one Jacobian of the 10 logits of 64
images with respect to the parameters of the whole CNN, of its dense head (on frozen conv features), of the head after
its first activated layer, and of the last Dense layer, on the study's network (experiments.rotated_mnist,
Ñ = 20, random weights: the cost does not depend on their values). Extrapolated to one pass over 4,500 training
images (the GGN; the per-step NeuralEF Jacobians cost the same per pair) and printed with the machine's load.

Then the diagonal LLA of the dense head both ways, on the same 64 images in the same run: J(x) diag(s) J(x)ᵀ and the
GGN's diagonal from the per-example Jacobians (``jacobian_function``, then the products) against the layer-wise
factors (``activated_dgp.eigen.layerwise``, what ``LinearisedLaplace`` uses for such chains), the ratio of the two
times, and the largest relative difference of their results; the same for the last-layer LLA's J(x) V (V the
eigenvectors of its GGN) and for the NTK features of (image, class) pairs that the NeuralEF LLA recomputes at every
step, and for the B × B NTK Gram of such a batch that a NeuralEF step needs: R Rᵀ of the per-example rows, against
R Rᵀ of the layer-wise rows and against the Gram summed layer by layer without the rows (``combination_gram``, what
the NeuralEF LLA uses). Each time is the best of three calls.

Run:  python -m benchmarks.lla_rotated_mnist_cost      (writes docs/results/lla_rotated_mnist_cost.json and its block of
      docs/benchmarks*.md; ``--report-only`` rewrites the block from the record, timing nothing)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import time

import gpflow  # noqa: F401  (the library's float64 set-up before tf_keras)
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp.eigen import jacobian_function
from activated_dgp.eigen.laplace import _OutputSelector, pair_inputs
from activated_dgp.eigen.layerwise import layerwise_jacobian
from activated_dgp.eigen.ntk import jacobian_kernel
from benchmarks._report import report_block, time_call
from experiments.harness.setups import rotated_mnist_cnn

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "lla_rotated_mnist_cost.json"
IMAGES, TRAINING_IMAGES = 64, 4500
PAIRS = 256  # NeuralEF's batch (its default batch_size)
TRUNCATION_LEVEL, NUM_UNITS, WIDTH = 20, 128, 128  # the rotated-MNIST study's defaults (its Config)


def main() -> None:
    model, extractor, head = rotated_mnist_cnn(0, TRUNCATION_LEVEL, NUM_UNITS, WIDTH)
    x = np.random.default_rng(0).uniform(size=(IMAGES, 784))
    model(x[:2].astype(np.float32))
    conv = extractor(x.astype(np.float32)).numpy().astype(np.float64)
    first = head.layers[0](conv).numpy()
    parts = [
        ("dense head on frozen conv features", head, conv),
        ("head after its first activated layer", tf_keras.Sequential(head.layers[1:]), first),
        ("last Dense layer", tf_keras.Sequential(head.layers[3:]), tf_keras.Sequential(head.layers[1:3])(first).numpy()),
        ("whole CNN", model, x),  # float64 images, as LinearisedLaplace passes them
    ]
    rows = []
    for name, network, inputs in parts:
        network(inputs[:2])
        jacobian = jacobian_function(lambda X, network=network: network(X, training=False), network.trainable_variables)
        jacobian(tf.constant(inputs[:4]))  # traced
        start = time.perf_counter()
        shape = jacobian(tf.constant(inputs)).shape
        seconds = time.perf_counter() - start
        rows.append({"parameters": name, "P": int(network.count_params()), "jacobian_shape": list(shape),
                     f"seconds_per_{IMAGES}_images": round(seconds, 3),
                     f"seconds_per_{TRAINING_IMAGES}_images": round(seconds * TRAINING_IMAGES / IMAGES, 1),
                     "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()]})
        print(json.dumps(rows[-1]), flush=True)
        OUTPUT.write_text(json.dumps({"truncation_level": TRUNCATION_LEVEL, "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n")
    diagonal = diagonal_lla_rows(head, conv) + last_layer_rows(head, conv) + pair_feature_rows(head, extractor)
    OUTPUT.write_text(json.dumps({"truncation_level": TRUNCATION_LEVEL, "cpus": os.cpu_count(), "rows": rows,
                                  "diagonal_lla": diagonal}, indent=1) + "\n")


def best_of_three(function):
    """The fastest of three timed calls (after the warm-up the caller did), and the function's result."""
    return min(time_call(function, repeats=3, warmup=0)), function()


def compare(name: str, by_jacobian, factored, images: int = IMAGES) -> dict:
    seconds_jacobian, expected = best_of_three(by_jacobian)
    seconds_layerwise, result = best_of_three(factored)
    row = {"product": name, "images": images, "seconds_per_example_jacobians": round(seconds_jacobian, 3),
           "seconds_layerwise": round(seconds_layerwise, 3), "ratio": round(seconds_jacobian / seconds_layerwise, 1),
           "max_relative_difference": float(np.abs(result - expected).max() / np.abs(expected).max()),
           "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()]}
    print(json.dumps(row), flush=True)
    return row


def last_layer_rows(head, conv) -> list:
    """The last-layer LLA's test covariance factor J(x) V (V [1,280, 1,280], the GGN's eigenvectors; here a random
    orthogonal matrix) on the penultimate features: from the Jacobians against the layer-wise product."""
    last = tf_keras.Sequential(head.layers[3:])
    penultimate = tf_keras.Sequential(head.layers[:3])(conv).numpy()
    last(penultimate[:2])
    variables = last.trainable_variables
    jacobian = jacobian_function(lambda X: last(X, training=False), variables)
    layerwise = layerwise_jacobian(last, variables)
    V, _ = np.linalg.qr(np.random.default_rng(2).normal(size=(int(last.count_params()),) * 2))
    X = tf.constant(penultimate)
    jacobian(tf.constant(penultimate[:4]))
    layerwise.jacobian_times(penultimate[:4], V)
    return [compare("last-layer J V", lambda: jacobian(X).numpy() @ V, lambda: layerwise.jacobian_times(penultimate, V))]


def pair_feature_rows(head, extractor) -> list:
    """The NTK features of NeuralEF's pairs (x, c) that the NeuralEF LLA recomputes at every step when they do not
    fit the cache, ∂_θ g_c(x) [pairs, P] of the dense head: the Jacobian of the pair network (x, one-hot c) → g_c(x)
    (``jacobian_kernel``'s features) against the layer-wise combination (``LayerwiseJacobian.combination_jacobian``);
    a NeuralEF batch of PAIRS pairs, PAIRS random images with classes 0…9 in turn."""
    variables = head.trainable_variables
    conv = extractor(np.random.default_rng(3).uniform(size=(PAIRS, 784)).astype(np.float32)).numpy().astype(np.float64)
    pairs = pair_inputs(conv, 10)[np.arange(PAIRS) * 10 + np.arange(PAIRS) % 10]
    by_tape = jacobian_kernel(_OutputSelector(head, conv.shape[1], 10)).feature_map
    layerwise = layerwise_jacobian(head, variables)
    factored = tf.function(lambda A: layerwise.combination_jacobian(A[:, : conv.shape[1]], A[:, conv.shape[1] :]))
    gram = tf.function(lambda A: layerwise.combination_gram(A[:, : conv.shape[1]], A[:, conv.shape[1] :]))
    A = tf.constant(pairs)
    by_tape(A[:4]), factored(A[:4]), gram(A[:4])
    by_tape_gram = lambda: (lambda F: F @ F.T)(by_tape(A).numpy())  # noqa: E731
    return [compare("NeuralEF pair features", lambda: by_tape(A).numpy(), lambda: factored(A).numpy(), PAIRS),
            compare("NeuralEF batch Gram from the layer-wise rows", by_tape_gram, lambda: (lambda R: R @ R.T)(factored(A).numpy()), PAIRS),
            compare("NeuralEF batch Gram layer by layer", by_tape_gram, lambda: gram(A).numpy(), PAIRS)]


def diagonal_lla_rows(head, conv) -> list:
    """The diagonal LLA's two products on the dense head, per-example Jacobians against layer-wise factors."""
    variables = head.trainable_variables
    jacobian = jacobian_function(lambda X: head(X, training=False), variables)
    layerwise = layerwise_jacobian(head, variables)
    rng = np.random.default_rng(1)
    variances = rng.uniform(1e-3, 1.0, size=int(head.count_params()))
    logits = head(conv).numpy()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    hessians = np.stack([np.diag(q) - np.outer(q, q) for q in p])  # the softmax Λ of the study's LLA
    X = tf.constant(conv)
    jacobian(tf.constant(conv[:4]))
    layerwise.covariance(conv[:4], variances)

    def by_jacobian(product):
        F = jacobian(X).numpy()
        return product(F)

    products = {
        "covariance": (lambda F: (F * variances) @ np.swapaxes(F, 1, 2), lambda: layerwise.covariance(conv, variances)),
        "ggn_diagonal": (lambda F: np.einsum("bcp,bcd,bdp->p", F, hessians, F), lambda: layerwise.ggn_diagonal(conv, hessians)),
    }
    return [compare(f"diagonal {name.replace('_', ' ')}", lambda product=product: by_jacobian(product), factored)
            for name, (product, factored) in products.items()]


REPORT_COMMAND = "python -m benchmarks.lla_rotated_mnist_cost --report-only"
REPORT_BLOCKS = [("docs/benchmarks_kernels.md", "lla_rotated_mnist_cost")]


def markdown(record: dict) -> str:
    rows = "\n".join(f"| {row['parameters']} | {row['P']:,} | {row['seconds_per_64_images']:.3f} | {row['seconds_per_4500_images']:,.1f} |"
                     for row in record["rows"])
    diagonal = "\n".join(
        f"| {row['product']} | {row['images']} | {row['seconds_per_example_jacobians']:.3f} | {row['seconds_layerwise']:.3f} | "
        f"{row['ratio']}× | {row['max_relative_difference']:.1e} |" for row in record["diagonal_lla"])
    loads = sorted({tuple(row["load_average_1_5_15"]) for row in record["rows"] + record["diagonal_lla"]})
    return (
        "## LLA on the rotated-MNIST network: Jacobian cost, and the diagonal LLA layer by layer\n\n"
        "Record: `docs/results/lla_rotated_mnist_cost.json` (made by `python -m benchmarks.lla_rotated_mnist_cost`). The study's "
        f"CNN (Ñ = {record['truncation_level']}, random weights), the Jacobian of the 10 logits of 64 images:\n\n"
        "| parameters | P | s per 64 images | s per 4,500 images |\n|---|---|---|---|\n" + rows + "\n\n"
        "The LLA's products, best of three calls each, from the per-example Jacobians against the "
        "layer-wise factors (`activated_dgp.eigen.layerwise`, which `LinearisedLaplace` uses for chains of Dense and "
        "ActivatedLayer layers): the diagonal LLA of the dense head (its test covariances J diag(s) Jᵀ and its GGN's diagonal), "
        "and the last-layer LLA's J V on the penultimate features (V the 1,280 × 1,280 eigenvectors of its GGN), and the NTK "
        "features of a NeuralEF batch of (image, class) pairs that the NeuralEF LLA recomputes at every step, and that batch's "
        "NTK Gram R Rᵀ (from the layer-wise rows, and summed layer by layer without them, which the NeuralEF LLA now uses).\n\n"
        "| product | images | per-example Jacobians (s) | layer-wise (s) | ratio | max relative difference |\n|---|---|---|---|---|---|\n"
        + diagonal + "\n\n"
        f"- Measured with the background study runs stopped (SIGSTOP); 1/5/15-min load averages during the run: "
        f"{', '.join(str(list(load)) for load in loads)} on {record['cpus']} cores.\n"
    )


def report_from_records() -> str:
    return report_block("lla_rotated_mnist_cost", markdown, OUTPUT, REPORT_COMMAND)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.lla_rotated_mnist_cost", __doc__.splitlines()[0], main, report_from_records)
