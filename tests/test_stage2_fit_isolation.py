"""The rotated-MNIST fit diagnosis: its earlier-study loop steps on full minibatches only, one fresh seeded
permutation per epoch, at a constant learning rate, and its block names every fit."""

import dataclasses

import numpy as np
import tensorflow as tf
import tf_keras

from experiments.rotated_mnist.config import Config
from experiments.rotated_mnist.stage2_fit_isolation import VARIANTS, earlier_study_loop, markdown


def test_the_earlier_loop_steps_on_full_minibatches_of_a_fresh_permutation_each_epoch():
    config = dataclasses.replace(Config(), batch_size=4, dgp_epochs=3, dgp_learning_rate=0.01)
    x, y = np.arange(10 * 3, dtype=np.float64).reshape(10, 3) / 30, (np.arange(10) % 2).astype(np.float64)[:, None]
    seen = []

    class Rows(tf_keras.layers.Layer):  # records each training batch's rows (by their first feature)
        def call(self, inputs, training=None):
            if training:
                seen.append(inputs)
            return inputs

    model = tf_keras.Sequential([tf_keras.Input((3,)), Rows(), tf_keras.layers.Dense(2)])
    tf.config.run_functions_eagerly(True)  # the layer sees each batch's values
    try:
        earlier_study_loop(model, x, y, config, seed=0)
    finally:
        tf.config.run_functions_eagerly(False)
    rows = [np.rint(np.asarray(batch)[:, 0] * 30 / 3).astype(int).tolist() for batch in seen]
    assert [len(r) for r in rows] == [4, 4] * 3  # two full minibatches per epoch, the remainder dropped
    rng = np.random.default_rng(0)
    expected = [order[start : start + 4].tolist() for order in (rng.permutation(10) for _ in range(3)) for start in (0, 4)]
    assert rows == expected
    assert float(model.optimizer.learning_rate.numpy()) == np.float32(0.01)  # constant: no plateau


def test_the_block_names_every_fit_and_the_three_differences():
    angles = [0, 90]
    fit = lambda value: {"log_likelihood": [value, value - 1], "accuracy": [0.9, 0.5]}  # noqa: E731
    record = {"seed": 0, "angles": angles, "stage_1": fit(-1.0), "variants": {v: fit(-2.0 - i) for i, v in enumerate(VARIANTS)}}
    text = markdown(record)
    assert all(v in text for v in VARIANTS) and "| 90° |" in text
    assert "by -1.000 nats" in text and "+1.000 nats" not in text
