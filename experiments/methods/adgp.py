"""The ADGP methods: the split's network converted by :func:`activated_dgp.train_two_stage` and trained through a
stage-2 recipe; and an ensemble of them.

* ``adgp`` — from the NN's network, with the library's ``validation`` recipe (chosen from the stage-2 diagnosis,
  docs/results/stage2.md); prediction by ``mc_samples`` samples propagated through the layers.
* ``adgp_paper``, ``adgp_elbo``, ``adgp_floor`` — the other stage-2 recipes of the recipe screen (run only when
  named; :data:`STAGE2_RECIPES`): the paper's v = 1 without early stopping, v chosen on the ELBO, and the validation
  choice with a floor :data:`RECIPE_FLOOR` on v. Each is ``adgp``'s path with other stage-2 options, and its record
  also scores the same fit with the far-field residual switched off (``extra.far_field_off``).
* ``plain_adgp`` — the plain network converted approximately (``dgp_from_keras``: zonal Softplus log(1 + e^(3t)) in
  place of softplus, V refitted by ridge regression) and trained like ``adgp``.
* ``relu_adgp`` — the network most users have (``relu``: a 2-hidden-layer ReLU MLP with biases) made convertible
  (:func:`activated_dgp.make_convertible`: zonal Swish units refitted to it and fine-tuned on the fit part), then
  trained like ``adgp``; ``relu_bare`` — the same ReLU network handed to ``train_two_stage`` as it is
  (``make_convertible=False``); ``relu_adgp_kl`` — ``relu_adgp`` with the fine-tuning penalised by the KL its
  converted means will carry (``make_convertible(kl_weight=1)``: the loss plus 2σ̂² KL_means / N, the ELBO's
  mean terms per data point).
* ``adgp_slab`` — ``adgp`` with the twin stopped, and v and the noise chosen, on a covariate-shifted slab of the
  training split instead of its random validation part (the library's ``slab`` recipe).
* ``adgp_mixed`` — ``adgp`` with the twin stopped, and v and the noise chosen, on a validation part that is half a
  covariate-shifted slab and half random rows (the library's ``mixed`` recipe).
* ``adgp_ensemble`` — :data:`experiments.methods.nn.ENSEMBLE_SIZE` ADGPs, one from each ensemble member's network.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from activated_dgp import make_convertible, train_two_stage
from activated_dgp.deep.far_field import far_field_switched_off, has_far_field
from activated_dgp.metrics import regression_metrics
from activated_dgp.training import STAGE2_RECIPES as LIBRARY_RECIPES
from experiments.methods.dgp import dgp_mixture, elbo_fit_summary
from experiments.methods.networks import NetworkCache, fine_tuning_steps, fit_network, network_mean, training_mse
from experiments.methods.nn import ENSEMBLE_SIZE
from experiments.methods.protocol import Budget, Prediction, SplitData, fit_parts, protocol_schedule, shifted_validation
from experiments.methods.scoring import mixture_mean_std

#: The floor of ``adgp_floor``: the library's ``floor`` recipe (why 1e-2: ``activated_dgp.training.recipes.FLOOR``).
RECIPE_FLOOR = LIBRARY_RECIPES["floor"].kernel_variance_floor


#: The ADGP methods' stage-2 recipes (converged budgets): method → the library's recipe name
#: (:data:`activated_dgp.training.STAGE2_RECIPES`). ``adgp`` is the validation-chosen candidate; the others run
#: only when named. ``adgp_paper`` — the paper's recipe (Dutordoir et al. 2021, Sec. 5.2 and appendix E.1: "first
#: train the mean of the approximate posterior w.r.t. the MSE, and then optimise all parameters w.r.t. the ELBO", Adam
#: 0.01 ×0.9 on plateaus, minibatch 128; no validation part, stopping rule or step count is stated): v = 1 at
#: conversion, noise = the network's validation MSE, stage 2 for the budget's full ``dgp_steps`` with no early
#: stopping. It differs from the paper in: the step count (the budget's cap, the paper gives none); stage 2 trains on
#: the 90 % fit part (the shared early-stopped network was trained there, the validation part only sets the starting
#: noise); the library's stage-2 defaults (a 100-step learning-rate ramp, the divergence guard that restores the best
#: training −ELBO check, the far-field residual, also scored without); and the twin (zonal Swish, not Softplus).
#: ``adgp_elbo`` — v and the noise chosen jointly on the ELBO of the fit part, early stopping as ``adgp``.
#: ``adgp_floor`` — ``adgp`` with v ≥ :data:`RECIPE_FLOOR` (``kernel_variance_floor``).
STAGE2_RECIPES = {"adgp": "validation", "adgp_paper": "paper", "adgp_elbo": "elbo", "adgp_floor": "floor"}


def recipe_options(method: str) -> Dict:
    """What ``method``'s recipe sets, as the records keep it (``extra.options``; the fit itself is handed the recipe):
    the UCI methods always have a validation part, so the paper's noise starts from the network's validation MSE."""
    recipe = LIBRARY_RECIPES[STAGE2_RECIPES[method]]
    options = {"kernel_variance": recipe.kernel_variance, "noise_variance": recipe.noise_variance or "validation"}
    if recipe.kernel_variance_floor is not None:
        options["kernel_variance_floor"] = recipe.kernel_variance_floor
    return options


#: ADGP's predictive σ on training rows is measured on at most this many of them (a seeded subset)
TRAIN_STD_ROWS = 1000


def _adgp(kind: str, data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None, recipe: str = "adgp",
          seed: Optional[int] = None, off_mixture: Optional[list] = None, swap: bool = False, kl_weight: float = 0.0) -> Prediction:
    """Convert the split's ``kind`` network of ``seed`` (default the split's) and train it through ``recipe``'s stage
    2; the test mixture, and in the extras the same fit scored with the far-field residual switched off (whose
    mixture is appended to ``off_mixture`` when a list is given)."""
    if recipe != "adgp" and not budget.converged:
        raise ValueError(f"the stage-2 recipe {recipe!r} needs a converged budget (its validation part); got {budget.name!r}")
    seed = data.seed if seed is None else seed
    network, history = fit_network(kind, data, budget, seed, networks)
    (X, y), validation = fit_parts(data, budget)
    chosen = LIBRARY_RECIPES[STAGE2_RECIPES[recipe]] if validation is not None else LIBRARY_RECIPES["paper"]
    options = recipe_options(recipe) if validation is not None else {}
    schedule = budget.schedule(budget.dgp_steps, len(X)) if chosen.early_stopping else protocol_schedule(budget.dgp_steps, len(X), early_stopping=False)
    extra = {}
    converted = network
    if swap:  # make_convertible: zonal Swish units refitted to the network, fine-tuned on the fit part
        made = make_convertible(network, X, y, steps=fine_tuning_steps(budget), seed=seed, kl_weight=kl_weight)
        converted = made.network
        extra["swapped"] = {"rmse": regression_metrics(data.y_test, network_mean(converted, data.X_test), training_mse(converted, X, y),
                                                       data.y_scale)["rmse"],
                            "original_loss": made.original_loss, "refit_loss": made.swapped_loss, "final_loss": made.final_loss,
                            "layer_mismatch": made.layer_mismatch, "kl_weight": kl_weight,
                            "mean_kl_per_point": sum(made.mean_kl) / len(X)}
    result = train_two_stage(  # the swap is the method's own choice (``swap``), never train_two_stage's
        X, y, likelihood="gaussian", network=converted, validation_data=validation, recipe=chosen,
        dgp_schedule=schedule, seed=seed, make_convertible=False,
    )
    init_noise = training_mse(network, X, y)
    init = regression_metrics(data.y_test, network_mean(network, data.X_test), init_noise, data.y_scale)
    means, variances = dgp_mixture(result.dgp, data.X_test, budget.mc_samples, seed)
    if has_far_field(result.dgp):
        with far_field_switched_off(result.dgp):  # the same samples through the hidden layers: the far-field residual's paired cell
            off = dgp_mixture(result.dgp, data.X_test, budget.mc_samples, seed)
        extra["far_field_off"] = regression_metrics(data.y_test, *off, data.y_scale)
        if off_mixture is not None:
            off_mixture.append(off)
    extra.update({
        "init_rmse": init["rmse"],
        "init_nlpd": init["nlpd"],
        "conversion_mismatch": result.conversion_mismatch,
        "conversion_kl_per_point": None if result.conversion_kl is None else sum(result.conversion_kl) / len(X),
        "kernel_variances": result.kernel_variances,
        "initial_noise_variance": result.initial_noise_variance,
        "noise_variance": float(result.dgp.likelihood_layer.likelihood.variance.numpy()),
        "final_loss": float(result.dgp_history["loss"][-1]) if result.dgp_history.get("loss") else None,
        "network": history,
        "dgp": elbo_fit_summary(result.dgp_history),
        "options": {k: str(v) for k, v in options.items()},
    })
    if recipe != "adgp":
        extra["stage2_early_stopping"] = schedule.patience is not None
    # the predictive σ on training rows, against the test σ of the record (the shift diagnosis): after every other
    # prediction, so that it changes none of them
    rows = np.sort(np.random.default_rng(seed).permutation(len(data.X_train))[:TRAIN_STD_ROWS])
    extra["train_std"] = float(mixture_mean_std(*dgp_mixture(result.dgp, data.X_train[rows], budget.mc_samples, seed))[1].mean())
    return means, variances, extra


def predict_adgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks)


def predict_adgp_slab(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``adgp`` with the validation part a covariate-shifted slab of the training split (``SplitData.validation_kind``):
    the twin stops early on it, and the library's validation recipe chooses v and the noise on it (the ``slab``
    recipe of :data:`activated_dgp.training.STAGE2_RECIPES`)."""
    return _adgp("twin", shifted_validation(data, budget, "slab", "adgp_slab"), budget, networks)


def predict_adgp_mixed(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    """``adgp`` with the validation part half a covariate-shifted slab and half random rows of the training split
    (``SplitData.validation_kind="mixed"``; the ``mixed`` recipe of :data:`activated_dgp.training.STAGE2_RECIPES`)."""
    return _adgp("twin", shifted_validation(data, budget, "mixed", "adgp_mixed"), budget, networks)


def predict_plain_adgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("plain", data, budget, networks)


def predict_relu_adgp(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("relu", data, budget, networks, swap=True)


def predict_relu_adgp_kl(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("relu", data, budget, networks, swap=True, kl_weight=1.0)


def predict_relu_bare(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("relu", data, budget, networks)


def predict_adgp_paper(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_paper")


def predict_adgp_elbo(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_elbo")


def predict_adgp_floor(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None) -> Prediction:
    return _adgp("twin", data, budget, networks, recipe="adgp_floor")


#: The stage-2 recipe of ``adgp_ensemble`` : ``adgp``'s, the library's ``validation`` recipe, which is
#: what the default ``by_likelihood`` resolves to for a Gaussian likelihood (activated_dgp.training.recipes): each
#: member is trained as ``train_two_stage`` trains a regression ADGP by default. Changing it is a protocol change of
#: ``adgp_ensemble``.
ADGP_ENSEMBLE_RECIPE = "adgp"


def predict_adgp_ensemble(data: SplitData, budget: Budget, networks: Optional[NetworkCache] = None,
                          members: int = ENSEMBLE_SIZE) -> Prediction:
    """An ensemble of ADGPs: each of the ``ensemble`` method's ``members`` (:data:`ENSEMBLE_SIZE`) twins (seeds split seed +
    1000·m, the same cached networks) converted and trained through :data:`ADGP_ENSEMBLE_RECIPE`'s stage 2. The
    prediction is the uniform mixture over members of each member's uniform mixture over its samples,
    p(y|x) = (1/M) Σ_m (1/S) Σ_s N(y; μ_ms(x), σ²_ms(x)): every member has the same S, so the components of all
    members are simply stacked. ``far_field_off`` scores the same stack with every member's residual switched off."""
    means, variances, extras, off = [], [], [], []
    for member in range(members):
        mean, variance, extra = _adgp("twin", data, budget, networks, recipe=ADGP_ENSEMBLE_RECIPE,
                                      seed=data.seed + 1000 * member, off_mixture=off)
        means.append(mean), variances.append(variance), extras.append(extra)
    info = {"members": members, "recipe": ADGP_ENSEMBLE_RECIPE, "member_extras": extras}
    if len(off) == members:
        info["far_field_off"] = regression_metrics(data.y_test, np.concatenate([m for m, _ in off]),
                                                   np.concatenate([v for _, v in off]), data.y_scale)
    return np.concatenate(means), np.concatenate(variances), info
