"""Reading a tf-keras network for conversion: the chain of its layers, its runs of activated Dense units (each with the
zonal activation it maps to), its classifier head and the likelihood that head stands for, and the split of a
network into a feature extractor and a convertible Dense head (Dutordoir et al., 2021, Sec. 5.1; used by
:func:`activated_dgp.deep.conversion.dgp_from_keras` and :func:`activated_dgp.make_convertible`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras

from .likelihoods import likelihood_name
from .twin import ActivatedLayer
from ..zonal.spectra import ACTIVATION_REGISTRY, resolve_activation

__all__ = ["SUPPORTED", "relu_layers", "split_convertible_head", "head_likelihood", "resolve_head_likelihood"]


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
