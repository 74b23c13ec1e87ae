"""Predictions of a (activated) gpflux DeepGP: mean propagation, per-layer moments, NLPD, class probabilities."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import gpflow
import gpflux
import numpy as np
import scipy.special
import tensorflow as tf
from check_shapes import check_shapes

from ..zonal.inducing_variables import ActivationFeature
from .likelihoods import LIKELIHOOD_REGISTRY, likelihood_name, output_width
from ..validation import check_inputs, check_matrix, check_targets, dgp_input_width

__all__ = [
    "check_dgp",
    "propagate_means",
    "sample_layers",
    "layer_moments",
    "predictive_log_density",
    "seeded_log_density",
    "predict_y",
    "predict_class_probabilities",
    "ensemble_log_density",
    "ensemble_predict_y",
]


def check_dgp(dgp) -> None:
    """The value checks of a DeepGP's own state: every activated feature's W finite with non-zero rows, and
    every parameter finite (a model that training drove to NaN is named, not used)."""
    if not isinstance(dgp, gpflux.models.DeepGP):
        raise ValueError(f"expected a gpflux DeepGP, got {type(dgp).__name__}")
    for index, layer in enumerate(dgp.f_layers):
        feature = getattr(getattr(layer, "inducing_variable", None), "inducing_variable", None)
        if isinstance(feature, ActivationFeature):
            check_matrix(feature.W, f"W of layer {index}", nonzero_rows=True)
    for path, parameter in gpflow.utilities.parameter_dict(dgp).items():
        if "._" not in path and not np.all(np.isfinite(parameter.numpy())):
            raise ValueError(f"the DGP's parameter {path} contains NaN or inf")


def checked_inputs(dgp: gpflux.models.DeepGP, X) -> tf.Tensor:
    """The value checks of the public prediction functions, once per call: the DGP's state
    (:func:`~activated_dgp.validation.check_dgp`) and X a finite [N, D] matrix of the DGP's input width."""
    check_dgp(dgp)
    width = dgp_input_width(dgp)
    X = check_matrix(X, "X") if width is None else check_inputs(X, width, "X")
    return tf.convert_to_tensor(X)


def _checked_targets(dgp: gpflux.models.DeepGP, Y, num_rows: int) -> np.ndarray:
    """Y as a finite [N, P] matrix that fits the DGP's registered likelihood: P = the last layer's width for
    real targets, one column of 0/1 labels or class indices 0..C−1 otherwise (an unregistered likelihood
    keeps its own conventions)."""
    Y = check_targets(Y, "Y")
    if Y.shape[0] != num_rows:
        raise ValueError(f"X and Y have different numbers of rows: {num_rows} and {Y.shape[0]}")
    likelihood = dgp.likelihood_layer.likelihood
    try:
        name = likelihood_name(likelihood)
    except ValueError:
        return Y
    width = dgp.f_layers[-1].num_latent_gps
    if LIKELIHOOD_REGISTRY[name].targets == "real":
        if Y.shape[1] != width:
            raise ValueError(f"Y must have the DGP's {width} output columns, got shape {Y.shape}")
    else:
        output_width(name, Y, width if LIKELIHOOD_REGISTRY[name].targets == "class" else None)
    return Y


@check_shapes(
    "X: [N, D]",
)
def propagate_means(dgp: gpflux.models.DeepGP, X, num_layers: Optional[int] = None) -> List[tf.Tensor]:
    """Each layer's posterior mean evaluated at the previous layer's mean: [N, P_ℓ] for ℓ = 1..L, or for
    ℓ = 1..``num_layers`` only (e.g. L − 1: the inputs of the output layer).

    For activated GP layers with zero mean functions this is the forward pass of the network twin
    (Sec. 5.1): μ_ℓ(h) = Φ_ℓ(h) Kuu⁻¹ μ_u.
    """
    outputs, hidden = [], checked_inputs(dgp, X)
    for layer in dgp.f_layers[:num_layers]:
        hidden, _ = layer.predict(hidden, full_cov=False, full_output_cov=False)
        outputs.append(hidden)
    return outputs


def layer_inputs(dgp: gpflux.models.DeepGP, X) -> List[tf.Tensor]:
    """The input each layer sees under mean propagation: [X, μ_1(X), …, μ_(L−1)(…)], one [N, D_ℓ] per layer
    (the last one is the output layer's input)."""
    X = checked_inputs(dgp, X)
    return [X] + propagate_means(dgp, X, num_layers=len(dgp.f_layers) - 1)


def checked_num_samples(num_samples) -> int:
    """``num_samples`` as an int when it is an integer ≥ 1, else a ValueError naming it."""
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be an integer ≥ 1, got {num_samples!r}")
    return int(num_samples)


class SeededDraws:
    """The draws of a seeded prediction, reusable inside a compiled function: ``normal`` (the layer samples' standard
    normals, for :func:`propagate_samples`) and ``likelihood`` (a Monte Carlo likelihood's, :func:`likelihood_draws`).
    ``reset(seed)`` puts both generators where ``tf.random.Generator.from_seed(seed)`` and ``likelihood_draws(seed)``
    start, so a compiled evaluation after it draws exactly what the eager functions draw with that seed."""

    def __init__(self, seed: int):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = int(seed)
        self.layers, self.likelihood = tf.random.Generator.from_seed(self.seed), likelihood_draws(self.seed)

    def normal(self, layer, shape, dtype) -> tf.Tensor:
        return self.layers.normal(shape, dtype=dtype)

    def reset(self, seed: int) -> None:
        self.layers.reset_from_seed(seed)
        self.likelihood.reset(likelihood_draws(seed).state)


@check_shapes(
    "X: [N, D]",
    "return[1]: [S, N, P]",
    "return[2]: [S, N, P]",
)
def sample_layers(dgp: gpflux.models.DeepGP, X, num_samples: int, seed: Optional[int] = None) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
    """Propagate ``num_samples`` samples through layers 1..L−1 (marginals per point, as in doubly
    stochastic VI), and return the per-layer samples [S, N, P_ℓ] together with the last layer's
    Gaussian moments given each sample, mean and variance [S, N, P_L]."""
    num_samples = checked_num_samples(num_samples)
    X = checked_inputs(dgp, X)
    generator = tf.random.Generator.from_seed(seed) if seed is not None else tf.random.get_global_generator()
    return propagate_samples(dgp, X, num_samples, lambda layer, shape, dtype: generator.normal(shape, dtype=dtype))


def propagate_samples(dgp: gpflux.models.DeepGP, X, num_samples: int, normal) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
    """:func:`sample_layers` with the standard normal draws given: ``normal(layer_index, shape, dtype)``
    (e.g. stateless, for a compiled function). Memory O(num_samples · N · max(M_ℓ, P_ℓ))."""
    X = tf.convert_to_tensor(X)
    batch_shape = tf.stack([num_samples, tf.shape(X)[0]])

    def moments(layer, hidden):
        if hidden is None:  # the first layer sees X in every sample: predict once, tile to [S·N, P]
            mean, var = layer.predict(X, full_cov=False, full_output_cov=False)
            return tf.tile(mean, [num_samples, 1]), tf.tile(var, [num_samples, 1])
        return layer.predict(tf.reshape(hidden, [-1, hidden.shape[-1]]), full_cov=False, full_output_cov=False)

    hidden, samples = None, []
    for index, layer in enumerate(dgp.f_layers[:-1]):
        mean, var = moments(layer, hidden)
        draw = mean + tf.sqrt(var) * normal(index, tf.shape(mean), mean.dtype)
        hidden = tf.reshape(draw, tf.concat([batch_shape, [draw.shape[-1]]], 0))
        samples.append(hidden)
    mean, var = moments(dgp.f_layers[-1], hidden)
    shape = tf.concat([batch_shape, [mean.shape[-1]]], 0)
    return samples, tf.reshape(mean, shape), tf.reshape(var, shape)


@check_shapes(
    "X: [N, D]",
)
def layer_moments(dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Mean and variance of each layer's output f_ℓ(x) under the DGP posterior, [N, P_ℓ] each.

    Layers 1..L−1 by Monte Carlo over ``num_samples`` propagated samples; the last layer by the law
    of total variance over its Gaussian conditionals.
    """
    samples, mean, var = sample_layers(dgp, X, num_samples, seed)
    moments = [(np.mean(s.numpy(), 0), np.var(s.numpy(), 0)) for s in samples]
    mean, var = mean.numpy(), var.numpy()
    moments.append((mean.mean(0), var.mean(0) + mean.var(0)))
    return moments


@check_shapes(
    "X: [N, D]",
    "return: [N]",
)
def predictive_log_density(dgp: gpflux.models.DeepGP, X, Y, num_samples: int = 100, seed: Optional[int] = None) -> np.ndarray:
    """log p(y | x) ≈ log (1/S) Σ_s p(y | f_L^(s)), per point [N]; −mean of it is the NLPD.

    Each sample s propagates through layers 1..L−1; the last layer's Gaussian q(f_L | h^(s)) is
    integrated against the likelihood analytically or by GPflow's quadrature
    (``likelihood.predict_log_density``); then log-mean-exp over s. With a ``seed`` a Monte Carlo
    likelihood's (softmax) own draws are seeded too (:func:`integrate_likelihood`): the result repeats exactly.
    """
    _, mean, var = sample_layers(dgp, X, num_samples, seed)
    Y = tf.convert_to_tensor(_checked_targets(dgp, Y, int(mean.shape[1])), dtype=mean.dtype)
    return _sample_mean_density(dgp.likelihood_layer.likelihood, mean, var, Y, likelihood_draws(seed)).numpy()


def _sample_mean_density(likelihood, mean, var, Y, draws) -> tf.Tensor:
    """log (1/S) Σ_s p(y | q(f_L | h^(s))), [N], from the output layer's moments [S, N, P] given each sample."""
    log_densities = integrate_per_sample(likelihood, "predict_log_density", mean, var, Y, draws)
    return tf.reduce_logsumexp(log_densities, axis=0) - np.log(int(mean.shape[0]))


def integrate_per_sample(likelihood, method: str, mean, var, Y=None, draws: Optional[tf.random.Generator] = None):
    """:func:`integrate_likelihood` for every sample s of the output layer's moments [S, N, P]: [S, N] for
    "predict_log_density" and "variational_expectations", ([S, N, P], [S, N, P]) for "predict_mean_and_var".

    A likelihood that integrates row by row in closed form or by quadrature (every GPflow likelihood but the
    Monte Carlo ones) is called once on the S·N rows stacked (Y repeated per sample): the same numbers as S calls,
    without S Python-level calls. A Monte Carlo likelihood is called sample by sample, so that its draws are
    taken from ``draws`` in the same order as always (seeded results repeat across versions)."""
    num_samples, num_rows = int(mean.shape[0]), tf.shape(mean)[1]
    targets = () if method == "predict_mean_and_var" else (Y,)
    if isinstance(likelihood, gpflow.likelihoods.MonteCarloLikelihood):
        per_sample = [integrate_likelihood(likelihood, method, mean[s], var[s], *targets, draws=draws) for s in range(num_samples)]
        if method == "predict_mean_and_var":
            return tf.stack([m for m, _ in per_sample]), tf.stack([v for _, v in per_sample])
        return tf.stack(per_sample)
    width = tf.shape(mean)[-1]
    stacked = [tf.reshape(mean, [-1, width]), tf.reshape(var, [-1, width])]
    if targets:
        stacked.append(tf.tile(Y, [num_samples, 1]))
    result = integrate_likelihood(likelihood, method, *stacked)
    if method == "predict_mean_and_var":
        return tuple(tf.reshape(part, tf.shape(mean)) for part in result)
    return tf.reshape(result, [num_samples, num_rows])


def seeded_log_density(dgp: gpflux.models.DeepGP, X, Y, num_samples: int, seed: int) -> Callable[..., np.ndarray]:
    """A compiled ``predictive_log_density(dgp, X, Y, num_samples, seed)`` at the DGP's parameter values *at
    each call*: for many evaluations of one model on the same data and draws (common random numbers) while
    its parameters are assigned between them (e.g. :func:`activated_dgp.deep.variance_selection.select_kernel_variances`).

    The inputs are checked once; every call resets the layer draws' generator to ``seed`` and the likelihood
    draws' to its split (:func:`likelihood_draws`), so each call sees exactly the draws the eager function
    sees, and returns the same [N] values up to rounding. One trace serves every call: parameters are read
    from their variables. A call that fails a numerics check or returns a non-finite value re-checks the DGP's
    state (:func:`check_dgp`), which names a parameter that became NaN.

    Called with ``noise_variances`` (a Gaussian likelihood only), it returns one [N] array per σ² in the list:
    the layers are sampled once and only the likelihood's term, log (1/S) Σ_s N(y | m_s, v_s + σ²), is
    re-evaluated, with the likelihood's variance restored afterwards (:func:`at_noise_variances`)."""
    draws, num_samples = SeededDraws(seed), checked_num_samples(num_samples)
    X = checked_inputs(dgp, X)
    Y = tf.convert_to_tensor(_checked_targets(dgp, Y, int(X.shape[0])), dtype=X.dtype)
    likelihood = dgp.likelihood_layer.likelihood

    @tf.function(autograph=False)  # GPflow/gpflux code needs no AutoGraph conversion (activated_dgp.deep.layers)
    def output_moments():
        _, mean, var = propagate_samples(dgp, X, num_samples, draws.normal)
        return mean, var

    @tf.function(autograph=False)
    def log_density(mean, var):
        return _sample_mean_density(likelihood, mean, var, Y, draws.likelihood)

    def evaluate(noise_variances: Optional[Sequence[float]] = None):
        draws.reset(draws.seed)
        try:
            mean, var = output_moments()
            if noise_variances is None:
                values = log_density(mean, var).numpy()
            else:
                values = [value.numpy() for value in at_noise_variances(likelihood, noise_variances, lambda: log_density(mean, var))]
        except tf.errors.InvalidArgumentError:  # a numerics check inside the graph: name the parameter if that is why
            check_dgp(dgp)
            raise
        if not np.all(np.isfinite(values)):
            check_dgp(dgp)
        return values

    return evaluate


def at_noise_variances(likelihood, noise_variances: Sequence[float], term: Callable[[], tf.Tensor]) -> list:
    """``[term() with the Gaussian likelihood's variance σ² set to each of noise_variances]``, the variance restored
    to its value on entry afterwards: for scoring many σ² from one set of layer samples (the Gaussian likelihood's
    terms are closed forms in σ² given the output layer's moments)."""
    if not isinstance(likelihood, gpflow.likelihoods.Gaussian):
        raise ValueError(f"noise variances can only be swept for a Gaussian likelihood, the model has {type(likelihood).__name__}")
    entry = likelihood.variance.numpy()
    try:
        values = []
        for noise in noise_variances:
            likelihood.variance.assign(noise)
            values.append(term())
        return values
    finally:
        likelihood.variance.assign(entry)


def likelihood_draws(seed: Optional[int]) -> tf.random.Generator:
    """The generator of a Monte Carlo likelihood's own draws: for a seeded prediction it is split off
    ``seed``'s generator, so its stream is independent of the layer samples' draws; unseeded, it is
    TensorFlow's global generator.

    Never GPflow's own ``tf.random.normal``: in eager mode, after ``tf.random.set_seed``, every call of an
    unseeded random op gets a fresh op seed, and TensorFlow caches one kernel per seed. Predicting 10,000
    rotated-MNIST images (softmax, 10 samples) leaked ≈ 1.7 GB that way, and the three-seed run ran out of memory."""
    return tf.random.get_global_generator() if seed is None else tf.random.Generator.from_seed(seed).split(1)[0]


def integrate_likelihood(likelihood, method: str, mean, var, Y=None, draws: Optional[tf.random.Generator] = None):
    """``likelihood.<method>(None, mean, var[, Y])`` for ``method`` "predict_log_density" or
    "variational_expectations" ([N]), or "predict_mean_and_var" (no Y; the moments of y, [N, P] each).

    A Monte Carlo likelihood (GPflow's ``MonteCarloLikelihood``, e.g. the softmax) integrates with
    ``num_monte_carlo_points`` standard normal draws per point, which GPflow takes from TensorFlow's global
    random state: two evaluations of the same model differ. With ``draws`` (:func:`likelihood_draws`) those
    draws come from that generator instead, so that a seeded evaluation repeats exactly and two models
    evaluated with the same seed see the same draws (common random numbers)."""
    if method not in ("predict_log_density", "variational_expectations", "predict_mean_and_var"):
        raise ValueError(f"method must be 'predict_log_density', 'variational_expectations' or 'predict_mean_and_var', got {method!r}")
    targets = () if method == "predict_mean_and_var" else (Y,)
    if draws is not None and isinstance(likelihood, gpflow.likelihoods.MonteCarloLikelihood):
        shape = tf.concat([[likelihood.num_monte_carlo_points], tf.shape(mean)], 0)
        return getattr(likelihood, "_" + method)(None, mean, var, *targets, epsilon=draws.normal(shape, dtype=mean.dtype))
    return getattr(likelihood, method)(None, mean, var, *targets)


@check_shapes(
    "X: [N, D]",
    "return[0]: [N, P]",
    "return[1]: [N, P]",
)
def predict_y(
    dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Predictive mean and variance of y, [N, P], by the law of total variance over samples.

    With ``batch_size`` the rows of X are predicted in batches of that many (memory ∝ batch_size ·
    num_samples); batch b starting at row r uses seed ``seed + r``, so the result does not depend on
    ``batch_size`` beyond the Monte Carlo draws, and with one batch it equals the unbatched call.
    """
    if batch_size is not None:
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        X = np.asarray(X)
        parts = [
            predict_y(dgp, X[start : start + batch_size], num_samples, None if seed is None else seed + start)
            for start in range(0, len(X), int(batch_size))
        ]
        return np.concatenate([m for m, _ in parts]), np.concatenate([v for _, v in parts])
    likelihood = dgp.likelihood_layer.likelihood
    _, mean, var = sample_layers(dgp, X, num_samples, seed)
    draws = likelihood_draws(seed)
    y_mean, y_var = (part.numpy() for part in integrate_per_sample(likelihood, "predict_mean_and_var", mean, var, draws=draws))
    return y_mean.mean(0), y_var.mean(0) + y_mean.var(0)


@check_shapes(
    "X: [N, D]",
    "return: [N, C]",
)
def predict_class_probabilities(
    dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None
) -> np.ndarray:
    """p(y = c | x), [N, C] (C = 1 for Bernoulli: p(y = 1 | x)), averaged over propagated samples
    (``batch_size`` as in :func:`predict_y`), clipped to [0, 1]: the likelihoods' quadrature can round a
    certain prediction to 1 + 2e-16, which plotting tools then leave blank."""
    return np.clip(predict_y(dgp, X, num_samples, seed, batch_size)[0], 0.0, 1.0)


@check_shapes(
    "X: [N, D]",
    "return: [N]",
)
def ensemble_log_density(dgps: Sequence[gpflux.models.DeepGP], X, Y, num_samples: int = 100, seed: Optional[int] = None) -> np.ndarray:
    """log p(y | x) of the uniform mixture of K DeepGPs, per point [N]:

        log (1/K) Σ_k p_k(y | x) = logsumexp_k log p_k(y | x) − log K,

    each log p_k by :func:`predictive_log_density` (member k seeded with ``seed + k``). The predictive of a deep
    ensemble (Lakshminarayanan et al., 2017) whose members are DGPs, e.g. each ensemble network converted and
    trained through stage 2."""
    if len(dgps) == 0:
        raise ValueError("an ensemble needs at least one DeepGP")
    members = [predictive_log_density(dgp, X, Y, num_samples, None if seed is None else seed + k) for k, dgp in enumerate(dgps)]
    return scipy.special.logsumexp(np.stack(members), axis=0) - np.log(len(dgps))


@check_shapes(
    "X: [N, D]",
    "return[0]: [N, P]",
    "return[1]: [N, P]",
)
def ensemble_predict_y(dgps: Sequence[gpflux.models.DeepGP], X, num_samples: int = 100, seed: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and variance of y under the uniform mixture of K DeepGPs, [N, P] each, by the law of total variance:
    E[y] = (1/K) Σ_k m_k, Var[y] = (1/K) Σ_k (v_k + m_k²) − E[y]², with (m_k, v_k) from :func:`predict_y`."""
    if len(dgps) == 0:
        raise ValueError("an ensemble needs at least one DeepGP")
    moments = [predict_y(dgp, X, num_samples, None if seed is None else seed + k) for k, dgp in enumerate(dgps)]
    means = np.stack([m for m, _ in moments])
    variances = np.stack([v for _, v in moments])
    return means.mean(0), variances.mean(0) + means.var(0)
