"""Bare conversion of a 2-hidden-layer ReLU MLP with biases on a 2-D regression toy: how far the converted DGP's
predictions are from the network's, and where the difference comes from.

Prints the network's test RMSE, the bare converted DGP's (no data given to the converter, so no ridge refit) test
RMSE of ``predict_y`` and of its mean propagation, each GP layer's own mismatch at the network's inputs to it,
each layer's residual prior variance k(h, h) − Qff(h) at those inputs (the spread that sampling the hidden layer
adds), and the KL per data point the converted means carry. Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python -m benchmarks.bare_relu_conversion [--truncation 20 60] [--epochs 300]
"""

import argparse
import warnings

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from activated_dgp import dgp_from_keras, predict_y, propagate_means


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--truncation", type=int, nargs="+", default=[10, 20, 60])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--units", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    def f(X):
        return np.sin(2 * X[:, :1]) + 0.5 * X[:, 1:] * np.cos(X[:, :1])
    X, X_test = rng.uniform(-2, 2, size=(500, 2)), rng.uniform(-2, 2, size=(500, 2))
    Y, Y_test = f(X) + 0.1 * rng.normal(size=(500, 1)), f(X_test) + 0.1 * rng.normal(size=(500, 1))
    tf_keras.utils.set_random_seed(0)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(args.units, "relu"),
                                   tf_keras.layers.Dense(args.units, "relu"), tf_keras.layers.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(X, Y, epochs=args.epochs, batch_size=64, verbose=0)
    rmse = lambda a, b: float(np.sqrt(np.mean((np.asarray(a, np.float64) - b) ** 2)))  # noqa: E731
    net_test = network(X_test).numpy().astype(np.float64)
    print(f"network: test RMSE {rmse(net_test, Y_test):.4f}")
    # GP layer 0 is the first ReLU layer's units with B = I (ReLU units follow directly), outputting h1 = relu(x K1 + b1);
    # GP layer 1 is the second ReLU layer's units with the linear output layer as B and its bias as the mean function
    h1 = tf_keras.Model(network.inputs, network.layers[0].output)(X_test).numpy().astype(np.float64)
    for level in args.truncation:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            dgp = dgp_from_keras(network, len(X), truncation_level=level).dgp
        mean = propagate_means(dgp, X_test)[-1].numpy()
        pred, var = predict_y(dgp, X_test, num_samples=50, seed=0)
        kl = [0.5 * float(tf.reduce_sum(tf.square(layer.q_mu))) for layer in dgp.f_layers]  # whitened: ½‖μ_v‖²
        print(f"Ñ = {level}: {len(dgp.f_layers)} GP layers; predict_y test RMSE {rmse(pred, Y_test):.4f} "
              f"(vs network {rmse(pred, net_test):.4f}); mean propagation vs network {rmse(mean, net_test):.4f}; "
              f"KL per data point {sum(kl) / len(X):.4g} (per layer {[round(k / len(X), 4) for k in kl]}); "
              f"mean predictive variance {float(var.mean()):.4g}")
        targets = [h1, net_test]
        for index, (layer, h_in, target) in enumerate(zip(dgp.f_layers, [X_test, h1], targets)):
            local, local_var = (t.numpy() for t in layer.predict(tf.constant(h_in), full_cov=False))
            print(f"  GP layer {index}: own mismatch at the network's input RMSE {rmse(local, target):.4f} "
                  f"(max {float(np.max(np.abs(local - target))):.4f}, output scale {float(np.std(target)):.3f}); "
                  f"variance at those inputs (mean over points and outputs) {float(local_var.mean()):.4g}, output "
                  f"variance {float(np.var(target, axis=0).mean()):.4g}")


if __name__ == "__main__":
    gpflow.config.set_default_float(np.float64)
    main()
