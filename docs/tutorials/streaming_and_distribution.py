# %% [markdown]
# # Streaming data and distributed training
#
# `train_dgp` takes in-memory arrays, but also data that do not fit in memory: a `tf.data.Dataset` of (x, y)
# pairs, an `ArraySource` over NumPy arrays or memmaps (`ArraySource.from_npy` reads `.npy` files block by block),
# or a `CsvSource`. They stream in shuffled global batches in constant memory. With a `tf.distribute.Strategy`
# the DGP is mirrored and each replica takes its share of every global batch.

# %%
import os
import tempfile

import numpy as np
import tensorflow as tf

from activated_dgp import TrainingSchedule, build_activated_dgp, evaluate_elbo, train_dgp
from activated_dgp.data import ArraySource

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(3)
N = 2000
X = rng.uniform(-2, 2, size=(N, 3))
Y = np.sum(np.sin(X), axis=1, keepdims=True) + 0.1 * rng.normal(size=(N, 1))

# %% [markdown]
# ## Rows from NumPy files, never all in memory

# %%
directory = tempfile.mkdtemp()
np.save(os.path.join(directory, "X.npy"), X)
np.save(os.path.join(directory, "Y.npy"), Y)
source = ArraySource.from_npy(os.path.join(directory, "X.npy"), os.path.join(directory, "Y.npy"), block_rows=256)

dgp = build_activated_dgp(3, N, num_layers=2, num_units=32, seed=0)
before = evaluate_elbo(dgp, X, Y)
history = train_dgp(dgp, source, schedule=TrainingSchedule(epochs=2 if FAST else 20, batch_size=200))
print(f"ELBO {before:.1f} → {evaluate_elbo(dgp, X, Y):.1f}")

# %% [markdown]
# ## A distribution strategy
# With `tf.distribute`: on this machine a `MirroredStrategy` has one replica (the CPU); on a multi-GPU machine the same call spreads each
# global batch over the devices. The global batch size must divide among the replicas.

# %%
strategy = tf.distribute.MirroredStrategy()
dgp = build_activated_dgp(3, N, num_layers=2, num_units=32, seed=0)
history = train_dgp(dgp, X, Y, TrainingSchedule(epochs=2 if FAST else 20, batch_size=200), strategy=strategy)
print(f"{strategy.num_replicas_in_sync} replica(s); final loss {history['loss'][-1]:.3f}")
