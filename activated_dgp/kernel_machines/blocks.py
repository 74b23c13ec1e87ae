"""Block-wise kernel products: nothing n × n or n × p is formed (EigenPro 3, Sec. 4 and Table 1).

Two objects carry the linear algebra of the kernel machines:

* a **basis** — the model's p functions b_1..b_p, so that f(x) = Σ_j α_j b_j(x) — answers
  ``values(X, start, stop)`` = [b_j(x_i)] [N, stop − start] and ``gram(rows, cols)`` =
  [⟨b_r, b_c⟩_H] [len(rows), len(cols)]. For kernel centers, b_j = K(·, z_j), so values are
  K(X, Z) and the Gram matrix is K(Z, Z) (:class:`KernelCenters`); for activated interdomain
  features b_m = g̃_m, values are Kuf(X)ᵀ and the Gram matrix is Kuu (:class:`ActivatedBasis`).
* a **Gram operator** G [N, N] (a basis's Gram matrix, or K(X, X) of a data set) that EigenPro 2
  solves G θ = b with, through ``block(rows, cols)`` and ``diagonal(rows)``.

Products Bα and Bᵀg over all p functions loop over column blocks of ``block_size`` functions, and
rows in blocks of ``block_size`` points, so the memory beyond the data is O(block_size² + p·L).
"""

from __future__ import annotations

from typing import Optional

import gpflow
import numpy as np
import tensorflow as tf

from ..eigen import Nystrom, as_float64_matrix
from ..eigen.kernel_sources import KernelSource

__all__ = [
    "DEFAULT_BLOCK",
    "check_data",
    "check_targets",
    "KernelCenters",
    "ActivatedBasis",
    "BasisGram",
    "KernelGram",
    "IndexedGramSource",
]

DEFAULT_BLOCK = 2048


def check_data(X, what: str = "the inputs") -> np.ndarray:
    """X as a finite float64 matrix [N, D] (ValueError naming ``what`` otherwise)."""
    return as_float64_matrix(X, what)


def check_targets(y, num_rows: int) -> np.ndarray:
    """y [N] or [N, L] as a finite float64 matrix [N, L]; ValueError when N differs from ``num_rows``."""
    y = y.numpy() if isinstance(y, (tf.Tensor, tf.Variable)) else np.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    y = as_float64_matrix(y, "the targets")
    if y.shape[0] != num_rows:
        raise ValueError(f"the targets have {y.shape[0]} rows but the inputs have {num_rows}")
    return y


def _held_block(held: tf.Tensor, rows, cols) -> tf.Tensor:
    """held[rows, cols] of a held Gram matrix, indexed on a NumPy view of it (one copy of the block, none of
    held[rows, :])."""
    return tf.constant(np.asarray(held)[np.ix_(np.asarray(rows), np.asarray(cols))])


def _check_block(block_size: int) -> int:
    if int(block_size) != block_size or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    return int(block_size)


class _Basis:
    """Shared block loops; subclasses define ``num_functions``, ``values`` and ``gram``."""

    block_size: int = DEFAULT_BLOCK
    num_functions: int

    def values(self, X: tf.Tensor, start: int, stop: int) -> tf.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def gram(self, rows: np.ndarray, cols: np.ndarray) -> tf.Tensor:  # pragma: no cover - abstract
        """[⟨b_r, b_c⟩_H] [len(rows), len(cols)] for index arrays."""
        raise NotImplementedError

    def cached_gram(self):
        """The whole Gram matrix [p, p] (a tf.Tensor or a read-only NumPy array) where the basis holds it (then
        products with it are one matmul), else None."""
        return None

    def _column_blocks(self):
        for start in range(0, self.num_functions, self.block_size):
            yield start, min(start + self.block_size, self.num_functions)

    def _row_blocks(self, X):
        for start in range(0, X.shape[0], self.block_size):
            yield X[start : start + self.block_size]

    def apply(self, X, alpha) -> tf.Tensor:
        """f(X) = B(X) α [N, L] for α [p, L], in blocks of points and functions."""
        X = tf.convert_to_tensor(X, tf.float64)
        alpha = tf.convert_to_tensor(alpha, tf.float64)
        out = []
        for rows in self._row_blocks(X):
            total = tf.zeros([rows.shape[0], alpha.shape[1]], tf.float64)
            for start, stop in self._column_blocks():
                total += tf.matmul(self.values(rows, start, stop), alpha[start:stop])
            out.append(total)
        return tf.concat(out, axis=0)

    def apply_transpose(self, X, g) -> tf.Tensor:
        """B(X)ᵀ g [p, L] for g [N, L] (K(Z, X) g for kernel centers), in blocks."""
        X = tf.convert_to_tensor(X, tf.float64)
        g = tf.convert_to_tensor(g, tf.float64)
        out = []
        for start, stop in self._column_blocks():
            total = tf.zeros([stop - start, g.shape[1]], tf.float64)
            for i in range(0, X.shape[0], self.block_size):
                total += tf.matmul(self.values(X[i : i + self.block_size], start, stop), g[i : i + self.block_size], transpose_a=True)
            out.append(total)
        return tf.concat(out, axis=0)

    def gram_operator(self) -> "BasisGram":
        """The basis's Gram matrix [p, p] as a block operator (K(Z, Z), or Kuu)."""
        return BasisGram(self)

    def dense_gram(self) -> np.ndarray:
        """The full Gram matrix [p, p] (only for the exact projection and small p)."""
        everything = np.arange(self.num_functions)
        return self.gram(everything, everything).numpy()


class KernelCenters(_Basis):
    """b_j = K(·, z_j): the kernel network of EigenPro 3, Definition 1, f(x) = Σ_j α_j K(x, z_j).

    :param kernel: any ``gpflow.kernels.Kernel`` (e.g. ``Exponential(lengthscales=5.0)``, the
        paper's Laplacian kernel).
    :param centers: Z [p, D].
    :param cache_gram: compute K(Z, Z) [p, p] once, at its first use, and serve ``gram`` from it: for a
        model's centers whose p² entries fit in memory (EigenPro 3's projection then costs a p × p product per
        step instead of p² kernel evaluations in D dimensions). Off for a data set's K(X, X).
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, centers, block_size: int = DEFAULT_BLOCK, cache_gram: bool = False):
        if not isinstance(kernel, gpflow.kernels.Kernel):
            raise ValueError(f"the kernel must be a gpflow kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.centers = tf.constant(check_data(centers, "the centers"))
        self.num_functions = int(self.centers.shape[0])
        self.block_size = _check_block(block_size)
        width = int(self.centers.shape[1])
        spec = tf.TensorSpec([None, width], tf.float64)
        # compiled once: an eager gpflow kernel call costs ~0.1 s of Python overhead per block
        self._cross = tf.function(lambda A, B: tf.cast(kernel(A, B), tf.float64), input_signature=[spec, spec])
        self._diag = tf.function(lambda A: tf.cast(kernel(A, full_cov=False), tf.float64), input_signature=[spec])
        self.cache_gram = bool(cache_gram)
        self._gram: Optional[np.ndarray] = None

    def values(self, X, start, stop):
        return self._cross(tf.convert_to_tensor(X, tf.float64), self.centers[start:stop])

    def cached_gram(self) -> Optional[np.ndarray]:
        """K(Z, Z) [p, p] (read-only NumPy), computed in row blocks at the first call, when ``cache_gram``;
        otherwise None. The blocks are written into one preallocated array, so building it needs 8·p² bytes
        plus one block, not twice that (a concatenation of the blocks would hold both)."""
        if self.cache_gram and self._gram is None:
            gram = np.empty((self.num_functions, self.num_functions))
            for a, b in self._column_blocks():
                gram[a:b] = self._cross(self.centers[a:b], self.centers).numpy()
            gram.flags.writeable = False
            self._gram = gram
        return self._gram

    def gram(self, rows, cols):
        cached = self.cached_gram()
        if cached is not None:
            return _held_block(cached, rows, cols)
        return self._cross(tf.gather(self.centers, rows), tf.gather(self.centers, cols))

    def diagonal(self, rows) -> tf.Tensor:
        return self._diag(tf.gather(self.centers, rows))

    def eigenfunction_products(self, approximation, q: int) -> tf.Tensor:
        """⟨b_j, √μ_i ψ_i⟩_H / √μ_i = ψ_i(z_j) [p, q] (reproducing property), in blocks."""
        if hasattr(approximation, "basis_products"):  # Ritz functions inside this span (span.py)
            return approximation.basis_products(q)
        return tf.concat([approximation(self.centers[a:b])[:, :q] for a, b in self._column_blocks()], axis=0)


class ActivatedBasis(_Basis):
    """b_m = g̃_m, the activated interdomain functions: values Kuf(X)ᵀ [N, M], Gram matrix Kuu [M, M].

    The mean of one activated GP layer, f = Σ_m θ_m g̃_m, trained as a kernel network whose
    "centers" are the inducing functions (⟨g̃_m, K(·, x)⟩_H = g̃_m(x) = Kuf[m, x] and
    ⟨g̃_m, g̃_m'⟩_H = Kuu[m, m']). M is a layer width, so Kuu is held (M × M).
    """

    def __init__(self, kernel, feature, block_size: int = DEFAULT_BLOCK):
        self.kernel = kernel
        self.feature = feature
        self.num_functions = len(feature)
        self.block_size = _check_block(block_size)
        self._kuu = tf.cast(gpflow.covariances.Kuu(feature, kernel), tf.float64)
        self._kuf = tf.function(lambda X: tf.cast(gpflow.covariances.Kuf(feature, kernel, X), tf.float64), reduce_retracing=True)

    def values(self, X, start, stop):
        return tf.transpose(self._kuf(tf.convert_to_tensor(X, tf.float64))[start:stop])

    def cached_gram(self) -> tf.Tensor:
        return self._kuu

    def gram(self, rows, cols):
        return _held_block(self._kuu, rows, cols)

    def diagonal(self, rows) -> tf.Tensor:
        return tf.gather(tf.linalg.diag_part(self._kuu), rows)

    def eigenfunction_products(self, approximation, q: int) -> tf.Tensor:
        """⟨g̃_m, ψ_i⟩_H [M, q]. Known in closed form for a Nyström ψ_i = K(·, X_s) C_i, where it is
        g̃_m(X_s) C_i, and for Ritz functions inside span{g̃} (``preconditioner="span"``); other
        approximations' ψ_i have no computable H inner product with g̃_m."""
        if hasattr(approximation, "basis_products"):  # Ritz functions inside this span (span.py)
            return approximation.basis_products(q)
        if not isinstance(approximation, Nystrom):
            raise ValueError(
                "activated features need a Nystrom or span preconditioner: the H inner product ⟨g̃_m, ψ_i⟩ of "
                f"{type(approximation).__name__} eigenfunctions is not computable"
            )
        landmarks = approximation.landmarks
        return tf.matmul(self.values(landmarks, 0, self.num_functions), approximation.coefficients[:, :q], transpose_a=True)


class BasisGram:
    """G = [⟨b_r, b_j⟩_H] [p, p] of a basis, as a block operator (rows by index, columns by range).

    Where the basis holds G (:meth:`held`), products are NumPy BLAS calls on a view of it: G[rows, :] V copies the
    rows it needs (contiguous), and G[rows, :]ᵀ R is that copy transposed, not a gather of columns (TensorFlow's
    column gather was 5× slower than its row gather at p = 5,000); the full product G V gathers nothing."""

    def __init__(self, basis: _Basis):
        self.basis = basis
        self.size = basis.num_functions
        self.block_size = basis.block_size

    def block(self, rows, cols) -> tf.Tensor:
        """G[rows, cols] for index arrays."""
        return self.basis.gram(np.asarray(rows), np.asarray(cols))

    def diagonal(self, rows) -> tf.Tensor:
        return self.basis.diagonal(np.asarray(rows))

    def held(self) -> Optional[np.ndarray]:
        """The whole G [N, N] as a read-only NumPy view (no copy) where the basis holds it, else None."""
        cached = self.basis.cached_gram()
        return None if cached is None else np.asarray(cached)

    def matmul(self, rows, V) -> tf.Tensor:
        """G[rows, :] V [len(rows), L] (``rows`` None: all N, G V), over blocks of rows and columns."""
        return self._product(None if rows is None else np.asarray(rows), None, V)

    def matmul_transpose(self, rows, R) -> tf.Tensor:
        """G[rows, :]ᵀ R [N, L] for R [len(rows), L]; computed as G[:, rows] R in blocks (G is symmetric), as
        the transpose of the held rows where G is held."""
        return self._product(None, np.asarray(rows), R)

    def _product(self, rows, cols, V) -> tf.Tensor:
        """G[rows, cols] V over blocks of rows and columns; None stands for every index (no gather)."""
        held = self.held()
        if held is not None:
            V = V.numpy() if isinstance(V, (tf.Tensor, tf.Variable)) else np.asarray(V, dtype=np.float64)
            if cols is None:
                return tf.constant((held if rows is None else held[rows]) @ V)
            if rows is None:  # G[:, cols] V = G[cols, :]ᵀ V
                return tf.constant(held[cols].T @ V)
            return tf.constant(held[np.ix_(rows, cols)] @ V)
        V = tf.convert_to_tensor(V, tf.float64)
        rows = np.arange(self.size) if rows is None else rows
        cols = np.arange(self.size) if cols is None else cols
        out = []
        for r in range(0, max(len(rows), 1), self.block_size):
            chunk = rows[r : r + self.block_size]
            total = tf.zeros([len(chunk), V.shape[1]], tf.float64)
            for c in range(0, len(cols), self.block_size):
                total += tf.matmul(self.block(chunk, cols[c : c + self.block_size]), V[c : c + self.block_size])
            out.append(total)
        return tf.concat(out, axis=0)


class KernelGram(BasisGram):
    """K(X, X) [n, n] of a data set, as a block operator (EigenPro 2 on data)."""

    def __init__(self, kernel: gpflow.kernels.Kernel, X, block_size: int = DEFAULT_BLOCK):
        super().__init__(KernelCenters(kernel, X, block_size))


class IndexedGramSource(KernelSource):
    """A :class:`KernelSource` over row indices of a Gram operator, so that :class:`Nystrom` can
    eigendecompose a sub-block G[S, S] (inputs: indices as an [s, 1] float matrix)."""

    def __init__(self, operator: BasisGram):
        self.operator = operator

    @staticmethod
    def _indices(A) -> np.ndarray:
        A = A.numpy() if isinstance(A, (tf.Tensor, tf.Variable)) else np.asarray(A)
        return np.rint(A.reshape(-1)).astype(np.int64)

    def gram(self, A, B=None):
        rows = self._indices(A)
        cols = rows if B is None else self._indices(B)
        return self.operator.block(rows, cols)
