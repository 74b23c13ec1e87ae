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
Bernoulli) likelihood, p(y = c | f) = softmax(f)_c (:func:`head_likelihood`).
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
from .twin import ActivatedLayer
from .likelihoods import likelihood_name
from .sampling import propagate_means
from .posterior_mean import UnrepresentableMean, mean_kl, set_posterior_mean_weights
from ..zonal.kernels import ZonalMatchedKernel
from ..zonal.spectra import ACTIVATION_REGISTRY, resolve_activation
from ..validation import check_inputs

__all__ = [
    "ConversionReport",
    "LayerMismatch",
    "dgp_from_keras",
    "split_convertible_head",
    "head_likelihood",
    "resolve_head_likelihood",
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



# ------------------------------------------------------------------------------------------------ reading a network

SUPPORTED = (
    "dgp_from_keras converts a chain (Sequential or functional, one input, one output) of Dense layers, with or "
    "without bias, whose activations are relu, softplus, swish or a registered activation (on the Dense or as a "
    "following Activation/ReLU layer), ActivatedLayer twins, and Dropout (skipped); the output may end in a "
    "classifier head (a final Dense with softmax or sigmoid, or a Softmax / Activation layer), which becomes the likelihood"
)
#: Inference-time identities, skipped at conversion.
_SKIPPED = (
    tf_keras.layers.InputLayer, tf_keras.layers.Dropout, tf_keras.layers.GaussianDropout, tf_keras.layers.GaussianNoise,
    tf_keras.layers.AlphaDropout,
)


def _keras_activations():
    """(Keras/TF function, registry name, gain, map) for the activations a Dense unit can carry.

    A Dense unit σ(w·x̃), x̃ = [x, 1], becomes the zonal feature gain · ‖w‖‖x̃‖ σ_z(ŵ·x̂) (eq. 10). ReLU is
    positively homogeneous, so with σ_z = relu this is relu(w·x̃) itself, up to the truncation at Ñ levels
    ("truncation"). The registry's Softplus is log(1 + e^(3t)) and its Swish 3t·sigmoid(3t); with gain 1/3
    they give r/3 · softplus(3z/r) and z · sigmoid(3z/r), z = w·x̃, r = ‖w‖‖x̃‖: Keras' softplus(z) and
    swish(z) exactly where r = 3, the same asymptotes as z → ±∞, otherwise an approximation ("approximate")."""
    a, third = tf_keras.activations, 1.0 / 3.0
    return [
        (a.relu, "relu", 1.0, "truncation"), (tf.nn.relu, "relu", 1.0, "truncation"),
        (a.softplus, "softplus", third, "approximate"), (tf.nn.softplus, "softplus", third, "approximate"),
        (a.swish, "swish", third, "approximate"), (tf.nn.silu, "swish", third, "approximate"),
    ]


def _activation_map(function, fail):
    """(registry name or ZonalActivation, gain, map) of a Keras activation function, None for the linear one; a
    registered callable (:func:`activated_dgp.zonal.register_activation`) maps to itself with gain 1 ("approximate":
    the zonal feature ‖w‖‖x̃‖σ(ŵ·x̂) equals σ(w·x̃) only for a positively homogeneous σ)."""
    if function is tf_keras.activations.linear:
        return None
    for keras_function, name, gain, kind in _keras_activations():
        if function is keras_function:
            return name, gain, kind
    activation = resolve_activation(function) if callable(function) else None
    if activation is not None and ACTIVATION_REGISTRY.get(activation.name) is activation:
        return activation.name, 1.0, "approximate"
    fail(f"its activation {getattr(function, '__name__', function)!r} is not relu, softplus, swish or a registered activation")


@dataclass
class _Block:
    """A run of Keras layers: activated units (W [M, D+1] on x̃ = [x, 1]) or a linear map x K + b."""

    kind: str
    layers: list
    W: Optional[np.ndarray] = None
    activation: object = None
    gain: float = 1.0
    map: str = "exact"
    truncation_level: Optional[int] = None
    lengthscales: object = 1.0
    kernel: Optional[np.ndarray] = None
    bias: Optional[np.ndarray] = None


def _fail(index, layer, why):
    raise ValueError(f"cannot convert layer {index} {layer.name!r} ({type(layer).__name__}): {why}. {SUPPORTED}")


def _chain_layers(network) -> list:
    """The network's layers in order (nested models flattened), after checking that they form a chain."""
    if not isinstance(network, tf_keras.Model):
        raise ValueError(f"expected a tf_keras Model (Sequential or functional), got {type(network).__name__}")
    if not getattr(network, "_is_graph_network", False) and not isinstance(network, tf_keras.Sequential):
        raise ValueError(f"cannot convert the subclassed model {network.name!r}: {SUPPORTED}")
    if not network.built or not network.inputs:
        raise ValueError(f"the network {network.name!r} is not built: give it an Input or call it once")
    if len(network.inputs) != 1 or len(network.outputs) != 1:
        raise ValueError(
            f"cannot convert {network.name!r}: it has {len(network.inputs)} inputs and {len(network.outputs)} outputs. {SUPPORTED}"
        )
    layers, previous = [], None
    for layer in network.layers:
        if not isinstance(network, tf_keras.Sequential):  # functional: each layer must take the previous one's output
            nodes = [n for k, n in enumerate(layer._inbound_nodes) if f"{layer.name}_ib-{k}" in network._network_nodes]
            parents = [tf.nest.flatten(n.inbound_layers) for n in nodes]
            if not isinstance(layer, tf_keras.layers.InputLayer) and parents != [[previous]]:
                index = sum(not isinstance(seen, tf_keras.layers.InputLayer) for seen in layers)  # as the other messages count
                _fail(index, layer, "the functional graph is not a chain here (this layer is not applied once to the previous layer's output)")
            previous = layer
        if isinstance(layer, tf_keras.Model):
            layers += _chain_layers(layer)
        else:
            layers.append(layer)
    return [layer for layer in layers if not isinstance(layer, tf_keras.layers.InputLayer)]


def _directions(kernel: np.ndarray, bias: Optional[np.ndarray], fail) -> np.ndarray:
    """W [M, D+1] = [kernel column, bias] of M Dense units: w_m · [x, 1] is the unit's pre-activation."""
    W = np.concatenate([kernel.T, np.zeros((kernel.shape[1], 1)) if bias is None else bias[:, None]], axis=1)
    if np.any(~(np.linalg.norm(W, axis=1) > 0)):
        fail("a unit has all-zero (or non-finite) weights and bias, which gives no inducing direction")
    return W


def _blocks(layers) -> list:
    """Activated and linear blocks of the chain (an Activation layer turns the linear Dense before it into units)."""
    blocks = []
    for index, layer in enumerate(layers):
        fail = lambda why, index=index, layer=layer: _fail(index, layer, why)  # noqa: E731
        if isinstance(layer, _SKIPPED):
            continue
        if isinstance(layer, ActivatedLayer):
            blocks.append(_Block(
                "activated", [layer], W=layer.feature.W.numpy().astype(np.float64), activation=layer.activation,
                truncation_level=layer.truncation_level, lengthscales=layer.kernel.lengthscales.numpy(),
            ))
        elif type(layer) is tf_keras.layers.Dense:
            kernel = layer.kernel.numpy().astype(np.float64)
            bias = layer.bias.numpy().astype(np.float64) if layer.use_bias else None
            mapped = _activation_map(layer.activation, fail)
            if mapped is None:
                blocks.append(_Block("linear", [layer], kernel=kernel, bias=bias))
            else:
                name, gain, kind = mapped
                blocks.append(_Block("activated", [layer], W=_directions(kernel, bias, fail), activation=name, gain=gain, map=kind))
        elif type(layer) in (tf_keras.layers.Activation, tf_keras.layers.ReLU):
            if type(layer) is tf_keras.layers.ReLU:
                config = layer.get_config()
                if config["max_value"] is not None or config["negative_slope"] or config["threshold"]:
                    fail("only the plain ReLU (no max_value, negative_slope or threshold) is supported")
                mapped = _activation_map(tf_keras.activations.relu, fail)
            else:
                mapped = _activation_map(layer.activation, fail)
            if mapped is None:
                continue
            if not blocks or blocks[-1].kind != "linear" or len(blocks[-1].layers) != 1:
                fail("an activation layer must directly follow a linear Dense layer")
            dense = blocks.pop()
            name, gain, kind = mapped
            blocks.append(_Block(
                "activated", dense.layers + [layer], W=_directions(dense.kernel, dense.bias, fail), activation=name,
                gain=gain, map=kind,
            ))
        else:
            fail(f"{type(layer).__name__} layers are not supported")
    return blocks


#: Output nonlinearities of classifier heads, as the likelihood whose link they are: a final Dense(C, "softmax")
#: or Dense(1, "sigmoid"), or a final Softmax / Activation layer, converts to the logits (its pre-activation)
#: with this likelihood.
_HEAD_ACTIVATIONS = (
    (tf_keras.activations.softmax, "softmax"), (tf.nn.softmax, "softmax"),
    (tf_keras.activations.sigmoid, "bernoulli"), (tf.nn.sigmoid, "bernoulli"),
)
#: The registered likelihoods each head's network can be converted with (the twin of "robustmax" is trained on
#: softmax cross-entropy too, :data:`~activated_dgp.deep.likelihoods.LIKELIHOOD_REGISTRY`).
_HEAD_LIKELIHOODS = {"softmax": ("softmax", "robustmax"), "bernoulli": ("bernoulli",)}


def _head_of(layer) -> Optional[str]:
    """The likelihood whose link the layer's output nonlinearity is ("softmax", "bernoulli"), or None."""
    if type(layer) is tf_keras.layers.Softmax:
        return "softmax" if layer.get_config()["axis"] in (-1, 1) else None
    if type(layer) in (tf_keras.layers.Dense, tf_keras.layers.Activation):
        return next((name for function, name in _HEAD_ACTIVATIONS if layer.activation is function), None)
    return None


def _logit_chain(network):
    """(layers, head): the network's chain with a classifier head's output nonlinearity removed, so that the chain
    computes the logits, and the likelihood it becomes (None for a network without one). A final Dense with softmax
    or sigmoid is replaced by a linear copy with the same weights; a final Softmax / Activation layer is left out.
    Softmax needs C ≥ 2 outputs, sigmoid one (a multi-label sigmoid head has no registered likelihood)."""
    layers = _chain_layers(network)
    last = max((i for i, layer in enumerate(layers) if not isinstance(layer, _SKIPPED)), default=None)
    if last is None:
        return layers, None
    layer = layers[last]
    head = _head_of(layer)
    if head is None:
        return layers, None
    width = layer.output_shape[-1]
    if (head == "softmax" and not width >= 2) or (head == "bernoulli" and width != 1):
        _fail(last, layer, f"a {'softmax' if head == 'softmax' else 'sigmoid'} output over {width} units has no "
              "registered likelihood (softmax needs C ≥ 2 classes, sigmoid one logit)")
    if type(layer) is tf_keras.layers.Dense:
        logits = tf_keras.layers.Dense.from_config({**layer.get_config(), "activation": "linear"})
        logits.build((None, layer.kernel.shape[0]))
        logits.set_weights(layer.get_weights())
        return layers[:last] + [logits] + layers[last + 1:], head
    return layers[:last] + layers[last + 1:], head


def head_likelihood(network: tf_keras.Model) -> Optional[str]:
    """The registered likelihood a classifier network's output nonlinearity stands for: "softmax" for a final
    Dense(C, "softmax"), Softmax or Activation("softmax") layer, "bernoulli" (logistic link) for a final
    Dense(1, "sigmoid") or Activation("sigmoid"); None for any other network (its output is the mean itself)."""
    return _logit_chain(network)[1]


def resolve_head_likelihood(head: Optional[str], likelihood):
    """The likelihood of the converted DGP: the head's when none was given, the given one when it fits the head;
    a ValueError naming both when they conflict (a softmax head with a Gaussian likelihood, say)."""
    if likelihood is None:
        return head or "gaussian"
    if head is None:
        return likelihood
    try:
        name = likelihood_name(likelihood)
    except ValueError:
        name = type(likelihood).__name__
    if name not in _HEAD_LIKELIHOODS[head]:
        output = "softmax" if head == "softmax" else "sigmoid"
        raise ValueError(
            f"the network ends in a {output} output, whose likelihood is {' or '.join(map(repr, _HEAD_LIKELIHOODS[head]))}, "
            f"but likelihood={name!r} was given: pass likelihood={head!r} (or None, which follows the head), or give "
            f"the network a linear output (logits) and pass the likelihood"
        )
    return likelihood


@dataclass
class _Plan:
    """One GP layer: units (W, activation, gain) and its posterior-mean weights B [M, P] and bias c [P] (or None)."""

    units: _Block
    B: np.ndarray
    bias: Optional[np.ndarray]
    layers: list
    linear: bool = False  # B comes from linear layers (else gain · I)


def _plans(network) -> list:
    """The GP layers of a network: each activated block with the linear blocks after it (composed:
    x K₁ + b₁ then K₂ + b₂ is x K₁K₂ + b₁K₂ + b₂) as B = gain · K and c; with no linear block after it
    (another activated block, or the output) B = gain · I, so the layer outputs the units themselves."""
    layers, _ = _logit_chain(network)
    blocks = _blocks(layers)
    if len(network.input_shape) != 2:
        raise ValueError(f"cannot convert {network.name!r}: its input shape {network.input_shape} is not [N, D]. {SUPPORTED}")
    if not blocks:
        raise ValueError(f"the network {network.name!r} has no layers to convert. {SUPPORTED}")
    plans = []
    for block in blocks:
        if block.kind == "activated":
            M = block.W.shape[0]
            plans.append(_Plan(block, block.gain * np.eye(M), None, list(block.layers)))
        elif not plans:
            layer = block.layers[0]
            _fail(layers.index(layer), layer, "a linear layer before the first activation has no GP layer to join (a GP "
                  "layer's inducing directions act on [x, 1] of the network's input)")
        else:
            plan = plans[-1]
            if not plan.linear:  # the first linear block after the units
                plan.B, plan.bias, plan.linear = plan.units.gain * block.kernel, block.bias, True
            else:
                plan.B = plan.B @ block.kernel
                plan.bias = None if plan.bias is None and block.bias is None else (
                    (0.0 if plan.bias is None else plan.bias @ block.kernel) + (0.0 if block.bias is None else block.bias)
                )
            plan.layers += block.layers
    return plans


def relu_layers(network: tf_keras.Model) -> list:
    """The names of the layers of ``network``'s convertible tail (:func:`split_convertible_head`) whose units are
    ReLUs: the units whose converted means have no bounded RKHS norm (their KL grows without bound with the
    truncation level; :mod:`activated_dgp.training.convertible`)."""
    _, head = split_convertible_head(network)
    return [plan.units.layers[0].name for plan in _plans(head) if resolve_activation(plan.units.activation).name == "relu"]


def split_convertible_head(network: tf_keras.Model):
    """(g, head): the network as a feature extractor g followed by the longest tail of its chain that
    :func:`dgp_from_keras` converts, head(g(x)) = network(x) with the same layer objects. g is None when the whole
    network converts (head is then the network itself). g takes everything in front of the tail: Conv2D and
    pooling layers, a Flatten, a tanh layer, whatever does not convert. A network with no convertible tail gets the
    conversion's own error for the whole network."""
    try:
        _plans(network)
        return None, network
    except ValueError as error:
        whole_error = error
    layers = _chain_layers(network)
    for start in range(1, len(layers)):
        if not isinstance(layers[start], (tf_keras.layers.Dense, ActivatedLayer)):
            continue
        extractor = tf_keras.Sequential([tf_keras.Input(network.input_shape[1:])] + layers[:start], name=f"{network.name}_extractor")
        head = tf_keras.Sequential([tf_keras.Input(extractor.output_shape[1:])] + layers[start:], name=f"{network.name}_head")
        try:
            _plans(head)
        except ValueError:
            continue
        return extractor, head
    raise whole_error


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

    :param network: a chain of Keras layers (see :data:`SUPPORTED`). Each run of activated units with the
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
        the classifier head's likelihood (:func:`head_likelihood`), else "gaussian". A classifier head as Keras
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
