"""Keras network → activated DGP (Dutordoir et al., 2021, Sec. 5.1). :func:`dgp_from_keras` returns a
:class:`ConversionReport` (formerly ``Conversion``: it reports the conversion — the DGP and its mismatch).

For a twin network [ActivatedLayer(W_ℓ), Dense(V_ℓ, no bias)] × L the map is exact: each GP
layer gets the inducing directions W_ℓ and the variational mean that makes its posterior-mean
weights B_ℓ = Kuu⁻¹ μ_u equal V_ℓ:

    non-whitened:  μ_u = (Kuu + εI) V_ℓ,        whitened (u = L v):  μ_v = Lᵀ V_ℓ,  L Lᵀ = Kuu + εI,

with ε = gpflow's default jitter, the same that GPflow's conditional adds, so that
Kfu (Kuu + εI)⁻¹ μ_u = Φ(x) V_ℓ to round-off.

A plain MLP converts the same way, one GP layer per run of activated Dense units and the linear layers after
it (:func:`dgp_from_keras`): a linear layer's bias c becomes the GP layer's Constant mean function, so its
mean is Φ(x) B + c, and units followed directly by more units get B = I. Dense units map to the closest
zonal activation (ReLU exactly up to the truncation, softplus and swish approximately).

A classifier's output nonlinearity is its likelihood's link, not part of the mean: a network ending in softmax
(or sigmoid) converts to a DGP whose output layer's mean is the network's logits, with the softmax (or logistic
Bernoulli) likelihood, p(y = c | f) = softmax(f)_c (:func:`~activated_dgp.deep.network_reading.head_likelihood`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union
import warnings

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .._deprecation import deprecated_aliases, moved_object
from .config import ArchitectureConfig
from .far_field import add_far_field, far_field_options
from .builders import build_activated_dgp
from .sampling import propagate_means
from .network_reading import _logit_chain, _plans, resolve_head_likelihood
from .network_reading import head_likelihood, relu_layers, split_convertible_head  # noqa: F401  (importable from here, as before)
from .posterior_mean import UnrepresentableMean, mean_kl, set_posterior_mean_weights
from ..zonal.kernels import ZonalMatchedKernel
from ..zonal.spectra import resolve_activation
from ..validation import check_inputs

__all__ = [
    "ConversionReport",
    "LayerMismatch",
    "dgp_from_keras",
]


@dataclass
class LayerMismatch:
    """One GP layer of a conversion, on the data X given to :func:`dgp_from_keras`.

    :param keras_layers: the names of the Keras layers it replaces (Dropout left out).
    :param activation: the zonal activation's registry name.
    :param map: "exact" (an ActivatedLayer twin), "truncation" (ReLU units: exact as Ñ → ∞) or "approximate"
        (softplus, swish, registered callables: see :func:`_keras_activations`).
    :param refitted: whether B (and c, where there is one) were refitted by ridge regression on X.
    :param max_abs, rms: the DGP's mean propagation after this layer against the network's output of the
        same Keras layers (what has accumulated up to here).
    :param local_max_abs, local_rms: this GP layer's mean alone, at the network's own input to it,
        against the network's output of its layers (this layer's own share).
    """

    keras_layers: list
    activation: str
    map: str
    refitted: bool
    max_abs: float
    rms: float
    local_max_abs: float
    local_rms: float


@dataclass
class ConversionReport:
    """The converted DeepGP; ``exact`` says whether the network was an activated twin (then mean propagation
    is its forward pass to round-off); when data were given, the mismatch between the network's forward pass
    and the DGP's mean propagation, overall and per GP layer (``layers``, :class:`LayerMismatch`); and
    ``mean_kl``, per GP layer, the KL that the converted means carry into the ELBO (:func:`mean_kl`)."""

    dgp: gpflux.models.DeepGP
    exact: bool
    max_abs_mismatch: Optional[float] = None
    rms_mismatch: Optional[float] = None
    variance_selection: Optional[object] = None  # a VarianceSelection (deprecated kernel_variance="elbo" only)
    layers: Optional[list] = None
    mean_kl: Optional[list] = None
    head: Optional[str] = None  # the likelihood the network's output nonlinearity became ("softmax", "bernoulli"), or None


def _warn_if_the_means_kl_dwarfs_the_data(kls: list, num_data: int, plans) -> None:
    """The ELBO's data term is O(num_data) nats; a converted mean whose KL exceeds that is traded away by
    stage 2 (it shrinks the means towards the prior), so say so at conversion, naming the layer."""
    total = float(sum(kls))
    if not total > num_data:
        return
    worst = int(np.argmax(kls))
    name = resolve_activation(plans[worst].units.activation).name
    if any(resolve_activation(plan.units.activation).name == "relu" for plan in plans):
        why = ("a ReLU unit's grows with truncation_level and the input dimension without bound, a smooth unit's is "
               "bounded (Dutordoir et al., 2021, Fig. 4): activated_dgp.make_convertible swaps ReLU units for zonal Swish "
               "units refitted to the network, or a lower truncation_level lowers a ReLU layer's at the price of the mismatch")
    else:
        why = ("for these smooth units it is bounded, and it grows with the size of the weights and with the number of "
               "units per data point")
    warnings.warn(
        f"the converted means carry a KL of {total:.3g} nats into the ELBO, {total / num_data:.3g} per data point "
        f"({kls[worst]:.3g} in GP layer {worst}, input dimension {plans[worst].units.W.shape[1]}, {name} units). "
        "Stage 2's ELBO will shrink these means away from the network's. The KL is half the squared RKHS norm of the "
        f"means: {why} (ConversionReport.mean_kl and .layers; docs/activated_dgp.md, 'How exact it is').",
        stacklevel=3,
    )


def _architecture(plans, likelihood, whiten: bool, truncation_level: int) -> ArchitectureConfig:
    """The DGP's :class:`ArchitectureConfig`: per layer a twin's own activation, Ñ and lengthscales, or for
    Dense units the mapped activation, Ñ = ``truncation_level`` and ℓ = 1. A ValueError when the likelihood
    does not fit the output width."""
    output_dim = plans[-1].B.shape[1]
    try:
        return ArchitectureConfig(
            input_dim=plans[0].units.W.shape[1] - 1, num_layers=len(plans), num_units=[p.units.W.shape[0] for p in plans],
            layer_widths=[p.B.shape[1] for p in plans[:-1]], output_dim=output_dim,
            activation=[p.units.activation for p in plans],
            truncation_level=[p.units.truncation_level or truncation_level for p in plans],
            lengthscales=[p.units.lengthscales for p in plans], whiten=whiten, likelihood=likelihood,
        )
    except ValueError as error:
        raise ValueError(f"cannot convert the network ({output_dim} outputs): {error}") from None


def _most_parallel_units(W: np.ndarray) -> str:
    """'i and j (cosine c)' for the pair of rows of W (the units' directions) with the largest |cosine|."""
    unit = W / np.maximum(np.linalg.norm(W, axis=1, keepdims=True), np.finfo(float).tiny)
    cosines = np.abs(unit @ unit.T)
    np.fill_diagonal(cosines, -1.0)
    i, j = np.unravel_index(np.argmax(cosines), cosines.shape)
    return f"{min(i, j)} and {max(i, j)} (|cosine| {cosines[i, j]:.6f})"


def _forward(layers, hidden) -> np.ndarray:
    """The network's own output of a run of its layers, as float64 (a float32 network computes in float32)."""
    for layer in layers:
        hidden = layer(hidden)
    return np.asarray(hidden, dtype=np.float64)


def _mismatch(difference: np.ndarray):
    return float(np.max(np.abs(difference))), float(np.sqrt(np.mean(difference**2)))


def _matched_kernel(kernel):
    """A :class:`ZonalMatchedKernel` for ReLU units with the arc-cosine ``kernel``'s d, Ñ, v and ℓ."""
    return ZonalMatchedKernel(
        kernel.input_dim, kernel.truncation_level, variance=float(kernel.variance.numpy()),
        lengthscales=kernel.lengthscales.numpy(), activation="relu", bias=kernel.bias, threshold=kernel.threshold,
    )


def dgp_from_keras(
    network: tf_keras.Model,
    num_data: int,
    *,
    X=None,
    Y=None,
    likelihood: Union[None, str, gpflow.likelihoods.Likelihood] = None,
    whiten: bool = True,
    kernel_variance: Union[float, str] = 1.0,
    noise_variance: float = 0.01,
    q_sqrt_scale: float = 1e-5,
    truncation_level: int = 20,
    ridge: float = 1e-8,
    far_field=False,
    relu_kernel: str = "arc_cosine",
) -> ConversionReport:
    """An activated DeepGP whose mean propagation is the network's forward pass (Sec. 5.1).

    :param network: a chain of Keras layers (see :data:`~activated_dgp.deep.network_reading.SUPPORTED`). Each run of activated units with the
        linear Dense layers after it becomes one GP layer with mean Φ(x) B + c: the units' directions
        W_m = [kernel column, bias] on x̃ = [x, 1] are the inducing directions, the composed linear layers
        give B and their bias c the layer's ``gpflow.mean_functions.Constant`` mean function (none: Zero).
        Activated units followed directly by more units (or ending the network) get B = I: the layer
        outputs Φ(x). A twin from :func:`build_activated_nn` converts exactly; Dense units map to the
        zonal activation that is closest (:func:`_keras_activations`): ReLU exactly up to the truncation
        at Ñ = ``truncation_level``, softplus and swish approximately. With data ``X`` the B of every
        layer that is not an exact twin ("truncation" or "approximate") is refitted (jointly with c where the network has a bias there) by ridge
        regression onto the network's own outputs of its layers, layer by layer, and the remaining mismatch
        is reported, per layer too. (A network without biases after its units converts as before biases
        were supported: no Constant mean is added.)
        Weights of a float32 network are cast to float64.
    :param X: inputs on which to report the forward-pass mismatch (and refit the layers that are not exact).
    :param likelihood: as in :func:`build_activated_dgp`; the last layer's width must match it. Default None:
        the classifier head's likelihood (:func:`~activated_dgp.deep.network_reading.head_likelihood`), else "gaussian". A classifier head as Keras
        tutorials write it converts: a final Dense(C, "softmax") or Dense(1, "sigmoid"), or a final Softmax /
        Activation("softmax" | "sigmoid") layer. Its nonlinearity is dropped from the mean — the output layer's
        mean is the network's pre-activation logits — and becomes the likelihood: softmax → "softmax" (or
        "robustmax"), sigmoid → "bernoulli" (the logistic link). A likelihood that conflicts with the head is a
        ValueError; the mismatch is reported on the logits (``ConversionReport.head`` names the head).
    :param truncation_level: Ñ for converted Dense layers (a twin keeps its own).
    :param kernel_variance: every layer's v. To choose v per layer (by the ELBO or a validation log density, the
        mean propagation kept) call :func:`activated_dgp.training.select_kernel_variances` on the converted DGP.
        ``"elbo"`` (deprecated, for one release) still does that on (``X``, ``Y``), with the record in
        ``ConversionReport.variance_selection``.
    :param far_field: True or a dict (``order``, ``scale``): give the output layer the far-field residual
        (:func:`activated_dgp.deep.far_field.add_far_field`, constants from ``X``); the mean is unchanged.
    :param relu_kernel: the kernel of GP layers made from Dense ReLU units: ``"arc_cosine"`` (default, the
        paper's :class:`~activated_dgp.zonal.kernels.ZonalArcCosine`, λ_n = 2d σ_n²) or ``"matched"``
        (:class:`~activated_dgp.zonal.kernels.ZonalMatchedKernel`, λ_n ∝ |σ_n| with s(1) = 1: the same prior
        variance k(x, x) = v‖x̃‖², a ReLU unit's squared RKHS norm (Σ_n |σ_n| N_n^d)² instead of
        Σ_(σ_n≠0) N_n^d/(2d), hence a far smaller KL for the converted means; docs/activated_dgp.md, "Converting
        plain ReLU networks"). Layers of other units keep the arc-cosine kernel. A DGP with matched kernels is not
        rebuilt by the builders (persistence and introspection expect ZonalArcCosine) and takes no ``far_field``.
    """
    far_field = far_field_options(far_field)
    if relu_kernel not in ("arc_cosine", "matched"):
        raise ValueError(f"relu_kernel must be 'arc_cosine' or 'matched', got {relu_kernel!r}")
    if relu_kernel == "matched" and far_field is not None:
        raise ValueError("far_field needs the arc-cosine kernel in the output layer; use relu_kernel='arc_cosine' with it")
    if far_field is not None and X is None:
        raise ValueError("far_field needs the data X (the residual's centre, radius and variance come from it)")
    select = isinstance(kernel_variance, str)
    if select:
        if kernel_variance != "elbo":
            raise ValueError(
                f"kernel_variance must be a positive number, got {kernel_variance!r} (to choose v per layer, use "
                "activated_dgp.training.select_kernel_variances on the converted DGP)"
            )
        if X is None or Y is None:
            raise ValueError("kernel_variance='elbo' needs the training data X and Y")
    plans = _plans(network)
    chain, head = _logit_chain(network)
    likelihood = resolve_head_likelihood(head, likelihood)
    exact = all(plan.units.map == "exact" for plan in plans)
    config = _architecture(plans, likelihood, whiten, truncation_level)
    hidden_dgp = None if X is None else tf.convert_to_tensor(check_inputs(X, config.input_dim, "X"))
    dgp = build_activated_dgp(
        config, num_data, kernel_variance=1.0 if select else kernel_variance, noise_variance=noise_variance,
        q_sqrt_scale=q_sqrt_scale,
    )
    hidden_net, records = hidden_dgp, []
    for index, (plan, layer) in enumerate(zip(plans, dgp.f_layers)):
        feature = layer.inducing_variable.inducing_variable
        if relu_kernel == "matched" and plan.units.map == "truncation":  # Dense ReLU units
            layer.kernel.kernel = _matched_kernel(layer.kernel.kernel)
        feature.W.assign(plan.units.W.astype(feature.W.dtype.as_numpy_dtype))
        B, bias, refit = plan.B, plan.bias, plan.units.map != "exact" and hidden_dgp is not None
        if hidden_dgp is not None:
            target = _forward(plan.layers, hidden_net)
        if refit:  # B (and c where the network has a bias) by ridge regression on [Φ(h), 1], h the DGP's input
            features = tf.transpose(gpflow.covariances.Kuf(feature, layer.kernel.kernel, hidden_dgp)).numpy()
            if bias is not None:
                features = np.concatenate([features, np.ones((len(features), 1))], axis=1)
            gram = features.T @ features
            gram += ridge * np.trace(gram) / gram.shape[1] * np.eye(gram.shape[1])
            B = np.linalg.solve(gram, features.T @ target)
            if bias is not None:
                B, bias = B[:-1], B[-1]
        if bias is not None:
            layer.mean_function = gpflow.mean_functions.Constant(np.asarray(bias, dtype=gpflow.default_float()))
        try:
            set_posterior_mean_weights(layer, B)
        except UnrepresentableMean as error:
            raise UnrepresentableMean(
                f"GP layer {index} (Keras layers {[keras_layer.name for keras_layer in plan.layers]}): {error}. Its most "
                f"nearly parallel units are {_most_parallel_units(plan.units.W)}; a lower truncation_level also helps."
            ) from None
        if hidden_dgp is not None:
            local, _ = layer.predict(tf.convert_to_tensor(hidden_net, dtype=gpflow.default_float()), full_cov=False)
            hidden_dgp, _ = layer.predict(hidden_dgp, full_cov=False)
            records.append(LayerMismatch(
                [keras_layer.name for keras_layer in plan.layers], resolve_activation(plan.units.activation).name,
                plan.units.map, refit, *_mismatch(hidden_dgp.numpy() - target), *_mismatch(local.numpy() - target),
            ))
            hidden_net = target
    if far_field is not None:
        add_far_field(dgp, X, **far_field)
    result = ConversionReport(dgp, exact, head=head)
    if select:
        warnings.warn(
            "activated_dgp.dgp_from_keras(kernel_variance='elbo') is deprecated; use "
            "activated_dgp.training.select_kernel_variances(report.dgp, X, Y) on the converted DGP",
            DeprecationWarning, stacklevel=2,
        )
        # the choice of v is stage 2's policy, in activated_dgp.training above this module: found by name for the
        # deprecated spelling's last release, as the deprecated module paths are
        result.variance_selection = moved_object("activated_dgp.training.recipes", "select_kernel_variances")(dgp, X, Y)
    result.mean_kl = [mean_kl(layer) for layer in dgp.f_layers]
    _warn_if_the_means_kl_dwarfs_the_data(result.mean_kl, num_data, plans)
    if X is not None:
        difference = propagate_means(dgp, X)[-1].numpy() - _forward(chain, np.asarray(X, dtype=np.float64))
        result.max_abs_mismatch, result.rms_mismatch = _mismatch(difference)
        result.layers = records
    return result


# old names, deprecated for one release
__getattr__ = deprecated_aliases(
    "activated_dgp.deep.conversion",
    {
        "Conversion": ("activated_dgp.deep.conversion", "ConversionReport"),
        **{name: ("activated_dgp.training.recipes", name)
           for name in ("NOISE_FACTORS", "check_variance_floor", "rescale_kernel_variance", "select_kernel_variances", "VarianceSelection")},
        **{name: ("activated_dgp.deep.posterior_mean", name) for name in ("set_optimal_output_covariance", "posterior_mean_weights")},
    },
)
