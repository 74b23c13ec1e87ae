"""Getting started: a Keras network on a 1-D toy problem, converted to an activated deep GP.

Run from the repository root: ``python docs/examples/getting_started.py``. It prints the numbers shown on the
Getting started page and writes the figure ``docs/figures/getting_started.png`` and
the printed lines to ``docs/examples/getting_started.txt``. ``ADGP_TUTORIAL_FAST=1`` runs
a few epochs only and writes both into the current folder instead (the tests run it that way)."""

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import tf_keras

from activated_dgp import TrainingSchedule, train_two_stage

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
HERE = Path(__file__).resolve().parent
FIGURE = Path("getting_started.png") if FAST else HERE.parent / "figures" / "getting_started.png"
OUTPUT = Path("getting_started.txt") if FAST else HERE / "getting_started.txt"  # the printed lines, shown on the page
lines = []


def report(line: str) -> None:
    print(line)
    lines.append(line)


# 1. A toy regression problem: y = sin(3x) + noise on [-2, 2].
rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, size=(200, 1))
Y = np.sin(3 * X) + 0.1 * rng.normal(size=X.shape)

# 2. An ordinary tf-keras network, trained as usual.
tf_keras.utils.set_random_seed(0)
network = tf_keras.Sequential([
    tf_keras.Input((1,)),
    tf_keras.layers.Dense(32, activation="softplus"),
    tf_keras.layers.Dense(32, activation="softplus"),
    tf_keras.layers.Dense(1),
])
network.compile(tf_keras.optimizers.Adam(0.01), loss="mse")
network.fit(X, Y, epochs=20 if FAST else 500, batch_size=64, verbose=0)

# 3. Convert it to an activated deep GP whose mean is the network's forward pass, then train that on the ELBO
#    (stage 2 of Dutordoir et al., 2021, with the library's default recipe for a Gaussian likelihood).
result = train_two_stage(X, Y, network=network, seed=0, dgp_schedule=TrainingSchedule(epochs=2 if FAST else 200, patience=20, verbose=0))
report(f"stage-2 recipe: {result.recipe}; conversion mismatch on X: {result.conversion_mismatch:.1e}")

# 4. Predict beyond the data: the mean stays close to the network's, the variance grows away from [-2, 2].
grid = np.linspace(-5, 5, 201)[:, None]
mean, variance = result.predict_y(grid, seed=0)
std = np.sqrt(variance[:, 0])
inside = np.abs(grid[:, 0]) <= 2
report(f"predictive std inside the data: {std[inside].mean():.3f}, at |x| = 5: {std[[0, -1]].mean():.3f}")
report(f"largest |DGP mean - network| inside the data: {np.abs(mean - network(grid).numpy())[inside].max():.3f}")

plt.figure(figsize=(7, 3))
plt.plot(X, Y, "k.", ms=3, label="data")
plt.plot(grid, network(grid).numpy(), "--", label="network")
plt.plot(grid, mean, label="activated DGP mean")
plt.fill_between(grid[:, 0], mean[:, 0] - 2 * std, mean[:, 0] + 2 * std, alpha=0.3, label="mean ± 2 std")
plt.legend(loc="upper left", fontsize=8)
plt.tight_layout()
plt.savefig(FIGURE, dpi=100)
OUTPUT.write_text("\n".join(lines) + "\n")
print(f"wrote {FIGURE} and {OUTPUT}")
