"""Checks of a DeepGP and its inputs, and the propagation of means and samples through its layers: the
forward pass of the network twin (Dutordoir et al., Sec. 5.1) and doubly stochastic sampling (Salimbeni &
Deisenroth 2017), on which every prediction function is built."""

from __future__ import annotations

from typing import List, Optional, Tuple

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..validation import check_inputs, check_matrix, dgp_input_width
from ..zonal.inducing_variables import ActivationFeature
from .inducing_samples import samples_from_inducing_draws, shares_inducing_variables

__all__ = ["check_dgp", "checked_inputs", "resolve_model", "checked_num_samples", "propagate_means", "layer_inputs",
           "sample_layers", "propagate_samples"]


def check_dgp(dgp) -> None:
    """The value checks of a DeepGP's own state: every activated feature's W finite with non-zero rows, and
    every parameter finite (a model that training drove to NaN is named, not used)."""
    if not isinstance(dgp, gpflux.models.DeepGP):
        raise ValueError(f"expected a gpflux DeepGP, got {type(dgp).__name__}")
    for index, layer in enumerate(dgp.f_layers):
        feature = getattr(getattr(layer, "inducing_variable", None), "inducing_variable", None)
        if isinstance(feature, ActivationFeature):
            check_matrix(feature.W, f"W of layer {index}", nonzero_rows=True)
    for path, parameter in gpflow.utilities.parameter_dict(dgp).items():
        if "._" not in path and not np.all(np.isfinite(parameter.numpy())):
            raise ValueError(f"the DGP's parameter {path} contains NaN or inf")


def checked_inputs(dgp: gpflux.models.DeepGP, X) -> tf.Tensor:
    """The value checks of the public prediction functions, once per call: the DGP's state
    (:func:`~activated_dgp.validation.check_dgp`) and X a finite [N, D] matrix of the DGP's input width."""
    check_dgp(dgp)
    width = dgp_input_width(dgp)
    X = check_matrix(X, "X") if width is None else check_inputs(X, width, "X")
    return tf.convert_to_tensor(X)


def resolve_model(model, X):
    """The DeepGP and inputs a prediction function works on: a gpflux ``DeepGP`` with X as given, or, for any object
    with a ``dgp`` attribute and a ``features(X)`` method (a training result whose trained feature extractor maps raw
    inputs to the DGP's inputs, or returns X unchanged), ``(model.dgp, model.features(X))``. Anything else is
    returned as given, for :func:`check_dgp` to name."""
    if not isinstance(model, gpflux.models.DeepGP) and hasattr(model, "dgp") and callable(getattr(model, "features", None)):
        return model.dgp, model.features(X)
    return model, X


def propagate_means(dgp: gpflux.models.DeepGP, X, num_layers: Optional[int] = None) -> List[tf.Tensor]:
    """Each layer's posterior mean evaluated at the previous layer's mean: [N, P_ℓ] for ℓ = 1..L, or for
    ℓ = 1..``num_layers`` only (e.g. L − 1: the inputs of the output layer). ``dgp`` may be a result object
    with a ``dgp`` and ``features(X)`` (:func:`resolve_model`).

    For activated GP layers with zero mean functions this is the forward pass of the network twin
    (Sec. 5.1): μ_ℓ(h) = Φ_ℓ(h) Kuu⁻¹ μ_u.
    """
    dgp, X = resolve_model(dgp, X)
    outputs, hidden = [], checked_inputs(dgp, X)
    for layer in dgp.f_layers[:num_layers]:
        hidden, _ = layer.predict(hidden, full_cov=False, full_output_cov=False)
        outputs.append(hidden)
    return outputs


def layer_inputs(dgp: gpflux.models.DeepGP, X) -> List[tf.Tensor]:
    """The input each layer sees under mean propagation: [X, μ_1(X), …, μ_(L−1)(…)], one [N, D_ℓ] per layer
    (the last one is the output layer's input)."""
    dgp, X = resolve_model(dgp, X)
    X = checked_inputs(dgp, X)
    return [X] + propagate_means(dgp, X, num_layers=len(dgp.f_layers) - 1)


def checked_num_samples(num_samples) -> int:
    """``num_samples`` as an int when it is an integer ≥ 1, else a ValueError naming it."""
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be an integer ≥ 1, got {num_samples!r}")
    return int(num_samples)


@check_shapes(
    "return[1]: [S, N, P]",
    "return[2]: [S, N, P]",
)
def sample_layers(dgp: gpflux.models.DeepGP, X, num_samples: int, seed: Optional[int] = None) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
    """Propagate ``num_samples`` samples through layers 1..L−1 (marginals per point, as in doubly
    stochastic VI), and return the per-layer samples [S, N, P_ℓ] together with the last layer's
    Gaussian moments given each sample, mean and variance [S, N, P_L]."""
    num_samples = checked_num_samples(num_samples)
    dgp, X = resolve_model(dgp, X)
    X = checked_inputs(dgp, X)
    generator = tf.random.Generator.from_seed(seed) if seed is not None else tf.random.get_global_generator()
    return propagate_samples(dgp, X, num_samples, lambda layer, shape, dtype: generator.normal(shape, dtype=dtype))


def propagate_samples(dgp: gpflux.models.DeepGP, X, num_samples: int, normal, inducing_normal=None) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
    """:func:`sample_layers` with the standard normal draws given: ``normal(layer_index, shape, dtype)``
    (e.g. stateless, for a compiled function). Memory O(num_samples · N · max(M_ℓ, P_ℓ)).

    With ``inducing_normal(layer_index, shape, dtype)`` (normals [S, P, M], one set per sample), the hidden layers
    after the first that share their inducing variables across outputs are sampled from one draw of their inducing
    outputs per sample (:mod:`~activated_dgp.deep.inducing_samples`): each row has the same distribution as from its
    marginal, at M²/2 + M·P multiply-adds per row instead of P quadratic forms."""
    X = tf.convert_to_tensor(X)
    batch_shape = tf.stack([num_samples, tf.shape(X)[0]])

    def moments(layer, hidden):
        if hidden is None:  # the first layer sees X in every sample: predict once, tile to [S·N, P]
            mean, var = layer.predict(X, full_cov=False, full_output_cov=False)
            return tf.tile(mean, [num_samples, 1]), tf.tile(var, [num_samples, 1])
        return layer.predict(tf.reshape(hidden, [-1, hidden.shape[-1]]), full_cov=False, full_output_cov=False)

    hidden, samples = None, []
    for index, layer in enumerate(dgp.f_layers[:-1]):
        if hidden is not None and inducing_normal is not None and shares_inducing_variables(layer):
            hidden = samples_from_inducing_draws(
                layer, hidden, lambda shape, dtype, index=index: inducing_normal(index, shape, dtype),
                lambda shape, dtype, index=index: normal(index, shape, dtype),
            )
            samples.append(hidden)
            continue
        mean, var = moments(layer, hidden)
        draw = mean + tf.sqrt(var) * normal(index, tf.shape(mean), mean.dtype)
        hidden = tf.reshape(draw, tf.concat([batch_shape, [draw.shape[-1]]], 0))
        samples.append(hidden)
    mean, var = moments(dgp.f_layers[-1], hidden)
    shape = tf.concat([batch_shape, [mean.shape[-1]]], 0)
    return samples, tf.reshape(mean, shape), tf.reshape(var, shape)
