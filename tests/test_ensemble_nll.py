"""The deep-ensemble baseline trained as Lakshminarayanan et al. (2017) train it: each member's Gaussian NLL loss
against scipy's normal log density, and the method end to end."""

import numpy as np
import pytest
from scipy import stats

from experiments.methods.networks import GaussianNLL, mean_and_variance
from experiments.methods.protocol import BUDGETS, SplitData
from experiments.methods.registry import run_method


def test_the_gaussian_nll_is_scipys_negative_log_density():
    rng = np.random.default_rng(0)
    outputs = rng.normal(size=(50, 2))
    y = rng.normal(size=(50, 1))
    variance = np.log1p(np.exp(outputs[:, 1])) + 1e-6
    expected = -stats.norm.logpdf(y[:, 0], loc=outputs[:, 0], scale=np.sqrt(variance))
    loss = GaussianNLL(reduction="none")(y, outputs).numpy()
    np.testing.assert_allclose(loss, expected, rtol=1e-10)
    np.testing.assert_allclose(mean_and_variance(outputs)[1].numpy(), variance, rtol=1e-12)


def test_the_nll_ensemble_runs_end_to_end_with_five_members():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 2))
    y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(90, 1))
    data = SplitData(X[:70], y[:70], X[70:], y[70:], 1.0, 0)
    record = run_method("ensemble_nll", data, BUDGETS["tiny"])
    assert record["extra"]["members"] == 5 and np.isfinite(record["nlpd"])
    assert record["rmse"] > 0
