"""The likelihoods of activated DGPs and the network twin's matching losses, in one registry (Dutordoir et al., 2021,
Sec. 5.1: stage 1 trains the twin on the negative log-likelihood of the same observation model that stage 2's ELBO uses).

:data:`LIKELIHOOD_REGISTRY` maps each registered name to how to build the GPflow likelihood, its number of latent GPs, how to
recognise an instance (so saving by name never turns one likelihood into another), the targets it models and the
twin's tf-keras loss. The builders, the architecture config, persistence and prediction all read this one registry
(formerly ``LIKELIHOODS``; the old name resolves, with a DeprecationWarning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Union

import gpflow
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras
from gpflow.likelihoods.utils import inv_probit

from .._deprecation import deprecated_aliases

__all__ = [
    "LIKELIHOOD_REGISTRY",
    "LikelihoodEntry",
    "MonteCarloSoftmax",
    "LogisticBernoulli",
    "ProbitCrossEntropy",
    "likelihood_name",
    "make_likelihood",
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
        # a label column of unknown static width (Keras' evaluation traces targets as [None, None]) is one column here:
        # GPflow's Monte Carlo tiling needs the width statically
        Ys = {
            name: tf.zeros_like(Fmu[..., :1]) if value is None else (tf.reshape(value, [-1, 1]) if value.shape[-1] is None else value)
            for name, value in Ys.items()
        }
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
LIKELIHOOD_REGISTRY: Dict[str, LikelihoodEntry] = {
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
    if key not in LIKELIHOOD_REGISTRY:
        raise ValueError(f"unknown likelihood {name!r}; choose one of {sorted(LIKELIHOOD_REGISTRY)} or pass a gpflow likelihood")
    return LIKELIHOOD_REGISTRY[key]


def likelihood_name(likelihood: Union[str, gpflow.likelihoods.Likelihood]) -> str:
    """The registry name of a likelihood name or instance; a ValueError naming the class (and link) when no
    registered name rebuilds exactly this likelihood."""
    if isinstance(likelihood, str):
        return _entry(likelihood).name
    for entry in LIKELIHOOD_REGISTRY.values():
        if entry.matches(likelihood):
            return entry.name
    link = getattr(likelihood, "invlink", None)
    link = f" with link {getattr(link, '__name__', type(link).__name__)}" if link is not None else ""
    raise ValueError(
        f"the likelihood {type(likelihood).__name__}{link} is not registered; registered: {sorted(LIKELIHOOD_REGISTRY)}"
    )


def network_loss(likelihood: Union[str, gpflow.likelihoods.Likelihood]) -> tf_keras.losses.Loss:
    """The twin's stage-1 loss for a registered likelihood (name or instance): MSE (gaussian), sigmoid
    cross-entropy (bernoulli), probit cross-entropy (probit), softmax cross-entropy (softmax, robustmax)."""
    return LIKELIHOOD_REGISTRY[likelihood_name(likelihood)].network_loss()


def output_width(likelihood: Union[str, gpflow.likelihoods.Likelihood], Y: np.ndarray, num_classes: Optional[int] = None) -> int:
    """P_L, the last layer's width for targets Y [N, P] under a registered likelihood, after checking that Y
    holds what the likelihood models: any reals; 0/1 labels [N, 1] (bernoulli, probit); class indices
    0..C−1 [N, 1] with C = ``num_classes`` (default: the largest label + 1) for softmax / robustmax."""
    targets = LIKELIHOOD_REGISTRY[likelihood_name(likelihood)].targets
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
    behaviour); :class:`~activated_dgp.deep.config.ArchitectureConfig` insists on ``output_dim=1``.
    """
    if isinstance(likelihood, gpflow.likelihoods.Likelihood):
        return likelihood, int(output_dim)
    entry = _entry(likelihood)
    if entry.name in ("bernoulli", "probit"):
        output_dim = 1
    return entry.build(output_dim, noise_variance), entry.latent_gps(output_dim)


# old names, deprecated for one release
__getattr__ = deprecated_aliases("activated_dgp.deep.likelihoods", {"LIKELIHOODS": ("activated_dgp.deep.likelihoods", "LIKELIHOOD_REGISTRY")})
