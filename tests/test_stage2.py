"""Stage 2 of the two-stage training: diagnostics, kernel-variance selection and early stopping,
each checked against an independent computation (dense linear algebra, gpflow's SVGP, recorded weights)."""

import gpflow
import numpy as np
import scipy.stats
import pytest
import tensorflow as tf
import tf_keras

from activated_dgp import build_activated_nn, dgp_from_keras, evaluate_elbo, predict_y, predictive_log_density, propagate_means
from activated_dgp.deep.posterior_mean import posterior_mean_weights
from activated_dgp.training import rescale_kernel_variance, select_kernel_variances
from activated_dgp.deep import layer_moments
from activated_dgp.deep.diagnostics import elbo_terms, residual_fraction
from activated_dgp.training import RestoreBest, TrainingSchedule, split_validation, train_dgp, stage2_recipe, train_network, train_two_stage


def _data(n=80, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] ** 2 + 0.1 * rng.normal(size=(n, 1))
    return X, Y


_TRAINED = {}  # (num_layers, seed, n) -> the trained network's weights: each is trained once per test process


def _converted(num_layers=2, whiten=True, seed=0, n=80):
    """A freshly built network with the weights of the one trained (20 epochs) for these settings, and its conversion."""
    X, Y = _data(n)
    tf.random.set_seed(seed)
    network = build_activated_nn(3, num_layers=num_layers, num_units=12, truncation_level=8, lengthscales=[2.0] * num_layers, seed=seed)
    key = (num_layers, seed, n)
    if key not in _TRAINED:
        train_network(network, X, Y, schedule=TrainingSchedule(epochs=20, batch_size=40))  # equal batches: one trace
        _TRAINED[key] = network.get_weights()
    else:
        network(X[:1])  # builds the weights
        network.set_weights(_TRAINED[key])
    return X, Y, network, dgp_from_keras(network, len(X), X=X, whiten=whiten).dgp


def test_residual_fraction_matches_dense_computation():
    X, _, _, dgp = _converted(num_layers=1)
    layer = dgp.f_layers[0]
    kernel, feature = layer.kernel.kernel, layer.inducing_variable.inducing_variable
    K = kernel.K(X).numpy()  # the full kernel matrix, dense
    Kuu = gpflow.covariances.Kuu(feature, kernel).numpy() + gpflow.config.default_jitter() * np.eye(12)
    Kuf = gpflow.covariances.Kuf(feature, kernel, X).numpy()
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    expected = np.diag(K - Q) / np.diag(K)
    np.testing.assert_allclose(residual_fraction(layer, X), expected, rtol=1e-7, atol=1e-10)
    assert np.all(expected > -1e-8) and np.all(expected < 1)  # K − Q ⪰ 0 on the diagonal


@pytest.mark.parametrize("whiten", [True, False])
def test_one_layer_elbo_and_density_match_gpflow_svgp(whiten):
    X, Y, _, dgp = _converted(num_layers=1, whiten=whiten)
    layer = dgp.f_layers[0]
    layer.q_sqrt.assign(0.3 * layer.q_sqrt.numpy() / 1e-5)  # a non-trivial q(u)
    likelihood = gpflow.likelihoods.Gaussian(variance=float(dgp.likelihood_layer.likelihood.variance.numpy()))
    svgp = gpflow.models.SVGP(
        layer.kernel.kernel, likelihood, layer.inducing_variable.inducing_variable, num_latent_gps=1, q_diag=False,
        whiten=whiten, num_data=len(X), q_mu=layer.q_mu.numpy(), q_sqrt=layer.q_sqrt.numpy(),
    )
    terms = elbo_terms(dgp, X, Y, num_samples=1)
    assert terms.elbo == pytest.approx(float(svgp.elbo((X, Y))), rel=1e-9)
    assert terms.kl[0] == pytest.approx(float(svgp.prior_kl()), rel=1e-9)
    # the public functions: one layer has no sampled layer, so every sample is the exact SVGP answer
    np.testing.assert_allclose(predictive_log_density(dgp, X, Y, num_samples=3, seed=0), svgp.predict_log_density((X, Y)).numpy(), rtol=1e-9)
    assert evaluate_elbo(dgp, X, Y, batch_size=32) == pytest.approx(float(svgp.elbo((X, Y))), rel=1e-9)  # 3 uneven batches
    (mean, var), = layer_moments(dgp, X, num_samples=3, seed=0)
    f_mean, f_var = svgp.predict_f(X)
    np.testing.assert_allclose(mean, f_mean.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var, f_var.numpy(), rtol=1e-9, atol=1e-15)
    y_mean, y_var = predict_y(dgp, X, num_samples=2, seed=0)
    np.testing.assert_allclose(y_var, svgp.predict_y(X)[1].numpy(), rtol=1e-9)
    np.testing.assert_allclose(y_mean, svgp.predict_y(X)[0].numpy(), rtol=1e-9, atol=1e-12)


def test_rescaled_variance_keeps_the_forward_pass_and_moves_kl_and_residual():
    X, Y, network, dgp = _converted(num_layers=3)
    reference = network(X).numpy()
    layer = dgp.f_layers[1]
    weights = posterior_mean_weights(layer)
    kl_before, residual_before = float(layer.prior_kl()), residual_fraction(layer, propagate_means(dgp, X)[0])
    rescale_kernel_variance(layer, 0.1)
    np.testing.assert_allclose(posterior_mean_weights(layer), weights, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(propagate_means(dgp, X)[-1].numpy(), reference, atol=1e-8)
    # KL of the means ∝ 1/v: the mean part grows ×10 (the q_sqrt part is unchanged, whitened)
    kl_cov = 0.5 * layer.q_mu.shape[1] * 12 * ((1e-5) ** 2 - 1 - np.log(1e-10))
    assert (float(layer.prior_kl()) - kl_cov) == pytest.approx(10 * (kl_before - kl_cov), rel=1e-3)
    # the residual prior variance is a fraction of k, so its share is unchanged; its size ∝ v
    np.testing.assert_allclose(residual_fraction(layer, propagate_means(dgp, X)[0]), residual_before, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("objective", ["elbo", "validation"])
def test_variance_selection_keeps_the_forward_pass(objective):
    X, Y, network, dgp = _converted(num_layers=3)
    selection = select_kernel_variances(dgp, X, Y, objective=objective, candidates=[0.01, 0.1, 1.0])
    assert all(np.isclose(v, [0.01, 0.1, 1.0], rtol=1e-9).any() for v in selection.variances) and len(selection.evaluations) == 9
    np.testing.assert_allclose(propagate_means(dgp, X)[-1].numpy(), network(X).numpy(), atol=1e-8)
    # the chosen point is the best evaluated one
    assert selection.elbo == pytest.approx(max(v for _, _, v in selection.evaluations + [(0, 0, selection.elbo)]))
    with pytest.raises(ValueError, match="objective"):
        select_kernel_variances(dgp, X, Y, objective="test-set")
    with pytest.raises(ValueError, match="positive"):
        select_kernel_variances(dgp, X, Y, candidates=[0.1, -1.0])


def test_conversion_with_the_elbo_variance_is_deprecated_for_the_training_selection():
    """``dgp_from_keras(kernel_variance="elbo")``, whose choice of v moved to activated_dgp.training, warns with the
    replacement and gives the v that replacement chooses on a DGP converted at v = 1."""
    X, Y, network, _ = _converted(num_layers=1)
    with pytest.warns(DeprecationWarning, match=r"dgp_from_keras\(kernel_variance='elbo'\) is deprecated; use activated_dgp\.training\.select_kernel_variances"):
        report = dgp_from_keras(network, len(X), X=X, Y=Y, kernel_variance="elbo")
    expected = select_kernel_variances(dgp_from_keras(network, len(X), X=X).dgp, X, Y)
    assert report.variance_selection.variances == expected.variances
    assert [float(layer.kernel.kernel.variance.numpy()) for layer in report.dgp.f_layers] == expected.variances
    with pytest.raises(ValueError, match=r"kernel_variance must be a positive number, got 'largest'.*select_kernel_variances"):
        dgp_from_keras(network, len(X), kernel_variance="largest")


@pytest.mark.parametrize("likelihood", ["gaussian", "softmax"])
def test_compiled_seeded_scores_are_the_eager_functions_at_the_parameters_of_each_call(likelihood):
    """select_kernel_variances scores each candidate with one compiled function (seeded_log_density, seeded_elbo)
    that reads the parameters as they are at each call and resets its draws: at every assignment it must give what
    the eager predictive_log_density / elbo_terms give, freshly seeded (Monte Carlo softmax draws included, and
    three uneven ELBO batches)."""
    from activated_dgp.deep.diagnostics import seeded_elbo
    from activated_dgp.deep.prediction import seeded_log_density

    if likelihood == "gaussian":
        X, Y, _, dgp = _converted(num_layers=3)
    else:
        rng = np.random.default_rng(4)
        X, Y = rng.normal(size=(40, 3)), rng.integers(0, 3, size=(40, 1)).astype(np.float64)
        network = build_activated_nn(3, num_layers=2, num_units=10, layer_widths=[4], output_dim=3, truncation_level=6, seed=1)
        dgp = dgp_from_keras(network, len(X), X=X, likelihood="softmax").dgp
    log_density, elbo = seeded_log_density(dgp, X, Y, num_samples=3, seed=7), seeded_elbo(dgp, X, Y, num_samples=2, seed=7, batch_size=32)
    for layer, v in [(0, 0.3), (len(dgp.f_layers) - 1, 1e-3), (0, 2.0)]:
        rescale_kernel_variance(dgp.f_layers[layer], v)
        tf.random.set_seed(layer)  # the global random state must not matter
        np.testing.assert_allclose(log_density(), predictive_log_density(dgp, X, Y, num_samples=3, seed=7), rtol=1e-10, atol=1e-12)
        assert elbo() == pytest.approx(elbo_terms(dgp, X, Y, num_samples=2, seed=7, batch_size=32).elbo, rel=1e-10)
    assert np.max(np.abs(log_density() - predictive_log_density(dgp, X, Y, num_samples=3, seed=8))) > 1e-6  # the seed is used
    q_mu = dgp.f_layers[0].q_mu
    q_mu.unconstrained_variable.assign(np.full(q_mu.shape, np.nan))  # as a diverged fit leaves it
    with pytest.raises(ValueError, match="q_mu"):
        log_density()
    with pytest.raises(ValueError, match="seed must be an integer"):
        seeded_log_density(dgp, X, Y, num_samples=3, seed=None)


def test_long_fits_scores_switch_to_compiled_functions_with_the_eager_values(monkeypatch):
    """Stage 2's early-stopping and guard scores are eager for their first EAGER_CHECKS calls and compiled afterwards:
    at every check (EAGER_CHECKS set to 2 here, four checks), the parameters changed between them, they equal the eager
    validation NLPD and −ELBO computed here on the same seeds."""
    from activated_dgp.training import fitters
    from activated_dgp.training.fitters import _stage2_stopper, negative_elbo_score, validation_nlpd

    monkeypatch.setattr(fitters, "EAGER_CHECKS", 2)
    X, Y, _, dgp = _converted(num_layers=2)
    X_val, Y_val = _data(30, seed=9)
    guard = negative_elbo_score(dgp, X, Y, seed=4)
    stopper = _stage2_stopper(dgp, (X, Y), TrainingSchedule(epochs=1, patience=100), (X_val, Y_val), 5, True, 0, 1)
    rng = np.random.default_rng(0)
    for check in range(4):
        rescale_kernel_variance(dgp.f_layers[check % 2], float(10.0 ** rng.uniform(-2, 0)))
        assert guard() == pytest.approx(-elbo_terms(dgp, X, Y, num_samples=1, seed=4).elbo, rel=1e-10)
        assert stopper.score() == pytest.approx(validation_nlpd(dgp, X_val, Y_val, 5, 0), rel=1e-10)


def test_noise_sweeps_from_one_set_of_samples_are_the_scores_at_each_noise_variance():
    """The joint (v, σ²) search scores every σ² of a v from one set of layer samples. One layer: the ELBO and the
    predictive density are closed forms in σ² given the layer's moments (m, s²) at X, written here in NumPy:
    Σ_i [−½ log 2πσ² − ((y_i − m_i)² + s_i²)/(2σ²)] − KL and log N(y_i | m_i, s_i² + σ²). Three layers: the eager
    elbo_terms / predictive_log_density with σ² assigned, on the same seed. The likelihood's σ² is restored, and a
    non-Gaussian likelihood is a clear error."""
    from activated_dgp.deep.diagnostics import seeded_elbo
    from activated_dgp.deep.prediction import seeded_log_density

    noises = [0.01, 0.1, 0.7]
    X, Y, _, dgp = _converted(num_layers=1)
    likelihood = dgp.likelihood_layer.likelihood
    entry = float(likelihood.variance.numpy())
    mean, var = (part.numpy() for part in dgp.f_layers[0].predict(X, full_cov=False))
    kl = float(dgp.f_layers[0].prior_kl())
    for noise, elbo, density in zip(
        noises, seeded_elbo(dgp, X, Y, num_samples=2, seed=1)(noises), seeded_log_density(dgp, X, Y, num_samples=3, seed=1)(noises)
    ):
        expected = np.sum(-0.5 * np.log(2 * np.pi * noise) - ((Y - mean) ** 2 + var) / (2 * noise)) - kl
        assert elbo == pytest.approx(expected, rel=1e-9)
        np.testing.assert_allclose(density, scipy.stats.norm.logpdf(Y, mean, np.sqrt(var + noise))[:, 0], rtol=1e-9)
    assert float(likelihood.variance.numpy()) == entry

    X, Y, _, dgp = _converted(num_layers=3)
    likelihood = dgp.likelihood_layer.likelihood
    swept_elbo = seeded_elbo(dgp, X, Y, num_samples=2, seed=7, batch_size=32)(noises)
    swept_density = seeded_log_density(dgp, X, Y, num_samples=3, seed=7)(noises)
    for noise, elbo, density in zip(noises, swept_elbo, swept_density):
        likelihood.variance.assign(noise)
        assert elbo == pytest.approx(elbo_terms(dgp, X, Y, num_samples=2, seed=7, batch_size=32).elbo, rel=1e-10)
        np.testing.assert_allclose(density, predictive_log_density(dgp, X, Y, num_samples=3, seed=7), rtol=1e-10, atol=1e-12)

    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(20, 3)), rng.integers(0, 2, size=(20, 1)).astype(np.float64)
    network = build_activated_nn(3, num_layers=1, num_units=6, truncation_level=4, seed=1)
    dgp = dgp_from_keras(network, len(X), X=X, likelihood="bernoulli").dgp
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        seeded_elbo(dgp, X, Y, seed=1)(noises)


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "softmax"])
def test_integrating_all_samples_at_once_is_the_per_sample_integral(likelihood):
    """integrate_per_sample stacks the S samples' rows into one likelihood call (closed form or quadrature, row by
    row); against S separate GPflow calls written here. The Monte Carlo softmax goes sample by sample on the same
    generator, so its seeded draws are the same ones in the same order."""
    from activated_dgp.deep.prediction import integrate_per_sample

    rng = np.random.default_rng(5)
    S, N, P = 4, 7, 3 if likelihood == "softmax" else 1
    mean, var = rng.normal(size=(S, N, P)), rng.uniform(0.1, 2.0, size=(S, N, P))
    Y = rng.integers(0, P if likelihood == "softmax" else 2, size=(N, 1)).astype(np.float64)
    if likelihood == "gaussian":
        Y, model = rng.normal(size=(N, 1)), gpflow.likelihoods.Gaussian(variance=0.3)
    elif likelihood == "bernoulli":
        model = gpflow.likelihoods.Bernoulli()
    else:
        from activated_dgp.deep.likelihoods import MonteCarloSoftmax

        model = MonteCarloSoftmax(P)  # GPflow's Softmax, usable with X = None
        model.num_monte_carlo_points = 50
    methods = ["predict_log_density", "variational_expectations"] + ([] if likelihood == "softmax" else ["predict_mean_and_var"])
    for method in methods:  # (GPflow's Monte Carlo predict_mean_and_var needs a Y it cannot have)
        targets = () if method == "predict_mean_and_var" else (Y,)
        stacked = integrate_per_sample(model, method, tf.constant(mean), tf.constant(var), *map(tf.constant, targets),
                                       draws=tf.random.Generator.from_seed(3))
        draws = tf.random.Generator.from_seed(3)
        if likelihood == "softmax":
            calls = [getattr(model, "_" + method)(None, mean[s], var[s], *targets, epsilon=draws.normal([50, N, P], dtype=tf.float64)) for s in range(S)]
        else:
            calls = [getattr(model, method)(None, mean[s], var[s], *targets) for s in range(S)]
        if method == "predict_mean_and_var":
            for got, part in zip(stacked, zip(*calls)):
                np.testing.assert_allclose(got.numpy(), np.stack([c.numpy() for c in part]), rtol=1e-12, atol=1e-14)
        else:
            assert stacked.shape == (S, N)
            np.testing.assert_allclose(stacked.numpy(), np.stack([c.numpy() for c in calls]), rtol=1e-12, atol=1e-14)


def test_default_variance_grid_extends_below_its_floor_when_the_data_want_it():
    # targets that are the network's outputs up to a noise of 1e-5: every unit of variance a sample picks up in
    # the hidden layers costs density, so the best v lies below the default grid's floor 1e-3 (as on naval)
    X, _, network, dgp = _converted(num_layers=2)
    Y = network(X).numpy()
    dgp.likelihood_layer.likelihood.variance.assign(1e-5)
    selection = select_kernel_variances(dgp, X, Y, objective="validation")
    assert max(selection.variances) < 1e-3 and min(v for _, v, _ in selection.evaluations) < 1e-3
    np.testing.assert_allclose(propagate_means(dgp, X)[-1].numpy(), network(X).numpy(), atol=1e-8)
    # the extension is worth it by the objective itself, evaluated directly: the chosen v against all at 1e-3
    chosen = float(np.mean(predictive_log_density(dgp, X, Y, num_samples=16, seed=0)))
    for layer in dgp.f_layers:
        rescale_kernel_variance(layer, 1e-3)
    at_floor = float(np.mean(predictive_log_density(dgp, X, Y, num_samples=16, seed=0)))
    assert chosen > at_floor + 1.0
    # explicit candidates are taken as given, never extended
    explicit = select_kernel_variances(dgp, X, Y, objective="validation", candidates=[1e-3, 1e-2])
    assert {v for _, v, _ in explicit.evaluations} <= {1e-3, 1e-2}


def _spread_softmax_dgp():
    """A one-layer softmax DGP with a spread q(u) (variances of order the prior's), 20,000 Monte Carlo points
    per likelihood integral, and its Gaussian marginals computed densely in NumPy (whitened: mean Φ(x)V, the
    network; var k − aᵀa + ‖Sᵀa‖², a = L⁻¹ Kuf) with a tensor-product Gauss–Hermite rule over the 3 logits."""
    rng = np.random.default_rng(3)
    X, labels = rng.normal(size=(30, 3)), rng.integers(0, 3, size=(30, 1)).astype(np.float64)
    network = build_activated_nn(3, num_layers=1, num_units=12, output_dim=3, truncation_level=8, lengthscales=[2.0], seed=0)
    dgp = dgp_from_keras(network, len(X), X=X, likelihood="softmax").dgp
    layer = dgp.f_layers[0]
    layer.q_sqrt.assign(0.5 * layer.q_sqrt.numpy() / 1e-5)
    dgp.likelihood_layer.likelihood.num_monte_carlo_points = 20000
    kernel, feature = layer.kernel.kernel, layer.inducing_variable.inducing_variable
    Kuu = gpflow.covariances.Kuu(feature, kernel).numpy() + gpflow.config.default_jitter() * np.eye(12)
    A = np.linalg.solve(np.linalg.cholesky(Kuu), gpflow.covariances.Kuf(feature, kernel, X).numpy())
    S = layer.q_sqrt.numpy()  # [3, M, M]
    mean = network(X).numpy()
    var = kernel.K_diag(X).numpy()[:, None] - np.sum(A**2, 0)[:, None] + np.stack([np.sum((S[p].T @ A) ** 2, 0) for p in range(3)], 1)
    assert np.min(var) > 0.05  # the integrals differ from plug-in values at μ: the comparisons can fail
    nodes, weights = np.polynomial.hermite.hermgauss(30)
    grid = np.stack(np.meshgrid(nodes, nodes, nodes, indexing="ij"), -1).reshape(-1, 3) * np.sqrt(2.0)
    w = np.prod(np.stack(np.meshgrid(weights, weights, weights, indexing="ij"), -1).reshape(-1, 3), 1) / np.pi**1.5
    logits = [mean[i] + np.sqrt(var[i]) * grid for i in range(len(X))]  # [nodes, 3] per point
    return X, labels, dgp, w, logits


def test_softmax_scores_repeat_with_a_seed_and_match_gauss_hermite_sums():
    """The softmax's Monte Carlo integral is seeded with the prediction (common random numbers for variance
    selection and early stopping), and the seeded log density is the integral: against a tensor-product
    Gauss–Hermite sum in NumPy over the one layer's Gaussian marginals, computed densely."""
    from scipy.special import logsumexp

    X, labels, dgp, w, logits = _spread_softmax_dgp()
    first = predictive_log_density(dgp, X, labels, num_samples=2, seed=5)
    tf.random.set_seed(123)  # the global random state must not matter
    np.testing.assert_array_equal(predictive_log_density(dgp, X, labels, num_samples=2, seed=5), first)
    assert np.max(np.abs(predictive_log_density(dgp, X, labels, num_samples=2, seed=6) - first)) > 1e-6  # the seed is used
    terms = elbo_terms(dgp, X, labels, num_samples=2, seed=5)
    assert elbo_terms(dgp, X, labels, num_samples=2, seed=5).expected_log_likelihood == terms.expected_log_likelihood
    expected = [np.log(w @ np.exp(F[:, int(labels[i, 0])] - logsumexp(F, axis=1))) for i, F in enumerate(logits)]
    np.testing.assert_allclose(first, expected, atol=0.03)  # 20,000 draws per point
    assert abs(np.mean(first) - np.mean(expected)) < 0.01


def test_softmax_class_probabilities_are_seeded_match_gauss_hermite_and_never_use_the_global_random_op(monkeypatch):
    """predict_class_probabilities with a softmax: the likelihood's Monte Carlo draws come from the prediction's
    generator, so a seeded call repeats exactly whatever the global random state; the probabilities are
    E[softmax(f)] (Gauss–Hermite in NumPy). GPflow's own unseeded ``tf.random.normal`` is never called: in eager
    mode after ``tf.random.set_seed`` each such call caches a kernel, which leaked ≈ 1.7 GB per 10,000 images."""
    from scipy.special import softmax

    from activated_dgp import predict_class_probabilities

    X, labels, dgp, w, logits = _spread_softmax_dgp()

    def refused(*args, **kwargs):
        raise AssertionError("GPflow's unseeded tf.random.normal was called")

    monkeypatch.setattr(tf.random, "normal", refused)
    tf.random.set_seed(7)
    first = predict_class_probabilities(dgp, X, num_samples=2, seed=5, batch_size=16)
    tf.random.set_seed(123)
    np.testing.assert_array_equal(predict_class_probabilities(dgp, X, num_samples=2, seed=5, batch_size=16), first)
    unseeded = predict_class_probabilities(dgp, X, num_samples=2)  # the global generator: works, and differs
    assert 1e-6 < np.max(np.abs(unseeded - first)) < 0.05
    expected = np.stack([w @ softmax(F, axis=1) for F in logits])
    np.testing.assert_allclose(first, expected, atol=0.01)  # 20,000 draws per point
    assert np.max(np.abs(expected - softmax(np.stack([w @ F for F in logits]), axis=1))) > 0.02  # ≠ softmax(μ)


def test_softmax_variance_selection_is_reproducible_and_keeps_the_logits():
    rng = np.random.default_rng(4)
    X, labels = rng.normal(size=(40, 3)), rng.integers(0, 3, size=(40, 1)).astype(np.float64)
    network = build_activated_nn(3, num_layers=2, num_units=10, layer_widths=[4], output_dim=3, truncation_level=6, seed=1)
    runs = []
    for _ in range(2):
        dgp = dgp_from_keras(network, len(X), X=X, likelihood="softmax").dgp
        runs.append(select_kernel_variances(dgp, X, labels, objective="validation", candidates=[0.01, 0.1, 1.0], seed=2))
        np.testing.assert_allclose(propagate_means(dgp, X)[-1].numpy(), network(X).numpy(), atol=1e-8)
    assert runs[0].evaluations == runs[1].evaluations and runs[0].variances == runs[1].variances


class _Recorder(tf_keras.callbacks.Callback):
    def __init__(self, module):
        super().__init__()
        self.module, self.snapshots = module, {}

    def on_train_begin(self, logs=None):
        self.snapshots[0] = [v.numpy().copy() for v in self.module.variables]

    def on_epoch_end(self, epoch, logs=None):
        self.snapshots[epoch + 1] = [v.numpy().copy() for v in self.module.variables]


def test_restore_best_returns_the_parameters_of_the_best_check():
    X, Y = _data(64)
    network = build_activated_nn(3, num_layers=1, num_units=8, truncation_level=6, seed=1)
    network(X[:1])
    scores = iter([5.0, 4.0, 1.0, 3.0, 2.0, 6.0, 7.0, 8.0])  # best at the 3rd check = epoch 2
    stopper = RestoreBest(lambda: next(scores), network, every=1, patience=3)
    recorder = _Recorder(network)
    network.compile(tf_keras.optimizers.Adam(0.05), loss="mse")
    network.fit(X, Y, epochs=20, batch_size=16, verbose=0, callbacks=[recorder, stopper])
    assert stopper.best_epoch == 2 and stopper.epochs_run == 5  # 3 checks without improvement after epoch 2
    for variable, expected in zip(network.variables, recorder.snapshots[2]):
        np.testing.assert_array_equal(variable.numpy(), expected)
    assert not np.allclose(recorder.snapshots[2][0], recorder.snapshots[5][0])


class _PoisonAfter(tf_keras.callbacks.Callback):
    """Writes NaN into the first variable of ``module`` at the end of epoch ``epoch`` (a diverging fit)."""

    def __init__(self, module, epoch):
        super().__init__()
        self.module, self.epoch = module, epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            variable = self.module.trainable_variables[0]
            variable.assign(tf.fill(tf.shape(variable), tf.constant(np.nan, variable.dtype)))


def _overfitting_network(seed=1):
    """A network, its compiled fit on 24 noisy points and a validation MSE that falls, then rises as it overfits."""
    X, Y = _data(24, seed=seed)
    X_val, Y_val = _data(200, seed=seed + 10)
    network = build_activated_nn(3, num_layers=1, num_units=16, truncation_level=6, seed=seed)
    network(X[:1])
    network.compile(tf_keras.optimizers.Adam(0.1), loss="mse")
    return X, Y, network, lambda: float(np.mean((network(X_val).numpy() - Y_val) ** 2))


@pytest.mark.parametrize("every, patience, epochs", [(2, 2, 60), (3, None, 10)])
def test_restore_best_matches_a_manual_loop_keeping_the_best_weights(every, patience, epochs):
    """Early stopping written out by hand — one epoch at a time, score the start, every ``every`` epochs and the last
    one, keep the weights of the best score (strictly lower; the start wins ties), stop after ``patience`` checks
    without a new best — stops at the same epoch and ends with the same weights as RestoreBest (Keras' EarlyStopping
    inside) in one fit. Without shuffling both fits take the same steps."""
    X, Y, network, score = _overfitting_network()
    start = network.get_weights()
    best, best_epoch, best_weights, since, checks = score(), 0, network.get_weights(), 0, [(0, score())]
    epoch = 0
    while epoch < epochs:
        network.fit(X, Y, epochs=1, batch_size=8, shuffle=False, verbose=0)
        epoch += 1
        if epoch % every and epoch < epochs:
            continue
        value = score()
        checks.append((epoch, value))
        if value < best:
            best, best_epoch, best_weights, since = value, epoch, network.get_weights(), 0
        else:
            since += 1
            if patience is not None and since >= patience:
                break
    stopped = epoch

    X, Y, network, score = _overfitting_network()
    for a, b in zip(network.get_weights(), start, strict=True):
        np.testing.assert_array_equal(a, b)  # the same start
    stopper = RestoreBest(score, network, every=every, patience=patience)
    network.fit(X, Y, epochs=epochs, batch_size=8, shuffle=False, verbose=0, callbacks=[stopper])
    assert stopper.checks == checks
    assert stopper.epochs_run == stopped and stopper.best_epoch == best_epoch and stopper.best == best
    for a, b in zip(network.get_weights(), best_weights, strict=True):
        np.testing.assert_array_equal(a, b)
    assert 0 < best_epoch < stopped  # the case is not trivial: an epoch beat the start, and a later state was undone
    assert (stopped < epochs) == (patience is not None)  # stopped early by patience, or ran to the end


def test_a_fit_that_only_gets_worse_gives_back_its_start_where_keras_alone_does_not():
    """The score is the squared distance of the weights from where they started, so every epoch scores worse than the
    start (0). Keras' EarlyStopping with the start's score as its baseline hands back its best epoch, which is
    worse than the start: what RestoreBest adds. RestoreBest hands back the start's weights exactly, after the
    ``patience`` epochs that did not beat it."""

    def fit(callbacks):
        X, Y, network, _ = _overfitting_network()
        start = network.get_weights()
        distance = lambda: float(sum(np.sum((a - b) ** 2) for a, b in zip(network.get_weights(), start)))  # noqa: E731
        used = callbacks(network, distance)
        network.fit(X, Y, epochs=8, batch_size=8, verbose=0, callbacks=used)
        return distance(), network.get_weights(), start, used

    def keras_alone(network, distance):
        def log_the_score(epoch, logs):
            logs["distance"] = distance()

        stopping = tf_keras.callbacks.EarlyStopping(monitor="distance", baseline=0.0, patience=3, restore_best_weights=True)
        return [tf_keras.callbacks.LambdaCallback(on_epoch_end=log_the_score), stopping]

    kept, _, _, (_, stopping) = fit(keras_alone)
    assert kept > 0 and stopping.best_epoch == 0 and stopping.stopped_epoch == 2  # epoch 1's weights, worse than the start

    distance, weights, start, (stopper,) = fit(lambda network, distance: [RestoreBest(distance, network, patience=3)])
    assert distance == 0.0 and stopper.best_epoch == 0 and stopper.restored and stopper.epochs_run == 3
    assert [epoch for epoch, _ in stopper.checks] == [0, 1, 2, 3] and all(value > 0 for _, value in stopper.checks[1:])
    for a, b in zip(weights, start, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("terminate_on_nan", [True, False])
def test_restore_best_stops_a_diverged_fit_and_restores_the_best_check(terminate_on_nan):
    """NaN written into the network after epoch 4 (checks every 3 epochs). With Keras' TerminateOnNaN the fit stops at
    the first step of epoch 5 (its loss is NaN) and the end-of-fit check finds the broken parameters; without it the
    next check (epoch 6) does. Either way the broken state is never scored and epoch 3's parameters come back."""
    X, Y = _data(64)
    network = build_activated_nn(3, num_layers=1, num_units=8, truncation_level=6, seed=1)
    network(X[:1])
    calls = []

    def score():  # the broken state must never reach the score
        assert all(np.all(np.isfinite(v.numpy())) for v in network.variables)
        calls.append(None)
        return [5.0, 1.0, 3.0, 2.0][len(calls) - 1]

    stopper = RestoreBest(score, network, every=3, patience=5)
    recorder = _Recorder(network)
    network.compile(tf_keras.optimizers.Adam(0.05), loss="mse")
    guard = [tf_keras.callbacks.TerminateOnNaN()] if terminate_on_nan else []
    network.fit(X, Y, epochs=20, batch_size=16, verbose=0, callbacks=[recorder, _PoisonAfter(network, 4)] + guard + [stopper])
    diverged = 5 if terminate_on_nan else 6
    assert stopper.diverged_epoch == diverged and stopper.epochs_run == diverged and len(calls) == 2
    assert int(network.optimizer.iterations.numpy()) == (4 * 4 + 1 if terminate_on_nan else 6 * 4)  # 4 steps an epoch
    assert stopper.best_epoch == 3 and np.isnan(stopper.checks[-1][1]) and stopper.restored
    assert stopper.summary(4)["diverged_step"] == 4 * diverged
    for variable, expected in zip(network.variables, recorder.snapshots[3]):
        np.testing.assert_array_equal(variable.numpy(), expected)


def test_dgp_early_stopping_restores_the_recorded_best_parameters():
    X, Y, _, dgp = _converted(num_layers=2)
    X_val, Y_val = _data(40, seed=5)
    recorder = _Recorder(dgp)
    schedule = TrainingSchedule(epochs=12, batch_size=40, patience=3, validation_every=2, learning_rate=0.05)
    history = train_dgp(dgp, X, Y, schedule, validation_data=(X_val, Y_val), callbacks=[recorder])
    steps, scores = zip(*history["validation_checks"])
    per_epoch = 2
    assert steps[0] == 0 and all(b - a == 2 * per_epoch for a, b in zip(steps, steps[1:]))
    assert history["best_step"] == steps[int(np.argmin(scores))]
    for variable, expected in zip(dgp.variables, recorder.snapshots[history["best_step"] // per_epoch]):
        np.testing.assert_array_equal(variable.numpy(), expected)
    # the restored model scores what the check recorded (same draws)
    nlpd = -np.mean(predictive_log_density(dgp, X_val, Y_val, num_samples=16, seed=0))
    assert nlpd == pytest.approx(min(scores), rel=1e-9)


def test_two_stage_with_validation_options_and_errors():
    X, Y = _data(90)
    schedule = TrainingSchedule(epochs=4, batch_size=36, patience=2)  # the 72 rows left after validation: equal batches
    result = train_two_stage(
        X, Y, architecture=dict(num_layers=2, num_units=8, truncation_level=6), network_schedule=schedule, dgp_schedule=schedule,
        recipe=stage2_recipe(validation_fraction=0.2, kernel_variance="validation", noise_variance="validation", warmup_steps=3),
        seed=0,
    )
    (X_fit, _), (X_val, Y_val) = split_validation(X, Y, 0.2, 0)
    expected_noise = float(np.mean((result.network(X_val).numpy() - Y_val) ** 2))
    assert "best_step" in result.network_history and "best_step" in result.dgp_history and "warmup" in result.dgp_history
    assert result.initial_noise_variance == pytest.approx(max(expected_noise, 1e-4), rel=1e-6)
    assert len(result.kernel_variances) == 2 and result.dgp.num_data == len(X_fit)
    with pytest.raises(ValueError, match="validation"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4), recipe=stage2_recipe("paper", noise_variance="validation"))  # reads no validation part
    with pytest.raises(ValueError, match="kernel_variance"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4), recipe=stage2_recipe(kernel_variance="largest"))
    with pytest.raises(ValueError, match="likelihood"):
        train_two_stage(X, Y, likelihood="poisson")
    with pytest.raises(ValueError, match="patience"):
        train_dgp(_converted(num_layers=1)[3], X, Y, TrainingSchedule(epochs=1, patience=2))


def test_train_dgp_resumes_from_a_checkpoint_with_its_optimizer(tmp_path, interrupt_after):
    """An uninterrupted 4-epoch stage 2 vs one interrupted after epoch 2 (DGPCheckpoint), loaded and resumed
    with ``train_dgp(optimizer=load_optimizer(…), initial_epoch=…)``: the same parameters. Full batches on a
    one-layer DGP make the ELBO deterministic; a fresh Adam (control) does not continue the trajectory."""
    from activated_dgp import build_activated_dgp, load_dgp
    from activated_dgp.deep import DGPCheckpoint, load_optimizer, load_training_state

    X, Y = _data(60)
    schedule = TrainingSchedule(epochs=4, batch_size=len(X), learning_rate=0.05)

    def fresh():
        return build_activated_dgp(3, len(X), num_layers=1, num_units=8, truncation_level=6, seed=0)

    def values(dgp):
        return np.concatenate([p.unconstrained_variable.numpy().ravel() for p in dgp.trainable_parameters])

    straight = fresh()
    train_dgp(straight, X, Y, schedule)
    interrupted = fresh()
    with pytest.raises(KeyboardInterrupt):
        train_dgp(interrupted, X, Y, schedule, callbacks=[DGPCheckpoint(tmp_path, interrupted), interrupt_after(2)])
    assert load_training_state(tmp_path)["epoch"] == 2
    results = {}
    for label in ("resumed", "fresh_optimizer"):
        dgp = load_dgp(tmp_path)
        optimizer = load_optimizer(tmp_path, dgp) if label == "resumed" else None
        history = train_dgp(dgp, X, Y, schedule, optimizer=optimizer, initial_epoch=load_training_state(tmp_path)["epoch"])
        assert len(history["loss"]) == 2  # epochs 2 and 3 only
        results[label] = values(dgp)
    np.testing.assert_allclose(results["resumed"], values(straight), rtol=1e-8, atol=1e-10)
    assert np.max(np.abs(results["fresh_optimizer"] - values(straight))) > 1e-3
    with pytest.raises(ValueError, match="initial_epoch"):
        train_dgp(fresh(), X, Y, schedule, initial_epoch=5)


def test_joint_noise_search_picks_the_closed_form_best_noise_and_keeps_the_forward_pass():
    """With every layer's v at 1e-12 the predictive is N(f(x), σ²) to within ~1e-12, whose mean log density
    −½ log 2πσ² − MSE/(2σ²) is maximised at σ² = MSE: the joint search must pick the factor whose σ² is best by
    that closed form (computed here in NumPy), and must leave the network's forward pass unchanged."""
    X, Y, network, dgp = _converted(num_layers=2)
    X_val, Y_val = _data(60, seed=5)
    mse = float(np.mean((network(X_val).numpy() - Y_val) ** 2))
    entry = 0.37
    dgp.likelihood_layer.likelihood.variance.assign(entry)
    factors = 2.0 ** np.arange(-4.0, 1.01, 0.5)
    selection = select_kernel_variances(dgp, X_val, Y_val, objective="validation", candidates=[1e-12], noise_factors=factors)
    closed_form = -0.5 * np.log(2 * np.pi * entry * factors) - mse / (2 * entry * factors)
    assert selection.noise_variance == pytest.approx(entry * factors[np.argmax(closed_form)], rel=1e-12)
    assert float(dgp.likelihood_layer.likelihood.variance.numpy()) == pytest.approx(selection.noise_variance, rel=1e-12)
    assert selection.elbo == pytest.approx(closed_form.max(), abs=1e-6)
    np.testing.assert_allclose(propagate_means(dgp, X)[-1].numpy(), network(X).numpy(), atol=1e-8)
    # the hidden layer is searched at the entry noise only; the output layer at every factor
    assert sum(1 for index, _, _ in selection.evaluations if index == 1) == len(factors)
    assert sum(1 for index, _, _ in selection.evaluations if index == 0) == 1
    with pytest.raises(ValueError, match="noise_factors"):
        select_kernel_variances(dgp, X_val, Y_val, objective="validation", candidates=[1e-12], noise_factors=[0.5, -1.0])


def test_two_stage_noise_selected_needs_a_variance_search():
    X, Y = _data(90)
    with pytest.raises(ValueError, match="selected"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4),
                        recipe=stage2_recipe("paper", validation_fraction=0.2, noise_variance="selected"))
    with pytest.raises(ValueError, match="noise_variance"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4), recipe=stage2_recipe(noise_variance="loudest"))


@pytest.mark.parametrize("whiten", [True, False])
def test_optimal_output_covariance_matches_gpflow_sgpr(whiten):
    """One layer: the ELBO-optimal q(u) covariance for a fixed mean is SGPR's q(u) covariance
    (gpflow.models.SGPR.compute_qu, the collapsed bound's optimum), with the same kernel, features and noise."""
    from activated_dgp.deep.posterior_mean import set_optimal_output_covariance

    X, Y, _, dgp = _converted(num_layers=1, whiten=whiten)
    layer = dgp.f_layers[0]
    kernel, feature = layer.kernel.kernel, layer.inducing_variable.inducing_variable
    kernel.variance.assign(0.3)
    noise = 0.05
    S = set_optimal_output_covariance(dgp, X, noise_variance=noise)
    sgpr = gpflow.models.SGPR((X, Y), kernel, feature, noise_variance=noise)
    _, cov_u = sgpr.compute_qu()
    cov_u = cov_u.numpy()
    if whiten:  # q(v) with u = L v
        Kuu = gpflow.covariances.Kuu(feature, kernel, jitter=gpflow.config.default_jitter()).numpy()
        L = np.linalg.cholesky(Kuu)
        cov_u_model = L @ S @ L.T
    else:
        cov_u_model = S
    np.testing.assert_allclose(cov_u_model, cov_u, rtol=1e-5, atol=1e-8 * np.abs(cov_u).max())
    q_sqrt = layer.q_sqrt.numpy()[0]
    np.testing.assert_allclose(q_sqrt @ q_sqrt.T, S, rtol=1e-6, atol=1e-9 * np.abs(S).max())


def test_the_weight_decay_table_shows_each_cells_plain_fit_and_its_validation_chosen_decay(tmp_path):
    """The retired weight-decay side study's table (written by the diagnosis' report from its records; the committed
    page: tests/test_committed_pages.py): its λ = 0 column is the record with weight_decay 0 and its chosen λ the one
    of least validation MSE (recomputed here)."""
    import json
    import shutil
    from pathlib import Path

    from experiments.harness.blocks import read_block
    from experiments.stage2_diagnosis import write_side_studies

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "stage2"
    out.mkdir()
    shutil.copy(root / "docs/results/stage2/twin_weight_decay.jsonl", out / "twin_weight_decay.jsonl")
    page, block = tmp_path / "stage2.md", "twin_weight_decay"
    page.write_text((root / "docs/results/stage2.md").read_text().replace(read_block(root / "docs/results/stage2.md", block), "stale\n"))
    write_side_studies(out, root / "docs/results/uci_long")
    records = [json.loads(line) for line in (out / "twin_weight_decay.jsonl").read_text().splitlines()]
    cell = [r for r in records if (r["dataset"], r["split"]) == ("yacht", 0)]
    plain = next(r for r in cell if r["weight_decay"] == 0.0)
    chosen = min(cell, key=lambda r: r["validation_mse"])
    assert f"| yacht 0 | {plain['test_rmse']:.4f} | {chosen['weight_decay']:g} | {chosen['test_rmse']:.4f} |" in read_block(page, block)


def test_stage2_diagnosis_cells_and_protocol_never_mix_settings(tmp_path):
    """A cell per (dataset, split, variant); records made with other stage-2 settings are invisible (so rerun),
    and an unknown variant is a clear error."""
    import shutil
    from pathlib import Path

    from experiments.harness import cli, registry
    from experiments.harness.store import pending
    from experiments.harness.study import open_store

    root = Path(__file__).resolve().parents[1]
    study = registry.study("stage2_diagnosis")
    shutil.copy(root / study.OUT / "records.jsonl", tmp_path / "records.jsonl")
    same = cli.parse("stage2_diagnosis", study, ["--out", str(tmp_path), "--dataset", "bostonHousing,energy", "--variant", "all"])
    todo = pending(open_store(study, same), study.cells(same))
    assert len(study.cells(same)) == 2 * 9
    assert {(c["dataset"], c["variant"]) for c in todo} == {("energy", "ade"), ("bostonHousing", "ade")}
    other = cli.parse("stage2_diagnosis", study, ["--out", str(tmp_path), "--dataset", "bostonHousing", "--dgp-steps", "100"])
    assert open_store(study, other).records() == []
    assert len(pending(open_store(study, other), study.cells(other))) == 4
    with pytest.raises(ValueError, match="unknown variant"):
        study.cells(cli.parse("stage2_diagnosis", study, ["--variant", "baseline,nonsense"]))


def test_a_saved_network_scored_as_nn_ts_gives_scipys_gaussian_nlpd(tmp_path):
    """Restored from the retired output-layer study (its NN+TS state): a network saved and loaded through the public
    entry points predicts as before, and its temperature-scaled score — N(f(x), σ²) with σ² the validation MSE —
    is scipy's Gaussian NLPD of the original network's predictions."""
    from scipy.stats import norm

    from activated_dgp.deep import load_network, save_network
    from activated_dgp.metrics import regression_metrics

    X, Y, network, _ = _converted(num_layers=2)
    X_val, Y_val = _data(40, seed=7)
    X_test, Y_test = _data(50, seed=8)
    mse = float(np.mean((network(X_val).numpy() - Y_val) ** 2))
    expected_mean = network(X_test).numpy()[:, 0]
    loaded = load_network(save_network(network, tmp_path / "net"))
    mean = loaded(X_test).numpy()[:, 0]
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-12, atol=1e-12)
    scores = regression_metrics(Y_test, mean[None], np.full((1, len(mean)), mse))
    np.testing.assert_allclose(scores["nlpd"], -np.mean(norm.logpdf(Y_test[:, 0], expected_mean, np.sqrt(mse))), rtol=1e-10)
    np.testing.assert_allclose(scores["rmse"], np.sqrt(np.mean((Y_test[:, 0] - expected_mean) ** 2)), rtol=1e-12)


def test_joint_variance_and_noise_search_is_the_best_pair_of_its_grid():
    """Restored from the retired output-layer study: the joint (v, σ²) search of the output layer, a superset of the
    fixed-noise search, chooses the pair of best validation log density, found here by evaluating every pair of the
    grid (one layer, so coordinate ascent is one pass) with the same seeded draws; it is never worse than the
    fixed-noise search."""
    from activated_dgp.training import rescale_kernel_variance

    X, _, network, _ = _converted(num_layers=1)

    def converted():  # the same conversion of one trained network, afresh
        return dgp_from_keras(network, len(X), X=X).dgp

    X_val, Y_val = _data(60, seed=5)
    candidates, factors = [1e-3, 1e-2, 1e-1], [0.25, 0.5, 1.0, 2.0]
    fixed = select_kernel_variances(converted(), X_val, Y_val, objective="validation", candidates=candidates, seed=3)
    dgp = converted()
    layer, likelihood = dgp.f_layers[0], dgp.likelihood_layer.likelihood
    entry_v, entry_noise = float(layer.kernel.kernel.variance.numpy()), float(likelihood.variance.numpy())
    joint = select_kernel_variances(dgp, X_val, Y_val, objective="validation", candidates=candidates, noise_factors=factors, seed=3)

    grid = converted()
    values = {}
    for v in [entry_v] + candidates:
        rescale_kernel_variance(grid.f_layers[0], v)
        for factor in [1.0] if v == entry_v else factors:
            grid.likelihood_layer.likelihood.variance.assign(entry_noise * factor)
            values[v, factor] = float(np.mean(predictive_log_density(grid, X_val, Y_val, num_samples=16, seed=3)))
    (best_v, best_factor), best = max(values.items(), key=lambda item: item[1])
    assert joint.elbo == pytest.approx(best, abs=1e-9)
    assert joint.noise_variance == pytest.approx(entry_noise * best_factor, rel=1e-12)
    assert float(layer.kernel.kernel.variance.numpy()) == pytest.approx(best_v, rel=1e-9)
    assert joint.elbo >= fixed.elbo - 1e-9
