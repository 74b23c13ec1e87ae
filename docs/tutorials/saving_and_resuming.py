# %% [markdown]
# # Saving and resuming
#
# Everything the library makes is saved one way, `activated_dgp.save(obj, DIR)` / `activated_dgp.load(DIR)`: a
# `tf.train.CheckpointManager` directory whose checkpoint also holds the config that rebuilds the object, so loading
# needs no code that built it. It also survives the ways tf-keras and TensorFlow save things:
#
# | object | ways to save it |
# |---|---|
# | anything below, a user's tf-keras network too | `activated_dgp.save` / `activated_dgp.load` |
# | the network twin (`build_activated_nn`) | `save_weights` (`.weights.h5`, TF checkpoint), `model.save("twin.keras")`, `ModelCheckpoint`, `BackupAndRestore`, `tf.train.Checkpoint` |
# | an activated DGP | `save_dgp` / `load_dgp` (architecture + every parameter, optimiser state), `DGPCheckpoint` during `fit`, `tf.train.Checkpoint` or the training model's `save_weights("….weights.h5")` into a DGP of the same architecture |
# | eigenfunctions (`Nystrom`, `IKA`, `NeuralEF`), `LinearisedLaplace`, `EigenPro2` / `EigenPro3` | `activated_dgp.save` / `activated_dgp.load` (`LinearisedLaplace.save` / `.load` are the same) |
#
# A DGP's Keras models cannot be saved whole (`model.save("m.keras")` or a SavedModel): tf-keras cannot serialise
# gpflux's layers, and the library says so, naming the alternatives, instead of failing deep inside tf-keras.

# %%
import os
import tempfile

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

import activated_dgp
from activated_dgp import (
    build_activated_nn,
    dgp_from_keras,
    load_dgp,
    propagate_means,
    save_dgp,
    train_dgp,
    train_network,
    TrainingSchedule,
)
from activated_dgp.deep import DGPCheckpoint, load_optimizer, load_training_state
from activated_dgp.eigen import LinearisedLaplace, NeuralEF

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
workdir = tempfile.mkdtemp()
rng = np.random.default_rng(2)
X = rng.uniform(-2, 2, size=(200, 2))
Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.05 * rng.normal(size=(200, 1))

# %% [markdown]
# ## The twin is a Keras model

# %%
twin = build_activated_nn(2, num_layers=2, num_units=32, seed=0)
train_network(twin, X, Y, schedule=TrainingSchedule(epochs=5 if FAST else 50, verbose=0))
twin.save(os.path.join(workdir, "twin.keras"))
restored = tf_keras.models.load_model(os.path.join(workdir, "twin.keras"))
print("largest difference after .keras round trip:", float(np.max(np.abs(restored(X) - twin(X)))))

# %% [markdown]
# ## Any tf-keras network
# `activated_dgp.save` / `activated_dgp.load`: the network a user already has (here a ReLU MLP) is saved with its Keras config and weights, and comes back
# without the code that built it.

# %%
mlp = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(16, "relu"), tf_keras.layers.Dense(1)])
activated_dgp.save(mlp, os.path.join(workdir, "mlp"))
print("largest difference after save/load:", float(np.max(np.abs(activated_dgp.load(os.path.join(workdir, "mlp"))(X) - mlp(X)))))

# %% [markdown]
# ## The DGP
# `save_dgp` writes the architecture and every parameter; `load_dgp` rebuilds the model from the architecture and
# restores the values exactly.

# %%
dgp = dgp_from_keras(twin, num_data=len(X), X=X).dgp
save_dgp(dgp, os.path.join(workdir, "dgp"))
loaded = load_dgp(os.path.join(workdir, "dgp"))
print("mean propagation after round trip:", float(np.max(np.abs(propagate_means(loaded, X)[-1] - propagate_means(dgp, X)[-1]))))

# %% [markdown]
# ## Resuming an interrupted fit
# `DGPCheckpoint` saves the DGP, its optimiser and the epoch during `fit`; resume from the saved directory with the
# saved optimiser (Adam's moments and step count continue) and `initial_epoch`.

# %%
epochs = 4 if FAST else 40
checkpoint_dir = os.path.join(workdir, "checkpoint")
train_dgp(dgp, X, Y, TrainingSchedule(epochs=epochs // 2), callbacks=[DGPCheckpoint(checkpoint_dir, dgp)])
# ... the process stops here; a new one resumes:
resumed = load_dgp(checkpoint_dir)
state = load_training_state(checkpoint_dir)
print("resuming at epoch", state["epoch"])
history = train_dgp(
    resumed, X, Y, TrainingSchedule(epochs=epochs), optimizer=load_optimizer(checkpoint_dir, resumed), initial_epoch=state["epoch"]
)

# %% [markdown]
# ## Eigenfunctions and Laplace approximations
# The eigen module's objects save the same way. A NeuralEF comes back with its networks and training state, but not
# its kernel: its eigenfunctions ψ(x) are its networks' outputs, so a loaded one predicts without the kernel and
# needs it again only to train on. A linearised Laplace approximation is saved with its network.

# %%
neuralef = NeuralEF(3, kernel=gpflow.kernels.SquaredExponential(), input_dim=2, width=16, batch_size=64)
neuralef.fit(X, num_steps=20 if FAST else 500, print_every=0)
activated_dgp.save(neuralef, os.path.join(workdir, "neuralef"))
print("eigenfunctions after save/load:", float(np.max(np.abs(activated_dgp.load(os.path.join(workdir, "neuralef"))(X) - neuralef(X)))))

network = tf_keras.Sequential([tf_keras.Input((2,), dtype="float64"), tf_keras.layers.Dense(16, "tanh", dtype="float64"), tf_keras.layers.Dense(1, dtype="float64")])
train_network(network, X, Y, schedule=TrainingSchedule(epochs=5 if FAST else 50, verbose=0))
lla = LinearisedLaplace(network, noise_variance=0.05, prior_precision="marginal_likelihood", verbose=0).fit(X, Y)
lla.save(os.path.join(workdir, "lla"))  # = activated_dgp.save(lla, …): settings, GGN eigendecomposition, the network
again = LinearisedLaplace.load(os.path.join(workdir, "lla"))
print("LLA variances after save/load:", float(np.max(np.abs(again.predict_y(X)[1] - lla.predict_y(X)[1]))))

# %% [markdown]
# ## TensorFlow checkpoints
# `tf.train.Checkpoint`: a DGP is a `tf.Module`, so TensorFlow's own checkpoints work too, restoring into a DGP of the same architecture.

# %%
path = tf.train.Checkpoint(model=resumed).write(os.path.join(workdir, "tf_ckpt"))
target = load_dgp(os.path.join(workdir, "dgp"))  # same architecture, older values
tf.train.Checkpoint(model=target).read(path).assert_consumed()
print("after tf.train.Checkpoint:", float(np.max(np.abs(propagate_means(target, X)[-1] - propagate_means(resumed, X)[-1]))))
