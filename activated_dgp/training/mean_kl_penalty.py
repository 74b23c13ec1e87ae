"""The KL a swapped network's converted means will carry, as a differentiable function of the network's weights.

A network of :class:`~activated_dgp.deep.twin.ActivatedLayer` blocks, each followed by a linear ``Dense`` map V
[M, P] (or by the next block: V = I), converts to a DGP whose layer posterior means are Kfu V, so that
q_μ = Kuu V and the part of KL[q(u) ‖ p(u)] the means carry is (:func:`activated_dgp.deep.posterior_mean.mean_kl`)

    KL_means = Σ_l ½ Σ_p V_lpᵀ Kuu(W_l) V_lp,

with Kuu(W_l) the inducing covariance of the block's units under its zonal kernel at variance 1 (eq. 13 of
Dutordoir et al., 2021; :mod:`activated_dgp.zonal.covariances`). It is half the squared RKHS norm of the mean
functions. With q(u)'s covariance collapsed, the ELBO per data point of the converted DGP is the network's average
log-likelihood minus KL_means / N: fine-tuning a network on its loss plus KL_means / N (``kl_weight`` = 1 of
:func:`~activated_dgp.training.make_convertible`) is maximising that ELBO over the means, the point-estimate view
of the paper (Sec. 5).
"""

from __future__ import annotations

from typing import List

import gpflow
import tensorflow as tf
import tf_keras

from ..deep.twin import ActivatedLayer

__all__ = ["network_mean_kl"]


def _blocks(network: tf_keras.Model) -> List:
    """(activated layer, the Dense layer after it or None) for every ActivatedLayer of a Sequential chain."""
    layers = [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]
    blocks = []
    for index, layer in enumerate(layers):
        if isinstance(layer, ActivatedLayer):
            following = layers[index + 1] if index + 1 < len(layers) else None
            blocks.append((layer, following if type(following) is tf_keras.layers.Dense else None))
    return blocks


def network_mean_kl(network: tf_keras.Model) -> List[tf.Tensor]:
    """Per activated block of ``network`` (a chain of ActivatedLayer and linear Dense layers, as
    :func:`~activated_dgp.training.swap_to_zonal` builds it), ½ Σ_p V_pᵀ Kuu(W) V_p (module docstring): scalar
    tensors, differentiable in the blocks' W and the Dense kernels V. A ValueError for a network without one."""
    blocks = _blocks(network)
    if not blocks:
        raise ValueError(f"the network {network.name!r} has no ActivatedLayer: its means carry no zonal KL to penalise")
    terms = []
    for layer, dense in blocks:
        if not layer.built:
            raise ValueError(f"the layer {layer.name!r} is not built: call the network on inputs first")
        Kuu = gpflow.covariances.Kuu(layer.feature, layer.kernel)  # [M, M], W read from the Keras weight
        if dense is None:
            terms.append(0.5 * tf.linalg.trace(Kuu))
        else:
            V = tf.cast(dense.kernel, Kuu.dtype)  # [M, P]
            terms.append(0.5 * tf.reduce_sum(V * tf.matmul(Kuu, V)))
    return terms
