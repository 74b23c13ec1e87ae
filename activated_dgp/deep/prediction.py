"""Predictions of a (activated) gpflux DeepGP: mean propagation, per-layer moments, NLPD, class probabilities."""

from __future__ import annotations

import time
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import gpflow
import gpflux
import numpy as np
import scipy.special
import tensorflow as tf
import tf_keras
from check_shapes import check_shapes

from ..zonal.conditionals import fast_conditional_enabled, symmetric_variances
from .likelihoods import LIKELIHOOD_REGISTRY, likelihood_name, output_width
from ..validation import check_inputs, check_matrix, check_targets, dgp_input_width
from .draws import RowDraws, row_normals  # noqa: F401  (row_normals: importable from here, as before)
from .sampling import check_dgp, checked_num_samples, propagate_samples, resolve_model
from .sampling import propagate_means, sample_layers  # noqa: F401  (importable from here, as before)
from .prediction_memory import (  # noqa: F401  (importable from here, as before)
    DEFAULT_MEMORY_BUDGET, EFFICIENT_BATCH_BYTES, bytes_per_row, checked_batch_size, prediction_batch_size,
)

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "EFFICIENT_BATCH_BYTES",
    "PROGRESS_AFTER_SECONDS",
    "prediction_batch_size",
    "layer_moments",
    "predictive_log_density",
    "seeded_log_density",
    "predict_y",
    "predict_class_probabilities",
    "ensemble_log_density",
    "ensemble_predict_y",
]


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


#: A prediction with ``progress=True`` shows a progress bar once it has run this many seconds with batches left (short
#: ones, e.g. a validation score inside a training loop, stay quiet).
PROGRESS_AFTER_SECONDS = 2.0


class PredictionFunctions:
    """The compiled per-batch predictions of one DeepGP with S samples. Each is a ``tf.function`` of (X [B, D], seed,
    start), or of (X, Y, seed, start) with the row draws of :class:`RowDraws`, traced once per batch shape: every batch but a single one
    shorter than the batch size is padded to the same B rows. Built once per (DeepGP, S) by :func:`prediction_functions`;
    parameters are read from their variables at each call."""

    def __init__(self, dgp: gpflux.models.DeepGP, num_samples: int):
        self._dgp, self.num_samples, self._compiled = weakref.ref(dgp), num_samples, {}

    def __getitem__(self, name: str):
        if name not in self._compiled:  # GPflow/gpflux code needs no AutoGraph conversion (activated_dgp.deep.layers)
            self._compiled[name] = tf.function(getattr(self, "_" + name), reduce_retracing=True, autograph=False)
        return self._compiled[name]

    def _samples(self, X, seed, start):
        draws = RowDraws(seed, start, tf.shape(X)[0], self.num_samples)
        with symmetric_variances():  # no gradients here: the variances as quadratic forms, half the products' work
            samples, mean, var = propagate_samples(self._dgp(), X, self.num_samples, draws.layer_normal, draws.inducing_normal)
        return samples, mean, var, draws

    def _per_sample(self, values):
        """[S·B, …] → [S, B, …]."""
        return tf.reshape(values, tf.concat([[self.num_samples, -1], tf.shape(values)[1:]], 0))

    def _output_moments(self, X, seed, start):
        """The output layer's moments given each sample, [S, B, P] each."""
        _, mean, var, _ = self._samples(X, seed, start)
        return mean, var

    def _y_moments(self, X, seed, start):
        """E[y | x] and Var[y | x], [B, P], by the law of total variance over the S samples."""
        _, mean, var, draws = self._samples(X, seed, start)
        width = mean.shape[-1]
        flat = [tf.reshape(t, [-1, width]) for t in (mean, var)]
        y_mean, y_var = integrate_likelihood(self._dgp().likelihood_layer.likelihood, "predict_mean_and_var", *flat, draws=draws)
        y_mean, y_var = self._per_sample(y_mean), self._per_sample(y_var)
        average = tf.reduce_mean(y_mean, 0)
        return average, tf.reduce_mean(y_var, 0) + tf.reduce_mean(tf.square(y_mean - average), 0)

    def _density_given(self, mean, var, Y, seed, start):
        """log (1/S) Σ_s p(y | q(f_L | h^(s))), [B], from the output layer's moments [S, B, P] given each sample."""
        draws = RowDraws(seed, start, tf.shape(Y)[0], self.num_samples)
        width = mean.shape[-1]
        flat = [tf.reshape(t, [-1, width]) for t in (mean, var)] + [tf.tile(tf.cast(Y, mean.dtype), [self.num_samples, 1])]
        log_density = self._per_sample(integrate_likelihood(self._dgp().likelihood_layer.likelihood, "predict_log_density", *flat, draws=draws))
        return tf.reduce_logsumexp(log_density, 0) - tf.math.log(tf.cast(self.num_samples, log_density.dtype))

    def _log_density(self, X, Y, seed, start):
        _, mean, var, _ = self._samples(X, seed, start)
        return self._density_given(mean, var, Y, seed, start)

    def _layer_moments(self, X, seed, start):
        """Each layer's mean and variance over the samples, [B, P_ℓ] each; the last by the law of total variance."""
        samples, mean, var, _ = self._samples(X, seed, start)
        moments = [(tf.reduce_mean(s, 0), tf.math.reduce_variance(s, 0)) for s in samples]
        average = tf.reduce_mean(mean, 0)
        return moments + [(average, tf.reduce_mean(var, 0) + tf.reduce_mean(tf.square(mean - average), 0))]


_FUNCTIONS: "weakref.WeakKeyDictionary[gpflux.models.DeepGP, Dict[tuple, PredictionFunctions]]" = weakref.WeakKeyDictionary()


def _structure(layer) -> tuple:
    """The Python objects a trace of ``layer`` captures: a layer whose kernel (or the kernel inside its multi-output
    wrapper, as :func:`activated_dgp.deep.far_field.add_far_field` replaces it), inducing variable or mean function is
    replaced gets new traces."""
    kernel = layer.kernel
    return (id(layer), id(kernel), id(getattr(kernel, "kernel", None)), id(layer.inducing_variable),
            id(getattr(layer.inducing_variable, "inducing_variable", None)), id(layer.mean_function), bool(layer.whiten))


def prediction_functions(dgp: gpflux.models.DeepGP, num_samples: int) -> PredictionFunctions:
    """The :class:`PredictionFunctions` of ``dgp`` with ``num_samples`` samples, kept while the DGP lives, so repeated
    predictions reuse their traces. A new set is made when the DGP's layers, their kernels, inducing variables or mean
    functions, or its likelihood are replaced, or inside
    :func:`activated_dgp.zonal.conditionals.gpflow_conditional` (which acts at trace time)."""
    key = (num_samples, fast_conditional_enabled(), id(dgp.likelihood_layer.likelihood), tuple(map(_structure, dgp.f_layers)))
    per_dgp = _FUNCTIONS.setdefault(dgp, {})
    if key not in per_dgp:
        per_dgp[key] = PredictionFunctions(dgp, num_samples)
    return per_dgp[key]


def padded_batches(X, batch_size: int, *arrays, dtype=None):
    """(start, rows, X[start:start+B], *arrays' rows) for consecutive batches of ``batch_size`` rows, as contiguous
    arrays of ``dtype`` (X may be a memmap: a batch's rows with NaN or inf are named in a ValueError); the last batch is padded to B rows by repeating its first row (so one compiled shape
    serves every batch) unless there is only one batch. The caller keeps the first ``rows`` rows of each result."""
    num_rows = len(X)
    batch_size = min(batch_size, num_rows)
    for start in range(0, num_rows, batch_size):
        parts = [np.asarray(array[start : start + batch_size], dtype=dtype) for array in (X, *arrays)]
        bad = ~np.all(np.isfinite(parts[0]), axis=1)
        if np.any(bad):  # X may be a memmap that no one has read through before
            raise ValueError(f"X contains NaN or inf in rows {(start + np.flatnonzero(bad)[:5]).tolist()}")
        rows = len(parts[0])
        if rows < batch_size:
            parts = [np.concatenate([part, np.repeat(part[:1], batch_size - rows, axis=0)]) for part in parts]
        yield (start, rows, *parts)


def fresh_seed() -> int:
    """A seed for an unseeded prediction, from TensorFlow's global generator (so ``tf.random.set_seed`` repeats it)."""
    return int(tf.random.get_global_generator().uniform_full_int([], tf.int64).numpy())


def run_batched(
    dgp: gpflux.models.DeepGP,
    name: str,
    X: np.ndarray,
    num_samples: int,
    seed: Optional[int],
    Y: Optional[np.ndarray] = None,
    batch_size: Optional[int] = None,
    memory_budget: Optional[float] = None,
    progress: bool = True,
    functions: Optional[PredictionFunctions] = None,
):
    """The compiled prediction ``name`` of :class:`PredictionFunctions` (``functions``, default the DGP's cached ones,
    :func:`prediction_functions`) on the rows of X (and Y), batch by batch, its per-batch results concatenated along rows. The batch size is ``batch_size`` when given, else the most rows that
    fit ``memory_budget`` (:func:`prediction_batch_size`). With ``progress`` a Keras progress bar counts the points
    once the prediction has run :data:`PROGRESS_AFTER_SECONDS` with batches left."""
    num_samples = checked_num_samples(num_samples)
    seed = fresh_seed() if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer or None, got {seed!r}")
    num_rows = len(X)
    if batch_size is None:
        batch_size = prediction_batch_size(dgp, num_samples, memory_budget, num_rows)
    batch_size = min(checked_batch_size(batch_size), num_rows)
    function = (prediction_functions(dgp, num_samples) if functions is None else functions)[name]
    bar, started = None, time.perf_counter()
    seed, parts = tf.constant(seed, tf.int64), []
    arrays = () if Y is None else (Y,)
    for start, rows, *batch in padded_batches(X, batch_size, *arrays, dtype=dgp.f_layers[0].q_mu.dtype.as_numpy_dtype):
        result = function(*map(tf.constant, batch), seed, tf.constant(start, tf.int64))
        parts.append(tf.nest.map_structure(lambda t: t.numpy()[:rows], result))
        if bar is None and progress and start + rows < num_rows and time.perf_counter() - started > PROGRESS_AFTER_SECONDS:
            bar = tf_keras.utils.Progbar(num_rows, unit_name="point")
        if bar is not None:
            bar.update(start + rows)
    return tf.nest.map_structure(lambda *pieces: np.concatenate(pieces), *parts)


_BATCHING = """
    The rows of X are predicted in batches under ``memory_budget`` bytes (default :data:`DEFAULT_MEMORY_BUDGET`,
    512 MiB; the batch size follows from S and the layers' widths, and is kept near a cache-friendly
    :data:`EFFICIENT_BATCH_BYTES`, :func:`prediction_batch_size`; a budget too small for one row is a ValueError
    naming what one row needs), or of ``batch_size`` rows when given. One compiled
    function per batch shape evaluates each batch; each row's draws depend on (seed, row) only
    (:func:`row_normals`), so the result does not depend on the batching beyond round-off. Without a seed one is
    drawn from TensorFlow's global generator. ``progress`` (default True) shows a progress bar over the points once
    the prediction has run :data:`PROGRESS_AFTER_SECONDS` (2 s) with batches left. ``dgp`` may also be any object with a ``dgp`` attribute and a ``features(X)``
    method (e.g. a two-stage training result): the prediction is then ``obj.dgp``'s at ``obj.features(X)``."""


def _with_batching(function):
    function.__doc__ += _BATCHING
    return function


def _prepared(dgp, X):
    """(DeepGP, checked X as a NumPy array) for a prediction function (:func:`resolve_model`, :func:`checked_inputs`)."""
    dgp, X = resolve_model(dgp, X)
    check_dgp(dgp)
    width = dgp_input_width(dgp)
    return dgp, (check_matrix(X, "X") if width is None else check_inputs(X, width, "X"))


@_with_batching
def layer_moments(
    dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None,
    *, memory_budget: Optional[float] = None, progress: bool = True,
) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Mean and variance of each layer's output f_ℓ(x) under the DGP posterior, [N, P_ℓ] each (the latent
    moments; ``predict_f`` of the DGP is the last pair).

    Layers 1..L−1 by Monte Carlo over ``num_samples`` propagated samples; the last layer in closed form given
    each sample, by the law of total variance over its Gaussian conditionals.
    """
    dgp, X = _prepared(dgp, X)
    return run_batched(dgp, "layer_moments", X, num_samples, seed, None, batch_size, memory_budget, progress)


@check_shapes(
    "return: [N]",
)
@_with_batching
def predictive_log_density(
    dgp: gpflux.models.DeepGP, X, Y, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None,
    *, memory_budget: Optional[float] = None, progress: bool = True,
) -> np.ndarray:
    """log p(y | x) ≈ log (1/S) Σ_s p(y | f_L^(s)), per point [N]; −mean of it is the NLPD.

    Each sample s propagates through layers 1..L−1; the last layer's Gaussian q(f_L | h^(s)) is
    integrated against the likelihood analytically or by GPflow's quadrature
    (``likelihood.predict_log_density``); then log-mean-exp over s. A Monte Carlo likelihood's (softmax) own
    draws are row draws of the same seed (:func:`integrate_likelihood`): a seeded result repeats exactly.
    """
    dgp, X = _prepared(dgp, X)
    Y = _checked_targets(dgp, Y, len(X))
    return run_batched(dgp, "log_density", X, num_samples, seed, Y, batch_size, memory_budget, progress)


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
    its parameters are assigned between them (e.g. :func:`activated_dgp.training.select_kernel_variances`).

    The inputs are checked once; every call evaluates the same compiled batches with the same row draws
    (:func:`row_normals`) as :func:`predictive_log_density` with that seed, and returns the same [N] values.
    Parameters are read from their variables. A call that fails a numerics check or returns a non-finite value
    re-checks the DGP's state (:func:`check_dgp`), which names a parameter that became NaN.

    Called with ``noise_variances`` (a Gaussian likelihood only), it returns one [N] array per σ² in the list:
    the layers are sampled once per batch and only the likelihood's term, log (1/S) Σ_s N(y | m_s, v_s + σ²), is
    re-evaluated, with the likelihood's variance restored afterwards (:func:`at_noise_variances`)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    num_samples = checked_num_samples(num_samples)
    dgp, X = _prepared(dgp, X)
    Y = _checked_targets(dgp, Y, len(X))
    likelihood = dgp.likelihood_layer.likelihood
    functions = prediction_functions(dgp, num_samples)
    batch_size = prediction_batch_size(dgp, num_samples, num_rows=len(X))
    dtype = dgp.f_layers[0].q_mu.dtype.as_numpy_dtype
    batches = [(rows, tf.constant(x), tf.constant(y), tf.constant(start, tf.int64)) for start, rows, x, y in padded_batches(X, batch_size, Y, dtype=dtype)]
    seed = tf.constant(seed, tf.int64)

    def evaluate(noise_variances: Optional[Sequence[float]] = None):
        try:
            if noise_variances is None:
                values = np.concatenate([functions["log_density"](x, y, seed, start).numpy()[:rows] for rows, x, y, start in batches])
            else:
                per_batch = []
                for rows, x, y, start in batches:
                    mean, var = functions["output_moments"](x, seed, start)
                    terms = at_noise_variances(likelihood, noise_variances, lambda: functions["density_given"](mean, var, y, seed, start))
                    per_batch.append([term.numpy()[:rows] for term in terms])
                values = [np.concatenate(parts) for parts in zip(*per_batch)]
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
    "return[0]: [N, P]",
    "return[1]: [N, P]",
)
@_with_batching
def predict_y(
    dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None,
    *, memory_budget: Optional[float] = None, progress: bool = True,
) -> Tuple[np.ndarray, np.ndarray]:
    """Predictive mean and variance of y, [N, P], by the law of total variance over samples:

        E[y | x] ≈ (1/S) Σ_s m_s(x),   Var[y | x] ≈ (1/S) Σ_s v_s(x) + (1/S) Σ_s m_s(x)² − E[y | x]²,

    (m_s, v_s) the moments of y given the output layer's Gaussian q(f_L | h^(s)), h^(s) the s-th sample propagated
    through layers 1..L−1 (the output layer needs no samples: its moments are closed forms given its input).
    Cost per point: S samples through L layers, i.e. about S forward passes of the network twin, plus the
    variance work: layer 1 once (its input is x), M_1²/2 · (P_1 + 2) multiply-adds (the triangular solve and one
    quadratic form per output, :func:`activated_dgp.zonal.conditionals.symmetric_variances`); the hidden layers after
    it S · (M_ℓ²/2 + M_ℓ P_ℓ), sampled from one draw of their inducing outputs per sample
    (:mod:`~activated_dgp.deep.inducing_samples`, the same distribution per row); the output layer S · M_L²/2 · (P_L + 2).
    """
    dgp, X = _prepared(dgp, X)
    return run_batched(dgp, "y_moments", X, num_samples, seed, None, batch_size, memory_budget, progress)


@check_shapes(
    "return: [N, C]",
)
@_with_batching
def predict_class_probabilities(
    dgp: gpflux.models.DeepGP, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None,
    *, memory_budget: Optional[float] = None, progress: bool = True,
) -> np.ndarray:
    """p(y = c | x), [N, C] (C = 1 for Bernoulli: p(y = 1 | x)), averaged over propagated samples
    (:func:`predict_y`'s mean), clipped to [0, 1]: the likelihoods' quadrature can round a certain prediction to
    1 + 2e-16, which plotting tools then leave blank."""
    mean, _ = predict_y(dgp, X, num_samples, seed, batch_size, memory_budget=memory_budget, progress=progress)
    return np.clip(mean, 0.0, 1.0)


@check_shapes(
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
    members = [predictive_log_density(dgp, X, Y, num_samples, None if seed is None else seed + k, progress=False) for k, dgp in enumerate(dgps)]
    return scipy.special.logsumexp(np.stack(members), axis=0) - np.log(len(dgps))


@check_shapes(
    "return[0]: [N, P]",
    "return[1]: [N, P]",
)
def ensemble_predict_y(dgps: Sequence[gpflux.models.DeepGP], X, num_samples: int = 100, seed: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and variance of y under the uniform mixture of K DeepGPs, [N, P] each, by the law of total variance:
    E[y] = (1/K) Σ_k m_k, Var[y] = (1/K) Σ_k (v_k + m_k²) − E[y]², with (m_k, v_k) from :func:`predict_y`."""
    if len(dgps) == 0:
        raise ValueError("an ensemble needs at least one DeepGP")
    moments = [predict_y(dgp, X, num_samples, None if seed is None else seed + k, progress=False) for k, dgp in enumerate(dgps)]
    means = np.stack([m for m, _ in moments])
    variances = np.stack([v for _, v in moments])
    return means.mean(0), variances.mean(0) + means.var(0)
