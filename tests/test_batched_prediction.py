"""Batched Monte Carlo prediction under a memory budget: batching does not change the draws or the results, the batch
size (and so the memory) does not grow with N, a budget too small for one row is refused, a result object with a
``dgp`` and ``features(X)`` is predicted through its features, and the whole prediction equals a dense reference
built from GPflow's own conditional with the same draws."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from activated_dgp import build_activated_dgp, predict_class_probabilities, predict_y, predictive_log_density
from activated_dgp.deep import layer_moments
from activated_dgp.deep.draws import row_normals
from activated_dgp.deep.prediction import EFFICIENT_BATCH_BYTES, bytes_per_row, prediction_batch_size, prediction_functions
from activated_dgp.zonal.conditionals import gpflow_conditional


def _dgp(num_layers=3, likelihood="gaussian", output_dim=1, input_dim=2, num_units=8, seed=0):
    """A small activated DGP with non-trivial posteriors: q_mu and a full q_sqrt per output, so every sample differs."""
    dgp = build_activated_dgp(input_dim, 40, num_layers=num_layers, num_units=num_units, likelihood=likelihood, output_dim=output_dim, seed=seed)
    rng = np.random.default_rng(seed)
    for layer in dgp.f_layers:
        layer.q_mu.assign(rng.standard_normal(layer.q_mu.shape))
        q_sqrt = np.tril(0.2 * rng.standard_normal(layer.q_sqrt.shape)) + 0.5 * np.eye(layer.q_sqrt.shape[-1])
        layer.q_sqrt.assign(q_sqrt)
    return dgp


def _inputs(num_rows, input_dim=2, seed=1):
    return np.random.default_rng(seed).standard_normal((num_rows, input_dim))


def test_row_normals_do_not_depend_on_the_batch_and_are_standard_normal():
    for dtype in (tf.float64, tf.float32):
        whole = row_normals(7, 2, 0, 50, [3, 5], dtype).numpy()
        assert whole.shape == (50, 3, 5) and whole.dtype == dtype.as_numpy_dtype
        for start, rows in [(1, 4), (13, 20), (49, 1)]:
            np.testing.assert_array_equal(row_normals(7, 2, start, rows, [3, 5], dtype).numpy(), whole[start : start + rows])
    assert not np.allclose(row_normals(7, 3, 0, 50, [3, 5], tf.float64).numpy(), whole)  # the stream is used
    assert not np.allclose(row_normals(8, 2, 0, 50, [3, 5], tf.float64).numpy(), whole)  # the seed is used
    draws = row_normals(0, 0, 12345, 4000, [7], tf.float64).numpy().ravel()
    assert scipy.stats.kstest(draws, "norm").pvalue > 1e-3


def test_float32_draws_are_enough_for_float64_predictions():
    """The draws are float32 normals returned in float64: their distribution, tails included, is the standard normal's
    to well below any Monte Carlo error (scipy's normal as the truth)."""
    draws = row_normals(3, 1, 0, 20_000, [50], tf.float64).numpy().ravel()  # 10⁶ draws
    assert scipy.stats.kstest(draws, "norm").pvalue > 1e-3
    for moment, truth in ((1, 0.0), (2, 1.0), (3, 0.0), (4, 3.0)):
        assert abs(np.mean(draws**moment) - truth) < 5 * np.sqrt(scipy.stats.norm.moment(2 * moment) / draws.size)
    for z in (3.0, 4.0):  # tail probabilities against scipy's, within 5 binomial SEs
        p = 2 * scipy.stats.norm.sf(z)
        assert abs(np.mean(np.abs(draws) > z) - p) < 5 * np.sqrt(p / draws.size)
    assert np.max(np.abs(draws)) > 4.5  # the tails reach as far as 10⁶ standard normals do (P(max < 4.5) ≈ 0.001)


def test_batched_prediction_equals_one_batch_with_the_same_seed():
    dgp, X = _dgp(), _inputs(37)
    Y = np.sin(X[:, :1])
    whole_y = predict_y(dgp, X, num_samples=5, seed=3, progress=False)
    assert np.max(np.abs(whole_y[0] - predict_y(dgp, X, num_samples=5, seed=4, progress=False)[0])) > 1e-4  # seed used
    for batch_size in (1, 6, 16):
        batched = predict_y(dgp, X, num_samples=5, seed=3, batch_size=batch_size, progress=False)
        for got, expected in zip(batched, whole_y):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        predictive_log_density(dgp, X, Y, num_samples=5, seed=3, batch_size=6, progress=False),
        predictive_log_density(dgp, X, Y, num_samples=5, seed=3, progress=False), rtol=1e-12, atol=1e-12,
    )
    for (m, v), (m_whole, v_whole) in zip(
        layer_moments(dgp, X, num_samples=5, seed=3, batch_size=6, progress=False), layer_moments(dgp, X, num_samples=5, seed=3, progress=False)
    ):
        np.testing.assert_allclose(m, m_whole, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(v, v_whole, rtol=1e-12, atol=1e-12)
    # a Monte Carlo likelihood's own draws are row draws too
    softmax, X3 = _dgp(num_layers=2, likelihood="softmax", output_dim=3), _inputs(23)
    np.testing.assert_allclose(
        predict_class_probabilities(softmax, X3, num_samples=3, seed=1, batch_size=5, progress=False),
        predict_class_probabilities(softmax, X3, num_samples=3, seed=1, progress=False), rtol=1e-12, atol=1e-12,
    )


def test_prediction_is_the_dense_monte_carlo_estimate_of_gpflows_conditional_with_the_same_draws():
    """Two layers, Gaussian likelihood: h^(s) = μ_1(x) + σ_1(x) z_s with z the row draws of stream 0, then the output
    layer's moments at each h^(s) from GPflow's conditional (the reference path), the total variance in NumPy."""
    dgp, X, S = _dgp(num_layers=2), _inputs(11), 6
    mean, var = predict_y(dgp, X, num_samples=S, seed=5, batch_size=4, progress=False)
    z = row_normals(5, 0, 0, len(X), [S, dgp.f_layers[0].num_latent_gps], tf.float64).numpy()  # [N, S, P]
    with gpflow_conditional():
        m1, v1 = (t.numpy() for t in dgp.f_layers[0].predict(X, full_cov=False))
        H = m1[:, None, :] + np.sqrt(v1)[:, None, :] * z
        moments = [dgp.f_layers[1].predict(H[:, s], full_cov=False) for s in range(S)]
    f_mean = np.stack([m.numpy() for m, _ in moments])  # [S, N, 1]
    f_var = np.stack([v.numpy() for _, v in moments])
    noise = dgp.likelihood_layer.likelihood.variance.numpy()
    np.testing.assert_allclose(mean, f_mean.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, f_var.mean(0) + noise + f_mean.var(0), rtol=1e-10)
    Y = np.cos(X[:, :1])
    expected = scipy.special.logsumexp(scipy.stats.norm.logpdf(Y, f_mean, np.sqrt(f_var + noise))[..., 0], axis=0) - np.log(S)
    np.testing.assert_allclose(predictive_log_density(dgp, X, Y, num_samples=S, seed=5, batch_size=4, progress=False), expected, rtol=1e-10)


def test_the_batch_size_follows_the_budget_and_not_n():
    """One row's working set: layer 1's variance work once, 2M + 3 max(MP, M(M+1)/2) + D values, and per sample the
    largest of its 6P draws, the hidden layers' inducing-draw samples (3M + 6P + D) and the output layer's variance work
    (2M + 3 max(MP, M(M+1)/2) + 6P + D); the batch is ⌊budget / row⌋ rows (below the cache-sized target) whatever N is,
    and every compiled call sees at most that many rows."""
    dgp, S = _dgp(num_layers=3, num_units=8), 4
    (D1, M1, P1), (D2, M2, P2), (D3, M3, P3) = (2, 8, 2), (2, 8, 2), (2, 8, 1)  # (D, M, P): bottlenecks of width D = 2
    once = 2 * M1 + 3 * max(M1 * P1, M1 * (M1 + 1) // 2) + D1
    per_sample = max(6 * P1, 3 * M2 + 6 * P2 + D2, 2 * M3 + 3 * M3 * P3 + 6 * P3 + D3, 1 * (1 + 4))
    assert bytes_per_row(dgp, S) == (once + S * per_sample) * 8
    budget = 10 * bytes_per_row(dgp, S) + 7
    assert [prediction_batch_size(dgp, S, budget, num_rows=n) for n in (15, 1_000, 10**7)] == [10, 10, 10]
    assert prediction_batch_size(dgp, S, budget, num_rows=3) == 3
    assert prediction_batch_size(dgp, S, 10**12) == EFFICIENT_BATCH_BYTES // bytes_per_row(dgp, S)  # a cache-sized batch
    function = prediction_functions(dgp, S)["y_moments"]
    seen = []
    prediction_functions(dgp, S)._compiled["y_moments"] = lambda X, *args: seen.append(X.shape[0]) or function(X, *args)
    try:
        for n in (25, 95):
            seen.clear()
            mean, _ = predict_y(dgp, _inputs(n), num_samples=S, seed=0, memory_budget=budget, progress=False)
            assert mean.shape == (n, 1) and set(seen) == {10} and len(seen) == -(-n // 10)
    finally:
        prediction_functions(dgp, S)._compiled["y_moments"] = function
    assert function.experimental_get_tracing_count() == 1  # padded last batches: one trace for every N above


def test_a_budget_too_small_for_one_row_names_what_one_row_needs():
    dgp = _dgp(num_layers=2)
    need = bytes_per_row(dgp, 100)
    with pytest.raises(ValueError, match=rf"too small for even one row.*one row needs {need:,} bytes"):
        predict_y(dgp, _inputs(5), memory_budget=need - 1)
    with pytest.raises(ValueError, match="too small for even one row"):
        predictive_log_density(dgp, _inputs(5), np.zeros((5, 1)), memory_budget=1000)
    with pytest.raises(ValueError, match="memory_budget must be a positive number"):
        predict_y(dgp, _inputs(5), memory_budget=-1)
    assert predict_y(dgp, _inputs(5), memory_budget=need, progress=False)[0].shape == (5, 1)  # exactly one row fits


def test_progress_is_shown_by_default_and_quiet_on_request(capsys, monkeypatch):
    import activated_dgp.deep.prediction as prediction

    dgp = _dgp(num_layers=2)
    monkeypatch.setattr(prediction, "PROGRESS_AFTER_SECONDS", 1e9)  # as if each batch were fast (a loaded machine traces slowly)
    predict_y(dgp, _inputs(12), num_samples=2, seed=0, batch_size=4)
    assert capsys.readouterr().out == ""  # short: no bar
    monkeypatch.setattr(prediction, "PROGRESS_AFTER_SECONDS", 0.0)  # as if each batch were slow
    predict_y(dgp, _inputs(12), num_samples=2, seed=0, batch_size=4)
    assert "12/12" in capsys.readouterr().out
    predict_y(dgp, _inputs(12), num_samples=2, seed=0, batch_size=4, progress=False)
    assert capsys.readouterr().out == ""


class _Result:
    """A stand-in for a training result: a DGP and a feature map from raw inputs to its inputs."""

    def __init__(self, dgp, projection):
        self.dgp, self.projection = dgp, projection

    def features(self, X):
        return np.tanh(np.asarray(X) @ self.projection)


def test_a_result_with_a_dgp_and_features_is_predicted_on_its_features():
    dgp = _dgp(num_layers=2)
    raw = _inputs(9, input_dim=5)
    result = _Result(dgp, np.random.default_rng(3).standard_normal((5, 2)))
    H, Y = result.features(raw), np.ones((9, 1))
    for got, expected in zip(predict_y(result, raw, num_samples=3, seed=2), predict_y(dgp, H, num_samples=3, seed=2)):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(
        predictive_log_density(result, raw, Y, num_samples=3, seed=2), predictive_log_density(dgp, H, Y, num_samples=3, seed=2)
    )
    np.testing.assert_array_equal(layer_moments(result, raw, num_samples=3, seed=2)[-1][1], layer_moments(dgp, H, num_samples=3, seed=2)[-1][1])
    bernoulli = _dgp(num_layers=2, likelihood="bernoulli")
    np.testing.assert_array_equal(
        predict_class_probabilities(_Result(bernoulli, result.projection), raw, num_samples=3, seed=2),
        predict_class_probabilities(bernoulli, H, num_samples=3, seed=2),
    )
    with pytest.raises(ValueError, match="expected a gpflux DeepGP"):
        predict_y(object(), raw)


@pytest.mark.parametrize("outputs", [1, 2, 5])
def test_symmetric_variances_equal_gpflows_base_conditional(rng, outputs):
    """The quadratic forms over the upper triangle (the prediction path) against GPflow's whitened base_conditional,
    on an arbitrary SPD Kmm, leading batch dimensions and a q_sqrt with an upper triangle (ignored by both)."""
    from gpflow.conditionals.util import base_conditional

    from activated_dgp.zonal.conditionals import symmetric_variances, whitened_marginals

    M, N = 7, 5
    root = rng.normal(size=(M, M))
    Kmm = tf.constant(root @ root.T + M * np.eye(M))
    Kmn = tf.constant(rng.normal(size=(M, 2, N)))
    Knn = tf.constant(10.0 + rng.uniform(size=(2, N)))
    f = tf.constant(rng.normal(size=(M, outputs)))
    q_sqrt = tf.constant(rng.normal(size=(outputs, M, M)))
    with symmetric_variances():
        mean, var = whitened_marginals(Kmn, Kmm, Knn, f, q_sqrt)
    mean_ref, var_ref = base_conditional(Kmn, Kmm, Knn, f, q_sqrt=q_sqrt, white=True)
    np.testing.assert_allclose(mean.numpy(), mean_ref.numpy(), rtol=1e-10, atol=1e-10 * np.abs(mean_ref.numpy()).max())
    np.testing.assert_allclose(var.numpy(), var_ref.numpy(), rtol=1e-10)


def test_a_batch_predictor_keeps_the_conditional_it_was_traced_with(monkeypatch):
    """A BatchPredictor has its own compiled functions: one first called inside gpflow_conditional() keeps GPflow's
    conditional afterwards (the comparison of benchmarks.step_profile), and both agree to round-off."""
    import activated_dgp.zonal.conditionals as conditionals
    from activated_dgp.deep import BatchPredictor

    calls, original = [], conditionals.whitened_marginals
    monkeypatch.setattr(conditionals, "whitened_marginals", lambda *args: calls.append(1) or original(*args))
    dgp, X = _dgp(num_layers=2), _inputs(10)
    fast, reference = BatchPredictor(dgp, 3, 4), BatchPredictor(dgp, 3, 4)
    with gpflow_conditional():
        expected = reference.predict_y(X)
    assert calls == []  # traced with GPflow's conditional
    got = reference.predict_y(X)
    assert calls == []  # and kept it outside the context
    fast.predict_y(X)
    assert len(calls) == 2  # the batched conditional, once per layer in its one trace
    for a, b, c in zip(got, expected, fast.predict_y(X)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c, b, rtol=1e-10)
