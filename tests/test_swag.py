"""SWA and SWAG (activated_dgp.training.swag) against numpy computations from the stored snapshots: the moments and
deviation columns, the sampler's exact covariance ½ Σ_diag + D Dᵀ / (2 (K − 1)), the predictive of a small MLP
from given noise, the Keras callback, and a tf.train.Checkpoint round trip in a fresh process."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp.training import SWAG, SWAGCallback

RANK = 4


def _mlp(seed: int = 0):
    """3 → Dense(5, tanh) → Dense(3) logits, float64."""
    tf_keras.utils.set_random_seed(seed)
    model = tf_keras.Sequential([
        tf_keras.Input((3,), dtype="float64"),
        tf_keras.layers.Dense(5, activation="tanh", dtype="float64"),
        tf_keras.layers.Dense(3, dtype="float64"),
    ])
    return model


def _flat(model) -> np.ndarray:
    return np.concatenate([v.numpy().reshape(-1) for v in model.trainable_variables])


def _numpy_forward(theta: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The MLP's softmax probabilities at flat weights θ, in numpy (kernel, bias of each layer, in order)."""
    W1, b1, W2, b2 = np.split(theta, np.cumsum([15, 5, 15]))
    logits = np.tanh(X @ W1.reshape(3, 5) + b1) @ W2.reshape(5, 3) + b2
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def trajectory():
    """A SWAG fed 7 snapshots of a short SGD run on random data, and the snapshots themselves [7, P]."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(64, 3)), rng.integers(0, 3, 64)
    model = _mlp()
    swag = SWAG(model, max_rank=RANK)
    optimizer = tf_keras.optimizers.SGD(0.5)
    snapshots = []
    for step in range(7):
        rows = rng.choice(64, 16, replace=False)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(y[rows], model(X[rows]), from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        swag.collect()
        snapshots.append(_flat(model))
    return swag, np.array(snapshots), X


def _numpy_moments(snapshots: np.ndarray):
    """θ̄, Σ_diag, and D [P, K] (deviations from the running means, last K, oldest first), from the snapshots."""
    mean = snapshots.mean(0)
    variance = np.maximum((snapshots**2).mean(0) - mean**2, 1e-30)
    running = np.cumsum(snapshots, 0) / np.arange(1, len(snapshots) + 1)[:, None]
    D = (snapshots - running)[-RANK:].T
    return mean, variance, D


def test_moments_and_deviations_match_numpy(trajectory):
    swag, snapshots, _ = trajectory
    mean, variance, D = _numpy_moments(snapshots)
    assert swag.num_snapshots == 7 and swag.rank == RANK
    np.testing.assert_allclose(swag.mean(), mean, rtol=0, atol=1e-13)
    np.testing.assert_allclose(swag.diagonal_variance(), variance, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(swag.deviation_matrix(), D, rtol=0, atol=1e-13)
    swa = swag.swa_weights()
    assert [w.shape for w in swa] == [tuple(v.shape) for v in swag.model.trainable_variables]
    np.testing.assert_allclose(np.concatenate([w.reshape(-1) for w in swa]), mean, atol=1e-13)


def test_sampler_covariance_is_the_dense_low_rank_plus_diagonal_gaussian(trajectory):
    """θ̃(z) is affine in z = [z₁, z₂]: its columns A e_i give the exact covariance A Aᵀ, against the dense
    Σ = ½ Σ_diag + D Dᵀ / (2 (K − 1)) built here from the snapshots."""
    swag, snapshots, _ = trajectory
    mean, variance, D = _numpy_moments(snapshots)
    P = snapshots.shape[1]
    basis = np.vstack([np.zeros(P + RANK), np.eye(P + RANK)])
    samples = swag.sample(noise=basis)
    np.testing.assert_allclose(samples[0], mean, atol=1e-13)
    A = (samples[1:] - samples[0]).T
    dense = 0.5 * np.diag(variance) + D @ D.T / (2 * (RANK - 1))
    np.testing.assert_allclose(A @ A.T, dense, rtol=0, atol=1e-10 * np.abs(dense).max())


def test_predictive_matches_a_dense_computation(trajectory):
    """The model average (1/S) Σ_s softmax(g(x; θ̃_s)) from given noise, against numpy: weights drawn from the dense
    Gaussian's square root (Cholesky of Σ would give other samples, so the same affine map is used, from numpy's
    moments) and the MLP evaluated in numpy. Agreement to 1e-8."""
    swag, snapshots, X = trajectory
    mean, variance, D = _numpy_moments(snapshots)
    P = snapshots.shape[1]
    noise = np.random.default_rng(3).standard_normal((20, P + RANK))
    thetas = mean + noise[:, :P] * np.sqrt(variance) / np.sqrt(2) + noise[:, P:] @ D.T / np.sqrt(2 * (RANK - 1))
    expected = np.mean([_numpy_forward(theta, X) for theta in thetas], axis=0)
    before = _flat(swag.model)
    got = swag.predict_proba(X, noise=noise, batch_size=16)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(_flat(swag.model), before)  # weights restored
    # drawn noise: the Monte-Carlo average over 4,000 samples is within its standard error of the dense
    # Gaussian's mean prediction of a linear readout (the first logit's bias row is linear in θ)
    draws = swag.sample(4000, seed=1)
    cov = 0.5 * np.diag(variance) + D @ D.T / (2 * (RANK - 1))
    np.testing.assert_allclose(draws.mean(0), mean, atol=5 * np.sqrt(np.diag(cov)).max() / np.sqrt(4000) + 1e-15)


def test_callback_collects_per_epoch_and_per_step():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(40, 3)), rng.integers(0, 3, 40)
    model = _mlp(1)
    model.compile(tf_keras.optimizers.SGD(0.1), tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    per_epoch, per_step = SWAG(model, max_rank=3), SWAG(model, max_rank=3)
    snapshots = []
    recorder = tf_keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epoch >= 1 and snapshots.append(_flat(model)))
    model.fit(X, y, batch_size=10, epochs=5, verbose=0, shuffle=False,
              callbacks=[SWAGCallback(per_epoch, start=1), SWAGCallback(per_step, every=2, per="step"), recorder])
    assert per_epoch.num_snapshots == 4 and per_step.num_snapshots == 10  # 20 steps, every second
    np.testing.assert_allclose(per_epoch.mean(), np.mean(snapshots, 0), atol=1e-13)
    per_epoch.apply_swa()
    np.testing.assert_allclose(_flat(model), np.mean(snapshots, 0), atol=1e-13)


def test_bad_input():
    model = _mlp()
    with pytest.raises(ValueError, match="max_rank"):
        SWAG(model, max_rank=1)
    with pytest.raises(ValueError, match="build it"):
        SWAG(tf_keras.Sequential([tf_keras.layers.Dense(2)]))
    swag = SWAG(model, max_rank=3)
    with pytest.raises(ValueError, match="0 collected"):
        swag.swa_weights()
    swag.collect()
    with pytest.raises(ValueError, match="at least 2"):
        swag.sample(2, seed=0)
    swag.collect()
    with pytest.raises(ValueError, match="noise must be"):
        swag.sample(noise=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        swag.predict_proba(np.full((2, 3), np.nan), num_samples=2)


LOADER = """
import json, sys
import numpy as np
import tensorflow as tf
import tf_keras
from activated_dgp.training import SWAG

model = tf_keras.Sequential([tf_keras.Input((3,), dtype="float64"), tf_keras.layers.Dense(5, activation="tanh", dtype="float64"),
                             tf_keras.layers.Dense(3, dtype="float64")])
swag = SWAG(model, max_rank=4)
tf.train.Checkpoint(swag=swag).read(sys.argv[1]).assert_consumed()
X = np.array(json.loads(sys.argv[2]))
print(json.dumps({"mean": swag.mean().tolist(), "D": swag.deviation_matrix().tolist(), "n": swag.num_snapshots,
                  "p": swag.predict_proba(X, num_samples=5, seed=7).tolist()}))
"""


def test_checkpoint_round_trip_in_a_fresh_process(trajectory, tmp_path, fresh_process):
    swag, _, X = trajectory
    path = tf.train.Checkpoint(swag=swag).write(str(tmp_path / "swag"))
    loaded = json.loads(fresh_process.run(LOADER, path, json.dumps(X[:6].tolist())).strip().splitlines()[-1])
    assert loaded["n"] == swag.num_snapshots
    np.testing.assert_array_equal(loaded["mean"], swag.mean())
    np.testing.assert_array_equal(loaded["D"], swag.deviation_matrix())
    np.testing.assert_allclose(loaded["p"], swag.predict_proba(X[:6], num_samples=5, seed=7), rtol=0, atol=1e-14)
