"""The network side of the linearised Laplace approximation, batch by batch: the outputs g(X, θ_MAP), the features
F(X) [B, C, m] of the posterior (the Jacobians J(X) = ∂_θ g(X, θ_MAP), layer by layer where the network allows, or the
eigenfunction features Ψ̃(X) = [√μ_1 ψ_1(X), …, √μ_k ψ_k(X)] of Deng et al. 2022, eq. 22), the input checks, and the
flattened parameters θ."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import tensorflow as tf

from ...deep.likelihoods import output_width
from ...validation import check_inputs, check_matrix
from .pairs import pair_inputs
from .settings import _EIGEN_METHODS


class _NetworkFeatures:
    """The batch-wise network computations of :class:`~activated_dgp.eigen.LinearisedLaplace` (its lowest part)."""

    def _log(self, message: str) -> None:
        if self.verbose:
            print(f"LinearisedLaplace: {message}", flush=True)

    def _batches(self, N: int):
        return [slice(start, min(start + self.batch_size, N)) for start in range(0, N, self.batch_size)]

    def _outputs(self, X: np.ndarray) -> np.ndarray:
        """g(X, θ_MAP) [N, C] float64, in batches."""
        parts = []
        for rows in self._batches(X.shape[0]):
            output = tf.cast(self.model(tf.constant(X[rows]), training=False), tf.float64).numpy()
            parts.append(output.reshape(output.shape[0], -1))
        return np.concatenate(parts, axis=0)

    def _check_X(self, X, what: str = "X") -> np.ndarray:
        if self.input_dim is None:
            raise ValueError("the LinearisedLaplace approximation is not fitted yet (call fit first)")
        return check_inputs(X, self.input_dim, what)

    def _check_Y(self, Y, N: int, what: str = "Y") -> np.ndarray:
        Y = check_matrix(Y, what)
        if Y.shape[0] != N:
            raise ValueError(f"{what} has {Y.shape[0]} rows but X has {N}")
        C = self.num_outputs
        if self.likelihood == "gaussian" and Y.shape[1] != C:
            raise ValueError(f"{what} has {Y.shape[1]} columns but the model has {C} outputs")
        if self.likelihood == "bernoulli" and C != 1:
            raise ValueError(f"the bernoulli likelihood needs a model with one output (a logit), this one has {C}")
        if self.likelihood == "softmax" and C < 2:
            raise ValueError("the softmax likelihood needs a model with C ≥ 2 outputs (logits)")
        output_width(self.likelihood, Y, num_classes=C if self.likelihood == "softmax" else None)
        return Y

    def _eigen_features(self, X: np.ndarray) -> np.ndarray:
        """Ψ̃(X) [B, C, k] = √μ_j ψ_j(x, c) of the eigenfunctions (eq. 22)."""
        C = self.num_outputs
        psi = tf.cast(self.eigenfunctions(tf.constant(pair_inputs(X, C))), tf.float64).numpy()
        mu = np.maximum(np.asarray(tf.convert_to_tensor(self.eigenfunctions.eigenvalues), dtype=np.float64).reshape(-1), 0.0)
        if psi.ndim != 2 or psi.shape[0] != X.shape[0] * C or psi.shape[1] != mu.shape[0]:
            raise ValueError(
                f"the eigenfunctions returned shape {psi.shape} for {X.shape[0] * C} inputs and have {mu.shape[0]} "
                f"eigenvalues; expected [{X.shape[0] * C}, {mu.shape[0]}]"
            )
        return (psi * np.sqrt(mu)[None, :]).reshape(X.shape[0], C, -1)

    def _features(self, X: np.ndarray, eigen: Optional[bool] = None) -> np.ndarray:
        """F(X) [B, C, m]: the Jacobians (parameter methods, or ``eigen=False``) or Ψ̃ (eigen methods) of one batch."""
        if self.method in _EIGEN_METHODS if eigen is None else eigen:
            return self._eigen_features(X)
        if self._layerwise is not None:
            return self._layerwise.jacobian(X)
        return self._jacobian(tf.constant(X)).numpy()

    def _progress_batches(self, N: int, what: str):
        """The batches' row slices, logging progress about every tenth batch."""
        batches = self._batches(N)
        start, report = time.perf_counter(), max(1, len(batches) // 10)
        for index, rows in enumerate(batches):
            yield rows
            if len(batches) > 1 and ((index + 1) % report == 0 or index + 1 == len(batches)):
                self._log(f"{what}: batch {index + 1}/{len(batches)} ({time.perf_counter() - start:.1f} s)")

    def _feature_batches(self, X: np.ndarray, what: str, eigen: Optional[bool] = None):
        for rows in self._progress_batches(X.shape[0], what):
            yield rows, self._features(X[rows], eigen)

    def _parameter_vector(self) -> np.ndarray:
        return np.concatenate([np.asarray(v.numpy(), dtype=np.float64).reshape(-1) for v in self.variables])


    @property
    def _woodbury(self) -> bool:
        """Whether the posterior is δ I plus a rank-k GGN in the parameter directions ``ggn_eigenvectors`` [P, k]
        (``lowrank``, and the eigen methods with ``covariance="subspace"``)."""
        return self.method == "lowrank" or (self.method in _EIGEN_METHODS and self.covariance == "subspace")
