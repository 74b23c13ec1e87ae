"""Samples of a hidden GP layer's outputs from one draw of its inducing outputs per Monte Carlo sample.

A GP layer with shared inducing variables (one Kuu for all P outputs) and whitened inducing outputs v_p ~ N(m_p, L_p
L_pᵀ) has, at an input h with a = L⁻¹ Kuf(h) [M] (L = chol(Kuu)),

    f_p(h) = μ(h)_p + aᵀ v_p + √(k(h, h) − ‖a‖²) ε,    ε ~ N(0, 1)

(Hensman et al., 2015; Salimbeni & Deisenroth, 2017, eq. 7 with u integrated in), so given h,
f_p(h) ~ N(μ(h)_p + aᵀ m_p, aᵀ L_p L_pᵀ a + k(h, h) − ‖a‖²): the marginal that GPflow's conditional gives. Drawing
v once per Monte Carlo sample s, shared by all the rows of that sample, and ε per row gives every row the same
distribution as drawing from the per-row marginal. Rows of one sample become correlated through v_s, which no
per-row prediction (``predict_y``, ``predictive_log_density``, per-layer moments) sees.

Cost per sampled row: M²/2 for a and M·P for aᵀ V_s, against P quadratic forms aᵀ L_p L_pᵀ a (P·M²/2 or more) for
the marginal; V_s = m + L ε_v costs P·M² once per sample. Non-whitened layers draw u_s ~ N(m, S) and use
V_s = L⁻¹ u_s.
"""

from __future__ import annotations

from typing import Callable

import gpflow
import tensorflow as tf

__all__ = ["samples_from_inducing_draws", "shares_inducing_variables"]


def shares_inducing_variables(layer) -> bool:
    """Whether :func:`samples_from_inducing_draws` applies to the gpflux ``GPLayer``: a ``SharedIndependent`` kernel
    with ``SharedIndependentInducingVariables`` (one Kuu for all outputs) and a full q_sqrt [P, M, M]."""
    kernel, inducing = layer.kernel, layer.inducing_variable
    return (
        type(kernel) is gpflow.kernels.SharedIndependent
        and isinstance(inducing, gpflow.inducing_variables.SharedIndependentInducingVariables)
        and layer.q_sqrt.shape.ndims == 3
    )


def samples_from_inducing_draws(layer, hidden: tf.Tensor, inducing_normal: Callable, row_normal: Callable) -> tf.Tensor:
    """Samples [S, N, P] of the layer's outputs at ``hidden`` [S, N, D] (the previous layer's samples), by the module
    docstring's equation. ``inducing_normal(shape)`` gives the standard normals ε_v [S, P, M], one set per sample;
    ``row_normal(shape)`` the per-row ε [S·N, P] (sample-major rows)."""
    kernel, inducing = layer.kernel.kernel, layer.inducing_variable.inducing_variable
    num_samples, width = tf.shape(hidden)[0], hidden.shape[-1]
    rows = tf.reshape(hidden, [-1, width])  # [S·N, D], sample-major
    Kuu = gpflow.covariances.Kuu(inducing, kernel, jitter=gpflow.config.default_jitter())
    L = tf.linalg.cholesky(Kuu)
    A = tf.linalg.triangular_solve(L, gpflow.covariances.Kuf(inducing, kernel, rows), lower=True)  # [M, S·N]
    residual = tf.maximum(kernel.K_diag(rows) - tf.reduce_sum(tf.square(A), 0), 0.0)  # [S·N]
    q_mu, q_sqrt = tf.convert_to_tensor(layer.q_mu), tf.convert_to_tensor(layer.q_sqrt)  # [M, P], [P, M, M]
    M, P = tf.shape(q_mu)[0], tf.shape(q_mu)[1]
    eps = inducing_normal(tf.stack([num_samples, P, M]), q_mu.dtype)  # [S, P, M]
    draws = tf.transpose(q_mu)[None] + tf.einsum("pmk,spk->spm", q_sqrt, eps)  # [S, P, M]: v_s or u_s
    if not layer.whiten:  # V_s = L⁻¹ u_s
        flat = tf.reshape(tf.transpose(draws, [2, 0, 1]), [M, -1])
        draws = tf.transpose(tf.reshape(tf.linalg.triangular_solve(L, flat, lower=True), [M, num_samples, P]), [1, 2, 0])
    A = tf.reshape(tf.transpose(A), [num_samples, -1, M])  # [S, N, M]
    mean = tf.einsum("snm,spm->snp", A, draws)  # [S, N, P]
    values = tf.reshape(mean, [-1, P]) + tf.sqrt(residual)[:, None] * row_normal(tf.stack([tf.shape(rows)[0], P]), q_mu.dtype)
    values = values + layer.mean_function(rows)
    return tf.reshape(values, tf.concat([tf.shape(hidden)[:2], [P]], 0))
