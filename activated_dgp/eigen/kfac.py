"""Kronecker-factored generalised Gauss–Newton (KFAC) for the Dense layers of a chain network, for the
linearised Laplace approximation (``LinearisedLaplace(method="kron")``).

A Dense layer z = h V + b with the bias folded in, z = ã W̃ (ã = [h, 1] [in + 1], W̃ = [V; b] [in + 1, out],
flattened row-major: V's rows, then b, the order of the layer's kernel and bias), has the per-example Jacobian
∂g_c/∂W̃_ij = ã_i ε_cj, with ε_c = ∂g_c/∂z [out] the back-propagated signal of output c. The layer's block of
the GGN Σ_n J_nᵀ Λ_n J_n is therefore exactly

    H_l = Σ_n (ã_n ã_nᵀ) ⊗ (E_nᵀ Λ_n E_n),        E_n = [ε_n1; …; ε_nC] [C, out],

and KFAC (Martens & Grosse 2015, eq. 1 and §3; for the Laplace posterior Ritter et al. 2018, "A scalable
Laplace approximation for neural networks", eq. 5–8) replaces the expectation of a product by the product of
expectations:

    H_l ≈ A_l ⊗ G_l,      A_l = (1/N) Σ_n ã_n ã_nᵀ  [in + 1, in + 1],      G_l = Σ_n E_nᵀ Λ_n E_n  [out, out],

which is exact for N = 1. Cross-layer blocks are dropped (block-diagonal GGN). The output-side factor uses all
C signals and the likelihood's exact output Hessian Λ_n (I/σ², s(1 − s), diag p − ppᵀ), not a Monte Carlo sample
of labels as Martens & Grosse's Fisher does: this is the "exact" Kronecker-factored GGN (KFLR, Botev et al. 2017,
"Practical Gauss–Newton optimisation for deep learning"), the same factorisation laplace-torch's
``KronLaplace`` takes by default with its GGN backends. The C backward passes a batch takes are the ones the
other layer-wise methods use.

The posterior precision of the layer, A ⊗ G + δ I, is inverted through the eigendecompositions A = Q_A diag(a) Q_Aᵀ,
G = Q_G diag(g) Q_Gᵀ: its eigenvalues are a_i g_j + δ and its eigenvectors Q_A ⊗ Q_G (no (in+1)·out square matrix
is formed). For the latent covariance, J_l(x) for output c is ã ⊗ ε_c, so with u = Q_Aᵀ ã and v_c = Q_Gᵀ ε_c

    J_l(x) Σ_l J_l(x)ᵀ [c, c'] = Σ_j v_cj v_c'j Σ_i u_i² / (a_i g_j + δ),

summed over layers; log det(H + δ I) = Σ_l Σ_ij log(a_i g_j + δ), so the Laplace evidence is as cheap as for the
diagonal GGN.
"""

from __future__ import annotations

from typing import List

import numpy as np

from ..deep.twin import ActivatedLayer

__all__ = ["KroneckerFactors", "check_kron_layers"]


def check_kron_layers(layerwise, model) -> None:
    """Raise ValueError unless ``layerwise`` (a :class:`~activated_dgp.eigen.layerwise.LayerwiseJacobian` or None)
    covers Dense layers only, each kernel directly followed by its bias in the variables."""
    if layerwise is None:
        kinds = sorted({type(layer).__name__ for layer in getattr(model, "layers", [])})
        raise ValueError(
            "method='kron' needs a tf_keras.Sequential chain of Dense layers (parameter-free Activation, Dropout and "
            f"InputLayer between them) whose weights are all trainable or all frozen; this model's layers are {kinds}"
        )
    for layer, first, bias in layerwise.slots:
        if isinstance(layer, ActivatedLayer) or not hasattr(layer, "kernel"):
            raise ValueError(f"method='kron' supports Dense layers only; layer {layer.name!r} is a {type(layer).__name__}")
        if bias is not None and bias != first + 1:
            raise ValueError(f"layer {layer.name!r}: its bias must follow its kernel in the variables")


class KroneckerFactors:
    """The Kronecker factors of the GGN's Dense-layer blocks (module docstring), accumulated over batches.

    After :meth:`accumulate` over the data and :meth:`finalise`, ``A[l]`` [in+1, in+1] and ``G[l]`` [out, out] hold
    H_l ≈ A_l ⊗ G_l (np.kron order: the layer's kernel rows, then its bias), with their eigendecompositions."""

    def __init__(self, layerwise):
        self.layerwise = layerwise
        self.names = [layer.name for layer, _, _ in layerwise.slots]
        self.has_bias = [bias is not None for _, _, bias in layerwise.slots]
        self.A: List[np.ndarray] = [0.0] * len(self.names)
        self.G: List[np.ndarray] = [0.0] * len(self.names)
        self.num_points = 0

    def _augmented(self, h: np.ndarray, index: int) -> np.ndarray:
        return np.concatenate([h, np.ones((h.shape[0], 1))], axis=1) if self.has_bias[index] else h

    def accumulate(self, X: np.ndarray, output_hessians: np.ndarray) -> None:
        """Add a batch X [B, D] with its output Hessians Λ [B, C, C] to the sums Σ ã ãᵀ and Σ Eᵀ Λ E."""
        for index, (_, h, s, _) in enumerate(self.layerwise._pieces(X)):
            a = self._augmented(h, index)
            self.A[index] = self.A[index] + a.T @ a
            weighted = np.matmul(output_hessians, s)  # Λ E [B, C, out]
            self.G[index] = self.G[index] + np.einsum("bci,bcj->ij", s, weighted)
        self.num_points += X.shape[0]

    def finalise(self) -> "KroneckerFactors":
        """A = Σ ã ãᵀ / N, symmetrise, and eigendecompose both factors (negative round-off clipped to 0)."""
        self.A = [A / self.num_points for A in self.A]
        self.eigen = []
        for A, G in zip(self.A, self.G):
            a, QA = np.linalg.eigh(0.5 * (A + A.T))
            g, QG = np.linalg.eigh(0.5 * (G + G.T))
            self.eigen.append((np.maximum(a, 0.0), QA, np.maximum(g, 0.0), QG))
        return self

    @classmethod
    def from_arrays(cls, layerwise, arrays: dict) -> "KroneckerFactors":
        """The factors saved by :meth:`arrays`."""
        factors = cls(layerwise)
        count = len(factors.names)
        factors.A = [arrays[f"kron_A_{l}"] for l in range(count)]
        factors.G = [arrays[f"kron_G_{l}"] for l in range(count)]
        factors.num_points = 1
        factors.eigen = [(arrays[f"kron_a_{l}"], arrays[f"kron_QA_{l}"], arrays[f"kron_g_{l}"], arrays[f"kron_QG_{l}"]) for l in range(count)]
        return factors

    def arrays(self) -> dict:
        """The factors and their eigendecompositions, for ``np.savez``."""
        saved = {}
        for l, (A, G, (a, QA, g, QG)) in enumerate(zip(self.A, self.G, self.eigen)):
            saved.update({f"kron_A_{l}": A, f"kron_G_{l}": G, f"kron_a_{l}": a, f"kron_QA_{l}": QA, f"kron_g_{l}": g, f"kron_QG_{l}": QG})
        return saved

    def scale_output_factors(self, scale: float) -> None:
        """Multiply every G_l (and its eigenvalues) by ``scale``: a Gaussian likelihood's GGN at another noise σ²
        (Λ = I/σ², so G ∝ 1/σ²)."""
        self.G = [G * scale for G in self.G]
        self.eigen = [(a, QA, g * scale, QG) for a, QA, g, QG in self.eigen]

    def layer_sizes(self) -> List[int]:
        """The number of parameters of each layer's block (its kernel and bias)."""
        return [a.size * g.size for a, _, g, _ in self.eigen]

    def eigenvalues(self) -> np.ndarray:
        """All eigenvalues a_i g_j of the block-diagonal Kronecker GGN [P] (for the log-determinant)."""
        return np.concatenate([np.outer(a, g).reshape(-1) for a, _, g, _ in self.eigen])

    def dense_blocks(self) -> List[np.ndarray]:
        """A_l ⊗ G_l for each layer (dense; for small layers and checks)."""
        return [np.kron(A, G) for A, G in zip(self.A, self.G)]

    def covariance(self, X: np.ndarray, delta) -> np.ndarray:
        """J(x) (Σ_l-block-diagonal (A_l ⊗ G_l + δ_l I)⁻¹) J(x)ᵀ [B, C, C] for each row of X [B, D]; δ a scalar or one
        value per layer."""
        total = 0.0
        deltas = np.broadcast_to(np.asarray(delta, dtype=np.float64), (len(self.eigen),))
        for index, ((_, h, s, _), (a, QA, g, QG), delta) in enumerate(zip(self.layerwise._pieces(X), self.eigen, deltas)):
            u2 = (self._augmented(h, index) @ QA) ** 2  # [B, in+1]
            v = s @ QG  # [B, C, out]
            weights = u2 @ (1.0 / (np.outer(a, g) + delta))  # [B, out]
            total = total + np.matmul(v * weights[:, None, :], np.swapaxes(v, 1, 2))
        return total
