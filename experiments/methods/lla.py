"""The linearised Laplace approximation (LLA) of the NN's own network: last layer, exact GGN, or NeuralEF's
eigenfunctions (Deng et al. 2022, §4.3), through :class:`activated_dgp.eigen.LinearisedLaplace`."""

from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np
import tf_keras

from activated_dgp.eigen import LinearisedLaplace
from experiments.methods.networks import NetworkCache, build_twin_network, fit_network, training_mse
from experiments.methods.protocol import Budget, Prediction, SplitData, fit_parts

#: LLA on the NN's own network (NeuralEF paper §4.3, Table 2 at CPU scale): the same twin, θ_MAP its
#: early-stopped weights; noise σ² = its training MSE (the NN's own predictive noise); prior precision by the
#: Laplace evidence (exact, last layer) or, for the NeuralEF method, on the validation part. The exact GGN only where
#: the twin has at most LLA_EXACT_MAX_PARAMETERS parameters (P × P eigendecomposition).
LLA_EXACT_MAX_PARAMETERS = 5000
LLA_EIGENPAIRS = 20
LLA_NEURALEF_STEPS = 2000
#: the recorded cells' NeuralEF: k networks and no extra ones (NeuralEF's default before it took k extra)
LLA_NEURALEF_OPTIONS = {"oversampling": 0}


def twin_parameter_count(input_dim: int) -> int:
    """P of the benchmark's twin for D inputs."""
    return int(build_twin_network(input_dim, 0).count_params())


def _lla(method: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None, kind: str = "twin",
         prior_by_evidence: bool = False) -> Prediction:
    network, history = fit_network(kind, data, budget, data.seed, networks)
    (X, y), validation = fit_parts(data, budget)
    noise = training_mse(network, X, y)
    eigen = method == "neuralef"
    prior = ("validation" if validation is not None else 1.0) if eigen and not prior_by_evidence else "marginal_likelihood"
    lla = LinearisedLaplace(
        network, likelihood="gaussian", noise_variance=noise, prior_precision=prior, method=method,
        num_eigenpairs=LLA_EIGENPAIRS, neuralef_steps=LLA_NEURALEF_STEPS, neuralef_options=LLA_NEURALEF_OPTIONS, seed=data.seed,
        max_parameters=LLA_EXACT_MAX_PARAMETERS, verbose=0,
    )
    lla.fit(X, y, validation_data=validation if prior == "validation" else None,
            checkpoint_dir=_neuralef_checkpoints(networks, network, data.seed) if eigen else None)
    means, variances = (np.asarray(t)[:, 0][None] for t in lla.predict_y(data.X_test))
    return means, variances, {
        "noise_variance": noise, "prior_precision": float(lla.prior_precision), "prior_precision_by": str(prior),
        "num_parameters": lla.num_parameters, "network": history,
        **({"num_eigenpairs": LLA_EIGENPAIRS, "neuralef_steps": LLA_NEURALEF_STEPS} if eigen else {}),
        **({"log_evidence": float(lla.log_evidence)} if lla.log_evidence is not None else {}),
    }


def _neuralef_checkpoints(networks: Optional[NetworkCache], network: tf_keras.Model, seed: int) -> Optional[str]:
    """Where the NeuralEF LLA of ``network`` checkpoints its training (resumable; None without a saving cache):
    next to the run's networks, keyed by a digest of θ_MAP and the LLA settings, so no other network's training
    is ever resumed."""
    if networks is None:
        return None
    weights = hashlib.sha1(b"".join(np.asarray(w, dtype=np.float64).tobytes() for w in network.get_weights())).hexdigest()
    key = ("lla-neuralef", seed, weights, LLA_EIGENPAIRS, LLA_NEURALEF_STEPS)
    return networks.checkpoint_dir(key[0], key)


def predict_lla_last_layer(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("last_layer", data, budget, networks)


def predict_lla_exact(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("exact", data, budget, networks)


def predict_lla_neuralef(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _lla("neuralef", data, budget, networks)


def predict_lla_neuralef_evidence(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``lla_neuralef`` with the prior precision δ chosen by the Laplace evidence on a continuous scale (every other
    setting the same: k = LLA_EIGENPAIRS, the same NeuralEF training and eq. 22), instead of by the validation NLPD
    over the grid 10^−4 … 10^4: log p(D | δ) ≈ log p(D | θ_MAP) − (δ/2)‖θ_MAP‖² + (P/2) log δ − ½ Σ_j log(e_j + δ),
    the P − k eigenvalues eq. 22 leaves out counted as 0 (MacKay 1992; Immer et al. 2021, eq. 5), maximised over
    δ ∈ [10^−8, 10^8]."""
    return _lla("neuralef", data, budget, networks, prior_by_evidence=True)


def predict_relu_lla_kron(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """The KFAC linearised Laplace approximation (``LinearisedLaplace(method="kron")``, the prior precision and the
    noise's start as for the other LLA rows) of the ``relu`` network: KFAC needs Dense layers, which the twin's
    activated layers are not."""
    return _lla("kron", data, budget, networks, kind="relu")
