"""Activated DGPs in GPflux, their network twin, the converter, two-stage training, prediction and saving."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp import (
    TrainingSchedule,
    build_activated_dgp,
    build_activated_nn,
    dgp_from_keras,
    load_dgp,
    predict_class_probabilities,
    predict_y,
    predictive_log_density,
    propagate_means,
    train_dgp,
    train_two_stage,
)
from activated_dgp.deep import layer_moments


@pytest.mark.parametrize("activation", ["relu", "softplus", "swish", None])  # None: the library default (the Swish)
@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("num_layers", [1, 3])
def test_twin_forward_pass_equals_dgp_mean_propagation(activation, whiten, num_layers, rng):
    chosen = {} if activation is None else dict(activation=activation)
    network = build_activated_nn(3, num_layers=num_layers, num_units=24, output_dim=2, seed=3, **chosen)
    network(rng.normal(size=(1, 3)))  # builds the weights
    # every weight moved off its initial value (as training would move W and V, without tracing a fit per case)
    network.set_weights([w + 0.3 * rng.normal(size=w.shape) for w in network.get_weights()])
    conversion = dgp_from_keras(network, num_data=128, whiten=whiten)
    X_new = rng.normal(size=(50, 3)) * 3.0  # "any input": also far from the training data
    twin = network(X_new).numpy()
    dgp = propagate_means(conversion.dgp, X_new)[-1].numpy()
    assert conversion.exact
    np.testing.assert_allclose(dgp, twin, rtol=0, atol=1e-8 * max(1.0, np.abs(twin).max()))


def test_activated_layer_is_the_relu_network_for_large_truncation(rng):
    """Independent truth: with ReLU features the twin's hidden layer tends to max(0, W x̃) (Sec. 4.1)."""
    network = build_activated_nn(2, num_layers=1, num_units=8, activation="relu", truncation_level=80, seed=0)
    X = rng.normal(size=(30, 2))
    hidden = network.layers[0](X).numpy()
    W = network.layers[0].feature.W.numpy()
    reference = np.maximum(0.0, np.concatenate([X, np.ones((30, 1))], 1) @ W.T)
    assert np.max(np.abs(hidden - reference)) < 0.03 * np.abs(reference).max()
    # leading batch axes, as a Dense layer takes them: [B, N, D] → [B, N, M], each slice its own rows' features
    batched = network.layers[0](X.reshape(5, 6, 2)).numpy()
    assert batched.shape == (5, 6, 8)
    np.testing.assert_allclose(batched.reshape(30, 8), hidden, rtol=1e-12, atol=1e-12)


def test_converted_dgp_elbo_improves_and_variances_are_positive(rng):
    X = rng.uniform(-2, 2, size=(256, 2))
    Y = np.sin(2 * X[:, :1]) * np.cos(X[:, 1:]) + 0.05 * rng.normal(size=(256, 1))
    result = train_two_stage(
        X, Y, architecture=dict(num_layers=2, num_units=32),
        network_schedule=TrainingSchedule(epochs=30), dgp_schedule=TrainingSchedule(epochs=15), seed=0, recipe="paper",
    )
    assert result.conversion_mismatch < 1e-8
    losses = result.dgp_history["loss"]
    assert losses[-1] < losses[0], losses  # loss = −ELBO per data point
    X_test = rng.uniform(-6, 6, size=(200, 2))
    mean, var = predict_y(result.dgp, X_test, num_samples=20, seed=1)
    assert np.all(var > 0) and np.all(np.isfinite(mean))
    for m, v in layer_moments(result.dgp, X_test, num_samples=20, seed=1):
        assert np.all(v > 0)
    nlpd = -predictive_log_density(result.dgp, X, Y, num_samples=20, seed=1).mean()
    assert np.isfinite(nlpd)


def test_batched_prediction(rng):
    """With one layer nothing is sampled, so the prediction of a row cannot depend on its batch:
    batched and whole-set predictions must agree to round-off. With two layers, one batch that covers
    every row must reproduce the unbatched call with the same seed exactly."""
    X = rng.normal(size=(50, 2))
    single = build_activated_dgp(2, 50, num_layers=1, num_units=8, seed=0)
    whole = predict_y(single, X, num_samples=3, seed=4)
    batched = predict_y(single, X, num_samples=3, seed=4, batch_size=7)
    np.testing.assert_allclose(batched[0], whole[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(batched[1], whole[1], rtol=1e-12, atol=1e-14)
    deep = build_activated_dgp(2, 50, num_layers=2, num_units=8, seed=0)
    np.testing.assert_array_equal(
        predict_class_probabilities(deep, X, num_samples=3, seed=4, batch_size=50), predict_y(deep, X, num_samples=3, seed=4)[0]
    )
    with pytest.raises(ValueError, match="batch_size"):
        predict_y(single, X, batch_size=0)


@pytest.mark.parametrize("likelihood,num_classes", [("bernoulli", 2), ("softmax", 3), ("robustmax", 3)])
def test_classification_likelihoods(likelihood, num_classes, rng):
    X = rng.normal(size=(120, 2))
    labels = (np.arctan2(X[:, 1], X[:, 0]) + np.pi) * num_classes // (2 * np.pi + 1e-9)
    Y = labels[:, None].astype(np.float64)
    output_dim = 1 if likelihood == "bernoulli" else num_classes
    dgp = build_activated_dgp(2, 120, num_layers=2, num_units=16, output_dim=output_dim, likelihood=likelihood, seed=0)
    history = train_dgp(dgp, X, Y, TrainingSchedule(epochs=2, batch_size=60))
    assert np.all(np.isfinite(history["loss"]))
    probabilities = predict_class_probabilities(dgp, X[:10], num_samples=5, seed=0)
    assert probabilities.shape == (10, output_dim)
    assert np.all((probabilities >= 0) & (probabilities <= 1))
    if output_dim > 1:
        np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-4)  # robust-max: quadrature error ~1e-6


# save_dgp / load_dgp and save_network / load_network round trips in a fresh process, converted and unwhitened DGPs
# included: tests/test_persistence.py (one fresh process loads every artefact).


def test_load_rejects_missing_and_corrupt_files(tmp_path):
    with pytest.raises(ValueError, match="holds no checkpoint written by activated_dgp.save"):
        load_dgp(tmp_path)
    (tmp_path / "config.json").write_text("{not json")  # the 0.1 layout, corrupt
    (tmp_path / "parameters.npz").write_bytes(b"garbage")
    with pytest.warns(DeprecationWarning, match="saved by activated_dgp 0.1"), pytest.raises(ValueError, match="corrupt"):
        load_dgp(tmp_path)


def test_plain_softplus_network_converts_approximately_and_reports_mismatch(rng):
    """softplus(w·x + b) is not positively homogeneous, so an ordinary Dense-softplus network converts only
    approximately; the reported mismatch must be the network-vs-DGP-mean difference, and small against the
    outputs (measured over seeds 0–7 of this set-up: 0.06–0.11 of the outputs' RMS)."""
    X = rng.normal(size=(200, 2))
    initializer = lambda offset: tf_keras.initializers.GlorotUniform(seed=offset)  # noqa: E731  (deterministic)
    plain = tf_keras.Sequential([
        tf_keras.Input((2,), dtype="float64"),
        tf_keras.layers.Dense(32, "softplus", dtype="float64", kernel_initializer=initializer(0)),
        tf_keras.layers.Dense(2, use_bias=False, dtype="float64", kernel_initializer=initializer(1)),
        tf_keras.layers.Dense(32, "softplus", dtype="float64", kernel_initializer=initializer(2)),
        tf_keras.layers.Dense(1, use_bias=False, dtype="float64", kernel_initializer=initializer(3)),
    ])
    conversion = dgp_from_keras(plain, 200, X=X)
    outputs = plain(X).numpy()
    difference = propagate_means(conversion.dgp, X)[-1].numpy() - outputs
    assert not conversion.exact
    np.testing.assert_allclose(conversion.rms_mismatch, np.sqrt(np.mean(difference**2)), rtol=1e-6)
    np.testing.assert_allclose(conversion.max_abs_mismatch, np.abs(difference).max(), rtol=1e-6)
    assert 0 < conversion.rms_mismatch < 0.2 * np.sqrt(np.mean(outputs**2)), (conversion.rms_mismatch, outputs)
    without_data = dgp_from_keras(plain, 200)
    assert without_data.max_abs_mismatch is None


def test_converter_names_the_layer_it_cannot_map():
    network = tf_keras.Sequential([
        tf_keras.Input((2,), dtype="float64"),
        tf_keras.layers.Dense(16, "tanh", dtype="float64", name="hidden_tanh"),
        tf_keras.layers.Dense(1, use_bias=False, dtype="float64"),
    ])
    with pytest.raises(ValueError, match="layer 0 'hidden_tanh'"):
        dgp_from_keras(network, 10)
    normalised = tf_keras.Sequential([
        tf_keras.Input((2,), dtype="float64"),
        tf_keras.layers.Dense(16, "softplus", dtype="float64"),
        tf_keras.layers.BatchNormalization(dtype="float64", name="normalised"),
        tf_keras.layers.Dense(1, dtype="float64"),
    ])
    with pytest.raises(ValueError, match="layer 1 'normalised' \\(BatchNormalization\\)"):
        dgp_from_keras(normalised, 10)
    with pytest.raises(ValueError, match="unknown likelihood"):
        build_activated_dgp(2, 10, likelihood="poisson-ish")
    with pytest.raises(ValueError, match="NaN or inf in rows"):
        train_dgp(build_activated_dgp(2, 10, num_layers=1, num_units=4), np.full((10, 2), np.nan), np.zeros((10, 1)))


def test_class_probabilities_stay_in_the_unit_interval_where_the_model_is_certain():
    """A Bernoulli DGP whose logits reach ±hundreds on a 120 × 120 grid: the quadrature of σ(f) can round to
    1 + 2e-16 (issue: 4,488 of 14,400 grid points did); the probabilities stay in [0, 1], and where the logit's
    mean is beyond ±40 with a tiny variance they equal σ(mean) (computed here with scipy's expit) to 1e-12."""
    from scipy.special import expit

    from activated_dgp import build_activated_dgp, predict_class_probabilities, propagate_means

    dgp = build_activated_dgp(2, 100, num_layers=1, num_units=16, likelihood="bernoulli", seed=0)
    layer = dgp.f_layers[0]
    layer.q_mu.assign(50.0 * np.random.default_rng(0).normal(size=layer.q_mu.shape))
    grid = np.stack(np.meshgrid(np.linspace(-6, 6, 120), np.linspace(-6, 6, 120)), -1).reshape(-1, 2)
    probabilities = predict_class_probabilities(dgp, grid, num_samples=1, seed=0)
    assert probabilities.shape == (14400, 1)
    assert np.all((probabilities >= 0.0) & (probabilities <= 1.0))
    mean = propagate_means(dgp, grid)[-1].numpy()
    certain = np.abs(mean) > 40
    assert certain.sum() > 1000
    np.testing.assert_allclose(probabilities[certain], expit(mean[certain]), atol=1e-12)


def test_a_vector_of_targets_is_one_column_everywhere():
    """One rule for 1-D targets (activated_dgp.validation.check_targets): y of N values is Y [N, 1] in the DGP
    functions, as in tf-keras' fit; predictive_log_density, evaluate_elbo and train_dgp accept it and give what the
    column gives; a 3-D Y is refused with the same message everywhere."""
    from activated_dgp import build_activated_dgp, evaluate_elbo, predictive_log_density

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 2)), rng.normal(size=20)
    dgp = build_activated_dgp(2, 20, num_layers=1, num_units=8, seed=0)
    np.testing.assert_array_equal(
        predictive_log_density(dgp, X, y, num_samples=2, seed=0), predictive_log_density(dgp, X, y[:, None], num_samples=2, seed=0)
    )
    assert evaluate_elbo(dgp, X, y) == evaluate_elbo(dgp, X, y[:, None])
    for call in (lambda: predictive_log_density(dgp, X, y[:, None, None]), lambda: evaluate_elbo(dgp, X, y[:, None, None])):
        with pytest.raises(ValueError, match=r"Y must be a matrix \[N, D\], got shape \(20, 1, 1\)"):
            call()


def test_gpflux_training_path_names_nan_inputs_as_inputs():
    """gpflux's own ``as_training_model().fit`` bypasses the library's entry checks: a NaN in the inputs is still
    named as an input (by the activated Kuf), before any parameter turns NaN."""
    import tensorflow as tf
    import tf_keras

    from activated_dgp import build_activated_dgp

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(32, 2)), rng.normal(size=(32, 1))
    X[5, 1] = np.nan
    dgp = build_activated_dgp(2, 32, num_layers=2, num_units=8, seed=0)
    before = [v.numpy().copy() for v in dgp.trainable_variables]
    model = dgp.as_training_model()
    model.compile(tf_keras.optimizers.Adam(0.01))
    with pytest.raises(tf.errors.InvalidArgumentError, match="the inputs of an activated layer contain NaN or inf"):
        model.fit({"inputs": X, "targets": Y}, epochs=1, batch_size=32, verbose=0)
    for value, variable in zip(before, dgp.trainable_variables):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_ensemble_of_dgps_predicts_the_uniform_mixture():
    """Two one-layer Gaussian DGPs (whose predictive is exactly N(μ_k(x), σ_k²(x) + noise_k)): the ensemble's log
    density equals log of the mixture density computed here with scipy's normal pdf, and its mean and variance equal
    those of 400,000 draws from the mixture."""
    from scipy.stats import norm

    from activated_dgp import build_activated_dgp
    from activated_dgp.deep.prediction import ensemble_log_density, ensemble_predict_y

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(7, 2)), rng.normal(size=(7, 1))
    dgps = []
    for k in range(2):
        dgp = build_activated_dgp(2, 50, num_layers=1, num_units=6, seed=k, noise_variance=0.1 * (k + 1))
        dgp.f_layers[0].q_mu.assign(rng.normal(size=dgp.f_layers[0].q_mu.shape))
        dgp.f_layers[0].q_sqrt.assign(0.3 * np.stack([np.eye(6)]))
        dgps.append(dgp)
    moments = []
    for dgp in dgps:
        mean, var = dgp.f_layers[0].predict(X, full_cov=False)
        moments.append((mean.numpy()[:, 0], var.numpy()[:, 0] + float(dgp.likelihood_layer.likelihood.variance.numpy())))
    density = np.mean([norm.pdf(Y[:, 0], m, np.sqrt(v)) for m, v in moments], axis=0)
    np.testing.assert_allclose(ensemble_log_density(dgps, X, Y, num_samples=1, seed=0), np.log(density), rtol=1e-10)
    member = rng.integers(2, size=(400_000, 7))
    draws = np.where(member == 0, rng.normal(moments[0][0], np.sqrt(moments[0][1]), (400_000, 7)),
                     rng.normal(moments[1][0], np.sqrt(moments[1][1]), (400_000, 7)))
    mean, var = ensemble_predict_y(dgps, X, num_samples=1, seed=0)
    np.testing.assert_allclose(mean[:, 0], draws.mean(0), atol=0.02)
    np.testing.assert_allclose(var[:, 0], draws.var(0), rtol=0.02)
    with pytest.raises(ValueError, match="at least one DeepGP"):
        ensemble_log_density([], X, Y)
