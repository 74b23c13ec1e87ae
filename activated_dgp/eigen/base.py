"""The common interface of the eigenfunction approximations (Nyström, NeuralEF, IKA).

Each fits the top-k eigenpairs (μ_j, ψ_j) of a kernel's integral operator under the data
distribution q, (Kψ)(x) = E_(x'~q)[κ(x, x') ψ(x')] = μ ψ(x), with ψ_j orthonormal in L²(q), and
exposes

* ``eigenvalues``: μ_1 ≥ … ≥ μ_k, [k];
* ``__call__(X)``: ψ(X), [N, k];
* ``features(X)``: √μ ψ(X), [N, k], so that κ(x, x') ≈ features(x) · features(x') (Mercer).

All state lives in ``tf.Variable``s: ``activated_dgp.save(approximation, DIR)`` / ``activated_dgp.load(DIR)``
(:mod:`activated_dgp.saving`) write and rebuild any of them, and ``tf.train.Checkpoint`` restores one into an object
of the same structure.
"""

from __future__ import annotations

import abc
from typing import Callable, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

__all__ = [
    "EigenApproximation", "as_float64_matrix", "require_float64", "ELEMENTWISE_ACTIVATIONS", "elementwise_activation",
    "elementwise_activation_name", "SavedState",
]


def require_float64(what: str) -> None:
    """The eigen module and the kernel machines compute in float64 (eigen-decompositions and solves of
    ill-conditioned Gram matrices, whose small eigenvalues float32 cannot resolve): a TypeError naming
    ``what`` when ``gpflow.default_float()`` is another type, instead of a mixed-dtype failure deep in
    TensorFlow."""
    if np.dtype(gpflow.default_float()) != np.float64:
        raise TypeError(
            f"{what} computes in float64, but gpflow.default_float() is {np.dtype(gpflow.default_float()).name}; "
            "call gpflow.config.set_default_float(np.float64) first"
        )


@tf_keras.utils.register_keras_serializable(package="activated_dgp", name="sin_cos")
def _sin_cos(h: tf.Tensor) -> tf.Tensor:
    """Half of the units sin, the other half cos (the activation of NeuralEF's App. B)."""
    half = h.shape[-1] // 2
    return tf.concat([tf.sin(h[..., :half]), tf.cos(h[..., half:])], axis=-1)


def _keras_named(name: str, function: Callable) -> Callable:
    """``function`` under a name tf-keras serialises, for the functions Keras does not know by their own name."""

    def activation(h):
        return function(h)

    activation.__name__ = name
    return tf_keras.utils.register_keras_serializable(package="activated_dgp", name=name)(activation)


#: The one registry of elementwise network activations of the eigen module (NeuralEF's networks, IKA's
#: bases). Not to be confused with :data:`activated_dgp.zonal.ACTIVATION_REGISTRY`, the zonal activations σ(t) on
#: [−1, 1] of activated inducing variables, which have Funk–Hecke coefficients. Each is one tf-keras serialises,
#: so a network of :func:`~activated_dgp.eigen.neural_eigenfunction` can be saved (``activated_dgp.save``).
ELEMENTWISE_ACTIVATIONS = {
    "sin_cos": _sin_cos,
    "sin": _keras_named("sin", tf.sin),
    "cos": _keras_named("cos", tf.cos),
    "tanh": tf.tanh,
    "relu": tf.nn.relu,
    "softplus": tf.nn.softplus,
    "gelu": tf.nn.gelu,
    "sigmoid": tf.sigmoid,
    "exp": _keras_named("exp", tf.exp),
    "erf": _keras_named("erf", tf.math.erf),
    "linear": _keras_named("linear", tf.identity),
}


def elementwise_activation(activation: Union[str, Callable]) -> Callable:
    """A name from :data:`ELEMENTWISE_ACTIVATIONS` or a callable on tensors; a ValueError otherwise."""
    if isinstance(activation, str):
        if activation not in ELEMENTWISE_ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; use one of {sorted(ELEMENTWISE_ACTIVATIONS)} or a callable")
        return ELEMENTWISE_ACTIVATIONS[activation]
    if not callable(activation):
        raise ValueError(f"activation must be a name or a callable, got {activation!r}")
    return activation


def elementwise_activation_name(activation: Union[str, Callable], where: str) -> str:
    """The :data:`ELEMENTWISE_ACTIVATIONS` name of ``activation`` (a name, or a function registered there), for a
    saved config; a ValueError naming ``where`` for another callable, which could not be rebuilt by name."""
    if isinstance(activation, str):
        elementwise_activation(activation)
        return activation
    for name, function in ELEMENTWISE_ACTIVATIONS.items():
        if function is activation:
            return name
    raise ValueError(
        f"cannot save {where}: its activation {getattr(activation, '__name__', activation)!r} is a callable, not one of "
        f"the named activations {sorted(ELEMENTWISE_ACTIVATIONS)}, so it could not be rebuilt"
    )


class SavedState(tf.Module):
    """The tracked state a saved kind checkpoints (:mod:`activated_dgp.saving`), under fixed names: the variables
    (and optimiser) of an object without the parts saved on their own (its kernel, its networks) or not at all."""

    def __init__(self, **items):
        super().__init__(name="state")
        for name, item in items.items():
            if item is not None:
                setattr(self, name, item)


def as_float64_matrix(X, what: str = "the inputs") -> np.ndarray:
    """X (array, tensor or variable) as a float64 NumPy matrix [N, D], N ≥ 1, all finite.

    Raises ValueError naming ``what`` for a non-numeric dtype, a shape other than [N, D], no rows,
    or NaN/inf entries.
    """
    X = X.numpy() if isinstance(X, (tf.Tensor, tf.Variable)) else np.asarray(X)
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float64)
    if X.ndim != 2:
        raise ValueError(f"{what} must be a matrix [N, D], got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{what} are empty (no rows)")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{what} contain NaN or inf")
    return X


class EigenApproximation(tf.Module, abc.ABC):
    #: whether the approximation needs ``gpflow.default_float()`` to be float64 (Nyström does not: it computes in
    #: float64 whatever the default, casting a float32 kernel's Gram matrix up)
    requires_float64_default = True

    def __init__(self, num_eigenpairs: int, name=None):
        super().__init__(name=name)
        if self.requires_float64_default:
            require_float64(type(self).__name__)
        if int(num_eigenpairs) != num_eigenpairs or num_eigenpairs < 1:
            raise ValueError(f"num_eigenpairs must be a positive integer, got {num_eigenpairs!r}")
        self.num_eigenpairs = int(num_eigenpairs)
        self._eigenvalues = tf.Variable(np.zeros(self.num_eigenpairs), dtype=tf.float64, trainable=False, name="eigenvalues")

    @property
    def eigenvalues(self) -> tf.Tensor:
        """μ_1 ≥ … ≥ μ_k, [k]."""
        return tf.convert_to_tensor(self._eigenvalues)

    @abc.abstractmethod
    def __call__(self, X) -> tf.Tensor:
        """ψ(X), [N, k], orthonormal in L²(q)."""

    def features(self, X) -> tf.Tensor:
        """√μ ψ(X), [N, k] (negative eigenvalue estimates are clipped at zero)."""
        values = self(X)
        return values * tf.sqrt(tf.maximum(tf.cast(self.eigenvalues, values.dtype), 0.0))[None, :]
