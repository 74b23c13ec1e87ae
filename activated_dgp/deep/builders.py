"""Activated deep GPs as gpflux models (Dutordoir et al., 2021, Sec. 4–5, Fig. 1a)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import gpflow
import gpflux
import numpy as np

from .._deprecation import deprecated_aliases
from ..zonal.conditionals import SharedActivationFeature
from ..zonal.inducing_variables import ActivationFeature
from .far_field import FarFieldArcCosine
from ..zonal.kernels import ZonalArcCosine
from .layers import ActivatedGPLayer, DeepGPModel, LikelihoodLayer
from .config import ArchitectureConfig, as_config, initial_directions
from .likelihoods import (  # noqa: F401  (re-exported: the registry's old home)
    LIKELIHOOD_REGISTRY,
    LogisticBernoulli,
    MonteCarloSoftmax,
    ProbitCrossEntropy,
    likelihood_name,
    make_likelihood,
    network_loss,
    output_width,
)
from ..zonal.spectra import DEFAULT_ACTIVATION, ZonalActivation
from ..validation import check_matrix, check_positive_int

__all__ = [
    "build_activated_dgp",
    "activated_gp_layer",
    "make_likelihood",
    "likelihood_name",
    "LIKELIHOOD_REGISTRY",
    "MonteCarloSoftmax",
    "LogisticBernoulli",
    "ProbitCrossEntropy",
    "network_loss",
    "output_width",
]


def activated_gp_layer(
    W: np.ndarray,
    output_dim: int,
    num_data: int,
    *,
    activation: Union[str, ZonalActivation, Callable] = DEFAULT_ACTIVATION,
    truncation_level: int = 20,
    kernel_variance: float = 1.0,
    lengthscales=1.0,
    whiten: bool = True,
    mean_function: Optional[gpflow.mean_functions.MeanFunction] = None,
    q_sqrt_scale: float = 1e-5,
    name: Optional[str] = None,
    far_field: Optional[dict] = None,
) -> gpflux.layers.GPLayer:
    """One activated GP layer: ``GPLayer(SharedIndependent(ZonalArcCosine), SharedActivationFeature(ActivationFeature(W)))``.

    :class:`~activated_dgp.zonal.conditionals.SharedActivationFeature` is GPflow's SharedIndependentInducingVariables with
    the P per-output q_sqrt products of the conditional computed as one matrix product.

    W is [M, D+1]; the layer maps [N, D] → [N, output_dim]. q_μ = 0 and q_sqrt = q_sqrt_scale · I
    (the paper's 1e-5); the mean function is Zero unless given, so that the mean propagation is
    exactly a network forward pass.

    ``far_field``: keywords of :class:`~activated_dgp.deep.far_field.FarFieldArcCosine` (``far_variance``,
    ``far_radius``, ``far_centre``, ``far_order``) to give this (output) layer the far-field residual, whose
    variance grows away from the data while the mean is unchanged.
    """
    W = check_matrix(W, "W", nonzero_rows=True).astype(np.float64)
    if W.shape[1] < 2:
        raise ValueError(f"W must be [M, D + 1] with D ≥ 1 (the inputs plus the bias coordinate), got shape {W.shape}")
    output_dim, num_data = check_positive_int(output_dim, "output_dim"), check_positive_int(num_data, "num_data")
    input_dim = W.shape[1] - 1
    zonal = ZonalArcCosine if far_field is None else FarFieldArcCosine
    kernel = gpflow.kernels.SharedIndependent(
        zonal(input_dim, truncation_level, variance=kernel_variance, lengthscales=lengthscales, **(far_field or {})),
        output_dim=output_dim,
    )
    inducing = SharedActivationFeature(ActivationFeature(W, activation, truncation_level))
    layer = ActivatedGPLayer(
        kernel,
        inducing,
        num_data=num_data,
        num_latent_gps=output_dim,
        mean_function=mean_function if mean_function is not None else gpflow.mean_functions.Zero(),
        whiten=whiten,
        name=name,
    )
    num_inducing = W.shape[0]
    layer.q_sqrt.assign(q_sqrt_scale * np.stack([np.eye(num_inducing)] * output_dim))
    return layer


def build_activated_dgp(
    input_dim: Union[int, ArchitectureConfig],
    num_data: int,
    *,
    num_layers: Optional[int] = None,
    num_units: Union[None, int, Sequence[int]] = None,
    layer_widths: Optional[Sequence[int]] = None,
    output_dim: Optional[int] = None,
    likelihood: Union[None, str, gpflow.likelihoods.Likelihood] = None,
    activation: Union[None, str, ZonalActivation, Callable] = None,
    truncation_level: Optional[int] = None,
    lengthscales: Optional[Sequence] = None,
    whiten: Optional[bool] = None,
    kernel_variance: float = 1.0,
    noise_variance: float = 0.01,
    q_sqrt_scale: float = 1e-5,
    seed: Optional[int] = None,
) -> gpflux.models.DeepGP:
    """A gpflux DeepGP of ``num_layers`` activated GP layers (the DGP of Fig. 1a).

    :param input_dim: D, or an :class:`~activated_dgp.deep.config.ArchitectureConfig` describing the whole
        architecture (then give no other architecture keyword: ``num_layers`` … ``whiten``).
    The architecture keywords are those of :class:`~activated_dgp.deep.config.ArchitectureConfig`, with its
    defaults (3 layers of 128 zonal Swish units, :data:`~activated_dgp.zonal.spectra.DEFAULT_ACTIVATION`; Ñ = 20, ℓ = 1,
    whitened, Gaussian):

    :param num_units: inducing variables (= hidden units) per layer, M_ℓ.
    :param layer_widths: output heads of layers 1..L−1 (the bottlenecks), default ``input_dim``.
    :param output_dim: heads of the last layer for "gaussian", the number of classes for
        "softmax"/"robustmax"; "bernoulli"/"probit" use one.
    :param likelihood: a registered name (:data:`LIKELIHOOD_REGISTRY`) or a gpflow likelihood.
    :param lengthscales: ℓ_ℓ per layer, each a scalar or D_ℓ + 1 values.
    :param kernel_variance: the kernel variance v of every layer at the start (not architecture).
    :param noise_variance: the Gaussian likelihood's initial noise variance.
    :param q_sqrt_scale: q_sqrt starts at this multiple of I.
    Inducing directions are drawn like :func:`activated_dgp.deep.twin.initial_directions`; use
    :func:`activated_dgp.dgp_from_keras` to start from a trained network instead.
    """
    if not isinstance(input_dim, ArchitectureConfig) and isinstance(likelihood, str):
        # the Bernoulli names: one latent GP whatever output_dim was asked (the keyword API's behaviour)
        output_dim = make_likelihood(likelihood, 1 if output_dim is None else output_dim)[1]
    config = as_config(
        input_dim, num_layers=num_layers, num_units=num_units, layer_widths=layer_widths, output_dim=output_dim,
        likelihood=likelihood, activation=activation, truncation_level=truncation_level, lengthscales=lengthscales,
        whiten=whiten,
    )
    if config.likelihood is None:
        raise ValueError("a DGP needs a likelihood; the config has likelihood=None")
    if isinstance(num_data, bool) or int(num_data) != num_data or num_data < 1:
        raise ValueError(f"num_data (N, which scales the ELBO's data term) must be a positive integer, got {num_data!r}")
    likelihood, _ = make_likelihood(config.likelihood, config.output_dim, noise_variance)
    rng = np.random.default_rng(seed)
    layers = [
        activated_gp_layer(
            initial_directions(spec["num_units"], spec["input_dim"], rng),
            spec["output_dim"],
            num_data,
            activation=spec["activation"],
            truncation_level=spec["truncation_level"],
            kernel_variance=kernel_variance,
            lengthscales=spec["lengthscales"],
            whiten=config.whiten,
            q_sqrt_scale=q_sqrt_scale,
            name=f"activated_gp_{index}",
        )
        for index, spec in enumerate(config.layers())
    ]
    return gpflux.models.DeepGP(layers, likelihood_layer(likelihood), num_data=num_data, default_model_class=DeepGPModel)


def likelihood_layer(likelihood: gpflow.likelihoods.Likelihood) -> gpflux.layers.LikelihoodLayer:
    """gpflux's LikelihoodLayer (as :class:`~activated_dgp.deep.layers.LikelihoodLayer`, whose ``.weights.h5`` state
    holds the likelihood's parameters), without the deprecation warning gpflux 0.4.5 raises from inside it for its
    own base class (TrackableLayer): nothing a user of this library can act on."""
    return LikelihoodLayer(likelihood)


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.deep.builders", {"LIKELIHOODS": ("activated_dgp.deep.likelihoods", "LIKELIHOOD_REGISTRY")})
