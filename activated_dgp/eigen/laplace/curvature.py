"""The curvature of the linearised Laplace approximation, accumulated over the training data: the GGN
H = Σ_i F_iᵀ Λ_i F_i of each structure (exact and last layer, eigendecomposed; diagonal; Kronecker factors,
:mod:`~activated_dgp.eigen.kfac`; top-k by Lanczos, :mod:`~activated_dgp.eigen.lowrank`; projected onto the eigenfunctions' parameter subspace), and, for
``method="neuralef"``, the top-k eigenfunctions of the empirical NTK learnt by NeuralEF (Deng et al. 2022, §4.3)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import tensorflow as tf

from ..kernel_sources import FeatureKernel, PrecomputedFeatures, PrecomputedGram, ntk_kernel
from ..kfac import KroneckerFactors
from ..lowrank import top_ggn_eigenpairs
from ..neuralef import NeuralEF
from ..ntk import jacobian_kernel
from .evidence import _Evidence
from .pairs import _OutputSelector, pair_inputs


class _Curvature(_Evidence):
    """The curvature fits of :class:`~activated_dgp.eigen.LinearisedLaplace`."""

    def _ntk_source(self, X: np.ndarray):
        """The NTK on the N C training pairs (rows in the order of :func:`pair_inputs`) as NeuralEF's kernel
        source: cached Jacobians (Gram or features) when they fit the budget, else recomputed per batch."""
        C = self.num_outputs
        rows = X.shape[0] * C
        if self.ntk_samples is None and rows * self.num_parameters * 8 <= self.jacobian_cache_bytes:
            start = time.perf_counter()
            J = np.empty((rows, self.num_parameters))  # filled batch by batch: no list of parts beside it
            for batch, F in self._feature_batches(X, "training Jacobians", eigen=False):
                J[batch.start * C : batch.stop * C] = F.reshape(-1, F.shape[2])
            if rows <= self.num_parameters:  # the Gram matrix is the smaller, and a batch product the cheaper
                gram = J @ J.T
                del J
                gram += gram.T
                gram *= 0.5
                source, self.ntk_source = PrecomputedGram(gram), "gram"
            else:
                source, self.ntk_source = PrecomputedFeatures(J), "features"
            self._log(f"NTK of {rows} training pairs from cached Jacobians [{rows}, {self.num_parameters}] as {self.ntk_source} ({time.perf_counter() - start:.1f} s)")
            return source
        network = self.model if C == 1 else _OutputSelector(self.model, self.input_dim, C)
        if self.ntk_samples is None:
            self.ntk_source = "jacobians"
            if self._layerwise is not None:  # the pairs' Jacobians layer by layer (:mod:`activated_dgp.eigen.laplace`)
                D, layerwise = self.input_dim, self._layerwise
                weights = lambda A: A[:, D:] if C > 1 else tf.ones_like(A[:, :1])  # noqa: E731
                pairs = lambda A: layerwise.combination_jacobian(A[:, :D], weights(A))  # noqa: E731
                # a step's Gram of B pairs layer by layer, B² (D_in + D_out) per layer instead of forming [B, P] rows
                return FeatureKernel(pairs, 1, batch_gram=lambda A: layerwise.combination_gram(A[:, :D], weights(A)))
            return jacobian_kernel(network)
        self.ntk_source = "rademacher"
        return ntk_kernel(network, self.ntk_samples, seed=self.seed)

    def _fit_neuralef(self, X: np.ndarray, checkpoint_dir: Optional[str]) -> None:
        source = self._ntk_source(X)
        inputs = pair_inputs(X, self.num_outputs)
        options = {"seed": self.seed, **self.neuralef_options}
        self.eigenfunctions = NeuralEF(self.num_eigenpairs, input_dim=inputs.shape[1], **options)
        self._log(f"NeuralEF: top-{self.num_eigenpairs} eigenfunctions of the NTK on {inputs.shape[0]} inputs ({self.ntk_source}), {self.neuralef_steps} steps")
        # the Rayleigh–Ritz step in blocks of batch_size · C pairs, the size of a GGN batch's Jacobians [batch, C, P]
        # (NeuralEF's default 2,048 pairs held 16.7 GB in one Jacobian of the rotated-MNIST head and was killed)
        self.eigenfunctions.fit(inputs, num_steps=self.neuralef_steps, kernel=source, print_every=self.neuralef_steps // 10 if self.verbose else 0,
                                ritz_block_size=self.batch_size * self.num_outputs, checkpoint_dir=checkpoint_dir)

    def _fit_curvature(self, X: np.ndarray, Lambda: np.ndarray) -> None:
        """Accumulate the method's GGN over X with the output Hessians Λ [N, C, C] and set ``ggn_eigenvalues`` and
        ``ggn_eigenvectors`` (or the Kronecker factors ``kron``)."""
        self._log(f"GGN of method {self.method!r} over {X.shape[0]} points ({self.num_outputs} outputs)")
        ggn = None
        if self.method == "lowrank":
            batches = lambda: self._feature_batches(X, "GGN Jacobians", eigen=False)  # noqa: E731
            values, vectors = top_ggn_eigenpairs(batches, Lambda, self.num_parameters, self.num_eigenpairs, self.jacobian_cache_bytes, self._log, self.seed)
        elif self._woodbury:  # the eigenfunctions' subspace V, then V_kᵀ H V_k = Σ (J V)ᵀ Λ (J V)
            subspace, projected = self._eigenfunction_subspace(X), 0.0
            for rows, J in self._feature_batches(X, "GGN in the eigenfunction subspace", eigen=False):
                F = J @ subspace
                projected = projected + F.reshape(-1, F.shape[2]).T @ np.einsum("bcd,bdq->bcq", Lambda[rows], F).reshape(-1, F.shape[2])
            values, rotation = np.linalg.eigh(0.5 * (projected + projected.T))
            values, vectors = np.maximum(values[::-1], 0.0), subspace @ rotation[:, ::-1]
        elif self.method == "kron":
            self.kron = KroneckerFactors(self._kron_chain)
            for rows in self._progress_batches(X.shape[0], "Kronecker factors"):
                self.kron.accumulate(X[rows], Lambda[rows])
            ggn = self.kron.finalise().eigenvalues()
        elif self._layerwise_covariance and self.method == "diagonal":
            ggn = sum(self._layerwise.ggn_diagonal(X[rows], Lambda[rows]) for rows in self._progress_batches(X.shape[0], "GGN (layer-wise)"))
        for rows, F in self._feature_batches(X, "GGN") if ggn is None and not self._woodbury else ():
            # Λ_i F_i first, then one product: a three-operand np.einsum loops over b, c, d, p and q at once
            # (50 s per batch of 256 at m = 1,280, C = 10)
            weighted = np.einsum("bcd,bdq->bcq", Lambda[rows], F)
            if self.method == "diagonal":
                term = np.einsum("bcp,bcp->p", F, weighted)
            else:
                term = F.reshape(-1, F.shape[2]).T @ weighted.reshape(-1, F.shape[2])
            ggn = term if ggn is None else ggn + term
        if self._woodbury:
            self.ggn_eigenvalues, self.ggn_eigenvectors = values, vectors
        elif self.method in ("diagonal", "kron"):
            self.ggn_eigenvalues, self.ggn_eigenvectors = ggn, None
        else:
            values, vectors = np.linalg.eigh(0.5 * (ggn + ggn.T))
            self.ggn_eigenvalues, self.ggn_eigenvectors = np.maximum(values, 0.0), vectors

    def _eigenfunction_subspace(self, X: np.ndarray) -> np.ndarray:
        """V_k [P, k]: an orthonormal basis of the parameter directions w_j = Σ_i J_iᵀ ψ_j(x_i) / (N √μ_j) of the
        eigenfunctions' Nyström extension (:mod:`activated_dgp.eigen.laplace`), eigenvalues μ_j ≤ 0 left out."""
        mu = np.asarray(tf.convert_to_tensor(self.eigenfunctions.eigenvalues), dtype=np.float64).reshape(-1)
        W = 0.0
        for rows, J in self._feature_batches(X, "eigenfunction subspace", eigen=False):
            W = W + np.einsum("bcp,bck->pk", J, self._eigen_features(X[rows]))  # Σ J_iᵀ √μ ψ(x_i)
        keep = mu > 0
        W = W[:, keep] / (X.shape[0] * self.num_outputs * mu[keep])
        Q, R = np.linalg.qr(W)
        return Q[:, np.abs(np.diag(R)) > 1e-12 * max(np.abs(np.diag(R)).max(), 1e-300)]
