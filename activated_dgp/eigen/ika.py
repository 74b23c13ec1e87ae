"""IKA, the Independent Kernel Approximator (Ronchetti, Algorithm 1).

The top eigenfunctions of κ's integral operator under q are approximated inside a fixed
"approximation space" F = span{b_1, …, b_n} of basis functions chosen independently of the kernel.
Writing f = Σ_i f_i b_i, the Rayleigh quotient is R(f) = ⟨Kf, f⟩ / ⟨f, f⟩ = fᵀ M f / fᵀ P f with

    P_ij = E_q[b_i(x) b_j(x)],          M_ij = E_(x,y ~ q)[κ(x, y) b_i(x) b_j(y)],

so its stationary points are the generalised eigenproblem M f = λ P f (paper eq. 5). From S samples
y_1..y_S of q, with B_si = b_i(y_s) [S, n] and G = κ(Y, Y) [S, S]:

    P̃ = BᵀB / S,        M̃ = Bᵀ G B / S²,        M̃ f = λ P̃ f.

``scipy.linalg.eigh(M̃, P̃)`` returns eigenvectors with fᵀ P̃ f = 1, i.e. (1/S) Σ_s ψ(y_s)² = 1, so
ψ_j(x) = B(x) F_(:, j) is orthonormal in L²(samples) and μ_j = λ_j estimates the operator's
eigenvalue. Algorithm 1 returns √λ_i ψ_i(x), which is ``features(x)`` here.

Basis functions. The paper's basis functions are built from "filters" w_i: filters chosen at random
among the sampled points (§4.3.1) or produced by (mini-batch) k-means and normalised to unit length
(§4.3.2); it leaves the nonlinearity open (ReLU and sigmoid activations are named as future work,
§6). Here the basis is b_i(x) = σ(w_i · x + c_i) (:func:`activation_basis`), with filters from
:func:`random_data_filters` or :func:`kmeans_filters`; any callable X [N, D] → B [N, n] (NumPy or
TensorFlow; e.g. zonal activation features) is accepted as well.

State: F [n, k] is a ``tf.Variable`` of unspecified shape created in ``__init__``; an
:class:`ActivationBasis` is a ``tf.Module`` whose filters and offsets are variables.
``activated_dgp.save(ika, DIR)`` writes F, the eigenvalues and the basis (an :class:`ActivationBasis` with a named
activation, or a tf-keras model); ``activated_dgp.load(DIR)`` rebuilds an IKA that evaluates the same ψ(x) = B(x) F.
Another callable basis cannot be rebuilt and is refused by name. The kernel is not saved: ψ does not evaluate it,
and a loaded IKA needs it again (``fit(X, kernel)``) only to fit anew. ``tf.train.Checkpoint(model=ika)``
restores into ``IKA(k, activation_basis(np.zeros((n, D)), same_activation))`` as well.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional, Union

import numpy as np
import scipy.linalg
import tensorflow as tf
import tf_keras

from .. import saving
from .base import EigenApproximation, SavedState, as_float64_matrix, elementwise_activation, elementwise_activation_name, require_float64
from .kernel_sources import as_kernel_source

__all__ = ["IKA", "ActivationBasis", "activation_basis", "random_data_filters", "kmeans_filters"]

_CONDITION_LIMIT = 1e10
_DEGRADED_SHARE = 1e-3  # the jitter's share of a kept f_j's norm: ≈ the relative change of λ_j


def _normalise_rows(W: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("cannot normalise a zero filter to unit length")
    return W / norms


def random_data_filters(X, n: int, seed: int = 0, normalise: bool = False) -> np.ndarray:
    """n filters chosen at random (without replacement) among the data points X [N, D] (IKA §4.3.1).

    :param normalise: scale each filter to unit length (the paper's patches already are).
    :returns: W [n, D], float64.
    """
    X = as_float64_matrix(X, "the inputs")
    n = int(n)
    if n < 1 or n > X.shape[0]:
        raise ValueError(f"cannot choose n = {n} filters among N = {X.shape[0]} points")
    rows = np.random.default_rng(seed).choice(X.shape[0], size=n, replace=False)
    W = X[rows].copy()
    return _normalise_rows(W) if normalise else W


def kmeans_filters(X, n: int, seed: int = 0, iterations: int = 25, normalise: bool = False) -> np.ndarray:
    """n filters = k-means centroids of X [N, D] (IKA §4.3.2): scikit-learn's ``KMeans`` (Lloyd's algorithm,
    greedy k-means++ seeding from ``random_state=seed``, one initialisation, at most ``iterations`` Lloyd steps;
    ``iterations=0`` keeps the k-means++ seeds). The paper normalises the centroids to unit length (its data are
    unit-norm patches): ``normalise=True``.

    :returns: W [n, D], float64.
    """
    from sklearn.cluster import KMeans, kmeans_plusplus

    X = as_float64_matrix(X, "the inputs")
    N = X.shape[0]
    n = int(n)
    if n < 1 or n > N:
        raise ValueError(f"cannot make n = {n} k-means filters from N = {N} points")
    if int(iterations) < 0:
        raise ValueError(f"iterations must be ≥ 0, got {iterations}")
    if int(iterations) == 0:
        centroids, _ = kmeans_plusplus(X, n, random_state=seed)
    else:
        centroids = KMeans(n, init="k-means++", n_init=1, max_iter=int(iterations), tol=0.0, random_state=seed).fit(X).cluster_centers_
    centroids = np.asarray(centroids, dtype=np.float64)
    return _normalise_rows(centroids) if normalise else centroids


class ActivationBasis(tf.Module):
    """b_i(x) = σ(w_i · x + c_i): [N, D] → [N, n], with W [n, D] and c [n] in ``tf.Variable``s.

    :param activation: a name in ``relu, sigmoid, tanh, exp, cos, erf, softplus, linear`` (saved by name with
        ``activated_dgp.save``) or a callable on tensors (which ``activated_dgp.save`` refuses unless it is one of
        those named functions; give it again to restore a ``tf.train.Checkpoint``).
    """

    def __init__(self, filters, activation: Union[str, Callable] = "relu", offsets=None, name: Optional[str] = None):
        super().__init__(name=name)
        require_float64("ActivationBasis")
        W = as_float64_matrix(filters, "the filters")
        self._activation = elementwise_activation(activation)
        self.activation = activation
        c = np.zeros(W.shape[0]) if offsets is None else np.asarray(offsets, dtype=np.float64).reshape(-1)
        if c.shape != (W.shape[0],):
            raise ValueError(f"offsets must have one value per filter ({W.shape[0]}), got shape {c.shape}")
        self.filters = tf.Variable(W, dtype=tf.float64, trainable=False, name="filters")
        self.offsets = tf.Variable(c, dtype=tf.float64, trainable=False, name="offsets")

    @property
    def num_basis(self) -> int:
        return int(self.filters.shape[0])

    def __call__(self, X) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        return self._activation(tf.matmul(X, self.filters, transpose_b=True) + self.offsets[None, :])


def activation_basis(W, activation: Union[str, Callable] = "relu", offsets="filters", seed: int = 0) -> ActivationBasis:
    """The basis b_i(x) = σ(w_i · x + c_i) for filters W [n, D] (see :class:`ActivationBasis`).

    :param offsets: c [n]; ``"filters"`` (the default): c_i = −w_i · w_π(i) for a permutation π seeded by
        ``seed``, so that each hinge (w_i · x + c_i = 0) passes through one of the filters, which
        :func:`random_data_filters` and :func:`kmeans_filters` place among the data; ``None``: c = 0.
        Without offsets every ReLU b_i is positively homogeneous, b_i(t x) = t b_i(x), and so is every
        function in their span: on data that are not on a sphere that span misses the kernel's
        eigenfunctions (2-D Gaussian data, an RBF kernel, 128 k-means ReLU filters: eigenvalue errors up
        to 88 % against Nyström without offsets, 0.3 % with them; tests/test_eigen_nystrom_ika.py).
    """
    W = as_float64_matrix(W, "the filters")
    if isinstance(offsets, str):
        if offsets != "filters":
            raise ValueError(f"offsets must be 'filters', None or one number per filter, got {offsets!r}")
        order = np.random.default_rng(seed).permutation(W.shape[0])
        offsets = -np.einsum("nd,nd->n", W, W[order])
    return ActivationBasis(W, activation, offsets)


class IKA(EigenApproximation):
    """Top-k eigenpairs of κ's integral operator in the span of n basis functions (Algorithm 1).

    :param num_eigenpairs: k ≤ n.
    :param basis: a callable X [N, D] → B [N, n] (NumPy or TensorFlow), e.g. :func:`activation_basis`.
    :param kernel: optional, anything :func:`as_kernel_source` accepts; may instead be given to ``fit`` (the
        convention of :class:`Nystrom` and :class:`NeuralEF`).
    """

    def __init__(self, num_eigenpairs: int, basis: Callable, name: Optional[str] = None, kernel=None):
        super().__init__(num_eigenpairs, name=name)
        if not callable(basis):
            raise ValueError(f"the basis must be callable X [N, D] → B [N, n], got {type(basis).__name__}")
        self.basis = basis
        # the kernel is not part of a checkpoint (the fit's state is the basis and F): give it again after restoring
        self._source = None if kernel is None else as_kernel_source(kernel)
        self._weights = tf.Variable(
            np.zeros((0, self.num_eigenpairs)), dtype=tf.float64, shape=tf.TensorShape(None), trainable=False, name="weights"
        )

    @property
    def weights(self) -> tf.Tensor:
        """F [n, k]: ψ(x) = B(x) F."""
        return tf.convert_to_tensor(self._weights)

    def _basis_values(self, X, num_rows: int, num_basis: Optional[int] = None) -> tf.Tensor:
        B = self.basis(X)
        B = tf.cast(tf.convert_to_tensor(B), tf.float64)
        if B.shape.rank != 2 or B.shape[0] != num_rows or (num_basis is not None and B.shape[1] != num_basis):
            expected = f"[{num_rows}, {num_basis if num_basis is not None else 'n'}]"
            raise ValueError(f"the basis returned shape {tuple(B.shape)}, expected {expected}")
        return B

    def fit(self, X_samples, kernel=None) -> "IKA":
        """Solve M̃ f = λ P̃ f on the samples Y [S, D] (float64) and keep the top k eigenpairs.

        If P̃ is ill-conditioned (condition number > 1e10, or not positive definite) jitter
        ε = 1e-10 · tr(P̃)/n (enlarged to lift a negative eigenvalue) is added to its diagonal; a warning
        says so only when the jitter changed the kept eigenpairs (:meth:`_warn_if_degraded`).
        Raises ValueError for non-finite samples, a basis output that is not [S, n], n < k, or
        S < n, or no kernel (here or in the constructor).
        """
        if kernel is not None:
            self._source = as_kernel_source(kernel)
        if self._source is None:
            raise ValueError("no kernel: pass one to fit(X, kernel) or to the constructor")
        source = self._source
        X = X_samples.numpy() if isinstance(X_samples, (tf.Tensor, tf.Variable)) else np.asarray(X_samples)
        if X.dtype.kind not in "biuf":
            raise ValueError(f"the samples must be numeric, got dtype {X.dtype}")
        if not np.all(np.isfinite(X.astype(np.float64))):
            raise ValueError("the samples contain NaN or inf")
        S = X.shape[0] if X.ndim >= 1 else 0
        if S == 0:
            raise ValueError("no samples")
        B = self._basis_values(X, S).numpy()
        n = B.shape[1]
        k = self.num_eigenpairs
        if k > n:
            raise ValueError(f"num_eigenpairs k = {k} exceeds the number of basis functions n = {n}")
        if n > S:
            raise ValueError(f"n = {n} basis functions need at least as many samples, got S = {S}")
        if not np.all(np.isfinite(B)):
            raise ValueError("the basis functions are NaN or inf on the samples")
        G = np.asarray(source.gram(X), dtype=np.float64)
        if G.shape != (S, S) or not np.all(np.isfinite(G)):
            raise ValueError(f"the kernel returned an invalid Gram matrix (shape {G.shape}, finite: {np.all(np.isfinite(G))})")
        P = B.T @ B / S
        M = B.T @ (G @ B) / S**2
        P, M = 0.5 * (P + P.T), 0.5 * (M + M.T)
        P, jitter = self._regularise(P)
        values, vectors = scipy.linalg.eigh(M, P)  # ascending; vectorsᵀ P vectors = I
        order = np.argsort(values)[::-1][:k]
        F = vectors[:, order]
        if jitter > 0:
            self._warn_if_degraded(F, jitter)
        signs = np.sign(F[np.argmax(np.abs(F), axis=0), np.arange(k)])
        F = F * np.where(signs == 0, 1.0, signs)[None, :]
        self._weights.assign(F)
        self._eigenvalues.assign(values[order])
        return self

    @staticmethod
    def _regularise(P: np.ndarray):
        """(P̃ + εI, ε): ε = 0 for a well-conditioned P̃, else 1e-10 · tr(P̃)/n, enlarged to lift a negative
        eigenvalue."""
        n = P.shape[0]
        eigenvalues = np.linalg.eigvalsh(P)
        largest = eigenvalues[-1]
        if largest <= 0:
            raise ValueError("the basis functions vanish on all samples (P̃ = 0)")
        condition = largest / eigenvalues[0] if eigenvalues[0] > 0 else np.inf
        try:
            np.linalg.cholesky(P)
            cholesky_ok = True
        except np.linalg.LinAlgError:
            cholesky_ok = False
        if cholesky_ok and condition <= _CONDITION_LIMIT:
            return P, 0.0
        jitter = 1e-10 * np.trace(P) / n
        jitter = max(jitter, jitter - eigenvalues[0])
        return P + jitter * np.eye(n), float(jitter)

    @staticmethod
    def _warn_if_degraded(F: np.ndarray, jitter: float) -> None:
        """Warn when the jitter ε changed the kept eigenpairs, not merely the null directions of P̃.

        The kept f_j are (P̃ + εI)-orthonormal, so ε ‖f_j‖² is the share of their norm (and, through the
        Rayleigh quotient, the relative change of λ_j) that comes from the jitter rather than from the
        samples. Directions in which the basis is exactly dependent on the samples carry no eigenvalue
        and are not kept, so a redundant basis gives no warning; only ε ‖f_j‖² > 1e-3 does (to first order
        the relative change of λ_j, since λ_j = f_jᵀ M̃ f_j / f_jᵀ (P̃ + εI) f_j)."""
        share = float(jitter * np.max(np.sum(F**2, axis=0)))
        if share > _DEGRADED_SHARE:
            warnings.warn(
                f"P̃ = BᵀB/S is ill-conditioned and the jitter {jitter:.2e} added to its diagonal makes up a share "
                f"{share:.1e} of a kept eigenfunction's norm: the basis functions are nearly linearly dependent "
                "on the samples in the directions the top eigenfunctions need; the eigenpairs are degraded",
                RuntimeWarning,
                stacklevel=3,
            )

    def __call__(self, X) -> tf.Tensor:
        """ψ(X) = B(X) F, [N, k]."""
        if tf.executing_eagerly() and int(tf.size(self._weights)) == 0:
            raise ValueError("the IKA approximation is not fitted (or restored) yet")
        if not tf.executing_eagerly():
            return tf.matmul(tf.cast(self.basis(X), tf.float64), self._weights)
        B = self._basis_values(X, X.shape[0], int(tf.shape(self._weights)[0]))
        return tf.matmul(B, self._weights)


# ---------------------------------------------------------------- saving (activated_dgp.save / load)


def _describe_basis(basis: ActivationBasis) -> saving.Description:
    activation = elementwise_activation_name(basis.activation, "the ActivationBasis")
    config = dict(activation=activation, num_basis=basis.num_basis, input_dim=int(basis.filters.shape[1]))
    return saving.Description(config=config, trackable=basis)


def _rebuild_basis(config: dict, arrays: dict, children: dict):
    basis = ActivationBasis(np.ones((config["num_basis"], config["input_dim"])), config["activation"])
    return basis, basis


def _state(ika: IKA) -> SavedState:
    return SavedState(eigenvalues=ika._eigenvalues, weights=ika._weights)


def _describe_ika(ika: IKA) -> saving.Description:
    if not isinstance(ika.basis, (ActivationBasis, tf_keras.Model)):
        raise ValueError(
            f"cannot save the IKA approximation: its basis is a {type(ika.basis).__name__} callable, which could not be "
            "rebuilt; a saved IKA's basis is an ActivationBasis (activation_basis) or a tf-keras model"
        )
    return saving.Description(config=dict(num_eigenpairs=ika.num_eigenpairs), trackable=_state(ika), children=dict(basis=ika.basis))


def _rebuild_ika(config: dict, arrays: dict, children: dict):
    ika = IKA(config["num_eigenpairs"], children["basis"])
    return ika, _state(ika)


saving.register_saved_kind(
    saving.SavedKind(name="activation_basis", matches=lambda obj: isinstance(obj, ActivationBasis), describe=_describe_basis, rebuild=_rebuild_basis)
)
saving.register_saved_kind(saving.SavedKind(name="ika", matches=lambda obj: isinstance(obj, IKA), describe=_describe_ika, rebuild=_rebuild_ika))
