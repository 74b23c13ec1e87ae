"""A far-field residual for the output layer: uncertainty that grows away from the data.

The zonal arc-cosine kernel and the activated features are positively homogeneous of degree 1 in
x̃ = [x, 1]/ℓ. Far from the data the bias coordinate vanishes, so along a ray the posterior mean and
standard deviation both grow linearly in the radius and p(y | x) tends to a direction-dependent constant
(the far-field study measures it). Kristiadi, Hein & Hennig (NeurIPS 2021) fix this for ReLU networks
with an additive GP made of infinitely many ReLU features with kinks beyond the data region, kept at their
prior. Here the output layer's kernel gains such a term, with no inducing variables of its own:

    k(h, h') = k_zonal(h, h') + k_res(h, h'),
    k_res(h, h') = σ_r² · (1 + ẑ·ẑ')/2 · ∫_1^∞ (ρ − c)₊^q (ρ' − c)₊^q dc,
    ρ = ‖h − h₀‖ / R,   z = [(h − h₀)/R, 1],   ẑ = z/‖z‖,

h₀ the data's centre and R its radius at the layer's input. The radial integral is a sum of infinitely many
truncated-power features (ReLU^q of the radius) whose kinks c lie outside the data's ball; in closed form,
with a = (min(ρ, ρ') − 1)₊ and δ = |ρ − ρ'|,

    ∫_1^∞ (ρ − c)₊^q (ρ' − c)₊^q dc = Σ_(j=0..q) C(q, j) δ^(q−j) a^(q+j+1) / (q + j + 1),

so k_res(h, h) = σ_r² (ρ − 1)₊^(2q+1) / (2q + 1): exactly zero inside the ball (no cost in distribution) and
growing like ρ^(2q+1), faster than the squared mean (∝ ρ²) for every q ≥ 1 (q = 1 is Kristiadi et al.'s cubic
spline; the default q = 3, chosen by the far-field study, grows like ρ⁷, so that |p − 0.5| ∝ ρ^(−5/2)). Both factors are positive definite (the directional one is a
normalised linear kernel plus a constant), so k_res is.

Since Cov(u, f_res) = 0, Kuu and Kuf are the zonal ones (the registered ``(ActivationFeature, ZonalKernel)``
covariances apply to the subclass :class:`FarFieldArcCosine`), so the posterior mean Kfu Kuu⁻¹ μ_u, and with
it the mean propagation (the network's forward pass), is unchanged, and the predictive variance gains
k_res(h, h) (it enters through ``K_diag``, which the activated conditional uses for Kff's diagonal).
"""

from __future__ import annotations

from contextlib import contextmanager
from math import comb
from typing import Optional

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
from check_shapes import inherit_check_shapes
from gpflow.base import TensorType
from gpflow.utilities import positive

from ..zonal.kernels import ZonalArcCosine

__all__ = ["FarFieldArcCosine", "add_far_field", "far_field_switched_off", "refit_far_field", "has_far_field", "far_field_options", "DEFAULT_ORDER"]

DEFAULT_ORDER = 3
_TINY = 1e-300


def radial_integral(rho: tf.Tensor, rho2: tf.Tensor, order: int) -> tf.Tensor:
    """∫_1^∞ (ρ − c)₊^q (ρ' − c)₊^q dc for broadcastable ρ, ρ' (module docstring's closed form)."""
    a = tf.nn.relu(tf.minimum(rho, rho2) - 1.0)
    delta = tf.abs(rho - rho2)
    return tf.add_n([comb(order, j) * delta ** (order - j) * a ** (order + j + 1) / (order + j + 1) for j in range(order + 1)])


class FarFieldArcCosine(ZonalArcCosine):
    """:class:`~activated_dgp.zonal.kernels.ZonalArcCosine` plus the far-field residual k_res of the module docstring.

    :param far_variance: σ_r² > 0 (positive transform; not trained by default: the ELBO cannot see a term that
        is zero on the data, and Adam's normalised steps would random-walk it).
    :param far_radius: R > 0, the radius of the data's ball at the layer's input (positive transform, not trained).
    :param far_centre: h₀ [D], its centre (not trained).
    :param far_order: q ≥ 1, the power of the truncated features; Var f_res ∝ (ρ − 1)₊^(2q+1).
    The other arguments are ZonalArcCosine's.
    """

    def __init__(
        self,
        input_dim: int,
        truncation_level: int = 20,
        variance: float = 1.0,
        lengthscales=1.0,
        *,
        far_variance: float = 1.0,
        far_radius: float = 1.0,
        far_centre=None,
        far_order: int = DEFAULT_ORDER,
        **kwargs,
    ):
        super().__init__(input_dim, truncation_level, variance, lengthscales, **kwargs)
        if isinstance(far_order, bool) or int(far_order) != far_order or far_order < 1:
            raise ValueError(f"far_order must be an integer ≥ 1, got {far_order!r}")
        for name, value in (("far_variance", far_variance), ("far_radius", far_radius)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")
        centre = np.zeros(self.input_dim) if far_centre is None else np.asarray(far_centre, dtype=np.float64)
        if centre.shape != (self.input_dim,) or not np.all(np.isfinite(centre)):
            raise ValueError(f"far_centre must be {self.input_dim} finite values, got {np.shape(far_centre)}")
        self.far_order = int(far_order)
        self.far_variance = gpflow.Parameter(far_variance, transform=positive(), trainable=False)
        self.far_radius = gpflow.Parameter(far_radius, transform=positive(), trainable=False)
        self.far_centre = gpflow.Parameter(centre, trainable=False)

    def _scaled(self, X: TensorType) -> tuple[tf.Tensor, tf.Tensor]:
        """(ρ [..., N], ẑ [..., N, D+1]) of the module docstring."""
        X = tf.convert_to_tensor(X)
        offset = (X - tf.cast(self.far_centre, X.dtype)) / tf.cast(self.far_radius, X.dtype)
        squared = tf.reduce_sum(tf.square(offset), axis=-1)
        rho = tf.sqrt(tf.maximum(squared, _TINY))  # finite gradient at the centre
        z = tf.concat([offset, tf.ones_like(offset[..., :1])], axis=-1) / tf.sqrt(1.0 + squared)[..., None]
        return rho, z

    def residual(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        """k_res(X, X2): [N, D], [N2, D] → [N, N2]; X2 None: k_res(X, X), [batch..., N, D] → [batch..., N, N]."""
        rho, z = self._scaled(X)
        rho2, z2 = (rho, z) if X2 is None else self._scaled(X2)
        direction = 0.5 * (1.0 + tf.matmul(z, z2, transpose_b=True))
        radial = radial_integral(rho[..., :, None], rho2[..., None, :], self.far_order)
        return tf.cast(self.far_variance, radial.dtype) * direction * radial

    def residual_diag(self, X: TensorType) -> tf.Tensor:
        """k_res(x, x) = σ_r² (ρ − 1)₊^(2q+1)/(2q + 1): [..., N, D] → [..., N]."""
        rho, _ = self._scaled(X)
        power = 2 * self.far_order + 1
        return tf.cast(self.far_variance, rho.dtype) * tf.nn.relu(rho - 1.0) ** power / power

    @inherit_check_shapes
    def K(self, X: TensorType, X2: Optional[TensorType] = None) -> tf.Tensor:
        if X2 is not None and (tf.convert_to_tensor(X).shape.rank != 2 or tf.convert_to_tensor(X2).shape.rank != 2):
            raise ValueError("FarFieldArcCosine.K(X, X2) takes [N, D] inputs (batched X alone, or K_diag, also work)")
        return super().K(X, X2) + self.residual(X, X2)

    @inherit_check_shapes
    def K_diag(self, X: TensorType) -> tf.Tensor:
        return super().K_diag(X) + self.residual_diag(X)


def has_far_field(dgp: gpflux.models.DeepGP) -> bool:
    """Whether the DGP's output layer carries a :class:`FarFieldArcCosine` kernel."""
    return isinstance(getattr(dgp.f_layers[-1].kernel, "kernel", None), FarFieldArcCosine)


@contextmanager
def far_field_switched_off(dgp: gpflux.models.DeepGP):
    """Within the block the output layer's residual is exactly zero (R = 10³⁰ puts every input inside the ball,
    where (ρ − 1)₊ = 0); the radius is restored on exit. For paired with/without comparisons of one fit."""
    kernel = dgp.f_layers[-1].kernel.kernel
    if not isinstance(kernel, FarFieldArcCosine):
        raise ValueError("the DGP's output layer has no far-field residual")
    radius = float(kernel.far_radius.numpy())
    kernel.far_radius.assign(1e30)
    try:
        yield dgp
    finally:
        kernel.far_radius.assign(radius)


def far_field_options(far_field) -> Optional[dict]:
    """Normalise a ``far_field=`` keyword: False/None → None (off), True → {} (defaults), a dict of
    :func:`add_far_field` keywords (``order``, ``scale``) → itself; anything else a ValueError."""
    if far_field is None or far_field is False:
        return None
    if far_field is True:
        return {}
    if isinstance(far_field, dict) and set(far_field) <= {"order", "scale"}:
        return dict(far_field)
    raise ValueError(f"far_field must be True, False or a dict with keys 'order', 'scale'; got {far_field!r}")


def add_far_field(dgp: gpflux.models.DeepGP, X=None, *, order: int = DEFAULT_ORDER, scale: float = 1.0, **values) -> gpflux.models.DeepGP:
    """Give the output layer of an activated DeepGP the far-field residual (in place; returns the DGP).

    The output layer's ZonalArcCosine is replaced by a :class:`FarFieldArcCosine` that shares its variance and
    lengthscale Parameters (so q(u), the mean propagation and every other parameter are untouched). With data X
    the residual's constants come from the mean propagation: h₀ = the mean of the output layer's inputs H,
    R = max_i ‖H_i − h₀‖, and σ_r² = ``scale`` · max_(i,p) μ_L(x_i)_p² (the largest squared output mean on the
    data; at ρ = 2 the residual's std is then √(scale/(2q+1)) times the largest |mean| seen in training).
    Without X give ``far_variance``, ``far_radius`` and ``far_centre`` (e.g. when loading a saved model).
    """
    from .sampling import layer_inputs

    layer = dgp.f_layers[-1]
    shared = layer.kernel
    zonal = getattr(shared, "kernel", None)
    if type(shared) is not gpflow.kernels.SharedIndependent or not isinstance(zonal, ZonalArcCosine):
        raise ValueError(f"the output layer's kernel must be SharedIndependent(ZonalArcCosine), got {type(shared).__name__}")
    if isinstance(zonal, FarFieldArcCosine):
        raise ValueError("the output layer already has a far-field residual")
    if not zonal.bias:
        raise ValueError("the far-field residual needs a bias-extended ZonalArcCosine")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    if X is not None:
        H = layer_inputs(dgp, X)[-1]
        mean, _ = layer.predict(H, full_cov=False, full_output_cov=False)
        values = dict(_ball(H.numpy()), far_variance=float(scale * max(np.max(mean.numpy() ** 2), 1e-12)))
    elif not {"far_variance", "far_radius", "far_centre"} <= set(values):
        raise ValueError("add_far_field needs data X or far_variance, far_radius and far_centre")
    kernel = FarFieldArcCosine(
        zonal.input_dim, zonal.truncation_level, threshold=zonal.threshold, far_order=order, name=zonal.name, **values
    )
    kernel.variance, kernel.lengthscales = zonal.variance, zonal.lengthscales
    layer.kernel = gpflow.kernels.SharedIndependent(kernel, output_dim=shared.output_dim)
    return dgp


def _ball(H: np.ndarray) -> dict:
    """h₀ = the mean of the rows of H and R = max_i ‖H_i − h₀‖."""
    centre = H.mean(0)
    return dict(far_centre=centre, far_radius=float(max(np.max(np.linalg.norm(H - centre, axis=1)), 1e-12)))


def refit_far_field(dgp: gpflux.models.DeepGP, X) -> None:
    """Re-centre the residual's ball on the output layer's inputs of X under the current mean propagation
    (h₀, R; σ_r² kept). Stage 2 moves the hidden layers of a deep model, so the ball fitted at conversion no
    longer holds the training data's representations; :func:`activated_dgp.train_two_stage` calls this after
    stage 2. The mean is unchanged (the residual never enters it)."""
    from .sampling import layer_inputs

    if not has_far_field(dgp):
        raise ValueError("the DGP's output layer has no far-field residual (see add_far_field)")
    kernel = dgp.f_layers[-1].kernel.kernel
    ball = _ball(layer_inputs(dgp, X)[-1].numpy())
    kernel.far_centre.assign(ball["far_centre"])
    kernel.far_radius.assign(ball["far_radius"])


def far_field_record(dgp: gpflux.models.DeepGP) -> Optional[dict]:
    """What rebuilding needs beyond the architecture: {"order": q} when the output layer has the residual
    (its parameter values are saved with the others), else None."""
    return {"order": dgp.f_layers[-1].kernel.kernel.far_order} if has_far_field(dgp) else None


def restore_far_field(dgp: gpflux.models.DeepGP, record: Optional[dict]) -> gpflux.models.DeepGP:
    """Rebuild the residual described by :func:`far_field_record` on a freshly built DGP (placeholder values,
    overwritten by the loaded parameters)."""
    if record is None:
        return dgp
    if not isinstance(record, dict) or set(record) != {"order"}:
        raise ValueError(f"a far-field record is {{'order': q}}, got {record!r}")
    width = dgp.f_layers[-1].kernel.kernel.input_dim
    return add_far_field(dgp, order=record["order"], far_variance=1.0, far_radius=1.0, far_centre=np.zeros(width))
