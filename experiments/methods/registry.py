"""The methods by name, their labels in tables, which run on a dataset, and :func:`run_method`, which fits and scores
one of them on one split."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Callable, Dict, Optional

import gpflow
import numpy as np
import tf_keras

from activated_dgp.metrics import regression_metrics
from experiments.methods.adgp import (predict_adgp, predict_adgp_elbo, predict_adgp_ensemble, predict_adgp_floor,
                                      predict_adgp_mixed, predict_adgp_paper, predict_adgp_slab, predict_plain_adgp,
                                      predict_relu_adgp, predict_relu_adgp_kl, predict_relu_bare)
from experiments.methods.dgp import predict_dgp
from experiments.methods.dropout import predict_dropout
from experiments.methods.lla import (LLA_EXACT_MAX_PARAMETERS, predict_lla_exact, predict_lla_last_layer,
                                     predict_lla_neuralef, predict_lla_neuralef_evidence, predict_relu_lla_kron, twin_parameter_count)
from experiments.methods.networks import NetworkCache
from experiments.methods.nn import (predict_ensemble, predict_ensemble_nll, predict_nn, predict_nn_mixed_ts, predict_nn_slab_ts,
                                    predict_nn_ts, predict_plain, predict_relu, predict_relu_ts, predict_relu_tuned_ts)
from experiments.methods.protocol import Budget, Prediction, SplitData
from experiments.methods.scoring import shift_diagnostics

METHODS: Dict[str, Callable[[SplitData, Budget, NetworkCache], Prediction]] = {
    "nn": predict_nn,
    "dropout": predict_dropout,
    "ensemble": predict_ensemble,
    "nn_ts": predict_nn_ts,
    "dgp": predict_dgp,
    "adgp": predict_adgp,
    "plain": predict_plain,
    "plain_adgp": predict_plain_adgp,
    "lla_last_layer": predict_lla_last_layer,
    "lla_exact": predict_lla_exact,
    "lla_neuralef": predict_lla_neuralef,
    "lla_neuralef_evidence": predict_lla_neuralef_evidence,
    "adgp_paper": predict_adgp_paper,
    "adgp_elbo": predict_adgp_elbo,
    "adgp_floor": predict_adgp_floor,
    "adgp_ensemble": predict_adgp_ensemble,
    "relu": predict_relu,
    "relu_ts": predict_relu_ts,
    "relu_tuned_ts": predict_relu_tuned_ts,
    "relu_bare": predict_relu_bare,
    "relu_adgp": predict_relu_adgp,
    "relu_adgp_kl": predict_relu_adgp_kl,
    "adgp_slab": predict_adgp_slab,
    "nn_slab_ts": predict_nn_slab_ts,
    "adgp_mixed": predict_adgp_mixed,
    "nn_mixed_ts": predict_nn_mixed_ts,
    "ensemble_nll": predict_ensemble_nll,
    "relu_lla_kron": predict_relu_lla_kron,
}
LABELS = {
    "nn": "NN",
    "dropout": "NN+Dropout",
    "ensemble": "NN Ensemble",
    "nn_ts": "NN+TS",
    "dgp": "DGP",
    "adgp": "ADGP",
    "plain": "plain NN",
    "plain_adgp": "plain→ADGP",
    "lla_last_layer": "LLA last layer",
    "lla_exact": "LLA exact",
    "lla_neuralef": "LLA NeuralEF",
    "lla_neuralef_evidence": "LLA NeuralEF (δ by evidence)",
    "adgp_paper": "ADGP paper (v=1)",
    "adgp_elbo": "ADGP ELBO-v",
    "adgp_floor": "ADGP v-floor",
    "adgp_ensemble": "ADGP Ensemble",
    "relu": "ReLU NN",
    "relu_ts": "ReLU NN+TS",
    "relu_tuned_ts": "ReLU NN+TS (fine-tuned)",
    "relu_bare": "ReLU→ADGP (as is)",
    "relu_adgp": "ReLU→ADGP (made convertible)",
    "relu_adgp_kl": "ReLU→ADGP (made convertible, KL-penalised)",
    "adgp_slab": "ADGP slab-v",
    "nn_slab_ts": "NN+TS slab",
    "adgp_mixed": "ADGP mixed-v",
    "nn_mixed_ts": "NN+TS mixed",
    "ensemble_nll": "NLL Ensemble",
    "relu_lla_kron": "ReLU LLA KFAC",
}


def applicable(method: str, input_dim: int) -> bool:
    """Whether ``method`` runs on a dataset of ``input_dim`` inputs (the exact LLA needs P ≤ the limit)."""
    return method != "lla_exact" or twin_parameter_count(input_dim) <= LLA_EXACT_MAX_PARAMETERS


def run_method(method: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Dict:
    """Fit ``method`` on the split and score it: rmse, nlpd (standardised), rmse_original, nlpd_original,
    seconds, the epochs used, and method-specific extras. ``networks``: the run's stage-1 networks (saved and
    reused; default a fresh in-memory cache)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    gpflow.config.set_default_float(np.float64)
    tf_keras.backend.clear_session()
    start = time.perf_counter()
    means, variances, extra = METHODS[method](data, budget, NetworkCache() if networks is None else networks)
    scores = regression_metrics(data.y_test, means, variances, data.y_scale)
    return {
        **scores,
        **shift_diagnostics(data.y_test, means, variances),
        "seconds": round(time.perf_counter() - start, 2),
        "budget": asdict(budget),
        "extra": extra,
    }
