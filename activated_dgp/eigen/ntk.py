"""The exact empirical NTK of a network: per-example Jacobians and their Gram matrix.

For a network g(x, θ): R^D → R^C with parameters θ ∈ R^P (all its trainable variables, flattened in
the order of ``trainable_variables``), the empirical NTK (Deng et al. 2022, "NeuralEF", eq. 3; Jacot
et al. 2018) is

    κ(x, x') = ∂_θ g(x, θ) ∂_θ g(x', θ)ᵀ = J(x) J(x')ᵀ,      J(x) [C, P].

:func:`jacobian_function` gives X [B, D] → J [B, C, P], example by example (``tf.vectorized_map`` over the rows
of one reverse-mode ``GradientTape.jacobian`` of each example's C outputs), so that its memory grows as B: the
Jacobian's B C P numbers and each example's activations; :func:`jacobian_features` stacks the Jacobians of a scalar-output
network in batches ([N, P]); :func:`ntk_gram` forms J(X) J(X')ᵀ; :func:`jacobian_kernel` is the exact
NTK as a :class:`~.kernel_sources.FeatureKernel` (S = 1 "sample" of P features), the exact counterpart
of the Rademacher estimate :func:`~.kernel_sources.ntk_kernel` (eq. 20), whose expectation it is.

The compiled Jacobian of a network is built once and kept (weakly keyed by the network, and rebuilt if
its variables change), so repeated :func:`jacobian_features` / :func:`ntk_gram` calls on one network do
not trace a new ``tf.function`` each time.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..validation import check_matrix, check_positive_int
from .kernel_sources import FeatureKernel, rademacher_directions

__all__ = ["jacobian_function", "jacobian_features", "ntk_gram", "jacobian_kernel", "rademacher_matrix"]


def jacobian_function(function: Callable, variables: Sequence[tf.Variable]) -> Callable:
    """X [B, D] → J [B, C, m]: J_bci = ∂ function(x_b)_c / ∂ v_i, v the flattened ``variables``
    (concatenated in order; float64). ``function`` maps [B, D] to [B, C] or [B] (then C = 1), each row from its
    own input row (no batch statistics, as a network at inference); a variable the output does not depend on gets
    zero columns.

    Each row's Jacobian is taken on that example alone, the examples vectorised by ``tf.vectorized_map``: memory
    O(B C m) for the result and O(B C a) for the backward pass through a activations per example. The Jacobian of
    the whole batch's B C outputs at once would be the same numbers, but its vectorised backward pass carries the
    activations of all B inputs for each of the B C outputs, O(B² C a): for 300 rows of one output through a
    24 × 24 × 32 float32 convolution, 300² · 18,432 · 4 bytes = 6.6 GB in one tensor."""
    variables = list(variables)
    if not variables:
        raise ValueError("no variables to differentiate with respect to (is the network built?)")

    def example(x):  # J(x) [C, m] of one input row x [D]
        with tf.GradientTape() as tape:
            outputs = tf.reshape(tf.cast(function(x[None, :]), tf.float64), [-1])
        blocks = tape.jacobian(outputs, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return tf.concat([tf.reshape(tf.cast(block, tf.float64), [tf.shape(outputs)[0], -1]) for block in blocks], axis=1)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float64)])
    def jacobian(X):
        return tf.vectorized_map(example, X)

    return jacobian


def _network_variables(network) -> list:
    try:
        variables = list(getattr(network, "trainable_variables", []))
    except ValueError:  # an unbuilt tf-keras model refuses to list its weights
        variables = []
    if not variables:
        raise ValueError("the network has no trainable variables; build it (call it once) first")
    return variables


#: network → (ids of its variables, its compiled Jacobian): one tf.function per network, not per call
_JACOBIANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _network_jacobian(network) -> Callable:
    variables = _network_variables(network)
    key = tuple(id(v) for v in variables)
    try:
        cached = _JACOBIANS.get(network)
    except TypeError:  # a network that cannot be weakly referenced: no caching
        return jacobian_function(network, variables)
    if cached is None or cached[0] != key:
        reference = weakref.ref(network)  # the cached function must not keep its own key alive
        cached = (key, jacobian_function(lambda X: reference()(X), variables))
        _JACOBIANS[network] = cached
    return cached[1]


def _scalar_jacobian(network) -> Callable:
    jacobian = _network_jacobian(network)

    def features(X, network=network):  # holds the network: the cache refers to it only weakly
        J = jacobian(tf.convert_to_tensor(X, tf.float64))
        if J.shape[1] is not None and J.shape[1] != 1:
            raise ValueError(f"the network has {J.shape[1]} outputs; the NTK features here are for one output (a logit)")
        return J[:, 0, :]

    return features


def jacobian_features(network, X, batch_size: int = 256) -> np.ndarray:
    """J(X) [N, P]: row n is ∂_θ g(x_n, θ) of a one-output network g (X [N, D] float64), computed
    ``batch_size`` rows at a time."""
    X = check_matrix(X, "X")
    batch_size = check_positive_int(batch_size, "batch_size")
    features = _scalar_jacobian(network)
    return np.concatenate([features(X[a : a + batch_size]).numpy() for a in range(0, X.shape[0], batch_size)], axis=0)


def ntk_gram(network, X, X2=None, batch_size: int = 256) -> np.ndarray:
    """The exact empirical NTK Gram matrix κ(X, X2) = J(X) J(X2)ᵀ [N, N2] (NeuralEF eq. 3) of a
    one-output network; X2 = X when omitted."""
    J = jacobian_features(network, X, batch_size)
    J2 = J if X2 is None else jacobian_features(network, X2, batch_size)
    return J @ J2.T


def jacobian_kernel(network) -> FeatureKernel:
    """The exact empirical NTK of a one-output network as a kernel source for NeuralEF / Nyström:
    φ(X) = J(X) [B, P], κ = φ φᵀ (a :class:`FeatureKernel` with S = 1)."""
    return FeatureKernel(_scalar_jacobian(network), 1)


def rademacher_matrix(network, num_samples: int, seed: int = 0) -> np.ndarray:
    """V [P, S]: column s is the Rademacher direction v_s of ``ntk_kernel(network, S, seed)``, flattened in
    the order of the Jacobian's columns. Where the Jacobian J(X) is at hand, the eq. 20 features are the
    product J(X) V = ``ntk_kernel(network, S, seed).feature_map(X)``, at the cost of one matrix product
    instead of S forward-mode passes (NeuralEF eq. 20). V takes P·S·8 bytes (S = 4,000 directions of the 7,553
    parameters of the NTK-spectra study's classifier: 242 MB)."""
    num_samples = check_positive_int(num_samples, "num_samples")
    samples = rademacher_directions(_network_variables(network), num_samples, seed)
    return np.stack([np.concatenate([d.reshape(-1) for d in sample]) for sample in samples], axis=1)
