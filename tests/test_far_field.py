"""The far-field residual (activated_dgp/far_field.py): its kernel against quadrature, its growth exponent,
p → 0.5 along rays, the unchanged mean propagation, the conditional's variance, and saving in a fresh process."""

import json
import textwrap

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy.integrate import quad
from scipy.stats import norm

from activated_dgp import build_activated_dgp, build_activated_nn, dgp_from_keras, propagate_means, save_dgp
from activated_dgp.zonal.conditionals import gpflow_conditional
from activated_dgp.deep.far_field import (
    FarFieldArcCosine,
    add_far_field,
    far_field_options,
    has_far_field,
    refit_far_field,
)
from activated_dgp.zonal.kernels import ZonalArcCosine
from activated_dgp.deep.builders import activated_gp_layer
from activated_dgp.deep.sampling import layer_inputs


def _dense_residual(H, H2, centre, radius, variance, order):
    """σ² (1 + ẑ·ẑ')/2 ∫_1^∞ (ρ − c)₊^q (ρ' − c)₊^q dc, the integral by scipy quadrature."""
    out = np.zeros((len(H), len(H2)))
    for i, h in enumerate(H):
        for j, g in enumerate(H2):
            rho, rho2 = np.linalg.norm(h - centre) / radius, np.linalg.norm(g - centre) / radius
            z = np.append((h - centre) / radius, 1.0)
            z2 = np.append((g - centre) / radius, 1.0)
            cosine = z @ z2 / np.linalg.norm(z) / np.linalg.norm(z2)
            upper = min(rho, rho2)
            integral = quad(lambda c: (rho - c) ** order * (rho2 - c) ** order, 1.0, upper)[0] if upper > 1 else 0.0
            out[i, j] = variance * 0.5 * (1.0 + cosine) * integral
    return out


@pytest.mark.parametrize("order", [1, 2, 3])
def test_residual_gram_matches_quadrature(rng, order):
    centre, radius, variance = np.array([0.3, -0.2]), 1.7, 0.8
    H = rng.normal(size=(7, 2)) * 3.0  # some inside the ball (zero rows), most outside
    H2 = rng.normal(size=(5, 2)) * 4.0
    kernel = FarFieldArcCosine(2, 5, far_variance=variance, far_radius=radius, far_centre=centre, far_order=order)
    expected = _dense_residual(H, H2, centre, radius, variance, order)
    np.testing.assert_allclose(kernel.residual(H, H2).numpy(), expected, rtol=1e-9, atol=1e-12)
    diag = _dense_residual(H, H, centre, radius, variance, order)
    np.testing.assert_allclose(kernel.residual_diag(H).numpy(), np.diag(diag), rtol=1e-9, atol=1e-12)
    # K = zonal + residual, and the Gram matrix stays positive semi-definite
    zonal = ZonalArcCosine(2, 5)
    np.testing.assert_allclose(kernel.K(H).numpy(), zonal.K(H).numpy() + diag, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(kernel.K_diag(H).numpy(), zonal.K_diag(H).numpy() + np.diag(diag), rtol=1e-9)
    assert np.linalg.eigvalsh(kernel.residual(H).numpy()).min() > -1e-8 * np.abs(diag).max()


@pytest.mark.parametrize("order", [1, 2])
def test_variance_growth_exponent(order):
    """Var f(r·u) ~ r^(2q+1) far away (the zonal part grows like r², slower)."""
    kernel = FarFieldArcCosine(2, 10, far_variance=0.5, far_radius=2.0, far_centre=np.zeros(2), far_order=order)
    r = np.geomspace(1e3, 1e5, 9)
    direction = np.array([0.6, 0.8])
    variance = kernel.K_diag(r[:, None] * direction).numpy()
    slope = np.polyfit(np.log(r), np.log(variance), 1)[0]
    assert abs(slope - (2 * order + 1)) < 0.01
    zonal_slope = np.polyfit(np.log(r), np.log(ZonalArcCosine(2, 10).K_diag(r[:, None] * direction).numpy()), 1)[0]
    assert abs(zonal_slope - 2.0) < 0.01


def _classifier(rng, far):
    X = rng.normal(size=(60, 2))
    dgp = build_activated_dgp(2, len(X), num_layers=1, num_units=20, likelihood="bernoulli", seed=3)
    layer = dgp.f_layers[0]
    layer.q_mu.assign(3.0 * rng.normal(size=layer.q_mu.shape))  # a confident, known posterior mean
    if far:
        add_far_field(dgp, X)
    return dgp, X


def _probability(dgp, points):
    """p(y=1|x) = ∫ σ(f) N(f; m, v) df by dense Gauss–Hermite quadrature on the layer's marginals."""
    mean, var = dgp.f_layers[0].predict(points, full_cov=False)
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    f = mean.numpy()[:, :1] + np.sqrt(var.numpy()[:, :1]) * nodes[None, :]
    return (0.5 * (1.0 + np.tanh(0.5 * f))) @ weights / weights.sum()  # σ(f), without overflow


def test_probability_tends_to_half_along_rays(rng):
    dgp, X = _classifier(rng, far=True)
    plain, _ = _classifier(np.random.default_rng(1234), far=False)
    angles = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    directions = np.stack([np.cos(angles), np.sin(angles)], 1)
    radius = np.max(np.linalg.norm(X - X.mean(0), axis=1))
    gaps = [np.abs(_probability(dgp, X.mean(0) + f * radius * directions) - 0.5) for f in (3, 10, 100, 1000)]
    assert np.all(np.diff([g.max() for g in gaps]) <= 1e-12) and gaps[0].max() > gaps[-1].max()
    assert gaps[-1].max() < 0.01
    plain_gap = np.abs(_probability(plain, X.mean(0) + 1000 * radius * directions) - 0.5)
    assert plain_gap.mean() > 0.1  # without the residual p tends to a direction-dependent constant


def test_softmax_probabilities_tend_to_uniform(rng):
    from activated_dgp import predict_class_probabilities

    X = rng.normal(size=(50, 2))
    dgp = build_activated_dgp(2, len(X), num_layers=1, num_units=15, likelihood="softmax", output_dim=3, seed=2)
    dgp.f_layers[0].q_mu.assign(5.0 * rng.normal(size=dgp.f_layers[0].q_mu.shape))
    far = 1000.0 * np.array([[1.0, 0.3], [-0.4, 1.0], [0.2, -1.0]])
    confident = predict_class_probabilities(dgp, far, num_samples=4, seed=0)
    add_far_field(dgp, X)
    uniform = predict_class_probabilities(dgp, far, num_samples=4, seed=0)
    assert confident.max(1).min() > 0.9
    np.testing.assert_allclose(uniform.sum(1), 1.0, atol=1e-9)
    assert np.max(np.abs(uniform - 1.0 / 3.0)) < 0.12  # Monte Carlo softmax: each class wins equally often


def test_batched_gram_matches_unbatched(rng):
    kernel = FarFieldArcCosine(2, 5, far_variance=1.3, far_radius=0.9, far_centre=np.zeros(2))
    H = 2.0 * rng.normal(size=(3, 4, 2))
    batched = kernel.K(H).numpy()
    for s in range(3):
        np.testing.assert_allclose(batched[s], kernel.K(H[s]).numpy(), rtol=1e-12)


def test_conditional_variance_gains_the_residual(rng):
    """The activated conditional (fast path and GPflow's) adds exactly k_res(h, h) to the zonal variance."""
    W = rng.normal(size=(15, 3))
    values = dict(far_variance=2.0, far_radius=1.5, far_centre=np.array([0.1, 0.2]), far_order=2)
    plain = activated_gp_layer(W, 2, 30)
    far = activated_gp_layer(W, 2, 30, far_field=values)
    for layer in (plain, far):
        layer.q_mu.assign(np.ones(layer.q_mu.shape))
    H = rng.normal(size=(9, 2)) * 3.0
    residual = np.diag(_dense_residual(H, H, values["far_centre"], 1.5, 2.0, 2))
    for context in (None, gpflow_conditional):
        with context() if context else np.errstate():
            m0, v0 = plain.predict(H, full_cov=False)
            m1, v1 = far.predict(H, full_cov=False)
        np.testing.assert_array_equal(m0.numpy(), m1.numpy())
        np.testing.assert_allclose(v1.numpy() - v0.numpy(), residual[:, None] * np.ones((1, 2)), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("likelihood,output_dim,num_layers", [("gaussian", 2, 3), ("bernoulli", 1, 1), ("softmax", 3, 2)])
def test_mean_propagation_is_the_network_with_far_field(rng, likelihood, output_dim, num_layers):
    X = rng.normal(size=(40, 2))
    network = build_activated_nn(2, num_layers=num_layers, num_units=12, output_dim=output_dim, seed=1)
    conversion = dgp_from_keras(network, len(X), X=X, likelihood=likelihood, far_field=True)
    assert has_far_field(conversion.dgp)
    far_points = 50.0 * rng.normal(size=(10, 2))
    for points in (X, far_points):
        difference = propagate_means(conversion.dgp, points)[-1].numpy() - network(points).numpy()
        assert np.max(np.abs(difference)) < 1e-8
    # the training inputs lie inside the residual's ball: no variance added there
    H = layer_inputs(conversion.dgp, X)[-1]
    assert np.max(conversion.dgp.f_layers[-1].kernel.kernel.residual_diag(H).numpy()) < 1e-12


def test_refit_recentres_the_ball_after_hidden_layers_move(rng):
    X = rng.normal(size=(40, 2))
    dgp = build_activated_dgp(2, len(X), num_layers=2, num_units=10, seed=4)
    for layer in dgp.f_layers:
        layer.q_mu.assign(rng.normal(size=layer.q_mu.shape))
    add_far_field(dgp, X)
    first = dgp.f_layers[0]
    first.q_mu.assign(first.q_mu.numpy() * 3.0 + 1.0)  # stage 2 moving the hidden layer
    H = propagate_means(dgp, X, num_layers=1)[-1].numpy()
    kernel = dgp.f_layers[-1].kernel.kernel
    assert np.max(kernel.residual_diag(H).numpy()) > 0  # the stale ball misses the data's representations
    refit_far_field(dgp, X)
    centre = H.mean(0)
    np.testing.assert_allclose(kernel.far_centre.numpy(), centre, rtol=1e-12)
    np.testing.assert_allclose(kernel.far_radius.numpy(), np.max(np.linalg.norm(H - centre, axis=1)), rtol=1e-12)
    assert np.max(kernel.residual_diag(H).numpy()) == 0.0


def test_save_load_fresh_process_exact(rng, tmp_path, fresh_process):
    dgp, X = _classifier(rng, far=True)
    kernel = dgp.f_layers[0].kernel.kernel
    kernel.far_variance.assign(7.5)  # moved away from anything a rebuild would give
    kernel.far_centre.assign([0.25, -0.5])
    points = 20.0 * rng.normal(size=(8, 2))
    mean, var = dgp.f_layers[0].predict(points, full_cov=False)
    save_dgp(dgp, tmp_path / "model")
    np.save(tmp_path / "points.npy", points)
    script = textwrap.dedent(
        f"""
        import json, numpy as np
        from activated_dgp import load_dgp
        from activated_dgp.deep.far_field import has_far_field
        dgp = load_dgp({str(tmp_path / 'model')!r})
        points = np.load({str(tmp_path / 'points.npy')!r})
        m, v = dgp.f_layers[0].predict(points, full_cov=False)
        k = dgp.f_layers[0].kernel.kernel
        print(json.dumps(dict(far=has_far_field(dgp), order=k.far_order, mean=m.numpy().tolist(), var=v.numpy().tolist())))
        """
    )
    loaded = json.loads(fresh_process.run(script).strip().splitlines()[-1])
    assert loaded["far"] and loaded["order"] == kernel.far_order
    np.testing.assert_array_equal(np.array(loaded["mean"]), mean.numpy())
    np.testing.assert_array_equal(np.array(loaded["var"]), var.numpy())


def test_bad_options():
    with pytest.raises(ValueError, match="far_field must be"):
        far_field_options("yes")
    with pytest.raises(ValueError, match="far_order"):
        FarFieldArcCosine(2, 5, far_order=0)
    with pytest.raises(ValueError, match="far_radius"):
        FarFieldArcCosine(2, 5, far_radius=-1.0)
    network = build_activated_nn(2, num_layers=1, num_units=5, seed=0)
    with pytest.raises(ValueError, match="needs the data X"):
        dgp_from_keras(network, 10, far_field=True)
    dgp = build_activated_dgp(2, 10, num_layers=1, num_units=5, seed=0)
    add_far_field(dgp, np.zeros((3, 2)) + np.arange(3)[:, None])
    with pytest.raises(ValueError, match="already has"):
        add_far_field(dgp, np.zeros((3, 2)))


def test_switching_the_residual_off_zeroes_it_and_restores_it():
    """Inside the block k_res(h, h) = 0 even far away; afterwards it is σ_r² (ρ − 1)^(2q+1)/(2q+1) again (closed form)."""
    import activated_dgp as ad
    from activated_dgp.deep.far_field import add_far_field, far_field_switched_off

    dgp = ad.build_activated_dgp(ad.deep.ArchitectureConfig(2, num_layers=1, num_units=6), num_data=10, seed=0)
    add_far_field(dgp, far_variance=2.0, far_radius=1.5, far_centre=np.zeros(2))
    kernel = dgp.f_layers[-1].kernel.kernel
    H = np.array([[30.0, 0.0]])
    expected = 2.0 * (30.0 / 1.5 - 1.0) ** 7 / 7
    with far_field_switched_off(dgp):
        assert float(kernel.residual_diag(H)[0]) == 0.0
    assert float(kernel.residual_diag(H)[0]) == pytest.approx(expected, rel=1e-10)


def test_train_two_stage_default_has_the_residual():
    """The library's default recipe (train_two_stage with no far-field argument) gives the output layer the residual:
    at 100× the data's range a 1-D regression's predictive mean is within one std of the targets' mean (the far-field
    target). A far-field DGP's save_dgp → load_dgp in a fresh process: test_save_load_fresh_process_exact."""
    from activated_dgp import TrainingSchedule, train_two_stage

    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, size=(60, 1))
    Y = np.sin(3.0 * X) + 0.1 * rng.normal(size=X.shape)
    result = train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=8), seed=0, recipe="paper",
                             network_schedule=TrainingSchedule(epochs=10, batch_size=60, verbose=0),
                             dgp_schedule=TrainingSchedule(epochs=2, batch_size=60, verbose=0))
    assert has_far_field(result.dgp)
    far = np.array([[-400.0], [400.0]])  # 100× the range [−2, 2]
    m, v = result.dgp.f_layers[-1].predict(layer_inputs(result.dgp, far)[-1], full_cov=False)  # the latent f
    assert np.all(np.abs(m.numpy().ravel() - Y.mean()) <= np.sqrt(v.numpy().ravel())), (m.numpy(), v.numpy())

