"""Stage 2 with a feature extractor trained too (activated_dgp.training.extractor), checked against gpflux's own
ELBO and a closed-form Gaussian predictive density computed here on the extractor's features."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp import build_activated_nn, dgp_from_keras, evaluate_elbo, train_dgp_with_extractor
from activated_dgp.training import ExtractorDGP, TrainingSchedule, extracted_features, train_network

N, D, FEATURES = 60, 3, 4


def _setup(seed=0):
    """Data, an extractor g (Dense 3 → 4, tanh, float32) and a converted one-layer head on g's features."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D)).astype(np.float32)
    Y = np.sin(X[:, :1]).astype(np.float64) + 0.1 * rng.normal(size=(N, 1))
    tf.random.set_seed(seed)
    extractor = tf_keras.Sequential([tf_keras.Input((D,)), tf_keras.layers.Dense(FEATURES, activation="tanh")])
    features = extractor(X).numpy().astype(np.float64)
    head = build_activated_nn(FEATURES, num_layers=1, num_units=10, truncation_level=6, lengthscales=[2.0], seed=seed)
    train_network(head, features, Y, schedule=TrainingSchedule(epochs=10, batch_size=30))
    dgp = dgp_from_keras(head, N, X=features, noise_variance=0.05).dgp
    return X, Y, extractor, dgp


def _negative_elbo(dgp, extractor, X, Y):
    """−ELBO on all the data through g: gpflux's DeepGP.elbo (one GP layer: exact, no sampling)."""
    return -evaluate_elbo(dgp, extractor(X).numpy().astype(np.float64), Y)


def _nlpd(dgp, extractor, X, Y):
    """−mean log N(y | m(g(x)), s²(g(x)) + σ²): the one-layer DGP's Gaussian predictive density in closed form."""
    mean, variance = dgp.f_layers[0].predict(extractor(X).numpy().astype(np.float64), full_cov=False)
    total = variance.numpy() + dgp.likelihood_layer.likelihood.variance.numpy()
    return float(np.mean(0.5 * np.log(2 * np.pi * total) + 0.5 * (Y - mean.numpy()) ** 2 / total))


def test_the_fit_trains_both_and_lowers_gpfluxs_elbo():
    X, Y, extractor, dgp = _setup()
    before, weights = _negative_elbo(dgp, extractor, X, Y), [w.copy() for w in extractor.get_weights()]
    history = train_dgp_with_extractor(dgp, extractor, X, Y, TrainingSchedule(epochs=30, batch_size=20, learning_rate=0.01))
    after = _negative_elbo(dgp, extractor, X, Y)
    assert after < before - 1.0, (before, after)
    assert all(not np.allclose(a, b) for a, b in zip(weights, extractor.get_weights()))
    assert history["check_objective"] == "negative_elbo" and len(history["loss"]) == 30


def test_a_frozen_extractor_is_left_as_it_is():
    X, Y, extractor, dgp = _setup()
    extractor.trainable = False
    weights = [w.copy() for w in extractor.get_weights()]
    q_mu = dgp.f_layers[0].q_mu.numpy().copy()
    train_dgp_with_extractor(dgp, extractor, X, Y, TrainingSchedule(epochs=5, batch_size=20))
    assert all(np.array_equal(a, b) for a, b in zip(weights, extractor.get_weights()))
    assert not np.allclose(q_mu, dgp.f_layers[0].q_mu.numpy())


def test_a_fit_that_only_makes_things_worse_gives_back_its_start():
    """A learning rate of 5 wrecks the fit; the guard restores the start, whose −ELBO gpflux computes the same."""
    X, Y, extractor, dgp = _setup()
    before = _negative_elbo(dgp, extractor, X, Y)
    history = train_dgp_with_extractor(dgp, extractor, X, Y, TrainingSchedule(epochs=4, batch_size=20, learning_rate=5.0, ramp_steps=0))
    assert history["restored"] and history["best_step"] == 0
    assert _negative_elbo(dgp, extractor, X, Y) == pytest.approx(before, rel=1e-9)


def test_early_stopping_restores_the_best_validation_check_of_both():
    X, Y, extractor, dgp = _setup()
    X_val, Y_val = X[:20] + np.float32(0.3), Y[:20]
    schedule = TrainingSchedule(epochs=40, batch_size=20, learning_rate=0.05, patience=3)
    history = train_dgp_with_extractor(dgp, extractor, X, Y, schedule, validation_data=(X_val, Y_val))
    best = min(score for _, score in history["validation_checks"])
    # one GP layer: the seeded Monte Carlo score of the checks is the closed form up to its sampling of nothing
    assert _nlpd(dgp, extractor, X_val, Y_val) == pytest.approx(best, rel=1e-6)
    assert history["best_validation"] == pytest.approx(best)


def test_features_and_bad_input_get_clear_errors():
    X, Y, extractor, dgp = _setup()
    np.testing.assert_allclose(extracted_features(extractor, X, batch_size=7), extractor(X).numpy(), rtol=1e-6)
    wide = tf_keras.Sequential([tf_keras.Input((D,)), tf_keras.layers.Dense(FEATURES + 1)])
    with pytest.raises(ValueError, match="features must have the DGP's input width 4, got width 5"):
        train_dgp_with_extractor(dgp, wide, X, Y)
    with pytest.raises(ValueError, match="num_data = 60"):
        train_dgp_with_extractor(dgp, extractor, X[:30], Y[:30])
    with pytest.raises(ValueError, match="same N"):
        train_dgp_with_extractor(dgp, extractor, X, Y[:30])
    with pytest.raises(ValueError, match="NaN or inf in rows 3"):
        train_dgp_with_extractor(dgp, extractor, np.where(np.arange(N)[:, None] == 3, np.nan, X), Y)
    with pytest.raises(ValueError, match="patience"):
        train_dgp_with_extractor(dgp, extractor, X, Y, TrainingSchedule(epochs=2, patience=2))
    with pytest.raises(NotImplementedError, match="save_dgp"):
        ExtractorDGP(dgp, extractor).save("model.keras")


# ------------------------------------------------------------------------------------------------ a CNN through train_two_stage


def _cnn(seed=0):
    """A small regression CNN: Conv2D → MaxPool → Flatten → Dense(12, softplus) → Dense(1), trained briefly on a
    smooth function of 6×6 images, with a held-out part."""
    tf_keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(160, 6, 6, 1)).astype(np.float32)
    targets = np.tanh(images[:, :3].mean(axis=(1, 2, 3)) - images[:, 3:].mean(axis=(1, 2, 3)))[:, None]
    targets = targets + 0.05 * rng.normal(size=targets.shape)
    L = tf_keras.layers
    network = tf_keras.Sequential([tf_keras.Input((6, 6, 1)), L.Conv2D(3, 3, activation="relu"), L.MaxPooling2D(),
                                   L.Flatten(), L.Dense(12, "softplus"), L.Dense(1)])
    network.compile(tf_keras.optimizers.Adam(0.01), "mse")
    network.fit(images[:120], targets[:120], epochs=60, batch_size=32, verbose=0)
    return network, (images[:120], targets[:120]), (images[120:], targets[120:])


def test_split_convertible_head_composes_to_the_network_and_keeps_what_converts():
    from activated_dgp.deep.network_reading import split_convertible_head

    network, (X, _), _ = _cnn()
    extractor, head = split_convertible_head(network)
    assert [type(layer).__name__ for layer in extractor.layers] == ["Conv2D", "MaxPooling2D", "Flatten"]
    assert [type(layer).__name__ for layer in head.layers] == ["Dense", "Dense"]
    np.testing.assert_array_equal(head(extractor(X)).numpy(), network(X).numpy())  # the same layer objects

    dense = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(4, "relu"), tf_keras.layers.Dense(1)])
    assert split_convertible_head(dense) == (None, dense)
    inputs = tf_keras.Input((3,))
    hidden = tf_keras.layers.Dense(5, "relu")(tf_keras.layers.Dense(4, "tanh")(inputs))
    functional = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(hidden))
    extractor, head = split_convertible_head(functional)
    assert [layer.get_config()["activation"] for layer in extractor.layers] == ["tanh"]
    ends_badly = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(4, "relu"), tf_keras.layers.Dense(1, "tanh")])
    with pytest.raises(ValueError, match="tanh"):
        split_convertible_head(ends_badly)


def test_train_two_stage_on_a_cnn_converts_the_head_on_the_features_and_never_ends_worse():
    """train_two_stage(network=cnn): the conv layers become a copy g trained with the DGP; the network is left as it
    was. Before stage 2 (one epoch at a learning rate of 1e-12) the DGP's mean on g(x) is the network's output on held-out images up to the
    softplus map's mismatch; after it, the held-out NLPD (the one-layer closed form above) is no worse than that
    start's, because the validation recipe restores its best check."""
    from activated_dgp import train_two_stage
    from activated_dgp.training import stage2_recipe

    network, (X, Y), (X_val, Y_val) = _cnn()
    weights = [w.copy() for w in network.get_weights()]
    runs = {}

    class Seen(tf_keras.callbacks.Callback):  # dgp_callbacks reach the extractor's fit, and set_dgp gets the DGP
        dgp, epochs = None, 0

        def set_dgp(self, dgp):
            self.dgp = dgp

        def on_epoch_end(self, epoch, logs=None):
            self.epochs += 1

    seen = Seen()
    for epochs, rate in ((1, 1e-12), (15, 1e-3)):
        runs[epochs] = train_two_stage(X, Y, network=network, validation_data=(X_val, Y_val), seed=0,
                                       dgp_schedule=TrainingSchedule(epochs=epochs, learning_rate=rate, patience=5),
                                       callbacks=[seen] if epochs == 15 else ())
        assert all(np.array_equal(a, b) for a, b in zip(weights, network.get_weights()))
    start, fitted = runs[1], runs[15]
    assert seen.dgp is fitted.dgp and seen.epochs >= 1
    assert start.recipe == "validation" and start.extractor is not None  # by_likelihood's branch for a Gaussian
    assert not any(layer in network.layers for layer in fitted.extractor.layers)
    mean, _ = start.dgp.f_layers[0].predict(extracted_features(start.extractor, X_val), full_cov=False)
    scale = np.sqrt(np.mean(network(X_val).numpy() ** 2))
    assert np.sqrt(np.mean((mean.numpy() - network(X_val).numpy()) ** 2)) < 0.1 * scale
    assert _nlpd(fitted.dgp, fitted.extractor, X_val, Y_val) <= _nlpd(start.dgp, start.extractor, X_val, Y_val) + 1e-9

    with pytest.raises(ValueError, match="feature extractor"):
        train_two_stage(X, Y, network=network, recipe=stage2_recipe(warmup_steps=5))
    with pytest.raises(ValueError, match=r"X must be \[N, 6, 6, 1\]"):
        train_two_stage(X[:, :5], Y, network=network)
