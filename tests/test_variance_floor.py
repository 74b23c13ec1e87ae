"""The floor on the chosen kernel variance: ``select_kernel_variances(min_variance=…)`` and
``train_two_stage(kernel_variance_floor=…)``, checked against the objective evaluated in the test itself — a
one-layer DGP's validation log density is gpflow's SVGP density (no sampled layer), computed here for every
allowed candidate."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from activated_dgp import build_activated_nn, dgp_from_keras
from activated_dgp.training import rescale_kernel_variance, select_kernel_variances
from activated_dgp.training import TrainingSchedule, stage2_recipe, train_network, train_two_stage


def _one_layer_wanting_a_tiny_variance(seed=0):
    """A converted one-layer DGP whose targets are its network's outputs and whose noise is 1e-5: every unit of
    prior variance left outside the inducing span costs density, so unconstrained, v wants to go far below 1e-2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 3))
    tf.random.set_seed(seed)
    network = build_activated_nn(3, num_layers=1, num_units=10, truncation_level=8, lengthscales=[2.0], seed=seed)
    train_network(network, X, np.sin(X[:, :1]), schedule=TrainingSchedule(epochs=5, batch_size=30))
    dgp = dgp_from_keras(network, len(X), X=X).dgp
    dgp.likelihood_layer.likelihood.variance.assign(1e-5)
    return X, network(X).numpy(), dgp


def _svgp_log_density(dgp, X, Y) -> float:
    """The one-layer DGP's mean validation log density, computed by gpflow's SVGP from the layer's parameters."""
    layer = dgp.f_layers[0]
    svgp = gpflow.models.SVGP(
        layer.kernel.kernel, gpflow.likelihoods.Gaussian(variance=float(dgp.likelihood_layer.likelihood.variance.numpy())),
        layer.inducing_variable.inducing_variable, num_latent_gps=Y.shape[1], q_diag=False, whiten=layer.whiten,
        num_data=len(X), q_mu=layer.q_mu.numpy(), q_sqrt=layer.q_sqrt.numpy(),
    )
    return float(np.mean(svgp.predict_log_density((X, Y)).numpy()))


@pytest.mark.parametrize("floor", [1e-2, 2e-2])  # on the default grid, and between two of its points
def test_floor_selection_is_the_argmax_over_the_allowed_candidates(floor):
    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    unconstrained = select_kernel_variances(dgp, X, Y, objective="validation")
    assert unconstrained.variances[0] < 1e-3  # without a floor the search goes far below it (the symptom)

    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    rescale_kernel_variance(dgp.f_layers[0], 1e-6)  # entering below the floor: it is raised first, never scored there
    selection = select_kernel_variances(dgp, X, Y, objective="validation", min_variance=floor)
    tried = sorted({v for _, v, _ in selection.evaluations})
    assert min(tried) >= floor * (1 - 1e-12)
    chosen = selection.variances[0]
    assert chosen >= floor * (1 - 1e-12)
    # the allowed candidates: the default grid 10^(−3 … 0.5) with points below the floor moved to the floor
    allowed = sorted({max(float(v), floor) for v in 10.0 ** np.arange(-3.0, 0.51, 0.5)})
    assert all(np.isclose(tried, v, rtol=1e-12).any() for v in allowed)
    objective = {}
    for v in allowed:
        rescale_kernel_variance(dgp.f_layers[0], v)
        objective[v] = _svgp_log_density(dgp, X, Y)
    best = max(objective, key=objective.get)
    assert best == pytest.approx(floor, rel=1e-12)  # the data want less, so the floor binds
    assert chosen == pytest.approx(best, rel=1e-12)
    assert selection.elbo == pytest.approx(objective[best], rel=1e-9, abs=1e-9)


def test_floor_below_every_candidate_changes_nothing_and_one_above_some_moves_them_to_it():
    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    free = select_kernel_variances(dgp, X, Y, objective="validation", candidates=[1e-4, 1e-2, 1.0])
    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    inert = select_kernel_variances(dgp, X, Y, objective="validation", candidates=[1e-4, 1e-2, 1.0], min_variance=1e-5)
    assert inert.evaluations == free.evaluations and inert.variances == free.variances
    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    floored = select_kernel_variances(dgp, X, Y, objective="validation", candidates=[1e-4, 1e-2, 1.0], min_variance=1e-3)
    assert sorted(v for _, v, _ in floored.evaluations) == [1e-3, 1e-2, 1.0]  # 1e-4 is tried at the floor instead
    assert floored.variances[0] >= 1e-3


@pytest.mark.parametrize("bad", [0.0, -1e-2, float("nan"), float("inf"), True, "1e-2"])
def test_bad_floor_is_a_clear_error(bad):
    X, Y, dgp = _one_layer_wanting_a_tiny_variance()
    with pytest.raises(ValueError, match="min_variance"):
        select_kernel_variances(dgp, X, Y, objective="validation", min_variance=bad)
    with pytest.raises(ValueError, match="kernel_variance_floor"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4),
                        recipe=stage2_recipe("validation", validation_fraction=0.2, kernel_variance_floor=bad))


def test_floor_with_a_fixed_kernel_variance_is_a_clear_error():
    X, Y, _ = _one_layer_wanting_a_tiny_variance()
    with pytest.raises(ValueError, match="kernel_variance_floor.*'elbo' or 'validation'"):
        train_two_stage(X, Y, architecture=dict(num_layers=1, num_units=4),
                        recipe=stage2_recipe(kernel_variance=1.0, kernel_variance_floor=1e-2))


def test_train_two_stage_passes_the_floor():
    """Through the ``floor`` recipe with its floor raised to 0.05 (an explicit option overrides the recipe's 1e-2):
    v ≥ 0.05 on both layers; the recipe holds out 10 % itself and stage 2 stops early on it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    Y = np.sin(X[:, :1]) + 0.01 * rng.normal(size=(80, 1))
    result = train_two_stage(
        X, Y, architecture=dict(num_layers=2, num_units=8, truncation_level=6),
        recipe=stage2_recipe("floor", kernel_variance_floor=0.05, far_field=False),
        seed=0, network_schedule=TrainingSchedule(epochs=3, batch_size=36),
        dgp_schedule=TrainingSchedule(epochs=2, batch_size=36, patience=1),
    )
    assert result.recipe == "floor" and len(result.kernel_variances) == 2 and min(result.kernel_variances) >= 0.05 * (1 - 1e-12)
    assert result.dgp_history["best_validation"] is not None and np.isfinite(result.dgp_history["best_validation"])
