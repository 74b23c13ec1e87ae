"""The top-k eigenpairs of a network's generalised Gauss–Newton matrix by Lanczos, for the low-rank linearised
Laplace approximation (``LinearisedLaplace(method="lowrank")``, laplace-torch's ``hessian_structure="lowrank"``).

The GGN of the training data is H = Σ_i J_iᵀ Λ_i J_i [P, P] (J_i = ∂_θ g(x_i) [C, P], Λ_i the likelihood's output
Hessian). It is never formed: the Lanczos iteration (ARPACK's implicitly restarted Lanczos through
``scipy.sparse.linalg.eigsh``; Lehoucq, Sorensen & Yang 1998) only needs products H v = Σ_i J_iᵀ (Λ_i (J_i v)),
each one pass over the per-example Jacobians, which are kept in memory when they fit a byte budget and recomputed
batch by batch otherwise. The result H ≈ V diag(e) Vᵀ (V [P, k] orthonormal, e the k largest eigenvalues) gives the
posterior precision V diag(e) Vᵀ + δ I of Daxberger et al. 2021 ("Laplace Redux", §3.2, the low-rank Hessian
approximation), whose inverse, by Woodbury, is

    Σ = δ⁻¹ I − V diag(e / (δ (e + δ))) Vᵀ,

so J(x) Σ J(x)ᵀ = δ⁻¹ J(x) J(x)ᵀ − (J(x) V) diag(e / (δ (e + δ))) (J(x) V)ᵀ, and
log det(V diag(e) Vᵀ + δ I) = Σ_j log(e_j + δ) + (P − k) log δ.
"""

from __future__ import annotations

from typing import Callable, Iterable, Tuple

import numpy as np
from scipy.sparse.linalg import LinearOperator, eigsh

__all__ = ["top_ggn_eigenpairs"]


def top_ggn_eigenpairs(
    feature_batches: Callable[[], Iterable[Tuple[slice, np.ndarray]]],
    output_hessians: np.ndarray,
    num_parameters: int,
    rank: int,
    cache_bytes: int,
    log: Callable[[str], None] = lambda message: None,
    seed: int = 0,
) -> Tuple[np.ndarray, np.ndarray]:
    """The ``rank`` largest eigenvalues e [k] (descending, clipped at 0) and orthonormal eigenvectors V [P, k] of
    H = Σ_i J_iᵀ Λ_i J_i by Lanczos.

    :param feature_batches: a callable returning an iterable of (row slice, J [B, C, P]) over the training data.
    :param output_hessians: Λ [N, C, C].
    :param num_parameters: P.
    :param rank: k, with 1 ≤ k < P (ARPACK's limit; for k = P use the exact method).
    :param cache_bytes: the Jacobians (N C P float64 numbers) are computed once and kept when they take at most this
        many bytes, else recomputed at every product.
    :param log: a function taking progress messages.
    :param seed: the seed of Lanczos's start vector.
    """
    if not 1 <= rank < num_parameters:
        raise ValueError(
            f"a low-rank GGN needs 1 ≤ rank < P = {num_parameters} (the number of parameters), got rank={rank}; "
            "for rank P use method='exact'"
        )
    N, C = output_hessians.shape[0], output_hessians.shape[1]
    cached = list(feature_batches()) if N * C * num_parameters * 8 <= cache_bytes else None
    products = [0]

    def matvec(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        result = np.zeros(num_parameters)
        for rows, J in cached if cached is not None else feature_batches():
            weighted = np.einsum("bcd,bd->bc", output_hessians[rows], J @ v)  # Λ_i (J_i v)
            result += J.reshape(-1, num_parameters).T @ weighted.reshape(-1)
        products[0] += 1
        if products[0] % 20 == 0:
            log(f"Lanczos: {products[0]} GGN-vector products")
        return result

    operator = LinearOperator((num_parameters, num_parameters), matvec=matvec, dtype=np.float64)
    start = np.random.default_rng(seed).standard_normal(num_parameters)
    values, vectors = eigsh(operator, k=rank, which="LA", v0=start)
    order = np.argsort(values)[::-1]
    log(f"Lanczos: top {rank} GGN eigenpairs after {products[0]} products (largest {values[order[0]]:.4g}, smallest kept {values[order[-1]]:.4g})")
    return np.maximum(values[order], 0.0), vectors[:, order]
