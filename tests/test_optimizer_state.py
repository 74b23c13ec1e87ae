"""Creating the optimizer's state before a fit (activated_dgp.deep.layers.build_optimizer_state) makes Keras trace
the train step once instead of twice, and trains exactly as tf-keras' own lazy creation in the first step."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp.deep.layers import build_optimizer_state


def _fit(build: bool, legacy: bool = False):
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(8, activation="tanh", input_shape=(3,)), tf_keras.layers.Dense(1)])
    optimizer = tf_keras.optimizers.legacy.Adam(1e-2) if legacy else tf_keras.optimizers.Adam(1e-2)
    model.compile(optimizer, loss="mse")
    traces = []
    step = model.train_step

    def counting(data):
        traces.append(1)
        return step(data)

    model.train_step = counting
    if build:
        build_optimizer_state(model)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3))
    model.fit(X, np.sin(X[:, :1]), batch_size=16, epochs=3, verbose=0, shuffle=False)
    return len(traces), model.get_weights(), [v.numpy() for v in optimizer.variables()] if not legacy else None


def test_one_trace_and_the_same_training_as_keras_lazy_state():
    lazy_traces, lazy_weights, lazy_state = _fit(build=False)
    built_traces, built_weights, built_state = _fit(build=True)
    assert (lazy_traces, built_traces) == (2, 1)  # tf-keras alone traces twice: its first step creates the slots
    for a, b in zip(lazy_weights, built_weights):
        np.testing.assert_array_equal(a, b)
    assert len(lazy_state) == len(built_state)
    for a, b in zip(lazy_state, built_state):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", ["unbuilt", "legacy", "not_compiled", "built_twice"])
def test_nothing_happens_where_there_is_nothing_to_build(case):
    if case == "legacy":
        traces, _, _ = _fit(build=True, legacy=True)
        assert traces >= 1  # left to tf-keras
        return
    model = tf_keras.Sequential([tf_keras.layers.Dense(2)])  # no input shape: no variables yet
    if case != "not_compiled":
        model.compile(tf_keras.optimizers.Adam(), loss="mse")
    if case == "built_twice":
        model.build((None, 3))
        build_optimizer_state(model)
        count = len(model.optimizer.variables())
        build_optimizer_state(model)
        assert len(model.optimizer.variables()) == count == 1 + 2 * len(model.trainable_variables)
        return
    build_optimizer_state(model)
    if case == "unbuilt":
        assert not getattr(model.optimizer, "_built", False)  # the first step builds it for the variables it then has
        model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
        assert len(model.optimizer.variables()) == 1 + 2 * len(model.trainable_variables)


def test_the_state_has_the_names_keras_gives_it():
    """A checkpoint or a name-matched reload sees the same optimizer variables either way."""
    def names(build):
        tf_keras.backend.clear_session()
        model = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,), name="dense")])
        model.compile(tf_keras.optimizers.Adam(), loss="mse")
        if build:
            build_optimizer_state(model)
        model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
        return [v.name for v in model.optimizer.variables()]

    assert names(True) == names(False)
