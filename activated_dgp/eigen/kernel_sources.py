"""Where kernel values come from: a GPflow kernel, a precomputed Gram matrix, or random features
(the NN-GP kernel by Monte Carlo over initialisations, NeuralEF eq. 19; the empirical NTK with
Rademacher directions, eq. 20).

A source answers two questions:

* ``gram(A, B)`` — κ(A, B) [N_A, N_B] (Nyström, IKA, exact kernel ridge regression);
* ``batch_product(A, V)`` — κ(A, A) V for a minibatch (NeuralEF's R̃ = ψᵀ κ ψ / B²). Feature
  sources compute it as Φ (Φᵀ V) / S without forming the B × B matrix.

"Inputs" are data points, except for the precomputed sources of a fixed training set
(:class:`PrecomputedGram`, :class:`PrecomputedFeatures`; :func:`is_indexed`), whose inputs are row indices.
"""

from __future__ import annotations

import abc
from typing import Callable, Optional

import gpflow
import numpy as np
import tensorflow as tf

__all__ = [
    "KernelSource", "GPflowKernel", "PrecomputedGram", "FeatureKernel", "PrecomputedFeatures", "nngp_kernel", "ntk_kernel",
    "rademacher_directions",
    "as_kernel_source", "is_indexed",
]


class KernelSource(abc.ABC):
    @abc.abstractmethod
    def gram(self, A, B=None) -> tf.Tensor:
        """κ(A, B), [N_A, N_B] (B = A when omitted), float64."""

    def batch_product(self, A, V) -> tf.Tensor:
        """κ(A, A) V, [N_A, k]."""
        return tf.matmul(self.gram(A), tf.cast(V, tf.float64))


class GPflowKernel(KernelSource):
    """Any ``gpflow.kernels.Kernel`` (ZonalArcCosine included). The kernel is evaluated in the dtype of its
    parameters (float64, or float32 for a kernel made under ``gpflow.config.set_default_float(np.float32)``),
    and its Gram matrix is returned as float64."""

    def __init__(self, kernel: gpflow.kernels.Kernel):
        self.kernel = kernel
        parameters = list(kernel.parameters)
        self.dtype = parameters[0].dtype if parameters else tf.float64

    def gram(self, A, B=None):
        A = tf.cast(tf.convert_to_tensor(A), self.dtype)
        K = self.kernel(A) if B is None else self.kernel(A, tf.cast(tf.convert_to_tensor(B), self.dtype))
        return tf.cast(K, tf.float64)


class PrecomputedGram(KernelSource):
    """A fixed Gram matrix G [N, N]; inputs are integer row indices into it."""

    def __init__(self, gram_matrix):
        G = np.asarray(gram_matrix, dtype=np.float64)
        if G.ndim != 2 or G.shape[0] != G.shape[1]:
            raise ValueError(f"a Gram matrix must be square, got shape {G.shape}")
        if not np.all(np.isfinite(G)):
            raise ValueError("the Gram matrix contains NaN or inf")
        if not np.allclose(G, G.T, rtol=1e-8, atol=1e-10 * np.abs(G).max()):
            raise ValueError("the Gram matrix is not symmetric")
        self.matrix = tf.constant(G)

    def _indices(self, A):
        index = np.asarray(A).reshape(-1)
        if index.dtype.kind not in "iu":
            if not np.all(index == np.round(index)):
                raise ValueError("inputs of a PrecomputedGram are row indices (integers)")
            index = index.astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.matrix.shape[0]):
            raise ValueError(f"row index out of range [0, {self.matrix.shape[0]})")
        return index

    @property
    def num_rows(self) -> int:
        return int(self.matrix.shape[0])

    def gram(self, A, B=None):
        rows = self._indices(A)
        cols = rows if B is None else self._indices(B)
        return tf.gather(tf.gather(self.matrix, rows), cols, axis=1)


class FeatureKernel(KernelSource):
    """κ(x, x') = Σ_s φ_s(x) φ_s(x') / S for a feature map φ: [N, D] → [N, S].

    :param batch_gram: optional A → φ(A) φ(A)ᵀ [N_A, N_A] computed without the features (e.g. the NTK Gram of a
        batch layer by layer, :meth:`~activated_dgp.eigen.layerwise.LayerwiseJacobian.combination_gram`): then a
        minibatch's Gram and products use it, which is cheaper when S is much larger than the batch.
    """

    def __init__(self, feature_map: Callable[[tf.Tensor], tf.Tensor], num_samples: int,
                 batch_gram: Optional[Callable[[tf.Tensor], tf.Tensor]] = None):
        self.feature_map = feature_map
        self.num_samples = int(num_samples)
        self.batch_gram = batch_gram

    def _features(self, A):
        return tf.cast(self.feature_map(tf.convert_to_tensor(A)), tf.float64)

    def gram(self, A, B=None):
        if B is None and self.batch_gram is not None:
            return tf.cast(self.batch_gram(tf.convert_to_tensor(A)), tf.float64) / self.num_samples
        Phi_A = self._features(A)
        Phi_B = Phi_A if B is None else self._features(B)
        return tf.matmul(Phi_A, Phi_B, transpose_b=True) / self.num_samples

    def batch_product(self, A, V):
        if self.batch_gram is not None:
            return tf.matmul(self.gram(A), tf.cast(V, tf.float64))
        Phi = self._features(A)
        return tf.matmul(Phi, tf.matmul(Phi, tf.cast(V, tf.float64), transpose_a=True)) / self.num_samples


class PrecomputedFeatures(FeatureKernel):
    """κ(n, m) = Σ_s Φ_ns Φ_ms / S for fixed features Φ [N, S] of the training points (e.g. their NTK
    Jacobians, computed once); inputs are integer row indices into Φ, as for :class:`PrecomputedGram`.
    The form to prefer when N > S: N·S numbers instead of N², and a minibatch product costs B·S·p."""

    def __init__(self, features, num_samples: int = 1):
        Phi = np.asarray(features, dtype=np.float64)
        if Phi.ndim != 2:
            raise ValueError(f"precomputed features must be a matrix [N, S], got shape {Phi.shape}")
        if not np.all(np.isfinite(Phi)):
            raise ValueError("the precomputed features contain NaN or inf")
        self.features = tf.constant(Phi)
        super().__init__(lambda rows: tf.gather(self.features, tf.cast(tf.reshape(rows, [-1]), tf.int32)), num_samples)

    @property
    def num_rows(self) -> int:
        return int(self.features.shape[0])


def is_indexed(source: KernelSource) -> bool:
    """Whether the source's inputs are row indices of a fixed training set (a precomputed Gram or features)."""
    return isinstance(source, (PrecomputedGram, PrecomputedFeatures))


def nngp_kernel(build_network: Callable[[int], Callable], num_samples: int, seed: int = 0) -> FeatureKernel:
    """NN-GP kernel by Monte Carlo (NeuralEF eq. 19): κ(x, x') ≈ (1/S) Σ_s g(x, θ_s) g(x', θ_s).

    :param build_network: ``seed -> g`` returning a randomly initialised network with one scalar
        output (e.g. a tf-keras model built with that seed); called S times.
    """
    networks = [build_network(seed + s) for s in range(int(num_samples))]

    def feature_map(X):
        return tf.concat([tf.reshape(tf.cast(g(X), tf.float64), [-1, 1]) for g in networks], axis=1)

    return FeatureKernel(feature_map, num_samples)


def rademacher_directions(variables, num_samples: int, seed: int = 0) -> list:
    """The S Rademacher directions v_s ∈ {±1}^P of eq. 20, one array per variable (shaped as it), drawn
    sample by sample and variable by variable from ``numpy.random.default_rng(seed)``: the directions
    :func:`ntk_kernel` uses, and the columns of :func:`~.ntk.rademacher_matrix`."""
    generator = np.random.default_rng(seed)
    shapes = [tuple(v.shape) for v in variables]
    return [[generator.choice([-1.0, 1.0], size=shape) for shape in shapes] for _ in range(int(num_samples))]


def ntk_kernel(network: tf.Module, num_samples: int, seed: int = 0) -> FeatureKernel:
    """Empirical NTK with Rademacher directions (NeuralEF eq. 20):
    κ(x, x') = E_v[(∂_θ g(x) v)(∂_θ g(x') v)], v ∈ {±1}^P, estimated with S directions.

    Each feature ∂_θ g(X) v_s is a Jacobian-vector product by forward-mode autodiff
    (``tf.autodiff.ForwardAccumulator``), so no Jacobian is formed. ``network`` maps [N, D] to
    [N] or [N, 1] and must be built (its variables exist).
    """
    variables = list(network.trainable_variables)
    if not variables:
        raise ValueError("the network has no trainable variables; build it (call it once) first")
    directions = [[tf.constant(d, dtype=v.dtype) for d, v in zip(sample, variables)]
                  for sample in rademacher_directions(variables, num_samples, seed)]

    @tf.function(reduce_retracing=True)
    def jvp(X, tangents):  # one graph for all directions: the tangents are arguments, not constants
        with tf.autodiff.ForwardAccumulator(variables, tangents) as accumulator:
            output = tf.reshape(network(X), [-1])
        return tf.cast(accumulator.jvp(output), tf.float64)

    def feature_map(X):
        return tf.stack([jvp(X, tangents) for tangents in directions], axis=1)

    return FeatureKernel(feature_map, num_samples)


def as_kernel_source(kernel) -> KernelSource:
    """A KernelSource from a source, a gpflow kernel, or a square Gram matrix."""
    if isinstance(kernel, KernelSource):
        return kernel
    if isinstance(kernel, gpflow.kernels.Kernel):
        return GPflowKernel(kernel)
    if isinstance(kernel, (np.ndarray, tf.Tensor)):
        return PrecomputedGram(kernel)
    raise ValueError(f"cannot use {type(kernel).__name__} as a kernel: pass a gpflow kernel, a Gram matrix or a KernelSource")
