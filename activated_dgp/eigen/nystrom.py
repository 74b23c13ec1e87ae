"""The Nyström method: eigenpairs of a kernel's integral operator from the Gram matrix of N points.

Given landmarks x_1..x_N drawn from q and G = κ(X, X) = U diag(λ) Uᵀ (λ_1 ≥ λ_2 ≥ …), the
empirical operator (K_N f)(x) = (1/N) Σ_n κ(x, x_n) f(x_n) has

* eigenvalues μ_j = λ_j / N,
* eigenfunctions at the landmarks ψ_j(x_n) = √N U_nj (so (1/N) Σ_n ψ_i(x_n) ψ_j(x_n) = δ_ij),
* and, anywhere else, the out-of-sample extension (NeuralEF, eq. 8)

      ψ_j(x) = (1 / (N μ_j)) Σ_n κ(x, x_n) ψ_j(x_n) = κ(x, X) C_(:, j),   C = √N U diag(1/λ),

  which reproduces ψ_j(x_n) = √N U_nj at the landmarks (G C = √N U).

State: the landmarks X [N, D] (for a :class:`PrecomputedGram`, the row indices, stored as float64)
and the coefficient matrix C [N, k] are ``tf.Variable``s of unspecified shape, created in
``__init__``; with a GPflow kernel (passed to the constructor or to ``fit``) its parameters are
tracked too. ``activated_dgp.save(nystrom, DIR)`` writes them with the kernel, which the extension evaluates (a
saveable gpflow or zonal kernel, :mod:`.saved_kernels`, or a precomputed Gram matrix; another kernel source is
refused), and ``activated_dgp.load(DIR)`` rebuilds the approximation, predicting as the saved one did.
``tf.train.Checkpoint(model=Nystrom(k, kernel=same_kind_of_kernel)).read(path)`` restores a checkpoint of one
into an object built with the kernel given again.
"""

from __future__ import annotations

import warnings
from typing import Optional

import gpflow
import numpy as np
import tensorflow as tf

from .. import saving
from . import saved_kernels  # noqa: F401  (registers the kind "kernel", which a saved Nystrom holds)
from .base import EigenApproximation, SavedState, as_float64_matrix
from .kernel_sources import GPflowKernel, KernelSource, PrecomputedGram, as_kernel_source

__all__ = ["Nystrom"]

# relative size (to λ_max) below which an eigenvalue of G counts as round-off
_ROUND_OFF = 1e-10

SOLVERS = ("auto", "eigh", "lanczos")
# "auto" uses Lanczos from this many landmarks on, when k is at most a tenth of N
_LANCZOS_FROM = 3000


def _resolve_solver(solver: str, num_landmarks: int, num_eigenpairs: int) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"unknown Nyström solver {solver!r}; choose one of {SOLVERS}")
    if solver == "auto":
        lanczos = num_landmarks >= _LANCZOS_FROM and 10 * num_eigenpairs <= num_landmarks
        return "lanczos" if lanczos else "eigh"
    return solver


def _top_eigenpairs(G: np.ndarray, k: int, solver: str):
    """The k largest eigenpairs (λ [k] descending, U [N, k]) of the symmetric G, and the smallest
    eigenvalue when the solver computes it (``None`` for Lanczos).

    "eigh": LAPACK's full symmetric eigendecomposition, O(N³) time, every eigenvalue (so the PSD check
    sees the smallest). "lanczos": ARPACK's implicitly restarted Lanczos (scipy.sparse.linalg.eigsh)
    on the dense G, O(N² k) per restart, only the top k; its start vector is seeded, so fits are
    reproducible.
    """
    if solver == "eigh":
        eigenvalues, U = np.linalg.eigh(G)  # ascending
        top = np.argsort(eigenvalues)[::-1][:k]
        return eigenvalues[top], U[:, top], eigenvalues[0]
    from scipy.sparse.linalg import eigsh

    start = np.random.default_rng(0).standard_normal(G.shape[0])
    eigenvalues, U = eigsh(G, k=k, which="LA", v0=start)
    top = np.argsort(eigenvalues)[::-1]
    return eigenvalues[top], U[:, top], None


def _check_inputs(X, source: KernelSource) -> np.ndarray:
    """X as a float64 matrix [N, D] (:func:`as_float64_matrix`), or as indices [N] for a PrecomputedGram."""
    if isinstance(source, PrecomputedGram):
        indices = X.numpy() if isinstance(X, (tf.Tensor, tf.Variable)) else np.asarray(X)
        return as_float64_matrix(indices.reshape(-1, 1), "the row indices").reshape(-1)
    return as_float64_matrix(X)


class Nystrom(EigenApproximation):
    """Top-k eigenpairs of κ's integral operator under the empirical distribution of the landmarks.

    :param num_eigenpairs: k ≤ N (checked by ``fit``).
    :param kernel: optional, anything :func:`as_kernel_source` accepts (a gpflow kernel, a square
        Gram matrix, a :class:`KernelSource`); may instead be given to ``fit``. Needed here when
        restoring a checkpoint into a fresh object.
    :param solver: "eigh" (full LAPACK eigendecomposition, O(N³)), "lanczos" (top k only by ARPACK,
        O(N² k) per restart; no check of the smallest eigenvalue) or "auto" (Lanczos from N = 3,000
        landmarks when k ≤ N / 10, else eigh). Both give the same eigenpairs to round-off.

    Nyström computes in float64 whatever ``gpflow.default_float()`` is: a float32 GPflow kernel is evaluated in
    float32 (its Gram matrix then carries float32 round-off, about 1e-7 relative) and decomposed in float64.
    """

    requires_float64_default = False  # the Gram matrix is cast to float64 and decomposed there

    def __init__(self, num_eigenpairs: int, kernel=None, name: Optional[str] = None, solver: str = "auto"):
        super().__init__(num_eigenpairs, name=name)
        _resolve_solver(solver, 1, 1)  # unknown names fail here, not at fit
        self.solver = solver
        self._source: Optional[KernelSource] = None
        self.kernel = None  # the gpflow kernel, when there is one (tracked: its parameters are saved)
        if kernel is not None:
            self._set_kernel(kernel)
        self._landmarks = tf.Variable(
            np.zeros((0, 0)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="landmarks"
        )
        self._coefficients = tf.Variable(
            np.zeros((0, self.num_eigenpairs)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="coefficients"
        )

    def _set_kernel(self, kernel):
        self._source = as_kernel_source(kernel)
        if isinstance(kernel, gpflow.kernels.Kernel):
            self.kernel = kernel

    @property
    def landmarks(self) -> tf.Tensor:
        """X [N, D] (row indices [N] for a PrecomputedGram)."""
        return tf.convert_to_tensor(self._landmarks)

    @property
    def coefficients(self) -> tf.Tensor:
        """C = √N U diag(1/λ) [N, k], so that ψ(x) = κ(x, X) C."""
        return tf.convert_to_tensor(self._coefficients)

    def fit(self, X, kernel=None) -> "Nystrom":
        """Eigendecompose G = κ(X, X) (float64) and store the landmarks and C.

        Raises ValueError for k > N, non-finite inputs or Gram matrix, or no kernel. Warns when G has
        negative eigenvalues beyond round-off (then κ is not PSD on X) and when one of the top k
        eigenvalues is numerically zero (its eigenfunction is then set to zero off the landmarks:
        the extension divides by λ_j).
        """
        if kernel is not None:
            self._set_kernel(kernel)
        if self._source is None:
            raise ValueError("no kernel: pass one to fit(X, kernel) or to the constructor")
        X = _check_inputs(X, self._source)
        N = X.shape[0]
        k = self.num_eigenpairs
        if k > N:
            raise ValueError(f"num_eigenpairs k = {k} exceeds the number of landmarks N = {N}")
        G = np.asarray(self._source.gram(X), dtype=np.float64)
        if G.shape != (N, N):
            raise ValueError(f"the kernel returned a Gram matrix of shape {G.shape}, expected {(N, N)}")
        if not np.all(np.isfinite(G)):
            raise ValueError("the Gram matrix contains NaN or inf")
        G = 0.5 * (G + G.T)
        lam, U, smallest = _top_eigenpairs(G, k, _resolve_solver(self.solver, N, k))
        scale = max(np.abs(lam).max(), np.finfo(np.float64).tiny)
        if smallest is not None:
            scale = max(scale, abs(smallest))
        tolerance = _ROUND_OFF * scale * max(1.0, np.sqrt(N))
        if smallest is not None and smallest < -tolerance:
            warnings.warn(
                f"the Gram matrix is not positive semi-definite beyond round-off: smallest eigenvalue "
                f"{smallest:.3e} (largest {lam[0]:.3e}); is the kernel PSD?",
                RuntimeWarning,
                stacklevel=2,
            )
        # fix the sign of each eigenvector (largest-magnitude entry positive) for reproducibility
        signs = np.sign(U[np.argmax(np.abs(U), axis=0), np.arange(k)])
        U = U * np.where(signs == 0, 1.0, signs)[None, :]
        small = lam <= tolerance
        if np.any(small):
            warnings.warn(
                f"{int(small.sum())} of the top {k} Gram eigenvalues are numerically zero "
                f"(≤ {tolerance:.1e}); their eigenfunctions are set to zero outside the landmarks "
                f"and their eigenvalues to 0. Use a smaller num_eigenpairs.",
                RuntimeWarning,
                stacklevel=2,
            )
        inverse = np.where(small, 0.0, 1.0 / np.where(small, 1.0, lam))
        self._landmarks.assign(X)
        self._coefficients.assign(np.sqrt(N) * U * inverse[None, :])
        self._eigenvalues.assign(np.where(small, 0.0, lam) / N)
        return self

    def __call__(self, X) -> tf.Tensor:
        """ψ(X) = κ(X, landmarks) C, [M, k]."""
        if self._source is None:
            raise ValueError("no kernel: fit the model, or pass the kernel to the constructor before restoring")
        if isinstance(self._source, PrecomputedGram):
            K = self._source.gram(_check_inputs(X, self._source), self._landmarks.numpy())
        else:
            K = self._source.gram(tf.convert_to_tensor(X, dtype=tf.float64), self._landmarks)
        return tf.matmul(tf.cast(K, tf.float64), self._coefficients)


# ---------------------------------------------------------------- saving (activated_dgp.save / load)


def _state(nystrom: Nystrom) -> SavedState:
    return SavedState(eigenvalues=nystrom._eigenvalues, landmarks=nystrom._landmarks, coefficients=nystrom._coefficients)


def _describe_nystrom(nystrom: Nystrom) -> saving.Description:
    config, arrays, children = dict(num_eigenpairs=nystrom.num_eigenpairs, solver=nystrom.solver, kernel=None), {}, {}
    source = nystrom._source
    if isinstance(source, GPflowKernel):
        config["kernel"], children["kernel"] = "gpflow", source.kernel
    elif isinstance(source, PrecomputedGram):
        config["kernel"], arrays["gram"] = "gram", source.matrix.numpy()
    elif source is not None:
        raise ValueError(
            f"cannot save the Nystrom approximation: its kernel is a {type(source).__name__}, which is not saved, and "
            "ψ(x) = κ(x, X) C evaluates it; a gpflow kernel (activated_dgp.eigen.saved_kernels) or a Gram matrix is"
        )
    return saving.Description(config=config, trackable=_state(nystrom), arrays=arrays, children=children)


def _rebuild_nystrom(config: dict, arrays: dict, children: dict):
    kernel = {"gpflow": lambda: children["kernel"], "gram": lambda: arrays["gram"], None: lambda: None}[config["kernel"]]()
    nystrom = Nystrom(config["num_eigenpairs"], kernel=kernel, solver=config["solver"])
    return nystrom, _state(nystrom)


saving.register_saved_kind(
    saving.SavedKind(name="nystrom", matches=lambda obj: isinstance(obj, Nystrom), describe=_describe_nystrom, rebuild=_rebuild_nystrom)
)
