"""Diagnostics of an activated (or any gpflux) DeepGP: how much prior variance each layer leaves
outside its inducing span, and the ELBO split into its terms (Dutordoir et al., 2021, Sec. 4–5;
Salimbeni & Deisenroth, 2017, eq. 5).

* :func:`residual_fraction` — per point, (k(x, x) − Qff(x)) / k(x, x) with
  Qff(x) = Kfu(x) Kuu⁻¹ Kuf(x): the share of a layer's prior variance that no inducing variable
  explains. A sample passed through the layer carries it as noise around the network's output.
* :func:`elbo_terms` — the ELBO Σ_i E_q[log p(y_i | f_L(x_i))] − Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)], with the
  expected log-likelihood and every layer's KL reported apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import gpflow
import gpflux
import numpy as np
import tensorflow as tf

from .draws import SeededDraws, likelihood_draws
from .prediction import at_noise_variances, integrate_per_sample
from .sampling import checked_num_samples, layer_inputs, propagate_samples, sample_layers

__all__ = ["residual_fraction", "layer_residual_fractions", "ElboTerms", "elbo_terms", "seeded_elbo"]


def _inner(layer: gpflux.layers.GPLayer):
    """The single kernel and inducing variable of a shared-independent GPLayer."""
    kernel, inducing = layer.kernel, layer.inducing_variable
    kernel = getattr(kernel, "kernel", kernel)
    inducing = getattr(inducing, "inducing_variable", inducing)
    return kernel, inducing


def whitened_cross_covariance(layer: gpflux.layers.GPLayer, X) -> Tuple[tf.Tensor, tf.Tensor]:
    """(L, A): Kuu + jitter·I = L Lᵀ (GPflow's default jitter, the one its conditionals use) and A = L⁻¹ Kuf(X),
    [M, M] and [M, N]; Aᵀ A = Kfu Kuu⁻¹ Kuf."""
    kernel, inducing = _inner(layer)
    X = tf.convert_to_tensor(X, dtype=gpflow.default_float())
    L = tf.linalg.cholesky(gpflow.covariances.Kuu(inducing, kernel, jitter=gpflow.config.default_jitter()))
    return L, tf.linalg.triangular_solve(L, gpflow.covariances.Kuf(inducing, kernel, X), lower=True)


def residual_fraction(layer: gpflux.layers.GPLayer, X) -> np.ndarray:
    """(k(x_i, x_i) − Kfu Kuu⁻¹ Kuf |_(ii)) / k(x_i, x_i), [N], with GPflow's default jitter in Kuu
    (the one its conditionals use). 0: the inducing variables explain all prior variance at x_i."""
    kernel, _ = _inner(layer)
    X = tf.convert_to_tensor(X, dtype=gpflow.default_float())
    _, A = whitened_cross_covariance(layer, X)
    Kdiag = kernel(X, full_cov=False)
    return ((Kdiag - tf.reduce_sum(A**2, axis=0)) / Kdiag).numpy()


def layer_residual_fractions(dgp: gpflux.models.DeepGP, X) -> List[float]:
    """Mean residual fraction of each layer on the inputs it sees under mean propagation."""
    return [float(np.mean(residual_fraction(layer, h))) for layer, h in zip(dgp.f_layers, layer_inputs(dgp, X))]


@dataclass
class ElboTerms:
    """ELBO = ``expected_log_likelihood`` − Σ ``kl``; ``kl`` has one entry per layer."""

    expected_log_likelihood: float
    kl: List[float]

    @property
    def elbo(self) -> float:
        return self.expected_log_likelihood - float(np.sum(self.kl))


def elbo_terms(dgp: gpflux.models.DeepGP, X, Y, *, num_samples: int = 8, seed: Optional[int] = 0, batch_size: int = 1024) -> ElboTerms:
    """The ELBO's terms on (X, Y), the data term scaled to the model's ``num_data`` (N if unset).

    Layers 1..L−1 are sampled as in doubly stochastic VI (``num_samples`` draws per point,
    :func:`activated_dgp.deep.sampling.sample_layers`); the last layer's Gaussian q(f_L | h) is
    integrated against the likelihood by ``variational_expectations`` (closed form for a Gaussian
    likelihood, quadrature otherwise). ``seed`` fixes the draws, a Monte Carlo likelihood's (softmax)
    included, so two models can be compared on the same noise (common random numbers).
    """
    X, Y = _checked_pair(X, Y)
    likelihood = dgp.likelihood_layer.likelihood
    total = 0.0
    for start in range(0, len(X), batch_size):
        x, y = X[start : start + batch_size], Y[start : start + batch_size]
        batch_seed = None if seed is None else seed + start
        _, mean, var = sample_layers(dgp, x, num_samples, batch_seed)
        total += float(_mean_expectation(likelihood, mean, var, tf.convert_to_tensor(y, dtype=mean.dtype), likelihood_draws(batch_seed)))
    return ElboTerms(_scaled(dgp, total, len(X)), [float(layer.prior_kl()) for layer in dgp.f_layers])


def _checked_pair(X, Y) -> Tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or len(X) != len(Y):
        raise ValueError(f"X must be [N, D] and Y [N, P] with the same N, got {X.shape} and {Y.shape}")
    return X, Y


def _mean_expectation(likelihood, mean, var, y, draws) -> tf.Tensor:
    """(1/S) Σ_s Σ_i E_q(f_L | h_i^(s))[log p(y_i | f_L)]: one batch's expected log-likelihood, the output layer's
    moments [S, N, P] given each sample."""
    return tf.reduce_mean(tf.reduce_sum(integrate_per_sample(likelihood, "variational_expectations", mean, var, y, draws), axis=1))


def _scaled(dgp: gpflux.models.DeepGP, total: float, num_rows: int) -> float:
    """A data term summed over ``num_rows`` rows, scaled to the model's ``num_data`` (``num_rows`` if unset)."""
    return total * (dgp.num_data if dgp.num_data is not None else num_rows) / num_rows


def seeded_elbo(dgp: gpflux.models.DeepGP, X, Y, *, num_samples: int = 8, seed: int = 0, batch_size: int = 1024) -> Callable[..., float]:
    """A compiled ``elbo_terms(dgp, X, Y, num_samples=…, seed=…, batch_size=…).elbo`` at the DGP's parameter
    values *at each call* (for many evaluations of one model on the same data and draws while its parameters are
    assigned between them, as :func:`activated_dgp.training.select_kernel_variances` does).

    Every call resets the draws of batch b (first row r) to seed + r and to that seed's likelihood split
    (:func:`activated_dgp.deep.draws.likelihood_draws`), so it sees exactly the eager function's draws and returns
    its ELBO up to rounding; one trace serves every call (a last, shorter batch adds one).

    Called with ``noise_variances`` (a Gaussian likelihood only), it returns the ELBO at each σ² in the list from one
    set of layer samples: the expected log-likelihood −½ log 2πσ² − ((y − m)² + v)/(2σ²) per sample is re-evaluated,
    the layers and the KL are not (:func:`activated_dgp.deep.prediction.at_noise_variances`)."""
    draws, num_samples = SeededDraws(seed), checked_num_samples(num_samples)
    X, Y = _checked_pair(X, Y)
    likelihood = dgp.likelihood_layer.likelihood
    starts = range(0, len(X), batch_size)

    @tf.function(reduce_retracing=True, autograph=False)  # no conversion needed (activated_dgp.deep.layers)
    def output_moments(x):
        _, mean, var = propagate_samples(dgp, x, num_samples, draws.normal)
        return mean, var

    @tf.function(reduce_retracing=True, autograph=False)
    def expectation(mean, var, y):
        return _mean_expectation(likelihood, mean, var, y, draws.likelihood)

    kl = tf.function(lambda: tf.stack([layer.prior_kl() for layer in dgp.f_layers]), autograph=False)
    batches = [(tf.constant(X[start : start + batch_size]), tf.constant(Y[start : start + batch_size])) for start in starts]

    def evaluate(noise_variances: Optional[Sequence[float]] = None):
        totals = np.zeros(1 if noise_variances is None else len(noise_variances))
        for start, (x, y) in zip(starts, batches):
            draws.reset(draws.seed + start)  # elbo_terms' batch seed
            mean, var = output_moments(x)
            if noise_variances is None:
                totals += float(expectation(mean, var, y))
            else:
                totals += [float(value) for value in at_noise_variances(likelihood, noise_variances, lambda: expectation(mean, var, y))]
        kls = [float(value) for value in kl().numpy()]
        elbos = [ElboTerms(_scaled(dgp, total, len(X)), kls).elbo for total in totals]
        return elbos[0] if noise_variances is None else elbos

    return evaluate
