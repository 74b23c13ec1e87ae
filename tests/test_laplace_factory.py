"""``Laplace(model, likelihood, subset_of_weights, hessian_structure)`` against the LinearisedLaplace configuration
it stands for (same predictive), and its errors."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_laplace import data, mlp, twin  # noqa: E402

from activated_dgp.eigen import Laplace, LinearisedLaplace  # noqa: E402


@pytest.mark.parametrize(
    "subset, structure, method, layers",
    [("all", "full", "exact", None), ("all", "diag", "diagonal", None), ("all", "kron", "kron", None),
     ("last_layer", "full", "last_layer", None), ("last_layer", "diag", "diagonal", [-1]), ("last_layer", "kron", "kron", [-1]),
     ("subnetwork", "full", "exact", [0]), ("subnetwork", "kron", "kron", [0]), ("all", "lowrank", "lowrank", None),
     ("subnetwork", "lowrank", "lowrank", [0])],
)
def test_factory_gives_the_configuration_it_names(subset, structure, method, layers, rng):
    X, Y = data("softmax", 15, 2, 3, rng)
    model = mlp(2, 3, width=4, seed=1)
    variables = None if layers is None else [v for i in layers for v in model.layers[i].trainable_variables]
    extra = {"subnetwork_variables": variables} if subset == "subnetwork" else {}
    la = Laplace(model, "classification", subset_of_weights=subset, hessian_structure=structure, prior_precision=0.5, verbose=0, **extra).fit(X, Y)
    reference = LinearisedLaplace(model, "softmax", prior_precision=0.5, method=method, variables=variables if method != "last_layer" else None, verbose=0).fit(X, Y)
    assert la.method == method and la.likelihood == "softmax" and la.num_parameters == reference.num_parameters
    X_test = rng.normal(size=(5, 2))
    np.testing.assert_allclose(la.predict_f(X_test)[1].numpy(), reference.predict_f(X_test)[1].numpy(), rtol=1e-12)
    np.testing.assert_allclose(la.predict_y(X_test)[0].numpy(), reference.predict_y(X_test)[0].numpy(), rtol=1e-12)


def test_factory_regression_names_and_noise(rng):
    X, Y = data("gaussian", 10, 2, 1, rng)
    model = mlp(2, 1, seed=2)
    la = Laplace(model, "regression", "all", "full", sigma_noise=0.5, verbose=0)
    assert la.likelihood == "gaussian" and la.noise_variance == 0.25 and la.method == "exact"
    assert Laplace(model, "classification", verbose=0).likelihood == "bernoulli"
    assert Laplace(model, "regression", verbose=0).method == "kron"  # laplace-torch's defaults: last layer, kron


def test_factory_errors(rng):
    model = mlp(2, 1)
    with pytest.raises(ValueError, match="subset_of_weights"):
        Laplace(model, "regression", subset_of_weights="some")
    with pytest.raises(ValueError, match="hessian_structure"):
        Laplace(model, "regression", hessian_structure="block")
    with pytest.raises(ValueError, match="subnetwork_variables"):
        Laplace(model, "regression", "subnetwork", "full")
    with pytest.raises(ValueError, match="subnetwork_variables"):
        Laplace(model, "regression", "all", "full", subnetwork_variables=model.trainable_variables)
    with pytest.raises(ValueError, match="likelihood"):
        Laplace(model, "poisson")
    with pytest.raises(ValueError, match="sigma_noise"):
        Laplace(model, "regression", sigma_noise=-1.0)
    with pytest.raises(ValueError, match="ActivatedLayer.*no Kronecker form"):
        Laplace(twin(2, 1, seed=0), "regression", "all", "kron")
