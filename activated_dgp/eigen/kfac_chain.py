"""The layers of a chain network that the Kronecker-factored GGN (:mod:`.kfac`) covers, with each layer's inputs
and back-propagated output signals on a batch.

A network is a chain when it is a tf-keras ``Sequential`` (nested ``Sequential`` models are unrolled into their
layers). Its layers with parameters in the posterior are

* ``Dense`` (kernel and optional bias): z = h V + b on inputs h [B, in];
* ``Conv2D`` (channels last, one group): z_t = ⟦h⟧_t K̃ at each output position t, with ⟦h⟧_t the unfolded input
  patch [k_h k_w C_in] around t (``tf.image.extract_patches``: kernel rows, then columns, then channels, the order
  of the layer's kernel [k_h, k_w, C_in, C_out] flattened to [k_h k_w C_in, C_out]) — Grosse & Martens 2016, "A
  Kronecker-factored approximate Fisher matrix for convolution layers", §2.2;
* the library's ``ActivatedLayer`` (only with ``fallback="diagonal"``, see :mod:`.kfac`).

Every other layer (reshapes, pooling, activations, dropout at inference, and any layer whose weights are not in the
posterior) is applied as it is. For one input x the output signals ε_c = ∂g_c(x)/∂z [out] (per position t for a
convolution) come from C backward passes of the batch-summed outputs, examples being independent at inference.
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from ..deep.twin import ActivatedLayer
from .layerwise import LayerwiseJacobian

__all__ = ["KroneckerChain", "KRON_FALLBACKS"]

#: what ``method="kron"`` does with a layer that has no Kronecker form: raise (None), or take its diagonal GGN block
KRON_FALLBACKS = (None, "diagonal")

DENSE, CONV, ACTIVATED = "dense", "conv", "activated"


def _unrolled(model) -> list:
    """The layers of a Sequential chain, nested Sequential models replaced by their own layers."""
    layers = []
    for layer in model.layers:
        layers.extend(_unrolled(layer) if isinstance(layer, tf_keras.Sequential) else [layer])
    return layers


def _kind(layer, fallback) -> str:
    if type(layer) is tf_keras.layers.Conv2D:  # not its subclasses (transposed, depthwise)
        if layer.data_format != "channels_last" or layer.groups != 1:
            raise ValueError(f"method='kron' supports channels-last Conv2D layers of one group; layer {layer.name!r} is "
                             f"{layer.data_format} with {layer.groups} groups")
        return CONV
    if type(layer) is tf_keras.layers.Dense:
        return DENSE
    if isinstance(layer, ActivatedLayer):
        if fallback != "diagonal":
            raise ValueError(
                f"method='kron': layer {layer.name!r} is an ActivatedLayer, whose per-example Jacobian "
                "∂Φ_m/∂w_m = S'(t) x̃ + α w_m is not the outer product of an input and an output vector, so it has no "
                "Kronecker form; pass kron_fallback='diagonal' to take its diagonal GGN block, or leave its W out of variables="
            )
        return ACTIVATED
    raise ValueError(f"method='kron' supports Dense and Conv2D layers (and ActivatedLayer with kron_fallback='diagonal'); "
                     f"layer {layer.name!r} is a {type(layer).__name__} with weights in the posterior")


class KroneckerChain:
    """The posterior's layers of a chain network (module docstring), in order, with their inputs and signals.

    :param model: a tf-keras ``Sequential`` (possibly nesting others).
    :param variables: the posterior's variables: all the trainable weights of some of the chain's layers, layer
        by layer in the chain's order, each kernel directly followed by its bias.
    :param fallback: None or ``"diagonal"`` (:data:`KRON_FALLBACKS`).
    Raises ValueError, naming the layer, for a model or variables it cannot cover."""

    def __init__(self, model, variables: Sequence[tf.Variable], fallback=None):
        if fallback not in KRON_FALLBACKS:
            raise ValueError(f"unknown kron_fallback {fallback!r}; use one of {KRON_FALLBACKS}")
        if not isinstance(model, tf_keras.Sequential):
            raise ValueError(f"method='kron' needs a tf_keras.Sequential chain (nested Sequential models allowed); got a {type(model).__name__}")
        self.model, self.layers = model, _unrolled(model)
        position = {v.ref(): i for i, v in enumerate(variables)}
        #: (layer, kind, has_bias) of each layer with weights in the posterior, in the chain's order
        self.slots, order = [], []
        for layer in self.layers:
            inside = [position[w.ref()] for w in layer.trainable_weights if w.ref() in position]
            if not inside:
                continue
            kind = _kind(layer, fallback)
            own = [layer.W] if kind == ACTIVATED else [layer.kernel] + ([layer.bias] if layer.use_bias else [])
            if [position.get(w.ref()) for w in own] != inside or len(inside) != len(layer.trainable_weights):
                raise ValueError(f"method='kron': the posterior must hold all of layer {layer.name!r}'s weights "
                                 "(kernel, then bias) or none of them")
            self.slots.append((layer, kind, kind != ACTIVATED and layer.use_bias))
            order.extend(inside)
        if order != list(range(len(position))):
            raise ValueError("method='kron' needs variables= to be whole layers' weights in the chain's order")
        self._included = {id(layer) for layer, _, _ in self.slots}
        self.names = [layer.name for layer, _, _ in self.slots]
        self.kinds = [kind for _, kind, _ in self.slots]
        self.has_bias = [bias for _, _, bias in self.slots]
        self._signals = tf.function(self._signals_graph, input_signature=[tf.TensorSpec([None, None], tf.float64)])

    def _forward(self, X):
        """The outputs [B, C] and, per posterior layer, (its inputs: h [B, in], patches [B, T, k k C_in] or h [B, D];
        its output before any activation, which the tape records)."""
        h, taps = X, []
        for layer in self.layers:
            if id(layer) not in self._included:
                # a layer without weights (reshape, pooling, …) in float64 through its own call, not Keras's cast to
                # its dtype (float32 feature extractors); a fixed layer with weights as it is
                h = tf.cast(layer.call(h) if not layer.weights else layer(h, training=False), tf.float64)
                continue
            if isinstance(layer, ActivatedLayer):
                z = tf.cast(layer(h), tf.float64)
                taps.append((h, z))
                h = z
                continue
            kernel = tf.cast(layer.kernel, tf.float64)
            if isinstance(layer, tf_keras.layers.Conv2D):
                z = tf.nn.conv2d(h, kernel, strides=[1, *layer.strides, 1], padding=layer.padding.upper(),
                                 dilations=[1, *layer.dilation_rate, 1])
                kh, kw = layer.kernel_size
                patches = tf.image.extract_patches(tf.stop_gradient(h), sizes=[1, kh, kw, 1], strides=[1, *layer.strides, 1],
                                                   rates=[1, *layer.dilation_rate, 1], padding=layer.padding.upper())
                inputs = tf.reshape(patches, [tf.shape(h)[0], -1, kh * kw * int(h.shape[-1])])  # [B, T, k k C_in]
            else:
                if h.shape.rank != 2:
                    raise ValueError(f"method='kron': Dense layer {layer.name!r} must act on flat inputs [B, in], got rank {h.shape.rank}")
                z, inputs = tf.matmul(h, kernel), h
            if layer.use_bias:
                z = z + tf.cast(layer.bias, tf.float64)
            taps.append((inputs, z))
            h = tf.cast(layer.activation(z), tf.float64)
        return tf.reshape(h, [tf.shape(h)[0], -1]), taps

    def _signals_graph(self, X):
        with tf.GradientTape() as tape:
            outputs, taps = self._forward(X)
            totals = tf.reduce_sum(outputs, axis=0)  # [C]: examples are independent at inference
        signals = tape.jacobian(totals, [z for _, z in taps])  # each [C, B, ...]
        B, C = tf.shape(outputs)[0], tf.shape(outputs)[1]
        result = []
        for (layer, kind, _), (inputs, _), signal in zip(self.slots, taps, signals):
            signal = tf.transpose(tf.reshape(signal, [C, B, -1, tf.shape(signal)[-1]]), [1, 0, 2, 3])  # [B, C, T, out]
            units = LayerwiseJacobian._unit_rows(layer, inputs) if kind == ACTIVATED else tf.zeros([0], tf.float64)
            result.append((inputs, signal, units))
        return result

    def pieces(self, X: np.ndarray) -> List[tuple]:
        """Per posterior layer of the chain on the batch X [B, D]: (kind, inputs, signals, unit gradients) with
        inputs [B, T, in] (T = 1 for Dense, the output positions for Conv2D; without the bias's 1) or [B, D]
        (ActivatedLayer), signals ε [B, C, T, out] (T = 1 for Dense and ActivatedLayer), and for an ActivatedLayer its
        units' own gradients [B, M, D + 1] (:meth:`LayerwiseJacobian._unit_rows`; empty otherwise)."""
        pieces = []
        for kind, (inputs, signal, units) in zip(self.kinds, self._signals(tf.constant(X, tf.float64))):
            inputs = inputs.numpy()
            pieces.append((kind, inputs[:, None, :] if kind == DENSE else inputs, signal.numpy(), units.numpy()))
        return pieces
