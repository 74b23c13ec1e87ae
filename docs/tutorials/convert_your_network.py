# %% [markdown]
# # Convert your own Keras network, train both stages, and look at the uncertainty
#
# The promise: take the tf-keras network you already have, convert it to an activated deep GP whose mean is
# the network's forward pass (Dutordoir et al., 2021, Sec. 5.1), and gain uncertainty without losing accuracy.
#
# 1. **Stage 1** is your network, trained as usual.
# 2. **Conversion** (`dgp_from_keras`) gives each layer the network's directions W and the variational mean that
#    reproduces the next linear map: the DGP's mean propagation *is* the forward pass.
# 3. **Stage 2** optimises the ELBO over every DGP parameter. `train_two_stage(X, Y, network=...)` does
#    conversion and stage 2 with the library's default recipe ([Which stage-2 recipe](../../activated_dgp/#which-stage-2-recipe) says which and why);
#    `dgp_from_keras` and `train_dgp` are the two steps on their own.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import tf_keras

from activated_dgp import TrainingSchedule, dgp_from_keras, predict_y, propagate_means, train_dgp, train_two_stage

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(0)
tf_keras.utils.set_random_seed(0)  # the networks' initial weights: the same run every time
X = rng.uniform(-2, 2, size=(300, 1))
Y = np.sin(3 * X) + 0.1 * rng.normal(size=X.shape)

# %% [markdown]
# ## Stage 1: an ordinary Keras network

# %%
network = tf_keras.Sequential(
    [
        tf_keras.Input((1,)),
        tf_keras.layers.Dense(64, activation="relu"),
        tf_keras.layers.Dense(64),
        tf_keras.layers.Activation("relu"),
        tf_keras.layers.Dense(1),  # biases everywhere: the last one becomes a Constant mean function
    ]
)
network.compile(tf_keras.optimizers.Adam(0.01), loss="mse")
network.fit(X, Y, epochs=50 if FAST else 1000, batch_size=64, verbose=0)
print("network training MSE:", float(np.mean((network(X).numpy() - Y) ** 2)))

# %% [markdown]
# ## Conversion
# A ReLU network converts up to the Gegenbauer truncation: ‖w‖‖x̃‖ relu(ŵ·x̂) = relu(w·x̃) because ReLU is positively
# homogeneous. Each Dense layer's [kernel, bias] gives the directions W, a bias after the units becomes a constant mean
# function, and consecutive activated layers are joined with B = I. Softplus or swish networks convert approximately
# (pass `X` so that the next linear map is refitted). The mismatch is reported per layer.

# %%
conversion = dgp_from_keras(network, num_data=len(X), X=X, noise_variance=float(np.mean((network(X).numpy() - Y) ** 2)))
dgp = conversion.dgp
print(f"exact: {conversion.exact}; largest mean mismatch on X: {conversion.max_abs_mismatch:.2e}")
for layer in conversion.layers:
    print(layer)
print("KL of the converted means per GP layer (nats):", [f"{kl:.3g}" for kl in conversion.mean_kl])

# %% [markdown]
# The conversion warned: the second GP layer's means carry a KL far above the data term. A ReLU unit's RKHS norm
# grows with the truncation level and the layer's input dimension (here 65), so the ELBO would rather shrink the
# network's means than pay it. These are the numbers to expect from a bare ReLU conversion, not a fault: for a ReLU
# network whose uncertainty you want to train further, `activated_dgp.make_convertible(network, X, Y)` swaps its units
# for zonal Swish units refitted to it first, and the swapped network converts exactly, with a KL of 33 and 108 nats per
# point on the two measured problems ([Making a ReLU network convertible](../../activated_dgp/#making-a-relu-network-convertible)).
# `train_two_stage` does that by default for a network with ReLU units (`make_convertible="auto"`).
#
# ## Stage 2: the ELBO alone, and the default recipe
# Plain ELBO training (`train_dgp` at kernel variance 1, the paper's recipe) on the bare conversion pays for the KL
# with the fit: the test RMSE below gets worse than the network's. `train_two_stage` first makes the ReLU network
# convertible (here with fewer fine-tuning steps than its default 10,000, to keep the tutorial short), then its default
# recipe chooses the kernel variances and the noise on a held-out part, stops early on the validation NLPD, restores
# the best check, and gives the output layer the far-field term, so its variance grows away from the data.
# `result.convertible` holds the losses of the ReLU network, of the swapped one after its refit, and after
# fine-tuning; `result.validation_scores` compares the DGP with the network on the held-out part.

# %%
rng_test = np.random.default_rng(1)
X_test = rng_test.uniform(-2, 2, size=(300, 1))
Y_test = np.sin(3 * X_test) + 0.1 * rng_test.normal(size=X_test.shape)
epochs = 10 if FAST else 100


def test_rmse(mean):
    return float(np.sqrt(np.mean((mean - Y_test) ** 2)))


print(f"network test RMSE: {test_rmse(network(X_test).numpy()):.3f}")
history = train_dgp(dgp, X, Y, TrainingSchedule(epochs=epochs, learning_rate=1e-3))
print(f"plain ELBO (paper recipe) test RMSE: {test_rmse(predict_y(dgp, X_test, num_samples=10, seed=0)[0]):.3f}")
result = train_two_stage(
    X, Y, network=network, seed=0, dgp_schedule=TrainingSchedule(epochs=epochs, learning_rate=1e-3, patience=5),
    make_convertible=dict(steps=300 if FAST else 3000),
)
made = result.convertible
print(f"MSE of the ReLU network {made.original_loss:.4f}, swapped {made.swapped_loss:.4f}, fine-tuned {made.final_loss:.4f}")
print(f"default recipe ({result.recipe}) test RMSE: {test_rmse(predict_y(result.dgp, X_test, num_samples=10, seed=0)[0]):.3f}")
print("kernel variances chosen per layer:", result.kernel_variances)
print("mean validation log density, network and DGP:", {k: round(v, 3) for k, v in result.validation_scores.items()})

# %% [markdown]
# ## The uncertainty, near the data and away from it

# %%
grid = np.linspace(-6, 6, 400)[:, None]


def plot_uncertainty(network_curve, mean, variance, network_label, dgp_label):
    """The data, the network's curve, and the DGP's predictive mean ± 2σ on the grid."""
    plt.figure(figsize=(8, 3.5))
    plt.plot(X, Y, "k.", ms=3, label="data")
    plt.plot(grid, network_curve, "--", label=network_label)
    plt.plot(grid, mean, label=dgp_label)
    plt.fill_between(grid[:, 0], mean[:, 0] - 2 * np.sqrt(variance[:, 0]), mean[:, 0] + 2 * np.sqrt(variance[:, 0]), alpha=0.3, label="±2σ")
    plt.legend()
    plt.show()


mean, variance = predict_y(result.dgp, grid, num_samples=10, seed=0)
plot_uncertainty(network(grid).numpy(), mean, variance, "network", "converted DGP (default recipe), mean")

# %% [markdown]
# ## A network with layers that do not convert: keep them as a feature extractor
# Only chains of activated Dense layers convert. Layers in front of them that do not (Conv2D, BatchNormalization,
# a tanh layer) stay a feature extractor g, and the dense head after them converts on the features g(x). In stage 2
# `train_dgp_with_extractor` trains g together with the DGP on the ELBO. On rotated MNIST that is what keeps the
# converted classifier's lead under dataset shift; with g frozen it does not beat MC dropout
# ([rotated MNIST results](../../results/rotated_mnist/)). Here g is a tanh layer, which the converter refuses. Below, the two steps by
# hand; `train_two_stage(X, Y, network=whole)` does the same split (`split_convertible_head`), trains a copy of g
# with the default recipe, and returns it as `result.extractor`.

# %%
from activated_dgp import train_dgp_with_extractor

extractor = tf_keras.Sequential([tf_keras.Input((1,)), tf_keras.layers.Dense(16, activation="tanh")])
head = tf_keras.Sequential([tf_keras.Input((16,)), tf_keras.layers.Dense(64, activation="relu"), tf_keras.layers.Dense(1)])
whole = tf_keras.Sequential([extractor, head])
whole.compile(tf_keras.optimizers.Adam(0.01), loss="mse")
whole.fit(X, Y, epochs=50 if FAST else 1000, batch_size=64, verbose=0)
features = extractor(X).numpy().astype(np.float64)
mse = float(np.mean((whole(X).numpy() - Y) ** 2))
head_conversion = dgp_from_keras(head, num_data=len(X), X=features, noise_variance=mse)
print(f"network training MSE: {mse:.4f}; head's mean mismatch on g(X): {head_conversion.max_abs_mismatch:.2e}")
extractor_history = train_dgp_with_extractor(
    head_conversion.dgp, extractor, X, Y, TrainingSchedule(epochs=10 if FAST else 100, learning_rate=1e-3)
)
print("best step kept by the guard:", extractor_history["best_step"])

# %%
mean, variance = predict_y(head_conversion.dgp, extractor(grid).numpy().astype(np.float64), num_samples=10, seed=0)
plot_uncertainty(whole(grid).numpy(), mean, variance, "network (tanh extractor + ReLU head)",
                 "head converted, extractor trained with it: mean")
