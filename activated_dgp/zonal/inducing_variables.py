"""Activated interdomain inducing variables u_m = ⟨f, g_m⟩_H (Dutordoir et al., 2021, eq. 10–12)."""

from __future__ import annotations

from typing import Callable, Optional, Union

import gpflow
import numpy as np
import tensorflow as tf

from .spectra import DEFAULT_ACTIVATION, ZonalActivation, activation_coefficients, resolve_activation
from .spherical import _check_truncation_level, polar_decomposition
from ..validation import check_matrix

__all__ = ["ActivationFeature"]


class ActivationFeature(gpflow.inducing_variables.InducingVariables):
    """Inducing variables whose inducing functions are activations (eq. 10):

        g_m(x̃) = ‖x̃‖ ‖w_m‖ σ(w_m·x̃ / (‖w_m‖ ‖x̃‖)),   truncated to levels n < Ñ:
        g̃_m(x̃) = ‖x̃‖ ‖w_m‖ Σ_(n<Ñ) σ_n N_n^d Ĉ_n(ŵ_m·x̂),

    with σ_n the Funk–Hecke coefficients of σ (eq. 11) and x̃ the kernel's bias-extended,
    length-scaled input. For the ReLU, g_m(x̃) = max(0, w_m·x̃) exactly: ‖w_m‖ plays the role of
    the pre-activation weight's scale, which is why it is kept (the paper's eq. 13 and its code
    sketch drop it, which would make every inducing function unit-slope).

    :param W: [M, d] directions (and scales) w_m; a trainable ``gpflow.Parameter``.
    :param activation: "relu" (closed form), "softplus" (log(1 + exp(3t))), "swish"
        (3t·sigmoid(3t), the default: :data:`~activated_dgp.zonal.spectra.DEFAULT_ACTIVATION`), an
        :class:`~activated_dgp.zonal.spectra.ZonalActivation`, or any callable on [−1, 1] (quadrature).
    :param truncation_level: Ñ ≥ 1.
    :param threshold: levels with |σ_n| N_n^d below ``threshold`` · Σ_k |σ_k| N_k^d are set to zero
        (see ``spherical.apply_threshold``). Softplus, Swish and callables that accept mpmath numbers
        get coefficients exact to ~1e−14 in any dimension (extended-precision quadrature, cached per
        activation, d and Ñ); the ReLU has a closed form.
    """

    def __init__(
        self,
        W,
        activation: Union[str, ZonalActivation, Callable] = DEFAULT_ACTIVATION,
        truncation_level: int = 20,
        *,
        threshold: float = 1e-9,
        quadrature_points: int = 200,
        name: Optional[str] = None,
    ):
        super().__init__(name=name)
        W_value = check_matrix(W, "W", nonzero_rows=True)
        if W_value.shape[1] < 2:
            raise ValueError(f"W must be a matrix [M, d] with d ≥ 2, got shape {W_value.shape}")
        self.activation = resolve_activation(activation)
        self.truncation_level = _check_truncation_level(truncation_level)
        self.dimension = int(W_value.shape[1])
        self.W = W if isinstance(W, gpflow.Parameter) else gpflow.Parameter(W_value, dtype=gpflow.default_float())
        eigenvalues = activation_coefficients(
            self.activation,
            self.dimension,
            self.truncation_level,
            threshold=threshold,
            quadrature_points=quadrature_points,
        )
        eigenvalues.setflags(write=False)
        self._eigenvalues = eigenvalues

    @property
    def eigenvalues(self) -> np.ndarray:
        """σ_n, n = 0..Ñ−1, the Funk–Hecke coefficients of the activation (eq. 11), float64 [Ñ]."""
        return self._eigenvalues

    @property
    def num_inducing(self) -> tf.Tensor:
        return tf.shape(self.W)[0]

    def __len__(self) -> int:
        return int(self.W.shape[0])

    @property
    def shape(self):
        """[M, D, 1] in GPflow's convention, D = the data's input width. W is [M, d] with d = D + 1
        under a bias-extending kernel and d = D without, so D is not known here: reported as None,
        which GPflow's shape checks accept; the kernel checks the widths instead."""
        return (int(self.W.shape[0]), None, 1)

    def polar_directions(self) -> tuple[tf.Tensor, tf.Tensor]:
        """(‖w_m‖ [M], w_m/‖w_m‖ [M, d]). W is checked (finite, no zero rows) at construction and at the
        public entry points (:func:`activated_dgp.validation.check_dgp`), not here on every minibatch."""
        return polar_decomposition(tf.convert_to_tensor(self.W))
