"""One process of the tf.distribute tests (tests/test_scaling.py): trains a fixed one-layer activated DGP
for a few steps and writes its parameters to ``--out`` (worker 0 only).

--strategy none:       a single device, no strategy (the reference);
--strategy mirrored:   MirroredStrategy over two logical CPU devices of this process;
--strategy multiworker: MultiWorkerMirroredStrategy, cluster from TF_CONFIG (one CPU replica per worker).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

NUM_DATA, INPUT_DIM, NUM_UNITS = 256, 3, 16


def make_strategy(name: str):
    """Created first: a multi-worker strategy must configure collectives before any other TF op."""
    if name == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return None


def problem():
    import numpy as np

    from activated_dgp import build_activated_dgp

    rng = np.random.default_rng(7)
    X = rng.standard_normal((NUM_DATA, INPUT_DIM))
    Y = np.sin(2.0 * X[:, :1]) + 0.1 * rng.standard_normal((NUM_DATA, 1))
    dgp = build_activated_dgp(INPUT_DIM, NUM_DATA, num_layers=1, num_units=NUM_UNITS, seed=3)
    return dgp, X, Y


def train(strategy, epochs: int, batch_size: int, data: str = "arrays"):
    """The DGP after ``epochs`` epochs of batch ``batch_size`` (global) on the fixed problem."""
    import numpy as np

    from activated_dgp import TrainingSchedule, train_dgp
    from activated_dgp.data.streaming import ArraySource

    dgp, X, Y = problem()
    source = ArraySource(X, Y, block_rows=64) if data == "arrays" else tf.data.Dataset.from_tensor_slices((X, Y))
    schedule = TrainingSchedule(epochs=epochs, batch_size=batch_size, learning_rate=0.02)
    history = train_dgp(dgp, source, schedule=schedule, strategy=strategy, seed=11)
    import gpflow

    parameters = gpflow.utilities.parameter_dict(dgp)
    return {path: np.asarray(p.numpy()) for path, p in parameters.items() if isinstance(p, gpflow.Parameter)}, history


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=["none", "mirrored", "multiworker"], required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", choices=["arrays", "dataset"], default="arrays")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    strategy = make_strategy(args.strategy)
    import numpy as np

    values, history = train(strategy, args.epochs, args.batch_size, args.data)
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    if task.get("index", 0) == 0:
        np.savez(args.out, **values)
    print("done", history["loss"], file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
