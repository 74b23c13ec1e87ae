# %% [markdown]
# # Activated GPflux layers with Keras fit and callbacks
#
# An activated GP layer is a `gpflux.layers.GPLayer`: `activated_gp_layer` builds one from inducing
# directions W [M, D + 1]. Stack layers into a `gpflux.models.DeepGP` and train it the GPflux way, with
# `as_training_model()`, `compile` and `fit`, and any Keras callback.

# %%
import os

import gpflow
import gpflux
import matplotlib.pyplot as plt
import numpy as np
import tf_keras

from activated_dgp import activated_gp_layer, predict_y
from activated_dgp.deep import LikelihoodLayer

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(1)
X = rng.uniform(-3, 3, size=(200, 1))
Y = np.sin(2 * X) + 0.1 * rng.normal(size=X.shape)
N = len(X)

# %% [markdown]
# Two layers: 1 → 2 (hidden) → 1. Each W row is [slope, offset] in the bias-extended input space. The likelihood
# layer is the library's `LikelihoodLayer` (gpflux's, whose `.weights.h5` state keeps the noise variance).

# %%
hidden = activated_gp_layer(rng.normal(size=(32, 2)), output_dim=2, num_data=N, name="hidden")
output = activated_gp_layer(rng.normal(size=(32, 3)), output_dim=1, num_data=N, name="output")
likelihood = LikelihoodLayer(gpflow.likelihoods.Gaussian(0.1))
dgp = gpflux.models.DeepGP([hidden, output], likelihood, num_data=N)

# %% [markdown]
# Training is Keras: `ReduceLROnPlateau` and `EarlyStopping` are Keras' own callbacks.
# With `validation_data`, Keras' `val_loss` is the negative ELBO per data point on the validation data (the
# library's layers add their losses in evaluation too), so `EarlyStopping(monitor="val_loss")` works as well.

# %%
model = dgp.as_training_model()
model.compile(tf_keras.optimizers.Adam(0.01))
callbacks = [
    tf_keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.9, patience=5),
    tf_keras.callbacks.EarlyStopping(monitor="loss", patience=50, restore_best_weights=True),
]
history = model.fit({"inputs": X, "targets": Y}, epochs=20 if FAST else 300, batch_size=64, callbacks=callbacks, verbose=0)
plt.plot(history.history["loss"])
plt.gca().set(xlabel="epoch", ylabel="−ELBO / N", title="training loss")
plt.show()

# %% [markdown]
# Predict with the library's sample-propagating predictor (layer 1 sampled, the last layer exact).

# %%
grid = np.linspace(-5, 5, 300)[:, None]
mean, variance = predict_y(dgp, grid, num_samples=20, seed=0)
plt.plot(X, Y, "k.", ms=3)
plt.plot(grid, mean[:, 0])
plt.fill_between(grid[:, 0], mean[:, 0] - 2 * np.sqrt(variance[:, 0]), mean[:, 0] + 2 * np.sqrt(variance[:, 0]), alpha=0.3)
plt.show()
