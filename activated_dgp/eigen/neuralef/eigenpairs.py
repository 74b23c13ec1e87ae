"""NeuralEF's fitted eigenpairs: the Rayleigh–Ritz step over the training set (:mod:`activated_dgp.eigen.rayleigh_ritz`)
or, without it, the networks ordered by their minibatch estimates; the diagnostics; and ψ(x) = (h(x)/σ̄) C
(see :mod:`activated_dgp.eigen.neuralef`)."""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf

from ..base import as_float64_matrix
from ..kernel_sources import is_indexed
from ..rayleigh_ritz import generalised_eigh, span_products


class _Eigenpairs:
    """The fitted half of :class:`~activated_dgp.eigen.neuralef.NeuralEF`: its eigenvalues and eigenfunctions."""

    def _minibatch_order(self) -> np.ndarray:
        return np.argsort(-self._eigenvalue_ema.numpy(), kind="stable")

    def _select_by_minibatch_estimates(self) -> None:
        """Outputs = the k networks with the largest minibatch estimates u_j, in decreasing order."""
        order = self._minibatch_order()[: self.num_eigenpairs]
        self._rotation.assign(np.eye(self.num_networks)[:, order])
        self._eigenvalues.assign(np.maximum(self._eigenvalue_ema.numpy()[order], 0.0))
        self._ritz_done.assign(False)

    def rayleigh_ritz(self, X, block_size: int = 2048) -> "NeuralEF":
        """The Rayleigh–Ritz step (:mod:`.rayleigh_ritz`) over the points X (the training set by
        default in ``fit``; rows of the Gram matrix for a PrecomputedGram): solves
        A c = λ M c with A = Hᵀ K H / N², M = Hᵀ H / N for the p networks' outputs H = h(X)/σ̄, in row
        blocks of ``block_size`` (no N × N matrix), and sets

        * ``eigenvalues`` to the top-k Ritz values (≤ the empirical operator's eigenvalues),
        * ψ(x) = (h(x)/σ̄) C_(:, :k), orthonormal on X (the rotation of the networks' outputs).

        The minibatch estimates stay available as ``minibatch_eigenvalues`` and ``rayleigh_quotients``.
        """
        if self.steps == 0 or self._source is None:
            raise ValueError("the NeuralEF networks are not trained yet (call fit first)")
        X = as_float64_matrix(X)
        if X.shape[1] != self.input_dim:
            raise ValueError(f"inputs have width {X.shape[1]}, the networks expect {self.input_dim}")
        indices = None
        if is_indexed(self._source):
            if X.shape[0] != self._source.num_rows:
                raise ValueError("with a precomputed kernel the Rayleigh–Ritz step runs on the training points (its rows) only")
            indices = np.arange(X.shape[0])
        A, M = span_products(self._source, X, lambda rows: self._normalised(rows).numpy(), block_size, kernel_inputs=indices)
        values, C = generalised_eigh(A, M)
        k = self.num_eigenpairs
        if C.shape[1] < k:
            warnings.warn(
                f"the {self.num_networks} networks span only {C.shape[1]} dimensions on the data; the last "
                f"{k - C.shape[1]} eigenpairs are set to zero",
                RuntimeWarning,
                stacklevel=2,
            )
            C = np.concatenate([C, np.zeros((C.shape[0], k - C.shape[1]))], axis=1)
            values = np.concatenate([values, np.zeros(k - values.shape[0])])
        C, values = C[:, :k], values[:k]
        # sign convention: each Ritz function's largest-magnitude network coefficient is positive
        C = C * np.where(C[np.argmax(np.abs(C), axis=0), np.arange(k)] < 0, -1.0, 1.0)[None, :]
        self._rotation.assign(C)
        self._eigenvalues.assign(np.maximum(values, 0.0))
        self._ritz_done.assign(True)
        return self

    @property
    def ritz_done(self) -> bool:
        """Whether the current outputs come from the Rayleigh–Ritz step."""
        return bool(self._ritz_done.numpy())

    @property
    def minibatch_eigenvalues(self) -> tf.Tensor:
        """Diagnostic: EMA of u_j = R̃_jj − Σ_(i<j) R̃_ij²/R̃_ii (the terms of eq. 17) per network, [p],
        in decreasing order."""
        return tf.constant(self._eigenvalue_ema.numpy()[self._minibatch_order()])

    @property
    def rayleigh_quotients(self) -> tf.Tensor:
        """Diagnostic: EMA of R̃_jj (Algorithm 1, line 7) per network, [p], in the order of
        ``minibatch_eigenvalues``; biased up by about E[κ(x, x)]/B with the paper's estimator."""
        return tf.constant(self._rayleigh_ema.numpy()[self._minibatch_order()])

    # -- prediction ----------------------------------------------------------------------------

    def __call__(self, X) -> tf.Tensor:
        """ψ(X) = (h(X) / σ̄) C [N, k] (EMA σ̄ of eq. 16; C the Ritz vectors, or a column selection
        without the Ritz step), columns in the order of ``eigenvalues``."""
        if tf.executing_eagerly():
            if self.input_dim is None or self.steps == 0:
                raise ValueError("the NeuralEF approximation is not fitted (or restored) yet")
            X = as_float64_matrix(X)
            if X.shape[1] != self.input_dim:
                raise ValueError(f"inputs have width {X.shape[1]}, the networks expect {self.input_dim}")
        return tf.matmul(self._normalised(X), self._rotation)
