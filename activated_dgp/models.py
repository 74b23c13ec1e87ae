"""Activated deep GPs as gpflux models (Dutordoir et al., 2021, Sec. 4–5, Fig. 1a)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Union

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tf_keras
import tensorflow_probability as tfp
from gpflow.likelihoods.utils import inv_probit

from .conditionals import SharedActivationFeature
from .inducing_variables import ActivationFeature
from .far_field import FarFieldArcCosine
from .kernels import ZonalArcCosine
from .config import ArchitectureConfig, as_config
from .nn import initial_directions
from .spectra import Activation
from .validation import check_matrix

__all__ = [
    "build_activated_dgp",
    "activated_gp_layer",
    "make_likelihood",
    "likelihood_name",
    "LIKELIHOODS",
    "MonteCarloSoftmax",
    "LogisticBernoulli",
    "ProbitCrossEntropy",
    "network_loss",
    "output_width",
]


class MonteCarloSoftmax(gpflow.likelihoods.Softmax):
    """GPflow's Softmax likelihood, usable with X = None.

    gpflux's LikelihoodLayer calls the likelihood with X = None, and GPflow's Monte Carlo
    quadrature tiles every keyword argument, failing on None. Softmax ignores X, so a placeholder
    column of zeros stands in for it; the Monte Carlo estimates are GPflow's own. Labels arrive
    as float64 (gpflux's targets) and are cast to integers.
    """

    def _log_prob(self, X, F, Y):
        return super()._log_prob(X, F, tf.cast(Y, tf.int64))

    def _mc_quadrature(self, funcs, Fmu, Fvar, logspace=False, epsilon=None, **Ys):
        Ys = {name: tf.zeros_like(Fmu[..., :1]) if value is None else value for name, value in Ys.items()}
        return super()._mc_quadrature(funcs, Fmu, Fvar, logspace=logspace, epsilon=epsilon, **Ys)


class LogisticBernoulli(gpflow.likelihoods.Bernoulli):
    """GPflow's Bernoulli likelihood with the logistic link, with a log density that cannot overflow.

    GPflow evaluates log p(y | f) as log σ(f) or log(1 − σ(f)); in float64 1 − σ(f) rounds to 0 for
    f ≳ 37, so a label-0 point whose quadrature nodes reach that far (large means after stage 1,
    growing variances in stage 2) gives −inf and a NaN gradient. Here

        log p(y | f) = log σ((2y − 1) f) = −softplus(−(2y − 1) f),

    the same function, finite for every f; predictive log densities use GPflow's log-space
    Gauss–Hermite quadrature of it instead of log of the averaged probability.
    """

    def __init__(self, **kwargs):
        super().__init__(invlink=tf.sigmoid, **kwargs)

    def _scalar_log_prob(self, X, F, Y):
        sign = tf.where(tf.equal(Y, 1), tf.ones_like(F), -tf.ones_like(F))
        return -tf.math.softplus(-sign * F)

    def _predict_log_density(self, X, Fmu, Fvar, Y):
        return gpflow.likelihoods.ScalarLikelihood._predict_log_density(self, X, Fmu, Fvar, Y)


class ProbitCrossEntropy(tf_keras.losses.Loss):
    """The network twin's loss for the probit likelihood: the negative log-likelihood of 0/1 labels under
    p(y = 1 | f) = Φ(f), f the network's output,

        −log p(y | f) = −log Φ((2y − 1) f),

    evaluated with ``log_ndtr`` (finite for every f, where log(1 − Φ(f)) would round to −inf); [N, 1] → [N].
    """

    def __init__(self, name: str = "probit_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_true = tf.cast(y_true, y_pred.dtype)
        standard = tfp.distributions.Normal(tf.zeros([], y_pred.dtype), tf.ones([], y_pred.dtype))
        return -tf.reduce_mean(standard.log_cdf((2.0 * y_true - 1.0) * y_pred), axis=-1)  # log_cdf = log_ndtr


@dataclass(frozen=True)
class LikelihoodEntry:
    """One registered likelihood name: how to build it, how to recognise an instance, and the network
    twin's matching loss.

    :param build: ``(output_dim, noise_variance) -> likelihood``.
    :param latent_gps: ``output_dim -> number of latent GPs of the last layer``.
    :param matches: true exactly for the instances this name rebuilds (same class and link), so
        that saving by name never turns one likelihood into another.
    :param targets: "real" (Y [N, P]), "binary" (0/1 labels [N, 1]) or "class" (class indices [N, 1]).
    :param network_loss: ``() -> tf-keras loss`` on the twin's outputs that is this likelihood's negative
        log density at f (stage 1 of the two-stage training).
    """

    name: str
    build: Callable[[int, float], gpflow.likelihoods.Likelihood]
    latent_gps: Callable[[int], int]
    matches: Callable[[gpflow.likelihoods.Likelihood], bool]
    targets: str
    network_loss: Callable[[], tf_keras.losses.Loss]


def _classes(output_dim: int, name: str) -> int:
    if int(output_dim) != output_dim or output_dim < 2:
        raise ValueError(f"a {name} likelihood needs output_dim = number of classes ≥ 2, got {output_dim!r}")
    return int(output_dim)


def _one_latent(name: str) -> Callable[[int], int]:
    def latent(output_dim: int) -> int:
        if output_dim != 1:
            raise ValueError(f"a {name} likelihood has one latent GP (a single logit), got output_dim={output_dim!r}")
        return 1

    return latent


#: The one registry of likelihood names (used by the builders, the config and persistence).
LIKELIHOODS: Dict[str, LikelihoodEntry] = {
    entry.name: entry
    for entry in (
        LikelihoodEntry(
            "gaussian",
            lambda P, noise: gpflow.likelihoods.Gaussian(variance=noise),
            int,
            lambda lik: type(lik) is gpflow.likelihoods.Gaussian,
            "real",
            tf_keras.losses.MeanSquaredError,
        ),
        LikelihoodEntry(
            "bernoulli",  # logistic link, the twin's sigmoid cross-entropy
            lambda P, noise: LogisticBernoulli(),
            _one_latent("bernoulli"),
            lambda lik: type(lik) is LogisticBernoulli,
            "binary",
            lambda: tf_keras.losses.BinaryCrossentropy(from_logits=True),
        ),
        LikelihoodEntry(
            "probit",  # GPflow's Bernoulli with its default probit link Φ(f)
            lambda P, noise: gpflow.likelihoods.Bernoulli(invlink=inv_probit),
            _one_latent("probit"),
            lambda lik: type(lik) is gpflow.likelihoods.Bernoulli and lik.invlink is inv_probit,
            "binary",
            ProbitCrossEntropy,
        ),
        LikelihoodEntry(
            "softmax",
            lambda P, noise: MonteCarloSoftmax(_classes(P, "softmax")),
            lambda P: _classes(P, "softmax"),
            lambda lik: type(lik) is MonteCarloSoftmax,
            "class",
            lambda: tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ),
        LikelihoodEntry(
            "robustmax",
            lambda P, noise: gpflow.likelihoods.MultiClass(_classes(P, "robustmax")),
            lambda P: _classes(P, "robustmax"),
            lambda lik: type(lik) is gpflow.likelihoods.MultiClass and type(lik.invlink) is gpflow.likelihoods.RobustMax,
            "class",  # the twin is trained on softmax cross-entropy, the DGP then on the robust-max likelihood
            lambda: tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ),
    )
}


def _entry(name) -> LikelihoodEntry:
    key = str(name).lower()
    if key not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood {name!r}; choose one of {sorted(LIKELIHOODS)} or pass a gpflow likelihood")
    return LIKELIHOODS[key]


def likelihood_name(likelihood: Union[str, gpflow.likelihoods.Likelihood]) -> str:
    """The registry name of a likelihood name or instance; a ValueError naming the class (and link) when no
    registered name rebuilds exactly this likelihood."""
    if isinstance(likelihood, str):
        return _entry(likelihood).name
    for entry in LIKELIHOODS.values():
        if entry.matches(likelihood):
            return entry.name
    link = getattr(likelihood, "invlink", None)
    link = f" with link {getattr(link, '__name__', type(link).__name__)}" if link is not None else ""
    raise ValueError(
        f"the likelihood {type(likelihood).__name__}{link} is not registered; registered: {sorted(LIKELIHOODS)}"
    )


def network_loss(likelihood: Union[str, gpflow.likelihoods.Likelihood]) -> tf_keras.losses.Loss:
    """The twin's stage-1 loss for a registered likelihood (name or instance): MSE (gaussian), sigmoid
    cross-entropy (bernoulli), probit cross-entropy (probit), softmax cross-entropy (softmax, robustmax)."""
    return LIKELIHOODS[likelihood_name(likelihood)].network_loss()


def output_width(likelihood: Union[str, gpflow.likelihoods.Likelihood], Y: np.ndarray, num_classes: Optional[int] = None) -> int:
    """P_L, the last layer's width for targets Y [N, P] under a registered likelihood, after checking that Y
    holds what the likelihood models: any reals; 0/1 labels [N, 1] (bernoulli, probit); class indices
    0..C−1 [N, 1] with C = ``num_classes`` (default: the largest label + 1) for softmax / robustmax."""
    targets = LIKELIHOODS[likelihood_name(likelihood)].targets
    Y = np.asarray(Y)
    if targets == "real":
        return int(Y.shape[1])
    if Y.shape[1] != 1:
        raise ValueError(f"{likelihood_name(likelihood)} targets are one label per row, Y [N, 1]; got shape {Y.shape}")
    if targets == "binary":
        if not np.all((Y == 0) | (Y == 1)):
            raise ValueError(f"{likelihood_name(likelihood)} labels must be 0 or 1, got values {np.unique(Y)[:5].tolist()}")
        return 1
    if np.any(Y < 0) or np.any(Y != np.round(Y)):
        raise ValueError(f"class labels must be integers 0..C−1, got values {np.unique(Y)[:5].tolist()}")
    classes = int(num_classes) if num_classes is not None else int(Y.max()) + 1
    if Y.size and Y.max() >= classes:
        raise ValueError(f"class label {int(Y.max())} is out of range for num_classes={classes}")
    return classes


def make_likelihood(likelihood: Union[str, gpflow.likelihoods.Likelihood], output_dim: int, noise_variance: float = 0.01):
    """A GPflow likelihood from a name; returns (likelihood, number of latent GPs of the last layer).

    "gaussian": Gaussian(noise_variance), ``output_dim`` outputs; "bernoulli": Bernoulli with the
    logistic link (so that the network twin's sigmoid cross-entropy is the same model;
    :class:`LogisticBernoulli`), 1 latent; "probit": GPflow's Bernoulli with the probit link, 1 latent;
    "softmax" / "robustmax": ``output_dim`` classes (≥ 2) with Softmax or MultiClass (robust-max).
    For the Bernoulli names any ``output_dim`` gives one latent GP (the builders' long-standing
    behaviour); :class:`~activated_dgp.config.ArchitectureConfig` insists on ``output_dim=1``.
    """
    if isinstance(likelihood, gpflow.likelihoods.Likelihood):
        return likelihood, int(output_dim)
    entry = _entry(likelihood)
    if entry.name in ("bernoulli", "probit"):
        output_dim = 1
    return entry.build(output_dim, noise_variance), entry.latent_gps(output_dim)


def activated_gp_layer(
    W: np.ndarray,
    output_dim: int,
    num_data: int,
    *,
    activation: Union[str, Activation, Callable] = "softplus",
    truncation_level: int = 20,
    kernel_variance: float = 1.0,
    lengthscales=1.0,
    whiten: bool = True,
    mean_function: Optional[gpflow.mean_functions.MeanFunction] = None,
    q_sqrt_scale: float = 1e-5,
    name: Optional[str] = None,
    far_field: Optional[dict] = None,
) -> gpflux.layers.GPLayer:
    """One activated GP layer: ``GPLayer(SharedIndependent(ZonalArcCosine), SharedActivationFeature(ActivationFeature(W)))``.

    :class:`~activated_dgp.conditionals.SharedActivationFeature` is GPflow's SharedIndependentInducingVariables with
    the P per-output q_sqrt products of the conditional computed as one matrix product.

    W is [M, D+1]; the layer maps [N, D] → [N, output_dim]. q_μ = 0 and q_sqrt = q_sqrt_scale · I
    (the paper's 1e-5); the mean function is Zero unless given, so that the mean propagation is
    exactly a network forward pass.

    ``far_field``: keywords of :class:`~activated_dgp.far_field.FarFieldArcCosine` (``far_variance``,
    ``far_radius``, ``far_centre``, ``far_order``) to give this (output) layer the far-field residual, whose
    variance grows away from the data while the mean is unchanged.
    """
    W = check_matrix(W, "W", nonzero_rows=True).astype(np.float64)
    if W.shape[1] < 2:
        raise ValueError(f"W must be [M, D + 1] with D ≥ 1 (the inputs plus the bias coordinate), got shape {W.shape}")
    for what, value in (("output_dim", output_dim), ("num_data", num_data)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{what} must be a positive integer, got {value!r}")
    input_dim = W.shape[1] - 1
    zonal = ZonalArcCosine if far_field is None else FarFieldArcCosine
    kernel = gpflow.kernels.SharedIndependent(
        zonal(input_dim, truncation_level, variance=kernel_variance, lengthscales=lengthscales, **(far_field or {})),
        output_dim=output_dim,
    )
    inducing = SharedActivationFeature(ActivationFeature(W, activation, truncation_level))
    layer = gpflux.layers.GPLayer(
        kernel,
        inducing,
        num_data=num_data,
        num_latent_gps=output_dim,
        mean_function=mean_function if mean_function is not None else gpflow.mean_functions.Zero(),
        whiten=whiten,
        name=name,
    )
    num_inducing = W.shape[0]
    layer.q_sqrt.assign(q_sqrt_scale * np.stack([np.eye(num_inducing)] * output_dim))
    return layer


def build_activated_dgp(
    input_dim: Union[int, ArchitectureConfig],
    num_data: int,
    *,
    num_layers: Optional[int] = None,
    num_units: Union[None, int, Sequence[int]] = None,
    layer_widths: Optional[Sequence[int]] = None,
    output_dim: Optional[int] = None,
    likelihood: Union[None, str, gpflow.likelihoods.Likelihood] = None,
    activation: Union[None, str, Activation, Callable] = None,
    truncation_level: Optional[int] = None,
    lengthscales: Optional[Sequence] = None,
    whiten: Optional[bool] = None,
    kernel_variance: float = 1.0,
    noise_variance: float = 0.01,
    q_sqrt_scale: float = 1e-5,
    seed: Optional[int] = None,
) -> gpflux.models.DeepGP:
    """A gpflux DeepGP of ``num_layers`` activated GP layers (the DGP of Fig. 1a).

    :param input_dim: D, or an :class:`~activated_dgp.config.ArchitectureConfig` describing the whole
        architecture (then give no other architecture keyword: ``num_layers`` … ``whiten``).
    The architecture keywords are those of :class:`~activated_dgp.config.ArchitectureConfig`, with its
    defaults (3 layers of 128 Softplus units, Ñ = 20, ℓ = 1, whitened, Gaussian):

    :param num_units: inducing variables (= hidden units) per layer, M_ℓ.
    :param layer_widths: output heads of layers 1..L−1 (the bottlenecks), default ``input_dim``.
    :param output_dim: heads of the last layer for "gaussian", the number of classes for
        "softmax"/"robustmax"; "bernoulli"/"probit" use one.
    :param likelihood: a registered name (:data:`LIKELIHOODS`) or a gpflow likelihood.
    :param lengthscales: ℓ_ℓ per layer, each a scalar or D_ℓ + 1 values.
    :param kernel_variance: the kernel variance v of every layer at the start (not architecture).
    :param noise_variance: the Gaussian likelihood's initial noise variance.
    :param q_sqrt_scale: q_sqrt starts at this multiple of I.
    Inducing directions are drawn like :func:`activated_dgp.nn.initial_directions`; use
    :func:`activated_dgp.dgp_from_keras` to start from a trained network instead.
    """
    if not isinstance(input_dim, ArchitectureConfig) and isinstance(likelihood, str):
        # the Bernoulli names: one latent GP whatever output_dim was asked (the keyword API's behaviour)
        output_dim = make_likelihood(likelihood, 1 if output_dim is None else output_dim)[1]
    config = as_config(
        input_dim, num_layers=num_layers, num_units=num_units, layer_widths=layer_widths, output_dim=output_dim,
        likelihood=likelihood, activation=activation, truncation_level=truncation_level, lengthscales=lengthscales,
        whiten=whiten,
    )
    if config.likelihood is None:
        raise ValueError("a DGP needs a likelihood; the config has likelihood=None")
    if isinstance(num_data, bool) or int(num_data) != num_data or num_data < 1:
        raise ValueError(f"num_data (N, which scales the ELBO's data term) must be a positive integer, got {num_data!r}")
    likelihood, _ = make_likelihood(config.likelihood, config.output_dim, noise_variance)
    rng = np.random.default_rng(seed)
    layers = [
        activated_gp_layer(
            initial_directions(spec["num_units"], spec["input_dim"], rng),
            spec["output_dim"],
            num_data,
            activation=spec["activation"],
            truncation_level=spec["truncation_level"],
            kernel_variance=kernel_variance,
            lengthscales=spec["lengthscales"],
            whiten=config.whiten,
            q_sqrt_scale=q_sqrt_scale,
            name=f"activated_gp_{index}",
        )
        for index, spec in enumerate(config.layers())
    ]
    return gpflux.models.DeepGP(layers, likelihood_layer(likelihood), num_data=num_data)


def likelihood_layer(likelihood: gpflow.likelihoods.Likelihood) -> gpflux.layers.LikelihoodLayer:
    """gpflux's LikelihoodLayer, without the deprecation warning gpflux 0.4.5 raises from inside it for its own base
    class (TrackableLayer): nothing a user of this library can act on. The filter covers this call only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*TrackableLayer.*", category=DeprecationWarning)
        return gpflux.layers.LikelihoodLayer(likelihood)
