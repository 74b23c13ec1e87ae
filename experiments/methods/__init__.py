"""Regression methods shared by the studies: network baselines, MC dropout, a classic DGP, the ADGP and the
linearised Laplace approximation, each fitted on one standardised split and returning its predictive distribution.

One configuration for every dataset (:mod:`experiments.methods.protocol`): 3 layers, 128 hidden units (= inducing
variables) per layer, narrow layers as wide as the input, the zonal Swish (Softplus until protocol v5), Adam with
learning rate 0.01 reduced ×0.9 when the training loss plateaus (max(5 epochs, 200 steps)), minibatch 128. Every
method sees standardised inputs and targets (:class:`SplitData`, :func:`prepare_split`) and returns its predictive
distribution on the test inputs as a uniform mixture of Gaussians, means and variances [S, N] (S = 1 for a single
Gaussian), scored by :func:`activated_dgp.metrics.regression_metrics` in :func:`run_method`.

The methods by name (:data:`METHODS`; Dutordoir et al., 2021, Sec. 5.2, Fig. 7, appendix E.1, and the baselines
around it):

* ``nn``, ``plain``, ``nn_ts``, ``ensemble`` — the activated twin, an ordinary network of its shape, temperature
  scaling and a deep ensemble (:mod:`experiments.methods.nn`, networks in :mod:`experiments.methods.networks`);
* ``dropout`` — MC dropout with the rate and precision chosen on the validation part (:mod:`experiments.methods.dropout`);
* ``dgp`` — Salimbeni & Deisenroth's doubly-stochastic DGP with arc-cosine kernels (:mod:`experiments.methods.dgp`);
* ``adgp``, ``plain_adgp``, ``adgp_paper``, ``adgp_elbo``, ``adgp_floor``, ``adgp_ensemble`` — the network converted
  and trained through a stage-2 recipe of :func:`activated_dgp.train_two_stage` (:mod:`experiments.methods.adgp`);
* ``lla_last_layer``, ``lla_exact``, ``lla_neuralef``, ``lla_neuralef_evidence`` — the linearised Laplace approximation
  of the NN's network (:mod:`experiments.methods.lla`).

A record is stamped with the :class:`~experiments.harness.protocol.Protocol` of its budget
(:func:`budget_protocol`, :mod:`experiments.methods.versions`): the budget's settings, and each method's own version
(:data:`METHOD_VERSIONS`), so that a record keeps counting under later versions that did not change its method.
"""

from experiments.methods.adgp import ADGP_ENSEMBLE_RECIPE, RECIPE_FLOOR, STAGE2_RECIPES, recipe_options
from experiments.methods.data import DATASET_ORDER, canonical_datasets, prepare_split
from experiments.methods.dgp import DGP_INITIAL_NOISE, build_classic_dgp, dgp_mixture
from experiments.methods.dropout import build_dropout_twin, mixture_noise_variance
from experiments.methods.lla import twin_parameter_count
from experiments.methods.networks import (TWIN_ACTIVATION, NetworkCache, NetworkMissing, build_plain_network,
                                          build_twin_network, fit_network)
from experiments.methods.nn import ENSEMBLE_SIZE
from experiments.methods.protocol import BUDGETS, Budget, Prediction, SplitData, fit_parts, protocol_schedule
from experiments.methods.registry import LABELS, METHODS, applicable, run_method
from experiments.methods.scoring import mixture_mean_std, shift_diagnostics
from experiments.methods.versions import (ENSEMBLE_METHODS, METHOD_VERSIONS, MIXED_METHODS, RECIPE_METHODS, RELU_METHODS,
                                          SHIFTED_VALIDATION_METHODS, SLAB_METHODS,
                                          budget_protocol, counted_version, current_version, method_version,
                                          protocol_label, record_method_version, record_settings, relabel_record)

__all__ = [
    "ADGP_ENSEMBLE_RECIPE", "BUDGETS", "DATASET_ORDER", "DGP_INITIAL_NOISE", "ENSEMBLE_METHODS",
    "ENSEMBLE_SIZE", "LABELS", "METHODS", "METHOD_VERSIONS", "RECIPE_FLOOR", "RECIPE_METHODS", "RELU_METHODS",
    "MIXED_METHODS", "SHIFTED_VALIDATION_METHODS", "SLAB_METHODS", "STAGE2_RECIPES", "TWIN_ACTIVATION", "Budget", "NetworkCache", "NetworkMissing", "Prediction",
    "SplitData", "applicable", "budget_protocol", "build_classic_dgp", "build_dropout_twin", "build_plain_network",
    "build_twin_network", "canonical_datasets", "counted_version", "current_version", "dgp_mixture", "fit_network",
    "fit_parts", "method_version", "mixture_mean_std", "mixture_noise_variance", "prepare_split", "protocol_label",
    "protocol_schedule", "recipe_options", "record_method_version", "record_settings", "relabel_record", "run_method",
    "shift_diagnostics", "twin_parameter_count",
]
