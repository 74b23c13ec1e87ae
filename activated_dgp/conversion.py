"""Keras network → activated DGP (Dutordoir et al., 2021, Sec. 5.1).

For a twin network [ActivatedLayer(W_ℓ), Dense(V_ℓ, no bias)] × L the map is exact: each GP
layer gets the inducing directions W_ℓ and the variational mean that makes its posterior-mean
weights B_ℓ = Kuu⁻¹ μ_u equal V_ℓ:

    non-whitened:  μ_u = (Kuu + εI) V_ℓ,        whitened (u = L v):  μ_v = Lᵀ V_ℓ,  L Lᵀ = Kuu + εI,

with ε = gpflow's default jitter, the same that GPflow's conditional adds, so that
Kfu (Kuu + εI)⁻¹ μ_u = Φ(x) V_ℓ to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from .config import ArchitectureConfig
from .diagnostics import whitened_cross_covariance
from .far_field import add_far_field, far_field_options
from .models import build_activated_dgp
from .nn import ActivatedLayer
from .persistence import architecture_of_network
from .prediction import layer_inputs, propagate_means
from .validation import check_inputs

__all__ = [
    "Conversion",
    "dgp_from_keras",
    "set_posterior_mean_weights",
    "posterior_mean_weights",
    "rescale_kernel_variance",
    "select_kernel_variances",
    "VarianceSelection",
]


@dataclass
class Conversion:
    """The converted DeepGP; ``exact`` says whether the network was an activated twin; when data
    were given, the mismatch between the network's forward pass and the DGP's mean propagation."""

    dgp: gpflux.models.DeepGP
    exact: bool
    max_abs_mismatch: Optional[float] = None
    rms_mismatch: Optional[float] = None
    variance_selection: Optional["VarianceSelection"] = None


def set_posterior_mean_weights(layer: gpflux.layers.GPLayer, V: np.ndarray) -> None:
    """Set q_μ so that the layer's posterior mean is Φ(x) V (see the module docstring)."""
    Kmm = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    V = tf.convert_to_tensor(V, dtype=Kmm.dtype)
    if layer.whiten:
        layer.q_mu.assign(tf.linalg.matmul(tf.linalg.cholesky(Kmm), V, transpose_a=True))
    else:
        layer.q_mu.assign(tf.linalg.matmul(Kmm, V))


def posterior_mean_weights(layer: gpflux.layers.GPLayer) -> np.ndarray:
    """B = (Kuu + εI)⁻¹ μ_u (whitened: L⁻ᵀ μ_v), [M, P]: the layer's posterior mean is Φ(x) B."""
    Kmm = gpflow.covariances.Kuu(layer.inducing_variable, layer.kernel, jitter=gpflow.config.default_jitter())
    if layer.whiten:
        return tf.linalg.triangular_solve(tf.linalg.cholesky(Kmm), layer.q_mu, lower=True, adjoint=True).numpy()
    return tf.linalg.solve(Kmm, tf.convert_to_tensor(layer.q_mu)).numpy()


def set_optimal_output_covariance(dgp: gpflux.models.DeepGP, X, noise_variance: Optional[float] = None) -> np.ndarray:
    """Set the output layer's q(u) covariance to the one that maximises the ELBO for its fixed q_μ.

    With a Gaussian likelihood the ELBO is separable in S = Cov q(u): for inputs H of the output layer (here the
    hidden layers' mean propagation of X) and A = L⁻¹ Kuf(H), Kuu = L Lᵀ, the whitened optimum is
    S = (I + c σ⁻² A Aᵀ)⁻¹, i.e. Kuu (Kuu + c σ⁻² Kuf Kfu)⁻¹ Kuu unwhitened (Titsias, 2009, the optimal q(u) of
    the collapsed bound; it does not depend on the mean), with c = N / len(X) the model's minibatch scaling.
    It is exact for a one-layer model, and for a deep one whose hidden layers are deterministic (v → 0).
    Every output head gets the same S. Returns S, [M, M]."""
    likelihood = dgp.likelihood_layer.likelihood
    if not isinstance(likelihood, gpflow.likelihoods.Gaussian):
        raise ValueError(f"the optimal q(u) covariance needs a Gaussian likelihood, the model has {type(likelihood).__name__}")
    noise = float(likelihood.variance.numpy()) if noise_variance is None else float(noise_variance)
    if not noise > 0:
        raise ValueError(f"noise_variance must be positive, got {noise_variance!r}")
    X = np.asarray(X, dtype=np.float64)
    H = layer_inputs(dgp, X)[-1]
    layer = dgp.f_layers[-1]
    L, A = (t.numpy() for t in whitened_cross_covariance(layer, H))
    scale = (dgp.num_data or len(X)) / len(X)
    S = np.linalg.inv(np.eye(A.shape[0]) + scale / noise * (A @ A.T))
    S = 0.5 * (S + S.T)
    if not layer.whiten:
        S = L @ S @ L.T
    root = np.linalg.cholesky(S + 1e-12 * np.trace(S) / len(S) * np.eye(len(S)))
    layer.q_sqrt.assign(np.broadcast_to(root, layer.q_sqrt.shape))
    return S


def rescale_kernel_variance(layer: gpflux.layers.GPLayer, variance: float) -> None:
    """Set the layer's kernel variance v and re-solve q_μ so that the posterior mean Φ(x) B is unchanged.

    Kuf does not depend on v and Kuu ∝ 1/v, so at fixed B the KL of the mean, ½ Bᵀ Kuu B, falls like
    1/v while the prior variance left outside the inducing span, k − Kfu Kuu⁻¹ Kuf ∝ v, grows with v.
    In the whitened parametrisation q_sqrt = s·I keeps its meaning (a fraction s² of the prior)."""
    if not variance > 0:
        raise ValueError(f"the kernel variance must be positive, got {variance!r}")
    weights = posterior_mean_weights(layer)
    kernel = getattr(layer.kernel, "kernel", layer.kernel)
    kernel.variance.assign(variance)
    set_posterior_mean_weights(layer, weights)


@dataclass
class VarianceSelection:
    """Result of :func:`select_kernel_variances`: the chosen v per layer, the ELBO there, and every
    evaluated (layer, v, ELBO) for the record."""

    variances: list
    elbo: float
    evaluations: list
    noise_variance: Optional[float] = None


# Multiples of the entry noise variance tried with each output-layer v by a joint search (2^-4 … 2).
NOISE_FACTORS = tuple(2.0 ** np.arange(-4.0, 1.01, 0.5))


def select_kernel_variances(
    dgp: gpflux.models.DeepGP,
    X,
    Y,
    *,
    objective: str = "elbo",
    candidates=None,
    sweeps: int = 1,
    num_samples: int = 4,
    seed: int = 0,
    max_points: int = 1024,
    noise_factors=None,
) -> VarianceSelection:
    """Choose each layer's kernel variance v, keeping the mean propagation (the network's forward pass).

    Coordinate ascent: for each layer in turn (``sweeps`` passes over the layers) the objective is
    evaluated at every v in ``candidates`` with q_μ re-solved by :func:`rescale_kernel_variance`, and the
    best v is kept. The draws are fixed by ``seed``, so all candidates see the same noise (common random
    numbers). The default grid is 10^(−3, −2.5, …, 0.5), *extended* in steps of 10^0.5 beyond whichever end
    is best, for as long as the objective improves (down to 10^−9, up to 10^3): the best v depends on the
    data's noise level (naval's twin, noise 1.6e-4, wants v ≈ 1e-5 per layer; at the old fixed floor 1e-3
    its test NLPD was −2.06 against the network's −2.93, docs/results/stage2.md). Explicit ``candidates``
    are taken as given.

    * ``objective="elbo"``: the ELBO on (X, Y) (:func:`activated_dgp.diagnostics.elbo_terms`, at most
      ``max_points`` seeded rows, scaled to the model's N). It resolves the trade-off the converted
      means pose: they cost ½ Bᵀ Kuu B ∝ 1/v nats of KL, while the prior variance left outside the
      inducing span, ∝ v, is noise in every sample passed through the layer.
    * ``objective="validation"``: the predictive log density on held-out (X, Y) (−NLPD,
      :func:`activated_dgp.predictive_log_density` with ``4·num_samples`` samples): the v that predicts best.

    ``noise_factors`` (a Gaussian likelihood only; e.g. :data:`NOISE_FACTORS`): the output layer's v is
    searched *jointly* with the noise variance σ², trying σ² = factor × (σ² on entry) at every candidate v.
    The two trade off — the output layer's residual prior variance k(x, x) − Qff(x) ∝ v is an input-dependent
    share of the predictive variance that a smaller σ² must make room for — so a search over v at a fixed σ²
    never finds the pair where both move (measured on yacht: docs/results/stage2.md, "Joint noise").
    """
    from .diagnostics import elbo_terms
    from .prediction import predictive_log_density

    if objective not in ("elbo", "validation"):
        raise ValueError(f"objective must be 'elbo' or 'validation', got {objective!r}")
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if len(X) != len(Y):
        raise ValueError(f"X and Y have different numbers of rows: {len(X)} and {len(Y)}")
    if len(X) > max_points and objective == "elbo":
        rows = np.random.default_rng(seed).choice(len(X), max_points, replace=False)
        X, Y = X[rows], Y[rows]
    extend = candidates is None
    grid = np.asarray(candidates if candidates is not None else 10.0 ** np.arange(-3.0, 0.51, 0.5), dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.any(~(grid > 0)):
        raise ValueError(f"candidates must be a non-empty list of positive variances, got {candidates!r}")
    grid = np.sort(grid)
    step, lowest, highest = 10.0**0.5, 10.0**-9, 10.0**3
    likelihood = dgp.likelihood_layer.likelihood
    if noise_factors is not None:
        if not isinstance(likelihood, gpflow.likelihoods.Gaussian):
            raise ValueError(f"noise_factors need a Gaussian likelihood, the model has {type(likelihood).__name__}")
        noise_factors = np.asarray(noise_factors, dtype=np.float64)
        if noise_factors.ndim != 1 or noise_factors.size == 0 or np.any(~(noise_factors > 0)):
            raise ValueError(f"noise_factors must be a non-empty list of positive numbers, got {noise_factors!r}")
    entry_noise = chosen_noise = float(likelihood.variance.numpy()) if noise_factors is not None else None

    def score():
        if objective == "elbo":
            return elbo_terms(dgp, X, Y, num_samples=num_samples, seed=seed).elbo
        return float(np.mean(predictive_log_density(dgp, X, Y, num_samples=4 * num_samples, seed=seed)))

    evaluations = []
    best = score()
    for _ in range(int(sweeps)):
        for index, layer in enumerate(dgp.f_layers):
            kernel = getattr(layer.kernel, "kernel", layer.kernel)
            chosen = float(kernel.variance.numpy())

            joint = noise_factors is not None and index == len(dgp.f_layers) - 1

            def evaluate(v: float) -> bool:
                nonlocal best, chosen, chosen_noise
                rescale_kernel_variance(layer, v)
                improved = False
                for noise in entry_noise * noise_factors if joint else [None]:
                    if noise is not None:
                        likelihood.variance.assign(noise)
                    value = score()
                    evaluations.append((index, v, value))
                    if value > best:
                        best, chosen, improved = value, v, True
                        if noise is not None:
                            chosen_noise = float(noise)
                return improved

            for v in grid:
                evaluate(float(v))
            if extend:  # past the grid's ends while the best sits on one and keeps improving
                v = float(grid[0])
                while chosen == v and v / step >= lowest and evaluate(v / step):
                    v = v / step
                v = float(grid[-1])
                while chosen == v and v * step <= highest and evaluate(v * step):
                    v = v * step
            rescale_kernel_variance(layer, chosen)
            if joint:
                likelihood.variance.assign(chosen_noise)
    variances = [float(getattr(layer.kernel, "kernel", layer.kernel).variance.numpy()) for layer in dgp.f_layers]
    return VarianceSelection(variances, best, evaluations, chosen_noise)


def _pairs(network: tf_keras.Model):
    layers = [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]

    def fail(index, layer, why):
        raise ValueError(
            f"cannot convert layer {index} {layer.name!r} ({type(layer).__name__}): {why}. The converter maps "
            "[ActivatedLayer or Dense(units, activation='softplus'), Dense(rank, use_bias=False)] repeated"
        )

    if not layers:
        raise ValueError("the network has no layers to convert")
    pairs = []
    for index in range(0, len(layers), 2):
        first = layers[index]
        if index + 1 >= len(layers):
            fail(index, first, "it has no linear layer after it")
        second = layers[index + 1]
        if isinstance(first, ActivatedLayer):
            kind = "activated"
        elif isinstance(first, tf_keras.layers.Dense) and first.activation is tf_keras.activations.softplus:
            kind = "softplus"
        else:
            fail(index, first, "expected an ActivatedLayer or a Dense layer with softplus activation")
        if not isinstance(second, tf_keras.layers.Dense):
            fail(index + 1, second, "expected a Dense layer")
        if second.use_bias:
            fail(index + 1, second, "the linear layer has a bias, which a zero-mean GP layer cannot represent")
        if second.activation is not tf_keras.activations.linear:
            fail(index + 1, second, "the linear layer has an activation")
        pairs.append((kind, first, second))
    return pairs


def _directions(kind: str, first) -> np.ndarray:
    """W [M, D+1] of a pair's first layer: a twin's own W, or [kernel column, bias] of a Dense(softplus)."""
    if kind == "activated":
        return first.feature.W.numpy()
    kernel, bias = first.kernel.numpy(), first.bias.numpy() if first.use_bias else 0.0
    return np.concatenate([kernel.T, np.reshape(bias, (-1, 1)) * np.ones((kernel.shape[1], 1))], axis=1)


def _architecture(network: tf_keras.Model, pairs, likelihood, whiten: bool, truncation_level: int) -> ArchitectureConfig:
    """The DGP's :class:`ArchitectureConfig`: a twin's own (:func:`architecture_of_network`), with the
    lengthscales its kernels hold and the likelihood; for a plain network its widths with the zonal
    Softplus, Ñ = ``truncation_level`` and ℓ = 1. A ValueError when the likelihood does not fit the width
    of the last linear layer."""
    output_dim = pairs[-1][2].units
    if all(kind == "activated" for kind, _, _ in pairs):
        base = architecture_of_network(network, registered_only=False)
        lengthscales = [first.kernel.lengthscales.numpy() for _, first, _ in pairs]
    else:
        base = ArchitectureConfig(
            input_dim=pairs[0][1].kernel.shape[0], num_layers=len(pairs),
            num_units=[first.units for _, first, _ in pairs], layer_widths=[second.units for _, _, second in pairs[:-1]],
            output_dim=output_dim, activation="softplus", truncation_level=truncation_level, likelihood=None,
        )
        lengthscales = None
    try:
        return base.replace(lengthscales=lengthscales, whiten=whiten, likelihood=likelihood)
    except ValueError as error:
        raise ValueError(f"cannot convert the network ({output_dim} outputs): {error}") from None


def dgp_from_keras(
    network: tf_keras.Model,
    num_data: int,
    *,
    X=None,
    Y=None,
    likelihood: Union[str, gpflow.likelihoods.Likelihood] = "gaussian",
    whiten: bool = True,
    kernel_variance: Union[float, str] = 1.0,
    noise_variance: float = 0.01,
    q_sqrt_scale: float = 1e-5,
    truncation_level: int = 20,
    ridge: float = 1e-8,
    far_field=False,
) -> Conversion:
    """An activated DeepGP whose mean propagation is the network's forward pass.

    :param network: a twin from :func:`build_activated_nn` (exact conversion), or a plain
        low-rank network [Dense(M, softplus), Dense(P, use_bias=False)] × L (approximate: each
        W_m = [kernel column, bias], and the zonal Softplus log(1 + e^(3t)) replaces softplus; with
        data ``X`` the V_ℓ are refitted layer by layer by ridge regression onto the network's own
        layer outputs, and the remaining mismatch is reported).
    :param X: inputs on which to report the forward-pass mismatch (and fit the approximate case).
    :param likelihood: as in :func:`build_activated_dgp`; the last Dense layer's width must match it.
    :param truncation_level: Ñ for converted plain networks (a twin keeps its own).
    :param kernel_variance: every layer's v, or ``"elbo"``: each layer's v chosen by maximising the
        ELBO on (``X``, ``Y``) with the mean propagation kept (:func:`select_kernel_variances`; the
        record is in ``Conversion.variance_selection``).
    :param far_field: True or a dict (``order``, ``scale``): give the output layer the far-field residual
        (:func:`activated_dgp.far_field.add_far_field`, constants from ``X``); the mean is unchanged.
    """
    far_field = far_field_options(far_field)
    if far_field is not None and X is None:
        raise ValueError("far_field needs the data X (the residual's centre, radius and variance come from it)")
    select = isinstance(kernel_variance, str)
    if select:
        if kernel_variance != "elbo":
            raise ValueError(f"kernel_variance must be a positive number or 'elbo', got {kernel_variance!r}")
        if X is None or Y is None:
            raise ValueError("kernel_variance='elbo' needs the training data X and Y")
    pairs = _pairs(network)
    exact = all(kind == "activated" for kind, _, _ in pairs)
    config = _architecture(network, pairs, likelihood, whiten, truncation_level)
    hidden_dgp = None if X is None else tf.convert_to_tensor(check_inputs(X, config.input_dim, "X"))
    dgp = build_activated_dgp(
        config, num_data, kernel_variance=1.0 if select else kernel_variance, noise_variance=noise_variance,
        q_sqrt_scale=q_sqrt_scale,
    )
    hidden_net = hidden_dgp
    for (kind, first, second), layer in zip(pairs, dgp.f_layers):
        feature = layer.inducing_variable.inducing_variable
        feature.W.assign(_directions(kind, first))
        V = second.kernel.numpy().astype(np.float64)
        if kind == "softplus" and hidden_dgp is not None:
            target = second(first(hidden_net)).numpy()
            features = tf.transpose(gpflow.covariances.Kuf(feature, layer.kernel.kernel, hidden_dgp)).numpy()
            gram = features.T @ features + ridge * np.trace(features.T @ features) / features.shape[1] * np.eye(features.shape[1])
            V = np.linalg.solve(gram, features.T @ target)
        set_posterior_mean_weights(layer, V)
        if hidden_dgp is not None:
            hidden_net = second(first(hidden_net))
            hidden_dgp, _ = layer.predict(hidden_dgp, full_cov=False)
    if far_field is not None:
        add_far_field(dgp, X, **far_field)
    result = Conversion(dgp, exact)
    if select:
        result.variance_selection = select_kernel_variances(dgp, X, Y)
    if X is not None:
        difference = propagate_means(dgp, X)[-1].numpy() - network(np.asarray(X, dtype=np.float64)).numpy()
        result.max_abs_mismatch = float(np.max(np.abs(difference)))
        result.rms_mismatch = float(np.sqrt(np.mean(difference**2)))
    return result
