"""Kronecker-factored generalised Gauss–Newton (KFAC) for the Dense and Conv2D layers of a chain network, for the
linearised Laplace approximation (``LinearisedLaplace(method="kron")``; the layers: :mod:`.kfac_chain`).

A Dense layer z = h V + b with the bias folded in, z = ã W̃ (ã = [h, 1] of size in + 1, W̃ = [V; b] of shape (in + 1) × out,
flattened row-major: V's rows, then b, the order of the layer's kernel and bias), has the per-example Jacobian
∂g_c/∂W̃_ij = ã_i ε_cj, with ε_c = ∂g_c/∂z [out] the back-propagated signal of output c. The layer's block of
the GGN Σ_n J_nᵀ Λ_n J_n is therefore exactly

    H_l = Σ_n (ã_n ã_nᵀ) ⊗ (E_nᵀ Λ_n E_n),        E_n = [ε_n1; …; ε_nC] [C, out],

and KFAC (Martens & Grosse 2015, eq. 1 and §3; for the Laplace posterior Ritter et al. 2018, "A scalable
Laplace approximation for neural networks", eq. 5–8) replaces the expectation of a product by the product of
expectations:

    H_l ≈ A_l ⊗ G_l,      A_l = (1/N) Σ_n ã_n ã_nᵀ  ((in + 1) × (in + 1)),      G_l = Σ_n E_nᵀ Λ_n E_n  (out × out),

which is exact for N = 1. A Conv2D layer is a Dense layer applied at each output position t ∈ T to the unfolded
input patch ã_nt = [⟦h_n⟧_t, 1] (size k_h k_w C_in + 1; W̃ = [K reshaped to (k_h k_w C_in) × C_out; b]), so its
Jacobian is Σ_t ã_nt ⊗ ε_nct and its block Σ_n Σ_tt' (ã_nt ã_nt'ᵀ) ⊗ (E_ntᵀ Λ_n E_nt'). KFC (Grosse & Martens 2016,
"A Kronecker-factored approximate Fisher matrix for convolution layers", §3: spatially uncorrelated derivatives
drop t ≠ t', spatial homogeneity and independence of activations and derivatives factor the rest) gives

    H_l ≈ A_l ⊗ G_l,      A_l = (1/(N |T|)) Σ_n Σ_t ã_nt ã_ntᵀ,      G_l = Σ_n Σ_t E_ntᵀ Λ_n E_nt,

the Dense factors with the (n, t) pairs as examples (the "expand" form; exact for N = 1 when |T| = 1). Cross-layer
blocks are dropped (block-diagonal GGN). The output-side factor uses all C signals and the likelihood's exact
output Hessian Λ_n (I/σ², s(1 − s), diag p − ppᵀ), not a Monte Carlo sample of labels as Martens & Grosse's Fisher
does: this is the "exact" Kronecker-factored GGN (KFLR, Botev et al. 2017, "Practical Gauss–Newton optimisation
for deep learning"), the same factorisation laplace-torch's ``KronLaplace`` takes by default with its GGN backends.

The library's ``ActivatedLayer`` has no Kronecker form: unit m's gradient ∂Φ_m/∂w_m = S'(t) x̃ + α w_m
(:meth:`~activated_dgp.eigen.layerwise.LayerwiseJacobian._unit_factors`) is not an input vector times an output
signal. With ``kron_fallback="diagonal"`` its block is the exact diagonal of its GGN block, Σ_n G_nmk² q_nm with
q_nm = Σ_cc' δ_ncm Λ_ncc' δ_nc'm (:mod:`.layerwise`), so that a network mixing both is covered.

The posterior precision of a Kronecker block, A ⊗ G + δ I, is inverted through the eigendecompositions
A = Q_A diag(a) Q_Aᵀ, G = Q_G diag(g) Q_Gᵀ: its eigenvalues are a_i g_j + δ and its eigenvectors Q_A ⊗ Q_G (no
(in+1)·out square matrix is formed). For the latent covariance, the layer's Jacobian of output c is the
(in + 1) × out matrix J_c = Σ_t ã_t ε_ctᵀ, so with M_c = Q_Aᵀ J_c Q_G

    J_l(x) Σ_l J_l(x)ᵀ [c, c'] = Σ_ij M_c,ij M_c',ij / (a_i g_j + δ),

(for a Dense layer M_c = u v_cᵀ with u = Q_Aᵀ ã, v_c = Q_Gᵀ ε_c), summed over layers; log det(H + δ I) =
Σ_l Σ_ij log(a_i g_j + δ), so the Laplace evidence is as cheap as for the diagonal GGN.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .kfac_chain import ACTIVATED, KroneckerChain

__all__ = ["KroneckerFactors"]

#: the most numbers of the per-example matrices M_c [B, C, in + 1, out] a convolution's covariance holds at once
_CHUNK_NUMBERS = 2**22


class KroneckerFactors:
    """The Kronecker factors of the GGN's blocks (module docstring), accumulated over batches.

    After :meth:`accumulate` over the data and :meth:`finalise`, ``A[l]`` [in+1, in+1] and ``G[l]`` [out, out] hold
    H_l ≈ A_l ⊗ G_l (np.kron order: the layer's kernel rows, then its bias), with their eigendecompositions
    ``eigen[l] = (a, Q_A, g, Q_G)``; for an ActivatedLayer (``kinds[l] == "activated"``) ``A[l]`` holds the GGN
    block's diagonal [M (D + 1)], ``G[l]`` is None and ``eigen[l] = (diagonal,)``."""

    def __init__(self, chain: KroneckerChain):
        self.chain = chain
        self.names, self.kinds, self.has_bias = chain.names, chain.kinds, chain.has_bias
        self.A: List = [0.0] * len(self.names)
        self.G: List = [0.0] * len(self.names)
        self.positions = [1] * len(self.names)
        self.num_points = 0

    def _augmented(self, inputs: np.ndarray, index: int) -> np.ndarray:
        """[B, T, in (+ 1)]: the inputs with the bias's 1 appended."""
        if not self.has_bias[index]:
            return inputs
        return np.concatenate([inputs, np.ones(inputs.shape[:2] + (1,))], axis=2)

    def accumulate(self, X: np.ndarray, output_hessians: np.ndarray) -> None:
        """Add a batch X [B, D] with its output Hessians Λ [B, C, C] to the sums Σ ã ãᵀ and Σ Eᵀ Λ E (over examples
        and positions), or to the diagonal of an ActivatedLayer's block."""
        for index, (kind, inputs, signals, units) in enumerate(self.chain.pieces(X)):
            if kind == ACTIVATED:
                s = signals[:, :, 0, :]  # [B, C, M]
                q = np.einsum("bcm,bcd,bdm->bm", s, output_hessians, s)
                self.A[index] = self.A[index] + np.einsum("bmk,bm->mk", units**2, q).reshape(-1)
                continue
            a = self._augmented(inputs, index)
            B, T = a.shape[:2]
            flat = a.reshape(B * T, -1)
            self.A[index] = self.A[index] + flat.T @ flat
            weighted = np.matmul(output_hessians, signals.reshape(B, signals.shape[1], -1)).reshape(signals.shape)  # Λ E
            self.G[index] = self.G[index] + np.tensordot(signals, weighted, axes=([0, 1, 2], [0, 1, 2]))
            self.positions[index] = T
        self.num_points += X.shape[0]

    def finalise(self) -> "KroneckerFactors":
        """A = Σ ã ãᵀ / (N |T|), symmetrise, and eigendecompose both factors (negative round-off clipped to 0)."""
        self.eigen = []
        for index, (A, G) in enumerate(zip(self.A, self.G)):
            if self.kinds[index] == ACTIVATED:
                self.G[index] = None
                self.eigen.append((np.asarray(A, dtype=np.float64),))
                continue
            A = self.A[index] = A / (self.num_points * self.positions[index])
            a, QA = np.linalg.eigh(0.5 * (A + A.T))
            g, QG = np.linalg.eigh(0.5 * (G + G.T))
            self.eigen.append((np.maximum(a, 0.0), QA, np.maximum(g, 0.0), QG))
        return self

    @classmethod
    def from_arrays(cls, chain: KroneckerChain, arrays: dict) -> "KroneckerFactors":
        """The factors saved by :meth:`arrays`."""
        factors = cls(chain)
        factors.num_points = 1
        factors.eigen = []
        for l, kind in enumerate(factors.kinds):
            if kind == ACTIVATED:
                factors.A[l], factors.G[l] = arrays[f"kron_d_{l}"], None
                factors.eigen.append((arrays[f"kron_d_{l}"],))
            else:
                factors.A[l], factors.G[l] = arrays[f"kron_A_{l}"], arrays[f"kron_G_{l}"]
                factors.eigen.append(tuple(arrays[f"kron_{name}_{l}"] for name in ("a", "QA", "g", "QG")))
        return factors

    def arrays(self) -> dict:
        """The factors and their eigendecompositions, for ``np.savez``."""
        saved = {}
        for l, (A, G, eigen) in enumerate(zip(self.A, self.G, self.eigen)):
            if self.kinds[l] == ACTIVATED:
                saved[f"kron_d_{l}"] = A
            else:
                saved.update({f"kron_A_{l}": A, f"kron_G_{l}": G})
                saved.update({f"kron_{name}_{l}": part for name, part in zip(("a", "QA", "g", "QG"), eigen)})
        return saved

    def scale_output_factors(self, scale: float) -> None:
        """Multiply every G_l (and its eigenvalues; a diagonal block wholly) by ``scale``: a Gaussian likelihood's GGN
        at another noise σ² (Λ = I/σ², so G ∝ 1/σ²)."""
        for l, eigen in enumerate(self.eigen):
            if self.kinds[l] == ACTIVATED:
                self.A[l] = self.A[l] * scale
                self.eigen[l] = (eigen[0] * scale,)
            else:
                self.G[l] = self.G[l] * scale
                a, QA, g, QG = eigen
                self.eigen[l] = (a, QA, g * scale, QG)

    def _block_eigenvalues(self, l: int) -> np.ndarray:
        eigen = self.eigen[l]
        return eigen[0] if len(eigen) == 1 else np.outer(eigen[0], eigen[2]).reshape(-1)

    def layer_sizes(self) -> List[int]:
        """The number of parameters of each layer's block (its kernel and bias)."""
        return [self._block_eigenvalues(l).size for l in range(len(self.eigen))]

    def eigenvalues(self) -> np.ndarray:
        """All eigenvalues of the block-diagonal GGN [P], layer by layer (a_i g_j; a diagonal block's entries)."""
        return np.concatenate([self._block_eigenvalues(l) for l in range(len(self.eigen))])

    def dense_blocks(self) -> List[np.ndarray]:
        """A_l ⊗ G_l (or the diagonal block) for each layer (dense; for small layers and checks)."""
        return [np.diag(A) if G is None else np.kron(A, G) for A, G in zip(self.A, self.G)]

    def _deltas(self, delta) -> np.ndarray:
        return np.broadcast_to(np.asarray(delta, dtype=np.float64), (len(self.eigen),))

    def covariance(self, X: np.ndarray, delta) -> np.ndarray:
        """J(x) (block-diagonal (A_l ⊗ G_l + δ_l I)⁻¹) J(x)ᵀ [B, C, C] for each row of X [B, D]; δ a scalar or one
        value per layer."""
        total = 0.0
        for index, ((kind, inputs, s, units), eigen, delta) in enumerate(zip(self.chain.pieces(X), self.eigen, self._deltas(delta))):
            if kind == ACTIVATED:
                s = s[:, :, 0, :]
                weights = np.einsum("bmk,mk->bm", units**2, (1.0 / (eigen[0] + delta)).reshape(units.shape[1:]))
                total = total + np.einsum("bcj,bdj->bcd", s * weights[:, None, :], s)
                continue
            a, QA, g, QG = eigen
            inverse = 1.0 / (np.outer(a, g) + delta)  # [in+1, out]
            u = self._augmented(inputs, index) @ QA  # [B, T, in+1]
            v = np.matmul(s, QG)  # [B, C, T, out]
            if u.shape[1] == 1:  # Dense: M_c = u v_cᵀ
                v = v[:, :, 0, :]
                weights = (u[:, 0, :] ** 2) @ inverse  # [B, out]
                total = total + np.matmul(v * weights[:, None, :], np.swapaxes(v, 1, 2))
                continue
            B, C = v.shape[:2]
            step = max(1, _CHUNK_NUMBERS // (C * inverse.size))
            parts = []
            for start in range(0, B, step):
                M = np.matmul(np.swapaxes(u[start : start + step], 1, 2)[:, None], v[start : start + step])  # [b, C, in+1, out]
                flat = M.reshape(M.shape[0], C, -1)
                parts.append(np.matmul(flat * inverse.reshape(-1), np.swapaxes(flat, 1, 2)))
            total = total + np.concatenate(parts, axis=0)
        return total

    def root_times(self, Z: np.ndarray, delta) -> np.ndarray:
        """R Z [P, S] for standard normals Z [P, S], R Rᵀ the block-diagonal posterior covariance at δ (a scalar or one
        per layer): per Kronecker block, with Z_l [in + 1, out] its part of a column, R Z_l = Q_A (Z_l ⊘ sqrt(a gᵀ + δ)) Q_Gᵀ
        (row-major vec(A X Bᵀ) = (A ⊗ B) vec(X)); a diagonal block scales by (d + δ)^(−½)."""
        blocks, start = [], 0
        for index, (eigen, delta) in enumerate(zip(self.eigen, self._deltas(delta))):
            size = self.layer_sizes()[index]
            block = Z[start : start + size]
            start += size
            if len(eigen) == 1:
                blocks.append(block / np.sqrt(eigen[0] + delta)[:, None])
                continue
            a, QA, g, QG = eigen
            scaled = block.reshape(a.size, g.size, -1) / np.sqrt(np.outer(a, g) + delta)[:, :, None]  # [in + 1, out, S]
            blocks.append(np.einsum("ik,kls,jl->ijs", QA, scaled, QG).reshape(size, -1))
        return np.concatenate(blocks, axis=0)
