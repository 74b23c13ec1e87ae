"""How far a converted plain MLP's mean propagation is from the network: per activation and Ñ.

Networks: [Input(D), Dense(32, act), Dense(32, act), Dense(1)], Glorot-uniform weights and N(0, 0.5²) biases
(seeded), untrained, float64; X: 500 standard-normal points. Each is converted by ``dgp_from_keras`` twice:
without data (the direct map: ReLU → zonal ReLU, softplus/swish → the registry's zonal Softplus/Swish with gain
1/3) and with X (every non-exact layer's B and c refitted by ridge). Recorded: the RMS of DGP mean propagation
minus the network's output, divided by the RMS of the output, overall and per GP layer (propagated and local,
see ``activated_dgp.deep.conversion.LayerMismatch``), each divided by the RMS of that layer's network output; and
per GP layer the KL that the converted means carry into the ELBO (``ConversionReport.mean_kl``, with X).

Run:  python -m benchmarks.conversion          (writes docs/results/conversion.json, prints a markdown table)
"""

from __future__ import annotations

import json
from pathlib import Path
import warnings

import numpy as np
import tf_keras

from activated_dgp import dgp_from_keras, propagate_means

RECORD = Path(__file__).resolve().parents[1] / "docs" / "results" / "conversion.json"
WIDTHS, UNITS, POINTS = (2, 8), 32, 500
CASES = [("relu", 2), ("relu", 5), ("relu", 10), ("relu", 20), ("relu", 40), ("softplus", 20), ("swish", 20)]


def network(input_dim: int, activation: str, seed: int):
    init = lambda k: tf_keras.initializers.GlorotUniform(seed=seed + k)  # noqa: E731
    layers = [tf_keras.layers.Dense(UNITS, activation, kernel_initializer=init(0), dtype="float64"),
              tf_keras.layers.Dense(UNITS, activation, kernel_initializer=init(1), dtype="float64"),
              tf_keras.layers.Dense(1, kernel_initializer=init(2), dtype="float64")]
    net = tf_keras.Sequential([tf_keras.Input((input_dim,), dtype="float64")] + layers)
    rng = np.random.default_rng(seed)
    for layer in layers:
        layer.bias.assign(0.5 * rng.normal(size=layer.bias.shape))
    return net


def main():
    rows = []
    for input_dim in WIDTHS:
        X = np.random.default_rng(input_dim).normal(size=(POINTS, input_dim))
        for activation, level in CASES:
            net = network(input_dim, activation, seed=input_dim)
            output = net(X).numpy()
            hidden = net.layers[0](X).numpy()  # GP layer 1 is the first Dense (B = I: the second one is activated too)
            layer_scales = [float(np.sqrt(np.mean(h**2))) for h in (hidden, output)]
            scale = float(np.sqrt(np.mean(output**2)))
            direct = dgp_from_keras(net, POINTS, truncation_level=level)
            direct_rms = float(np.sqrt(np.mean((propagate_means(direct.dgp, X)[-1].numpy() - output) ** 2)))
            with warnings.catch_warnings():  # the KL warning: the KL is what this records
                warnings.simplefilter("ignore", UserWarning)
                fitted = dgp_from_keras(net, POINTS, X=X, truncation_level=level)
            rows.append(dict(
                input_dim=input_dim, activation=activation, truncation_level=level, output_rms=scale,
                direct_relative_rms=direct_rms / scale, data_relative_rms=fitted.rms_mismatch / scale, mean_kl=fitted.mean_kl,
                layers=[dict(map=r.map, refitted=r.refitted, output_rms=s, relative_rms=r.rms / s, relative_local_rms=r.local_rms / s)
                        for r, s in zip(fitted.layers, layer_scales)],
            ))
    RECORD.write_text(json.dumps(dict(command="python -m benchmarks.conversion", rows=rows), indent=1) + "\n")
    print("| D | activation | Ñ | map | direct (no X) | with X | per layer (with X, propagated, relative to the layer's output) "
          "| KL of the means per layer (nats) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        layers = ", ".join(f"{layer['relative_rms']:.3f}" for layer in row["layers"])
        print(f"| {row['input_dim']} | {row['activation']} | {row['truncation_level']} | {row['layers'][0]['map']} | "
              f"{row['direct_relative_rms']:.3f} | {row['data_relative_rms']:.3f} | {layers} | "
              + " / ".join(f"{kl:.3g}" for kl in row["mean_kl"]) + " |")


if __name__ == "__main__":
    main()
