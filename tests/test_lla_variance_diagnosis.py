"""The rotated-MNIST LLA variance diagnosis: the prior's trace against a closed form, and its table from a record."""

import numpy as np
import pytest
import tf_keras

from experiments.lla_rotated_mnist.variance_diagnosis import centred_traces, markdown, prior_traces


def test_prior_trace_of_a_linear_model_is_outputs_times_squared_norm_plus_one():
    """g(x) = W x + b: ∂g_c/∂W_dc' = x_d [c = c'], ∂g_c/∂b_c' = [c = c'], so J Jᵀ = (‖x‖² + 1) I_C: its trace is
    C (‖x‖² + 1), and with P = I − 11ᵀ/C, tr(P J Jᵀ P) = (C − 1)(‖x‖² + 1)."""
    rng = np.random.default_rng(0)
    network = tf_keras.Sequential([tf_keras.Input((5,), dtype="float64"), tf_keras.layers.Dense(3, dtype="float64")])
    X = rng.normal(size=(30, 5))
    full, centred = prior_traces(network, X)
    np.testing.assert_allclose(full, 3 * (np.sum(X**2, axis=1) + 1), rtol=1e-12)
    np.testing.assert_allclose(centred, 2 * (np.sum(X**2, axis=1) + 1), rtol=1e-12)


def test_centred_traces_are_the_traces_of_the_projected_covariances():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(4, 5, 5))
    S = A @ np.swapaxes(A, 1, 2)
    P = np.eye(5) - np.ones((5, 5)) / 5
    np.testing.assert_allclose(centred_traces(S), [np.trace(P @ s @ P) for s in S], rtol=1e-12)


def test_a_two_layer_network_prior_trace_against_autodiff_by_hand():
    """A ReLU MLP: the per-example squared Jacobian norms from one tf.GradientTape per output, summed by hand."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    network = tf_keras.Sequential([tf_keras.Input((4,), dtype="float64"), tf_keras.layers.Dense(6, "tanh", dtype="float64"),
                                   tf_keras.layers.Dense(2, dtype="float64")])
    X = rng.normal(size=(7, 4))
    expected = []
    for x in X:
        total = 0.0
        for c in range(2):
            with tf.GradientTape() as tape:
                out = network(x[None])[0, c]
            total += sum(float(tf.reduce_sum(g**2)) for g in tape.gradient(out, network.trainable_variables))
        expected.append(total)
    np.testing.assert_allclose(prior_traces(network, X)[0], expected, rtol=1e-10)


def test_the_table_shows_each_trace_and_its_share_of_the_prior_at_the_same_delta():
    record = {"seed": 0, "digits": 2, "angles": [0, 90], "prior_trace": {"0": [10.0, 30.0], "90": [100.0, 300.0]},
              "prior_centred_trace": {"0": [1.0, 1.0], "90": [1.0, 1.0]},
              "methods": {"last_layer": {"prior_precision": 4.0, "trace": {"0": [1.0, 3.0], "90": [2.0, 2.0]},
                                         "centred_trace": {"0": [0.5, 0.5], "90": [0.5, 0.5]}},
                          "neuralef_10": {"prior_precision": 0.5, "trace": {"0": [0.1, 0.1], "90": [0.2, 0.2]},
                                          "centred_trace": {"0": [0.1, 0.1], "90": [0.1, 0.1]}}}}
    text = markdown(record)
    centred, whole = text.split("**The whole latent variance**")
    assert "| Last-layer LLA | 4 | 0.5 (2) | 0.5 (2) |" in centred and "| prior, tr(P J Jᵀ P) (δ = 1) | 1 | 1 | 1 |" in centred
    text = whole
    # last layer: mean traces 2 and 2 against priors 20 / 4 = 5 and 200 / 4 = 50
    assert "| Last-layer LLA | 4 | 2 (0.4) | 2 (0.04) |" in text
    # NeuralEF: 0.1 and 0.2 against 20 / 0.5 = 40 and 200 / 0.5 = 400
    assert "| NeuralEF LLA (k = 10) | 0.5 | 0.1 (0.0025) | 0.2 (0.0005) |" in text
    assert "| prior, tr J Jᵀ (δ = 1) | 1 | 20 | 200 |" in text


def test_report_from_records_writes_nothing_without_a_record(monkeypatch, tmp_path):
    from experiments.lla_rotated_mnist import variance_diagnosis

    monkeypatch.setattr(variance_diagnosis, "OUTPUT", tmp_path / "missing.json")
    assert variance_diagnosis.report_from_records() == ""
