"""``Laplace(model, likelihood, subset_of_weights, hessian_structure)``: the linearised Laplace approximation
under the names of laplace-torch (Daxberger et al. 2021, "Laplace Redux — effortless Bayesian deep learning"),
returning the matching :class:`~activated_dgp.eigen.LinearisedLaplace` (always the GLM/linearised predictive,
laplace-torch's ``pred_type="glm"``).

=====================  ==========  ==============================  ==============================  ==============================
subset_of_weights      "full"      "diag"                          "kron"                          "lowrank"
=====================  ==========  ==============================  ==============================  ==============================
"all"                  exact       diagonal                        kron                            lowrank (rank ``num_eigenpairs``)
"last_layer"           last_layer  diagonal on the last layer      kron on the last layer          lowrank on the last layer
"subnetwork"           exact on    diagonal on                     kron on                         lowrank on
                       the given   ``subnetwork_variables``        ``subnetwork_variables``        ``subnetwork_variables``
                       variables
=====================  ==========  ==============================  ==============================  ==============================

The subnetwork is given as tf variables (``subnetwork_variables=``, e.g. some layers' ``trainable_variables``),
not as laplace-torch's flat parameter indices. ``likelihood`` is laplace-torch's ``"regression"`` (Gaussian)
or ``"classification"`` (Bernoulli for one output logit, softmax for C ≥ 2), or one of this library's
``"gaussian"``, ``"bernoulli"``, ``"softmax"``; ``sigma_noise`` σ is the Gaussian noise's standard deviation
(``noise_variance = σ²``). Other keyword arguments go to :class:`LinearisedLaplace` (``prior_precision``,
``predictive``, ``batch_size``, ``verbose``, …). As in laplace-torch, ``la.fit(X, Y)`` then
``la.optimize_prior_precision(method="marglik")``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import tf_keras

from .laplace import LinearisedLaplace
from .laplace.subnetwork import _last_dense_variables

__all__ = ["Laplace", "SUBSETS", "HESSIAN_STRUCTURES"]

SUBSETS = ("all", "last_layer", "subnetwork")
HESSIAN_STRUCTURES = ("full", "diag", "kron", "lowrank")
_METHOD = {"full": "exact", "diag": "diagonal", "kron": "kron", "lowrank": "lowrank"}


def _likelihood_name(likelihood: str, model) -> str:
    if likelihood == "regression":
        return "gaussian"
    if likelihood == "classification":
        width = int(model.output_shape[-1])
        return "bernoulli" if width == 1 else "softmax"
    if likelihood in ("gaussian", "bernoulli", "softmax"):
        return likelihood
    raise ValueError(f"unknown likelihood {likelihood!r}; use 'regression', 'classification', 'gaussian', 'bernoulli' or 'softmax'")


def Laplace(
    model,
    likelihood: str,
    subset_of_weights: str = "last_layer",
    hessian_structure: str = "kron",
    sigma_noise: float = 1.0,
    prior_precision=1.0,
    subnetwork_variables: Optional[Sequence] = None,
    **kwargs,
) -> LinearisedLaplace:
    """The :class:`LinearisedLaplace` of laplace-torch's ``Laplace(model, likelihood, subset_of_weights,
    hessian_structure)`` (see the module docstring for the table; defaults ``"last_layer"`` and ``"kron"`` as
    there). Raises ValueError for an unknown name, an unsupported combination, or layers the structure does not
    support (kron: Dense and Conv2D layers of a Sequential chain, see ``kron_fallback``)."""
    if not isinstance(model, tf_keras.Model):
        raise ValueError(f"model must be a tf-keras Model, got {type(model).__name__}")
    if subset_of_weights not in SUBSETS:
        raise ValueError(f"unknown subset_of_weights {subset_of_weights!r}; use one of {SUBSETS}")
    if hessian_structure not in HESSIAN_STRUCTURES:
        raise ValueError(f"unknown hessian_structure {hessian_structure!r}; use one of {HESSIAN_STRUCTURES}")
    if "noise_variance" in kwargs:
        raise ValueError("give the Gaussian noise as sigma_noise (its standard deviation), not noise_variance")
    for reserved in ("method", "variables", "likelihood"):
        if reserved in kwargs:
            raise ValueError(f"{reserved}= is set by subset_of_weights and hessian_structure; leave it out")
    if (subnetwork_variables is not None) != (subset_of_weights == "subnetwork"):
        raise ValueError("subnetwork_variables= (the variables of the subnetwork) is required by, and only used by, subset_of_weights='subnetwork'")
    if isinstance(sigma_noise, bool) or not isinstance(sigma_noise, (int, float)) or not sigma_noise > 0:
        raise ValueError(f"sigma_noise must be a positive number, got {sigma_noise!r}")
    method, variables = _METHOD[hessian_structure], None
    if subset_of_weights == "last_layer":
        if hessian_structure == "full":
            method = "last_layer"
        else:
            variables = _last_dense_variables(model)
    elif subset_of_weights == "subnetwork":
        variables = list(subnetwork_variables)
    return LinearisedLaplace(
        model,
        likelihood=_likelihood_name(likelihood, model),
        noise_variance=float(sigma_noise) ** 2,
        prior_precision=prior_precision,
        method=method,
        variables=variables,
        **kwargs,
    )
