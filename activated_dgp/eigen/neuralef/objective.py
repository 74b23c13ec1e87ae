"""NeuralEF's objective on a minibatch (Deng et al., 2022, Sec. 3): the kernel products κ(X_b, X_b) Ψ without an N × N
matrix, and the minibatch estimate R̃ of eq. 15 (``"paper"``) or its diagonal-free variant (``"unbiased"``), from which
eq. 17's loss and eq. 18's gradient follow (see :mod:`activated_dgp.eigen.neuralef`)."""

from __future__ import annotations

import tensorflow as tf

from ..kernel_sources import FeatureKernel, GPflowKernel, KernelSource, PrecomputedGram, is_indexed

ESTIMATORS = ("paper", "unbiased")


def _kernel_products(source: KernelSource, rows: tf.Tensor, X_batch: tf.Tensor, V: tf.Tensor):
    """κ(X_b, X_b) V [B, p] and diag κ(X_b, X_b) [B] (None for a user source that only has a batch
    product), without an N × N matrix.

    A FeatureKernel's features are computed once for both (Φ (Φᵀ V) / S and Σ_s φ_s² / S), or its batch Gram
    when it has one (``batch_gram``); a PrecomputedGram or PrecomputedFeatures is indexed by the batch's row
    numbers ``rows``.
    """
    if isinstance(source, FeatureKernel) and (source.batch_gram is None or is_indexed(source)):
        Phi = tf.cast(source.feature_map(rows if is_indexed(source) else X_batch), tf.float64)
        product = tf.matmul(Phi, tf.matmul(Phi, V, transpose_a=True)) / source.num_samples
        return product, tf.reduce_sum(Phi**2, axis=1) / source.num_samples
    if isinstance(source, FeatureKernel):
        K = source.gram(X_batch)
    elif isinstance(source, PrecomputedGram):
        K = tf.gather(tf.gather(source.matrix, rows), rows, axis=1)
    elif isinstance(source, GPflowKernel) or type(source).batch_product is KernelSource.batch_product:
        K = tf.cast(source.gram(X_batch), tf.float64)
    else:  # a user source with its own batch product
        return tf.cast(source.batch_product(X_batch, V), tf.float64), None
    return tf.matmul(K, V), tf.linalg.diag_part(K)


def minibatch_rayleigh(Psi, KPsi, diagonal, estimator: str = "paper"):
    """The minibatch estimate R̃ [p, p] of R_ij = E_(x,x')[ψ_i(x) κ(x, x') ψ_j(x')], and the matrix
    whose columns eq. 18 pulls back, from Ψ = ψ(X_b) [B, p], κΨ [B, p] and diag κ(X_b, X_b) [B].

    * ``"paper"`` (eq. 15, diagonal included): R̃ = Ψᵀ κ Ψ / B². Over batches drawn without
      replacement from N points its expectation is
      (B−1)/(B(N−1)) Σ_(n≠m) ψ_i(x_n) κ_nm ψ_j(x_m) / N  +  (1/B) Σ_n κ_nn ψ_i(x_n) ψ_j(x_n) / N.
    * ``"unbiased"`` (diagonal removed): R̃ = (Ψᵀ κ Ψ − Σ_b κ_bb ψ_ib ψ_jb) / (B (B − 1)), whose
      expectation is Σ_(n≠m) ψ_i(x_n) κ_nm ψ_j(x_m) / (N (N − 1)).

    Returns (R̃ [p, p] symmetrised, κ'Ψ [B, p], scale) with κ' = κ − diag κ for ``"unbiased"``
    (κ otherwise) and scale the factor 1/B² or 1/(B(B−1)), so that ∂(Σ_ij R̃_ij)/∂ψ = scale · κ'Ψ.
    """
    B = tf.cast(tf.shape(Psi)[0], tf.float64)
    if estimator == "unbiased":
        if diagonal is None:
            raise ValueError("the unbiased estimator needs the kernel's diagonal; this kernel source gives only a batch product")
        KPsi = KPsi - diagonal[:, None] * Psi
        scale = 1.0 / (B * (B - 1.0))
    elif estimator == "paper":
        scale = 1.0 / B**2
    else:
        raise ValueError(f"unknown estimator {estimator!r}; use one of {ESTIMATORS}")
    R = scale * tf.matmul(Psi, KPsi, transpose_a=True)
    return 0.5 * (R + tf.transpose(R)), KPsi, scale
