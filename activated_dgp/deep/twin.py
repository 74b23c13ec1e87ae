"""The network twin of an activated DGP: a tf-keras layer computing Kuf's basis functions, and the
low-rank network of Fig. 1b built from it (Dutordoir et al., 2021, Sec. 5.1).

An activated GP layer's posterior mean is μ(x) = Kfu Kuu⁻¹ μ_u = Φ(x) B, with Φ(x) = Kuf(x)ᵀ the
activated basis functions g̃_m(x̃) and B = Kuu⁻¹ μ_u. The twin is the same Φ followed by a linear
map V without bias; setting B = V makes the DGP's mean propagation equal the network's forward pass.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from .config import ArchitectureConfig, as_config, initial_directions  # noqa: F401  (initial_directions re-exported)
from ..zonal.inducing_variables import ActivationFeature
from ..zonal.kernels import ZonalArcCosine
from ..zonal.spectra import (
    DEFAULT_ACTIVATION,
    SAVED_DEFAULT_ACTIVATION,
    ZonalActivation,
    registered_activation_name,
    resolve_activation,
)

__all__ = ["ActivatedLayer", "build_activated_nn", "initial_directions", "with_dropout"]


@tf_keras.utils.register_keras_serializable(package="activated_dgp")
class ActivatedLayer(tf_keras.layers.Layer):
    """Φ(x) = [g̃_1(x̃), …, g̃_M(x̃)], [N, D] → [N, M]: exactly ``Kuf(ActivationFeature, ZonalArcCosine, x)ᵀ``.

    g̃_m(x̃) = ‖w_m‖ ‖x̃‖ Σ_(n<Ñ, λ_n≠0) σ_n N_n^d Ĉ_n(ŵ_m·x̂), x̃ = [x, 1]/ℓ (eq. 10, 11, 14). The
    layer calls the registered Kuf of an :class:`ActivationFeature` and a ZonalArcCosine, so the
    twin cannot drift from the GP layer.

    W [M, D+1] is the layer's own Keras weight (``layer.W``, created by ``add_weight``), and
    ``layer.feature.W`` is that same variable: every Keras way of saving (``save_weights`` in the
    ``.weights.h5``, ``.h5`` and TensorFlow-checkpoint formats, ``.keras`` files, ``ModelCheckpoint``,
    ``BackupAndRestore``) and ``tf.train.Checkpoint`` store it. The kernel's hyper-parameters are frozen
    configuration, not weights (Kuf does not depend on the variance; ℓ only rescales x̃, which W can
    absorb): ℓ comes back from :meth:`get_config`.

    ``activation`` defaults to :data:`~activated_dgp.zonal.spectra.DEFAULT_ACTIVATION` (the zonal Swish); a layer config
    without one (:meth:`from_config`) means "softplus", the default when it was written.
    """

    def __init__(
        self,
        units: int,
        activation: Union[str, ZonalActivation, Callable] = DEFAULT_ACTIVATION,
        truncation_level: int = 20,
        lengthscales=1.0,
        initial_W: Optional[np.ndarray] = None,
        seed: Optional[int] = None,
        **kwargs,
    ):
        kwargs.setdefault("dtype", gpflow.default_float())
        super().__init__(**kwargs)
        if isinstance(units, bool) or int(units) != units or units < 1:
            raise ValueError(f"units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.activation = resolve_activation(activation)
        self.truncation_level = int(truncation_level)
        self.lengthscales = lengthscales
        self.initial_W = None if initial_W is None else np.asarray(initial_W, dtype=np.float64)
        self.seed = seed

    def build(self, input_shape):
        input_dim = int(input_shape[-1])
        W = self.initial_W
        if W is None:
            W = initial_directions(self.units, input_dim, np.random.default_rng(self.seed), self.lengthscales)
        if W.shape != (self.units, input_dim + 1):
            raise ValueError(f"initial_W must be [{self.units}, {input_dim + 1}], got {W.shape}")
        self.W = self.add_weight(
            name="W", shape=W.shape, dtype=self.dtype, initializer=tf_keras.initializers.Constant(W), trainable=True
        )
        kernel = ZonalArcCosine(input_dim, self.truncation_level, lengthscales=self.lengthscales)
        gpflow.set_trainable(kernel, False)
        feature = ActivationFeature(W, self.activation, self.truncation_level)
        feature.W = self.W  # the feature reads the Keras weight (its own Parameter copy is dropped)
        self._untracked(kernel=kernel, feature=feature)
        super().build(input_shape)

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _untracked(self, **modules):
        """Attach gpflow modules without Keras tracking them: their only variable that matters, W, is the
        layer's own weight; the frozen kernel is configuration (a tracked kernel would add its variance
        and ℓ as weights that the ``.h5`` format cannot even name apart)."""
        for name, module in modules.items():
            setattr(self, name, module)

    @tf.autograph.experimental.do_not_convert  # GPflow's Kuf needs no AutoGraph conversion (activated_dgp.deep.layers)
    def call(self, inputs, training=None):
        """[batch..., N, D] → [batch..., N, M], like a Dense layer on inputs of any leading shape (``training``, which
        Keras passes, changes nothing)."""
        features = gpflow.covariances.Kuf(self.feature, self.kernel, inputs)  # [M, batch..., N]
        rank = tf.rank(features)
        return tf.transpose(features, tf.concat([tf.range(1, rank), [0]], axis=0))

    @classmethod
    def from_config(cls, config):
        """The layer of a :meth:`get_config` dict; one without ``activation`` is read as
        :data:`~activated_dgp.zonal.spectra.SAVED_DEFAULT_ACTIVATION`, the default of its time, not today's."""
        return cls(**{"activation": SAVED_DEFAULT_ACTIVATION, **config})

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            activation=registered_activation_name(self.activation),
            truncation_level=self.truncation_level,
            lengthscales=np.asarray(self.lengthscales, dtype=np.float64).tolist(),
        )
        return config


def build_activated_nn(
    input_dim: Union[int, ArchitectureConfig],
    *,
    num_layers: Optional[int] = None,
    num_units: Union[None, int, Sequence[int]] = None,
    layer_widths: Optional[Sequence[int]] = None,
    output_dim: Optional[int] = None,
    activation: Union[None, str, ZonalActivation, Callable] = None,
    truncation_level: Optional[int] = None,
    lengthscales: Optional[Sequence] = None,
    seed: Optional[int] = None,
) -> tf_keras.Sequential:
    """The low-rank network of Fig. 1b: [ActivatedLayer(M_ℓ), Dense(P_ℓ, no bias)] × L, float64.

    :param input_dim: D, or an :class:`~activated_dgp.deep.config.ArchitectureConfig` describing the whole
        architecture (then give no other architecture keyword).
    The keywords are those of :class:`~activated_dgp.deep.config.ArchitectureConfig`, with its defaults
    (3 layers of 128 zonal Swish units, Ñ = 20, ℓ = 1, bottlenecks of width D, one output; ``activation="softplus"``
    gives the paper's zonal Softplus, the default before, see :data:`~activated_dgp.zonal.spectra.DEFAULT_ACTIVATION`):

    :param num_units: M_ℓ, the activated units (= inducing variables) per layer.
    :param layer_widths: P_ℓ, the narrow (bottleneck) widths of layers 1..L−1; default input_dim.
    :param output_dim: width of the last linear map (regression targets, 1 logit, or class logits).
    :param lengthscales: ℓ_ℓ of each layer's ActivatedLayer, one entry per layer, each a scalar or
        D_ℓ + 1 values (x̃ = [x, 1] / ℓ, see :class:`ZonalArcCosine`); default 1 everywhere. The initial
        directions scale with ℓ (:func:`initial_directions`: ‖w‖ ‖x̃‖ ≈ 1 for standardised inputs), so every
        common ℓ gives the same initial network; ℓ then sets Adam's step relative to ‖w‖, and ℓ = √(D_ℓ + 1)
        (‖w‖ ≈ 1) trains best.
    The output has no final non-linearity: train it on MSE or on cross-entropy from logits.
    """
    config = as_config(
        input_dim, num_layers=num_layers, num_units=num_units, layer_widths=layer_widths, output_dim=output_dim,
        activation=activation, truncation_level=truncation_level, lengthscales=lengthscales,
    )
    rng = np.random.default_rng(seed)
    layers = [tf_keras.Input(shape=(config.input_dim,), dtype=gpflow.default_float())]
    for index, spec in enumerate(config.layers()):
        layers.append(
            ActivatedLayer(
                spec["num_units"],
                spec["activation"],
                spec["truncation_level"],
                lengthscales=spec["lengthscales"],
                seed=int(rng.integers(2**31)),
                name=f"activated_{index}",
            )
        )
        layers.append(
            tf_keras.layers.Dense(
                spec["output_dim"],
                use_bias=False,
                dtype=gpflow.default_float(),
                kernel_initializer=tf_keras.initializers.GlorotNormal(seed=int(rng.integers(2**31))),
                name=f"linear_{index}",
            )
        )
    return tf_keras.Sequential(layers, name="activated_nn")


def with_dropout(network: tf_keras.Sequential, rate: float, seed: Optional[int] = None) -> tf_keras.Sequential:
    """The same layers (shared, not copied) with ``Dropout(rate)`` after every :class:`ActivatedLayer`.

    For MC dropout (Gal & Ghahramani, 2016) call the result with ``training=True``; the dropout layers
    are not part of the twin, so convert the original ``network`` (not this one) to a DGP.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate!r}")
    layers = [tf_keras.Input(shape=network.input_shape[1:], dtype=network.input.dtype)]
    for index, layer in enumerate(network.layers):
        layers.append(layer)
        if isinstance(layer, ActivatedLayer):
            dropout_seed = None if seed is None else seed + index
            layers.append(tf_keras.layers.Dropout(rate, seed=dropout_seed, dtype=gpflow.default_float(), name=f"dropout_{index}"))
    return tf_keras.Sequential(layers, name=f"{network.name}_dropout")
