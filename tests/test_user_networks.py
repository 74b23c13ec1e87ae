"""The tf-keras networks users write convert and predict: classifier heads as Keras tutorials write them (a final
softmax or sigmoid), one way to predict from a two-stage result, and clear errors for the data mistakes the GPflux
training path used to take silently.

Truths are independent of the converter: the network's own pre-activation outputs (a Keras model up to the layer
before the activation, or its weights applied by hand), its own probabilities, a by-hand feature extraction, and a
closed-form one-layer ELBO (Gaussian expected log-likelihood and gpflow's Gaussian KL).
"""

import textwrap
import warnings

import gpflow
import gpflux
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp import build_activated_dgp, dgp_from_keras, predict_class_probabilities, predict_y, predictive_log_density, propagate_means
from activated_dgp.deep import LikelihoodLayer
from activated_dgp.deep.builders import activated_gp_layer
from activated_dgp.training import TrainingSchedule, stage2_recipe, train_dgp, train_two_stage



def _network(head_layers, seed=0):
    tf_keras.utils.set_random_seed(seed)
    network = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(12, "relu")] + head_layers)
    for layer in network.layers[-len(head_layers):]:  # logits well outside [0, 1], so probabilities ≠ logits
        if layer.weights:
            layer.set_weights([3.0 * w for w in layer.get_weights()])
    return network


def _convert(network, X, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the ReLU means' KL warning
        return dgp_from_keras(network, len(X), X=X, **kwargs)


HEADS = {
    "dense_softmax": (lambda: [tf_keras.layers.Dense(4, "softmax")], "softmax"),
    "softmax_layer": (lambda: [tf_keras.layers.Dense(4), tf_keras.layers.Softmax()], "softmax"),
    "activation_softmax": (lambda: [tf_keras.layers.Dense(4), tf_keras.layers.Activation("softmax")], "softmax"),
    "dense_sigmoid": (lambda: [tf_keras.layers.Dense(1, "sigmoid")], "bernoulli"),
    "activation_sigmoid": (lambda: [tf_keras.layers.Dense(1), tf_keras.layers.Activation("sigmoid")], "bernoulli"),
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_classifier_heads_convert_to_logits_and_their_likelihood(head):
    layers, name = HEADS[head]
    network = _network(layers())
    X = np.random.default_rng(1).normal(size=(200, 3))
    # the network's pre-activation outputs, computed here: hidden units by a Keras model, the last Dense by hand
    dense = [layer for layer in network.layers if isinstance(layer, tf_keras.layers.Dense)][-1]
    hidden = tf_keras.Model(network.inputs, network.layers[0].output)(X).numpy().astype(np.float64)
    kernel, bias = (w.astype(np.float64) for w in dense.get_weights())
    logits = hidden @ kernel + bias
    if dense is not network.layers[-1]:  # a separate activation layer: the Keras model up to the layer before it
        np.testing.assert_allclose(tf_keras.Model(network.inputs, network.layers[-2].output)(X).numpy(), logits, atol=1e-5)
    probabilities = network(X).numpy().astype(np.float64)
    assert np.ptp(logits) > 3.0  # logits that probabilities could not imitate

    conversion = _convert(network, X)
    assert conversion.head == name
    mean = propagate_means(conversion.dgp, X)[-1].numpy()
    assert mean.shape == logits.shape
    np.testing.assert_allclose(mean, logits, atol=0.05 * np.ptp(logits))  # ReLU: exact up to the truncation
    assert np.sqrt(np.mean((mean - logits) ** 2)) < 0.01 * np.ptp(logits)

    likelihood = conversion.dgp.likelihood_layer.likelihood
    predicted, _ = likelihood.predict_mean_and_var(None, tf.constant(mean), tf.zeros_like(mean))
    np.testing.assert_allclose(predicted.numpy(), probabilities, atol=0.02)
    if name == "softmax":
        np.testing.assert_allclose(predicted.numpy().sum(1), 1.0, atol=1e-12)


def test_a_head_that_conflicts_with_the_given_likelihood_is_named():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="softmax output.*likelihood='gaussian'"):
        _convert(_network([tf_keras.layers.Dense(4, "softmax")]), X, likelihood="gaussian")
    with pytest.raises(ValueError, match="sigmoid output.*likelihood='softmax'"):
        _convert(_network([tf_keras.layers.Dense(1, "sigmoid")]), X, likelihood="softmax")
    with pytest.raises(ValueError, match="sigmoid output over 3 units"):
        _convert(_network([tf_keras.layers.Dense(3, "sigmoid")]), X)
    # a logit head with an explicit likelihood keeps working, and one given consistently with the head too
    assert _convert(_network([tf_keras.layers.Dense(4)]), X, likelihood="softmax").head is None
    assert type(_convert(_network([tf_keras.layers.Dense(4, "softmax")]), X, likelihood="robustmax").dgp.likelihood_layer.likelihood) \
        is gpflow.likelihoods.MultiClass


def _tiny_cnn(classes=3):
    tf_keras.utils.set_random_seed(0)
    return tf_keras.Sequential([
        tf_keras.Input((6, 6, 1)), tf_keras.layers.Conv2D(2, 3, activation="relu"), tf_keras.layers.Flatten(),
        tf_keras.layers.Dense(8, "relu"), tf_keras.layers.Dense(classes, "softmax"),
    ])


def test_two_stage_result_predicts_through_its_extractor():
    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(24, 6, 6, 1)), rng.integers(0, 3, size=(24, 1)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = train_two_stage(images, labels, network=_tiny_cnn(), dgp_schedule=TrainingSchedule(epochs=1, batch_size=12, verbose=0),
                                 recipe=stage2_recipe(far_field=False), seed=0, make_convertible=dict(steps=10))  # a short swap
    assert result.extractor is not None and result.recipe == "paper"  # the softmax head chose the likelihood
    assert type(result.dgp.likelihood_layer.likelihood).__name__ == "MonteCarloSoftmax"
    by_hand = result.extractor(images, training=False).numpy().astype(np.float64)
    np.testing.assert_allclose(result.features(images), by_hand, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result.predict_class_probabilities(images, num_samples=4, seed=3),
                               predict_class_probabilities(result.dgp, by_hand, num_samples=4, seed=3), atol=1e-5)
    for got, want in zip(result.predict_y(images, num_samples=4, seed=3), predict_y(result.dgp, by_hand, num_samples=4, seed=3)):
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(result.predict_log_density(images, labels, num_samples=4, seed=3),
                               predictive_log_density(result.dgp, by_hand, labels, num_samples=4, seed=3), atol=1e-5)
    with pytest.raises(ValueError, match=r"X must be \[N, 6, 6, 1\]"):
        result.predict_y(images[:, :5])


def test_two_stage_regression_names_the_recipe_it_used():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    Y = np.sin(X[:, :1])
    result = train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=8), network_schedule=TrainingSchedule(epochs=2, verbose=0),
                             dgp_schedule=TrainingSchedule(epochs=1, verbose=0), recipe=stage2_recipe(far_field=False), seed=0)
    assert result.recipe == "validation"  # the by_likelihood default's regression branch
    assert result.features(X) is X  # no extractor: the DGP's inputs are X
    mean, _ = result.predict_y(X, num_samples=2, seed=0)
    np.testing.assert_allclose(mean, predict_y(result.dgp, X, num_samples=2, seed=0)[0])


def test_train_dgp_refuses_targets_of_the_wrong_width():
    X = np.random.default_rng(0).normal(size=(10, 2))
    dgp = build_activated_dgp(2, 10, num_layers=1, num_units=4, output_dim=1)
    with pytest.raises(ValueError, match="1 output columns"):
        train_dgp(dgp, X, np.zeros((10, 2)), TrainingSchedule(epochs=1, verbose=0))


def test_gpflux_training_model_checks_its_data():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(30, 2)), rng.normal(size=(30, 1))
    model = build_activated_dgp(2, 30, num_layers=2, num_units=4, output_dim=1).as_training_model()
    model.compile(tf_keras.optimizers.Adam(0.01))
    with pytest.raises(ValueError, match=r"matrix Y \[N, P\].*y\[:, None\]"):
        model.fit({"inputs": X, "targets": Y[:, 0]}, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="same number of rows N, got 30 and 20"):
        model.fit({"inputs": X, "targets": Y[:20]}, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="validation inputs and targets must have the same number of rows"):
        model.fit({"inputs": X, "targets": Y}, epochs=1, verbose=0, validation_data=({"inputs": X, "targets": Y[:5]},))
    with pytest.raises(ValueError, match="1 output columns"):
        model.evaluate({"inputs": X, "targets": np.zeros((30, 2))}, verbose=0)
    # a DeepGP stacked by hand (tf-keras' own model class): the library's likelihood layer still names a 1-D y
    layer = activated_gp_layer(rng.normal(size=(4, 3)), output_dim=1, num_data=30)
    bare = gpflux.models.DeepGP([layer], LikelihoodLayer(gpflow.likelihoods.Gaussian(0.1)), num_data=30).as_training_model()
    bare.compile(tf_keras.optimizers.Adam(0.01))
    with pytest.raises(ValueError, match=r"matrix Y \[N, P\]"):
        bare.fit({"inputs": X, "targets": Y[:, 0]}, epochs=1, verbose=0)


def test_validation_loss_is_the_negative_elbo_per_point():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(25, 2)), rng.normal(size=(25, 1))
    X_val, Y_val = rng.normal(size=(15, 2)), rng.normal(size=(15, 1))
    dgp = build_activated_dgp(2, 25, num_layers=1, num_units=5, output_dim=1, noise_variance=0.3, q_sqrt_scale=0.5, seed=0)
    layer = dgp.f_layers[0]
    layer.q_mu.assign(rng.normal(size=layer.q_mu.shape))
    model = dgp.as_training_model()
    model.compile(tf_keras.optimizers.SGD(0.0))  # the parameters stay as they are
    history = model.fit({"inputs": X, "targets": Y}, epochs=1, batch_size=25, verbose=0,
                        validation_data=({"inputs": X_val, "targets": Y_val},), validation_batch_size=15)
    # −ELBO / N on the validation data, one layer (deterministic): −mean E_q[log N(y | f, σ²)] + KL / N, in closed form
    mean, var = (t.numpy() for t in layer.predict(tf.constant(X_val), full_cov=False))
    noise = 0.3
    expected_log_lik = -0.5 * np.log(2 * np.pi * noise) - ((Y_val - mean) ** 2 + var) / (2 * noise)
    kl = gpflow.kullback_leiblers.gauss_kl(layer.q_mu, layer.q_sqrt).numpy()  # whitened: KL[q(v) ‖ N(0, I)]
    truth = -np.mean(expected_log_lik) + kl / 25
    assert history.history["val_loss"][0] == pytest.approx(truth, rel=1e-5)
    assert history.history["val_loss"][0] != 0.0


BUILD = textwrap.dedent(
    """
    import gpflow, gpflux, numpy as np
    from activated_dgp.deep import LikelihoodLayer
    from activated_dgp.deep.builders import activated_gp_layer

    def build(noise, own):
        rng = np.random.default_rng(0)
        layer = activated_gp_layer(rng.normal(size=(4, 3)), output_dim=1, num_data=10, name="gp")
        likelihood = (gpflux.layers.LikelihoodLayer if own else LikelihoodLayer)(gpflow.likelihoods.Gaussian(noise))
        return gpflux.models.DeepGP([layer], likelihood, num_data=10).as_training_model()
    """
)


@pytest.mark.parametrize("layer", ["library", "gpflux"])
def test_weights_h5_round_trip_keeps_the_noise_in_a_fresh_process(tmp_path, layer, fresh_process):
    """Saved here with noise 0.383, loaded in a fresh process into a model built with noise 0.1."""
    own = layer == "gpflux"
    namespace = {}
    exec(BUILD, namespace)
    namespace["build"](0.383, own).save_weights(str(tmp_path / "m.weights.h5"))
    out = fresh_process.run(BUILD + textwrap.dedent(
        f"""
        model = build(0.1, {own!r})
        model.load_weights("m.weights.h5")
        print(repr(float(model.layers[-1].likelihood.variance.numpy())))
        """
    ), cwd=tmp_path)
    assert float(out.strip().splitlines()[-1]) == pytest.approx(0.383, rel=1e-12)
