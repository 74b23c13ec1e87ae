"""The Rayleigh–Ritz step: the best eigenpairs of a kernel operator within the span of p given functions.

Given functions h_1..h_p (e.g. trained NeuralEF networks) evaluated on N points x_1..x_N of q, write
a candidate eigenfunction as f = Σ_i c_i h_i. The Rayleigh quotient of the empirical operator
(K_N f)(x) = (1/N) Σ_n κ(x, x_n) f(x_n) (the one Nyström diagonalises) is

    R(c) = cᵀ A c / cᵀ M c,     A = Hᵀ K H / N²  [p, p],     M = Hᵀ H / N  [p, p],

with H_ni = h_i(x_n) and K = κ(X, X). Its stationary points solve the generalised eigenproblem
A c = λ M c (Rayleigh–Ritz; the same problem as IKA's eq. 5 with the networks as basis). The Ritz
values λ_1 ≥ … ≥ λ_p never exceed the operator's eigenvalues (Courant–Fischer, μ_j ≥ λ_j) and equal
them, with the Ritz functions ψ_j = H c_j equal to the eigenfunctions, when span{h_i} contains the top
eigenfunctions. Normalised as cᵀ M c = 1, the ψ_j are orthonormal on the N points.

:func:`span_products` forms A and M in row blocks, never N × N: for a Gram-based source each block
costs κ(X_b, X) [b, N]; a :class:`FeatureKernel` (κ = Φ Φᵀ / S) needs only Φᵀ H [S, p].
:func:`generalised_eigh` solves A c = λ M c when M is singular or ill-conditioned (two networks that
learnt the same function) by dropping the directions of M below a relative tolerance.
"""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np
import tensorflow as tf

from .kernel_sources import FeatureKernel, KernelSource

__all__ = ["span_products", "generalised_eigh"]


def _blocks(N: int, block_size: int):
    for start in range(0, N, block_size):
        yield start, min(N, start + block_size)


def span_products(
    source: KernelSource, X, functions: Callable, block_size: int = 2048, kernel_inputs=None
) -> Tuple[np.ndarray, np.ndarray]:
    """(A, M) = (Hᵀ K H / N², Hᵀ H / N) for H = functions(X) [N, p] and K = κ(X, X), in row blocks.

    :param X: the N points [N, D].
    :param functions: X_block → H_block [b, p].
    :param kernel_inputs: what ``source`` takes for these points when not X itself (the row
        indices [N] for a PrecomputedGram).
    :raises ValueError: if the source returns a block of the wrong shape.
    """
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    N = int(X.shape[0])
    H = np.concatenate([np.asarray(functions(X[a:b]), dtype=np.float64) for a, b in _blocks(N, int(block_size))], axis=0)
    if H.ndim != 2 or H.shape[0] != N:
        raise ValueError(f"the functions returned shape {H.shape} on {N} inputs, expected [N, p]")
    p = H.shape[1]
    M = H.T @ H / N
    Z = X if kernel_inputs is None else kernel_inputs
    if isinstance(source, FeatureKernel):
        projection = 0.0
        for a, b in _blocks(N, int(block_size)):
            Phi = np.asarray(source.feature_map(tf.convert_to_tensor(Z[a:b])), dtype=np.float64)
            if Phi.ndim != 2 or Phi.shape[0] != b - a:
                raise ValueError(f"the kernel source's feature map returned shape {Phi.shape} for {b - a} inputs, expected [{b - a}, S]")
            projection = projection + Phi.T @ H[a:b]  # Φᵀ H, [S, p]
        A = projection.T @ projection / (source.num_samples * N**2)
    else:
        A = np.zeros((p, p))
        for a, b in _blocks(N, int(block_size)):
            K = np.asarray(source.gram(Z[a:b], Z), dtype=np.float64)
            if K.shape != (b - a, N):
                raise ValueError(f"the kernel source returned a block of shape {K.shape}, expected {(b - a, N)}")
            A += H[a:b].T @ (K @ H)
        A /= N**2
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(M))):
        raise ValueError("the Rayleigh–Ritz matrices contain NaN or inf (non-finite kernel values or network outputs)")
    return 0.5 * (A + A.T), 0.5 * (M + M.T)


def generalised_eigh(A: np.ndarray, M: np.ndarray, relative_tolerance: float = 1e-10) -> Tuple[np.ndarray, np.ndarray]:
    """Solve A c = λ M c (A symmetric, M symmetric PSD), largest λ first.

    M = U diag(s) Uᵀ is restricted to its r directions with s > tol · max s, then
    T = U_r diag(s_r^(−½)) whitens it and the ordinary symmetric problem (Tᵀ A T) v = λ v gives
    c = T v, so cᵀ M c = 1. Returns (λ [r], C [p, r]); r < p when M is (numerically) singular.
    """
    A, M = np.asarray(A, dtype=np.float64), np.asarray(M, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or M.shape != A.shape:
        raise ValueError(f"A and M must be square matrices of one shape, got {A.shape} and {M.shape}")
    s, U = np.linalg.eigh(0.5 * (M + M.T))
    if s[-1] <= 0:
        raise ValueError("the Gram matrix of the functions, M, is zero: the functions vanish on the points")
    keep = s > relative_tolerance * s[-1]
    T = U[:, keep] / np.sqrt(s[keep])[None, :]
    values, V = np.linalg.eigh(T.T @ (0.5 * (A + A.T)) @ T)
    order = np.argsort(values)[::-1]
    return values[order], T @ V[:, order]
