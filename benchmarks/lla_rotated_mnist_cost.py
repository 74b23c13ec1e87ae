"""What the rotated-MNIST LLA rows can afford to cover (issue 33): the time of one Jacobian of the 10 logits of 64
images with respect to the parameters of the whole CNN, of its dense head (on frozen conv features), of the head after
its first activated layer, and of the last Dense layer, on the study's network (experiments.rotated_mnist,
Ñ = 20, random weights: the cost does not depend on their values). Extrapolated to one pass over 4,500 training
images (the GGN; the per-step NeuralEF Jacobians cost the same per pair) and printed with the machine's load.

Run:  nice -n 10 python -m benchmarks.lla_rotated_mnist_cost      (writes docs/results/lla_rotated_mnist_cost.json)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gpflow  # noqa: E402,F401  (the library's float64 set-up before tf_keras)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from activated_dgp.eigen import jacobian_function  # noqa: E402
from experiments.setups import rotated_mnist_cnn  # noqa: E402

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "lla_rotated_mnist_cost.json"
IMAGES, TRAINING_IMAGES = 64, 4500
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


if __name__ == "__main__":
    main()
