"""The conditional of an activated GP layer with the P per-output q_sqrt products as one matrix product.

An activated layer (:func:`activated_dgp.deep.builders.activated_gp_layer`) is a gpflux ``GPLayer`` with a
``SharedIndependent`` kernel and shared inducing variables; gpflux evaluates it through
``gpflow.conditionals.conditional``. For whitened inducing outputs u = L v, v ~ N(q_mu, S_p = L_p L_pᵀ) per output
p, with L = chol(Kuu) and A = L⁻¹Kuf [M, N], the marginals are (Hensman et al., 2015; GPflow's ``base_conditional``)

    mean[n, p] = (Aᵀ q_mu)[n, p],
    var[n, p]  = kff[n] − ‖A[:, n]‖² + ‖(L_pᵀ A)[:, n]‖².

GPflow forms the last term with a batched matrix product over p after broadcasting A to [P, M, N] (a Tile/BroadcastTo
in the forward pass and a reduce_sum over p in the gradient; with sampled inputs [S, N, D] also L and Kuu's Cholesky
to [S, P, M, M] and [S, M, M]). Here A is computed once, for all rows (leading dimensions flattened into N), and the
P products are one 2-D product

    [N, M] · [M, P·M] → [N, P·M],   column p·M + i of the result = (L_pᵀ A)[i, :]ᵀ,

whose squares are summed over i per p. The arithmetic is the same (P·M²·N multiply-adds); only the order of the
floating-point sums may differ, at round-off.

The inducing variables' type selects this path in GPflow's dispatch: :class:`SharedActivationFeature`, GPflow's
``SharedIndependentInducingVariables`` for an :class:`~activated_dgp.zonal.inducing_variables.ActivationFeature`.
GPflow's own types keep GPflow's conditional. Every case other than whitened, full q_sqrt [P, M, M], full_cov =
full_output_cov = False (the training step and the Monte Carlo predictions) calls GPflow's conditional, as does
every case inside :func:`gpflow_conditional` (a context manager for comparisons and tests).

The library's activated layers (:class:`activated_dgp.deep.layers.ActivatedGPLayer`) take their training step from
:mod:`activated_dgp.zonal.owned_conditional` instead (q_sqrt read once per step, without its ``fill_triangular``
transform); this conditional serves GPflow's dispatch, i.e. direct ``conditional`` calls, gpflux's own ``GPLayer``
on these inducing variables, and the activated layers' predictions inside :func:`symmetric_variances`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator, Optional

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import MeanAndVariance
from gpflow.conditionals import conditional
from gpflow.conditionals.multioutput.conditionals import shared_independent_conditional
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu

from .inducing_variables import ActivationFeature

__all__ = ["SharedActivationFeature", "whitened_marginals", "gpflow_conditional", "fast_conditional_enabled", "symmetric_variances", "symmetric_variances_active"]

_enabled = True
_symmetric = False


@contextlib.contextmanager
def symmetric_variances() -> Iterator[None]:
    """Within this context, graphs traced for activated layers with P ≥ 2 outputs form the variances as quadratic
    forms over the upper triangle (:func:`whitened_marginals`): about half the multiply-adds of the P products
    L_pᵀA. For predictions (no gradients are needed there; the training step keeps the products). Acts at trace time."""
    global _symmetric
    previous, _symmetric = _symmetric, True
    try:
        yield
    finally:
        _symmetric = previous


def symmetric_variances_active() -> bool:
    """Whether graphs traced now are inside :func:`symmetric_variances`."""
    return _symmetric


def fast_conditional_enabled() -> bool:
    """Whether :class:`SharedActivationFeature` layers use :func:`whitened_marginals` (outside :func:`gpflow_conditional`)."""
    return _enabled


@contextlib.contextmanager
def gpflow_conditional() -> Iterator[None]:
    """Within this context, graphs traced for activated layers use GPflow's conditional (the reference path).

    The switch acts at trace time: a ``tf.function`` traced outside the context keeps the fast path."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


class SharedActivationFeature(gpflow.inducing_variables.SharedIndependentInducingVariables):
    """GPflow's ``SharedIndependentInducingVariables`` for one :class:`ActivationFeature` shared by all outputs;
    Kuu, Kuf and the KL are GPflow's (through the ``ActivationFeature`` registrations), the conditional is the
    batched one of this module."""

    def __init__(self, inducing_variable: ActivationFeature):
        if not isinstance(inducing_variable, ActivationFeature):
            raise TypeError(f"expected an ActivationFeature, got {type(inducing_variable).__name__}")
        super().__init__(inducing_variable)


@check_shapes(
    "Kmn: [M, batch..., N]",
    "Kmm: [M, M]",
    "Knn: [batch..., N]",
    "f: [M, P]",
    "q_sqrt: [P, M, M]",
    "return[0]: [batch..., N, P]",
    "return[1]: [batch..., N, P]",
)
def whitened_marginals(Kmn: tf.Tensor, Kmm: tf.Tensor, Knn: tf.Tensor, f: tf.Tensor, q_sqrt: tf.Tensor) -> MeanAndVariance:
    """Marginal means and variances of q(f(x_n)) for whitened inducing outputs with full q_sqrt:

        A = L⁻¹ Kmn (L = chol(Kmm)),  mean = Aᵀ f,  var[n, p] = Knn[n] − ‖A[:, n]‖² + ‖(L_pᵀ A)[:, n]‖²,

    L_p the lower triangle of q_sqrt[p] (as GPflow's ``base_conditional(..., white=True)``, full_cov=False). The P
    products L_pᵀA are one [N', M] · [M, P·M] matrix product over the N' = |batch|·N flattened rows.

    Inside :func:`symmetric_variances` (P ≥ 2, M known when traced) the last two terms are one quadratic form per
    output, var[n, p] = Knn[n] + a_nᵀ (L_p L_pᵀ − I) a_n = Knn[n] + Σ_(i≤j) (2 − δ_ij) a_i a_j (L_p L_pᵀ − I)_ij: the
    M(M+1)/2 products a_i a_j of each row times a [M(M+1)/2, P] matrix, about half the multiply-adds of L_pᵀA
    (M(M+1)/2 · (P + 1) against P M² per row); same value up to round-off."""
    num_inducing, num_outputs = tf.shape(Kmm)[0], tf.shape(f)[-1]
    out_shape = tf.concat([tf.shape(Knn), [num_outputs]], 0)  # [batch..., N, P]
    Kmn = tf.reshape(Kmn, [num_inducing, -1])  # [M, N']: the rows of every leading index, no copy
    Knn = tf.reshape(Knn, [-1])  # [N']
    Lm = tf.linalg.cholesky(Kmm)
    A = tf.linalg.triangular_solve(Lm, Kmn, lower=True)  # [M, N']
    mean = tf.matmul(A, f, transpose_a=True)  # [N', P]
    M, P = Kmm.shape[0], f.shape[-1]
    if _symmetric and M is not None and P is not None and P >= 2:
        with tf.name_scope("symmetric_variances"):
            L = tf.linalg.band_part(q_sqrt, -1, 0)
            C = tf.matmul(L, L, transpose_b=True) - tf.eye(M, dtype=L.dtype)  # [P, M, M]: L_p L_pᵀ − I
            rows, cols = np.triu_indices(M)
            weights = tf.constant(np.where(rows == cols, 1.0, 2.0)[:, None], dtype=L.dtype)
            C_upper = tf.transpose(tf.gather(tf.reshape(C, [P, M * M]), rows * M + cols, axis=1)) * weights  # [K, P]
            products = tf.gather(A, rows) * tf.gather(A, cols)  # [K, N']: a_i a_j, i ≤ j
            var = Knn[:, None] + tf.matmul(products, C_upper, transpose_a=True)  # [N', P]
        return tf.reshape(mean, out_shape), tf.reshape(var, out_shape)
    with tf.name_scope("q_sqrt_products"):
        L = tf.linalg.band_part(q_sqrt, -1, 0)  # [P, M, M], lower triangle as in GPflow
        stacked = tf.reshape(tf.transpose(L, [1, 0, 2]), [num_inducing, -1])  # [M, P·M]: [j, p·M + i] = L_p[j, i]
        LTA = tf.matmul(A, stacked, transpose_a=True)  # [N', P·M]: [n, p·M + i] = (L_pᵀ A)[i, n]
        LTA = tf.reshape(LTA, [-1, num_outputs, num_inducing])  # [N', P, M]
        var = (Knn - tf.reduce_sum(tf.square(A), 0))[:, None] + tf.reduce_sum(tf.square(LTA), -1)  # [N', P]
    return tf.reshape(mean, out_shape), tf.reshape(var, out_shape)


def _activated_conditional(
    Xnew: tf.Tensor,
    inducing_variable: SharedActivationFeature,
    kernel: gpflow.kernels.SharedIndependent,
    f: tf.Tensor,
    *,
    full_cov: bool = False,
    full_output_cov: bool = False,
    q_sqrt: Optional[tf.Tensor] = None,
    white: bool = False,
) -> MeanAndVariance:
    """GPflow's shared-independent conditional, with :func:`whitened_marginals` for whitened full q_sqrt marginals."""
    fast = (
        _enabled
        and white
        and not full_cov
        and not full_output_cov
        and q_sqrt is not None
        and q_sqrt.shape.ndims == 3
    )
    if not fast:
        return shared_independent_conditional(
            Xnew, inducing_variable, kernel, f, full_cov=full_cov, full_output_cov=full_output_cov, q_sqrt=q_sqrt, white=white
        )
    Kmm = Kuu(inducing_variable, kernel, jitter=default_jitter())  # [M, M]
    Kmn = Kuf(inducing_variable, kernel, Xnew)  # [M, batch..., N]
    Knn = kernel.kernel(Xnew, full_cov=False)  # [batch..., N]
    return whitened_marginals(Kmn, Kmm, Knn, tf.convert_to_tensor(f), tf.convert_to_tensor(q_sqrt))


# GPflow marks conditional.register as deprecated in favour of posterior classes, but gpflux's GPLayer calls
# conditional() directly, so the dispatcher is the place that reaches it. The registration is for this package's
# inducing-variable type only.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    conditional.register(object, SharedActivationFeature, gpflow.kernels.SharedIndependent, object)(_activated_conditional)
