"""The algebra of an activated layer's training step, read straight from q_sqrt's unconstrained vector.

gpflux's ``GPLayer`` stores q_sqrt as a GPflow ``Parameter`` whose transform is ``FillTriangular``: the variable is
a vector x_p of M(M+1)/2 values per output p, and q_sqrt[p] = L_p is x_p laid out in the lower triangle. Reading the
parameter evaluates that layout (a chain of slices, reversals and concatenations, and their gradients), and the
conditional and the KL each read it. Here every quantity the step needs is taken from x once, by fixed index maps:

* the factors, as the column blocks that the q_sqrt products need (:func:`stacked_factors`): for columns
  i ∈ [c₀, c₁) only the rows j ≥ c₀ of L_p can be nonzero, so block c is S_c[j − c₀, p·w + (i − c₀)] = L_p[j, i],
  [M − c₀, P·w]; one gather, whose gradient is a gather too (every x entry has one place in the blocks);
* the diagonal of every L_p, and Σ‖L_p‖²_F = Σ x² (each entry of x is one entry of the lower triangle).

With A = L⁻¹Kuf [M, N] (L = chol(Kuu)), whitened inducing outputs u = L v, v ~ N(m_p, L_p L_pᵀ), the marginals and the
KL to p(v) = N(0, I) are (Hensman et al., 2015; GPflow's ``base_conditional`` and ``gauss_kl``)

    mean[n, p] = (Aᵀ m)[n, p],   var[n, p] = kff[n] − ‖a_n‖² + Σ_c ‖(S_cᵀ A[c₀:])[p-th w columns, n]‖²,
    KL = ½ Σ_p (‖m_p‖² + ‖L_p‖²_F − M − Σ_i log L_p[i, i]²).

Splitting the columns into k blocks skips the zero upper triangle in all but the diagonal blocks: the products
cost (k + 1)/(2k) of the dense P·M²·N (k = 4: 62.5 %), with the same sums in a different order.

Unwhitened (q(u) = N(m_p, L_p L_pᵀ), p(u) = N(0, Kuu)) is the whitened algebra in v = L⁻¹u: with α = L⁻¹m and
T_p = L⁻¹L_p (lower triangular), mean = Aᵀα, var = kff − ‖a_n‖² + ‖T_pᵀa_n‖², and
KL = ½ Σ_p (‖α_p‖² + ‖T_p‖²_F − M − Σ_i log L_p[i, i]² + Σ_i log L[i, i]²). A, α and all T_p are one triangular solve
L⁻¹[Kuf | m | L_1 … L_P], and the one Cholesky L serves the conditional and the KL.
"""

from __future__ import annotations

import contextlib
import functools
from typing import List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

__all__ = ["TriangularLayout", "owned_layout", "default_num_blocks", "is_lower_fill_triangular", "stacked_factors", "variance_terms", "q_sqrt_log_det", "half_square_sum", "owned_marginals_and_kl"]


def is_lower_fill_triangular(transform) -> bool:
    """Whether a GPflow parameter's ``transform`` is tfp's ``FillTriangular`` filling the lower triangle (gpflux's
    q_sqrt): the one layout :class:`TriangularLayout` reads."""
    return type(transform) is tfp.bijectors.FillTriangular and not transform.parameters.get("upper", False)


def _forward_scope():
    """A context that re-enters the name scope current now (for a custom gradient, which TensorFlow builds at the root
    scope): the gradient's ops then carry the forward ops' scope names (``benchmarks.step_profile`` reads them)."""
    scope = tf.get_current_name_scope()
    return (lambda: tf.name_scope(scope + "/")) if scope else contextlib.nullcontext


@functools.lru_cache(maxsize=None)
def _positions(num_inducing: int) -> np.ndarray:
    """[M, M]: 1 + the index in x of the entry that ``fill_triangular`` puts at (j, i); 0 above the diagonal (tfp's
    own layout, computed once)."""
    count = num_inducing * (num_inducing + 1) // 2
    with tf.init_scope():  # eager, also when first asked while a graph is traced
        return np.rint(tfp.math.fill_triangular(np.arange(1.0, count + 1.0)).numpy()).astype(np.int64)


class TriangularLayout:
    """The index maps from x [P, M(M+1)/2] (``FillTriangular``'s vector) to the column blocks of the factors.

    ``starts`` are the first columns c₀ of the ``num_blocks`` blocks (about equal widths); block c holds the rows
    j ≥ c₀ of the columns [c₀, c₁) of every L_p, as [M − c₀, P·w] with column p·w + (i − c₀)."""

    def __init__(self, num_inducing: int, num_outputs: int, num_blocks: int = 1):
        M, P = int(num_inducing), int(num_outputs)
        if M < 1 or P < 1 or not 1 <= num_blocks <= M:
            raise ValueError(f"need M ≥ 1, P ≥ 1 and 1 ≤ num_blocks ≤ M, got M = {M}, P = {P}, num_blocks = {num_blocks}")
        self.num_inducing, self.num_outputs, self.size = M, P, M * (M + 1) // 2
        positions = _positions(M)
        bounds = np.linspace(0, M, num_blocks + 1).round().astype(int)
        self.starts: Tuple[int, ...] = tuple(int(b) for b in bounds[:-1])
        self.widths: Tuple[int, ...] = tuple(int(b) for b in np.diff(bounds))
        zero = P * self.size  # the index of the appended 0 in the flat [P·K + 1] vector
        blocks, inverse, offset = [], np.empty(P * self.size, np.int64), 0
        for c0, w in zip(self.starts, self.widths):
            local = positions[c0:, c0 : c0 + w]  # [M − c₀, w]
            index = np.where(local[:, None, :] > 0, np.arange(P)[None, :, None] * self.size + local[:, None, :] - 1, zero)
            index = index.reshape(M - c0, P * w)
            inside = index != zero
            inverse[index[inside]] = offset + np.flatnonzero(inside)
            blocks.append(index)
            offset += index.size
        self.block_indices: List[np.ndarray] = blocks
        self.inverse = inverse  # x's flat index → its place in the concatenated flattened blocks
        self.diagonal = (np.arange(P)[:, None] * self.size + positions[np.arange(M), np.arange(M)] - 1).reshape(-1)  # [P·M]


def default_num_blocks(num_inducing: int, num_outputs: int) -> int:
    """Column blocks for the products of a whitened layer: one for P = 1 (the products are then small and the
    blocks' extra ops cost more than the skipped zeros save), else min(8, M // 16) (blocks of ≥ 16 columns; the
    fastest of k = 1, 2, 4, 8, 16, 32 for M = 128, P = 8, N = 128 in one CPU measurement, forward and gradient)."""
    return 1 if num_outputs == 1 else max(1, min(8, num_inducing // 16))


@functools.lru_cache(maxsize=None)
def owned_layout(num_inducing: int, num_outputs: int, white: bool) -> TriangularLayout:
    """The (cached) layout :func:`owned_marginals_and_kl` takes: :func:`default_num_blocks` blocks whitened, one
    unwhitened."""
    return TriangularLayout(num_inducing, num_outputs, default_num_blocks(num_inducing, num_outputs) if white else 1)


def stacked_factors(x: tf.Tensor, layout: TriangularLayout) -> List[tf.Tensor]:
    """The column blocks S_c [M − c₀, P·w] of the lower factors L_p = fill_triangular(x_p) (module docstring), from
    x [P, M(M+1)/2]. Each block is one gather; the gradient gathers the blocks' gradients back into x's order."""
    P, K = layout.num_outputs, layout.size
    shapes = [index.shape for index in layout.block_indices]

    scope = _forward_scope()

    @tf.custom_gradient
    def gather(x):
        flat = tf.concat([tf.reshape(x, [-1]), tf.zeros([1], x.dtype)], 0)
        blocks = [tf.gather(flat, index) for index in layout.block_indices]

        def grad(*upstream):
            with scope(), tf.name_scope("q_sqrt_layout_grad"):
                flat_upstream = tf.concat([tf.reshape(g, [-1]) for g in upstream], 0) if len(upstream) > 1 else tf.reshape(upstream[0], [-1])
                return tf.reshape(tf.gather(flat_upstream, layout.inverse), [P, K])

        return blocks, grad

    with tf.name_scope("q_sqrt_layout"):
        blocks = gather(x)
    for block, shape in zip(blocks, shapes):
        block.set_shape(shape)
    return list(blocks)


def variance_terms(A: tf.Tensor, blocks: Sequence[tf.Tensor], starts: Sequence[int], num_outputs: int) -> tf.Tensor:
    """‖L_pᵀ a_n‖² − ‖a_n‖² as [N, P] from A [M, N] and the column blocks of the factors (:func:`stacked_factors`):
    one product A[c₀:]ᵀ S_c [N, P·w] per block, squared and summed per output. The gradient is written out: the
    products' gradients with G_c = 2 g ⊙ (A[c₀:]ᵀ S_c), and −2 A (Σ_p g_p) for ‖a_n‖² (no broadcast of g over
    the M columns is formed)."""
    P = num_outputs
    widths = [int(block.shape[-1]) // P for block in blocks]

    scope = _forward_scope()

    @tf.custom_gradient
    def terms(A, *blocks):
        rows = [A[c0:] if c0 else A for c0 in starts]
        products = [tf.reshape(tf.matmul(a, S, transpose_a=True), [-1, P, w]) for a, S, w in zip(rows, blocks, widths)]  # [N, P, w]
        squares = [tf.reduce_sum(tf.square(LTA), -1) for LTA in products]  # [N, P] each
        total = (tf.add_n(squares) if len(squares) > 1 else squares[0]) - tf.reduce_sum(tf.square(A), 0)[:, None]

        def grad(g):
            with scope():
                g2 = 2.0 * g[:, :, None]
                dA, dS = [-A * (2.0 * tf.reduce_sum(g, 1))], []
                for a, S, w, LTA, c0 in zip(rows, blocks, widths, products, starts):
                    G = tf.reshape(LTA * g2, [-1, P * w])  # [N, P·w]
                    dA_c = tf.matmul(S, G, transpose_b=True)  # [M − c₀, N]
                    dA.append(tf.pad(dA_c, [[c0, 0], [0, 0]]) if c0 else dA_c)
                    dS.append(tf.matmul(a, G))  # [M − c₀, P·w]
                return (tf.add_n(dA), *dS)

        return total, grad

    return terms(A, *blocks)


def q_sqrt_log_det(x: tf.Tensor, layout: TriangularLayout) -> tf.Tensor:
    """Σ_p log det(L_p L_pᵀ) = Σ_(p,i) log L_p[i, i]², from the diagonal entries of x; the gradient 2 / L_p[i, i] is
    scattered into x's shape in one op."""

    scope = _forward_scope()

    @tf.custom_gradient
    def log_det(x):
        diagonal = tf.gather(tf.reshape(x, [-1]), layout.diagonal)  # [P·M]

        def grad(g):
            with scope():
                return tf.reshape(tf.scatter_nd(layout.diagonal[:, None], (2.0 * g) / diagonal, [x.shape.num_elements()]), tf.shape(x))

        return tf.reduce_sum(tf.math.log(tf.square(diagonal))), grad

    return log_det(x)


def half_square_sum(x: tf.Tensor) -> tf.Tensor:
    """½ Σ x², with the gradient g x as one product (autodiff forms 2x, a broadcast of g and their product)."""

    scope = _forward_scope()

    def grad(g):
        with scope():
            return g * x

    @tf.custom_gradient
    def half(x):
        return 0.5 * tf.reduce_sum(tf.square(x)), grad

    return half(x)


def owned_marginals_and_kl(
    Kmn: tf.Tensor, Lm: tf.Tensor, Knn: tf.Tensor, q_mu: tf.Tensor, x: tf.Tensor, layout: TriangularLayout, white: bool, with_kl: bool = True
):
    """(mean [N, P], var [N, P], KL or None) of an activated layer (module docstring), from Kmn [M, N], L = chol(Kmm)
    [M, M], Knn [N], q_μ [M, P] and q_sqrt's unconstrained vector x [P, M(M+1)/2]. ``white``: the whitened
    parameterisation (the blocks of ``layout``); otherwise one fused solve and ``layout`` must have one block."""
    M, P = layout.num_inducing, layout.num_outputs
    num_rows = tf.shape(Kmn)[1]
    kl = None
    if white:
        with tf.name_scope("conditional"):
            A = tf.linalg.triangular_solve(Lm, Kmn, lower=True)  # [M, N]
            mean = tf.matmul(A, q_mu, transpose_a=True)
            with tf.name_scope("q_sqrt_products"):
                terms = variance_terms(A, stacked_factors(x, layout), layout.starts, P)
        if with_kl:
            with tf.name_scope("prior_kl"):
                kl = half_square_sum(q_mu) + half_square_sum(x) - 0.5 * (M * P + q_sqrt_log_det(x, layout))
    else:
        if len(layout.starts) != 1:
            raise ValueError("the unwhitened algebra takes a layout of one block")
        with tf.name_scope("conditional"):
            (L_stacked,) = stacked_factors(x, layout)  # [M, P·M]
            solved = tf.linalg.triangular_solve(Lm, tf.concat([Kmn, q_mu, L_stacked], 1), lower=True)
            A, alpha, T = solved[:, :num_rows], solved[:, num_rows : num_rows + P], solved[:, num_rows + P :]
            mean = tf.matmul(A, alpha, transpose_a=True)
            with tf.name_scope("q_sqrt_products"):
                terms = variance_terms(A, [T], (0,), P)
        if with_kl:
            with tf.name_scope("prior_kl"):
                log_det_prior = tf.reduce_sum(tf.math.log(tf.square(tf.linalg.diag_part(Lm))))
                kl = half_square_sum(alpha) + half_square_sum(T) - 0.5 * (M * P + q_sqrt_log_det(x, layout) - P * log_det_prior)
    with tf.name_scope("conditional"):
        var = Knn[:, None] + terms
    return mean, var, kl
