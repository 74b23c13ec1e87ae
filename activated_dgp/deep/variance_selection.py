"""The kernel variance v of converted layers: rescaling v with the posterior mean kept, and choosing v per layer (and
the Gaussian noise jointly with the output layer's) by the ELBO or a validation log density, the mean propagation
kept throughout.

Kuf does not depend on v and Kuu ∝ 1/v, so at fixed posterior-mean weights B the KL of the mean, ½ Bᵀ Kuu B, falls
like 1/v while the prior variance left outside the inducing span, k − Kfu Kuu⁻¹ Kuf ∝ v, grows with v: the choice of v
trades the two (Dutordoir et al., 2021, Sec. 5.1 set v = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import gpflow
import gpflux
import numpy as np

from .posterior_mean import UnrepresentableMean, posterior_mean_weights, set_posterior_mean_weights

__all__ = ["rescale_kernel_variance", "VarianceSelection", "NOISE_FACTORS", "check_variance_floor", "select_kernel_variances"]


def rescale_kernel_variance(layer: gpflux.layers.GPLayer, variance: float) -> None:
    """Set the layer's kernel variance v and re-solve q_μ so that the posterior mean Φ(x) B is unchanged.

    Kuf does not depend on v and Kuu ∝ 1/v, so at fixed B the KL of the mean, ½ Bᵀ Kuu B, falls like
    1/v while the prior variance left outside the inducing span, k − Kfu Kuu⁻¹ Kuf ∝ v, grows with v.
    In the whitened parametrisation q_sqrt = s·I keeps its meaning (a fraction s² of the prior)."""
    if not variance > 0:
        raise ValueError(f"the kernel variance must be positive, got {variance!r}")
    weights = posterior_mean_weights(layer)
    kernel = getattr(layer.kernel, "kernel", layer.kernel)
    previous = float(kernel.variance.numpy())
    kernel.variance.assign(variance)
    try:
        set_posterior_mean_weights(layer, weights)
    except UnrepresentableMean as error:
        kernel.variance.assign(previous)
        raise UnrepresentableMean(
            f"at kernel variance {variance:.3g} (Kuu ∝ 1/v) the layer's converted mean cannot be represented; it "
            f"keeps v = {previous:.3g}. {error}"
        ) from None


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


def check_variance_floor(value, name: str = "min_variance") -> float:
    """``value`` as a float when it is a usable floor on a kernel variance (positive and finite), else a
    ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number (a floor on the kernel variance v), got {value!r}")
    return float(value)


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
    min_variance: Optional[float] = None,
) -> VarianceSelection:
    """Choose each layer's kernel variance v, keeping the mean propagation (the network's forward pass).

    Coordinate ascent: for each layer in turn (``sweeps`` passes over the layers) the objective is
    evaluated at every v in ``candidates`` with q_μ re-solved by :func:`rescale_kernel_variance`, and the
    best v is kept. The draws are fixed by ``seed``, so all candidates see the same noise (common random
    numbers). The default grid is 10^(−3, −2.5, …, 0.5), *extended* in steps of 10^0.5 beyond whichever end
    is best, for as long as the objective improves (down to 10^−9, up to 10^3): the best v depends on the
    data's noise level (naval's twin, noise 1.6e-4, wants v ≈ 1e-5 per layer; at a fixed floor of 1e-3
    its test NLPD was −2.06 against the network's −2.93). Explicit ``candidates``
    are taken as given. A v at which a layer's converted mean cannot be represented (Kuu ∝ 1/v with too little
    jitter left to be positive definite: :class:`UnrepresentableMean`) is recorded with −inf and never chosen.

    * ``objective="elbo"``: the ELBO on (X, Y) (:func:`activated_dgp.deep.diagnostics.elbo_terms`, at most
      ``max_points`` seeded rows, scaled to the model's N). It resolves the trade-off the converted
      means pose: they cost ½ Bᵀ Kuu B ∝ 1/v nats of KL, while the prior variance left outside the
      inducing span, ∝ v, is noise in every sample passed through the layer.
    * ``objective="validation"``: the predictive log density on held-out (X, Y) (−NLPD,
      :func:`activated_dgp.predictive_log_density` with ``4·num_samples`` samples): the v that predicts best.

    ``noise_factors`` (a Gaussian likelihood only; e.g. :data:`NOISE_FACTORS`): the output layer's v is
    searched *jointly* with the noise variance σ², trying σ² = factor × (σ² on entry) at every candidate v.
    The two trade off — the output layer's residual prior variance k(x, x) − Qff(x) ∝ v is an input-dependent
    share of the predictive variance that a smaller σ² must make room for — so a search over v at a fixed σ²
    never finds the pair where both move (measured on yacht).

    ``min_variance`` (a floor v_min > 0): no v below it is ever tried. Grid points (or explicit ``candidates``)
    below the floor are replaced by the floor itself, the downward extension stops there, and a layer that
    enters below the floor is first raised to it (q_μ re-solved), so the chosen v is the objective's best
    over the allowed candidates, all ≥ v_min. Why: with the validation objective the hidden layers' v goes to
    ≈ 3e-9 on most UCI cells,
    which switches the GP off — the ADGP then predicts like its network plus a constant noise, and under
    dataset shift like a network (rotated MNIST). A floor keeps each layer's residual prior
    variance k(x, x) − Qff(x) ∝ v a non-negligible share of the predictive variance.
    """
    from .diagnostics import elbo_terms, seeded_elbo
    from .prediction import at_noise_variances, predictive_log_density, seeded_log_density

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
    step, lowest, highest = 10.0**0.5, 10.0**-9, 10.0**3
    if min_variance is not None:
        min_variance = check_variance_floor(min_variance)
        grid = np.maximum(grid, min_variance)  # a candidate below the floor is tried at the floor
        lowest = max(lowest, min_variance)
    grid = np.unique(grid)  # sorted, the floor once
    likelihood = dgp.likelihood_layer.likelihood
    if noise_factors is not None:
        if not isinstance(likelihood, gpflow.likelihoods.Gaussian):
            raise ValueError(f"noise_factors need a Gaussian likelihood, the model has {type(likelihood).__name__}")
        noise_factors = np.asarray(noise_factors, dtype=np.float64)
        if noise_factors.ndim != 1 or noise_factors.size == 0 or np.any(~(noise_factors > 0)):
            raise ValueError(f"noise_factors must be a non-empty list of positive numbers, got {noise_factors!r}")
    entry_noise = chosen_noise = float(likelihood.variance.numpy()) if noise_factors is not None else None

    # Seeded: compiled once and evaluated at the parameters of the moment, the eager functions' values on the same
    # draws. Unseeded: the eager functions, fresh draws at every evaluation. ``scores(noises)`` gives one value per
    # σ² in ``noises`` (None: the likelihood's own): seeded, from one set of layer samples.
    if objective == "elbo":
        seeded = seeded_elbo(dgp, X, Y, num_samples=num_samples, seed=seed) if seed is not None else None
        eager = lambda: elbo_terms(dgp, X, Y, num_samples=num_samples, seed=None).elbo
    else:
        density = seeded_log_density(dgp, X, Y, num_samples=4 * num_samples, seed=seed) if seed is not None else None
        seeded = None if density is None else lambda noises=None: np.mean(density(noises), axis=-1).tolist()
        eager = lambda: float(np.mean(predictive_log_density(dgp, X, Y, num_samples=4 * num_samples)))

    def scores(noises) -> list:
        if seeded is None:
            return [eager()] if noises is None else at_noise_variances(likelihood, noises, eager)
        values = seeded(noises)
        return values if noises is not None else [values]

    if min_variance is not None:  # the entry state counts as a candidate: raise any layer below the floor first
        for layer in dgp.f_layers:
            if float(getattr(layer.kernel, "kernel", layer.kernel).variance.numpy()) < min_variance:
                rescale_kernel_variance(layer, min_variance)
    evaluations = []
    best = scores(None)[0]
    for _ in range(int(sweeps)):
        for index, layer in enumerate(dgp.f_layers):
            kernel = getattr(layer.kernel, "kernel", layer.kernel)
            chosen = float(kernel.variance.numpy())

            joint = noise_factors is not None and index == len(dgp.f_layers) - 1

            def evaluate(v: float) -> bool:
                nonlocal best, chosen, chosen_noise
                try:
                    rescale_kernel_variance(layer, v)
                except UnrepresentableMean:  # a v whose Kuu the mean cannot be solved on is not a candidate
                    evaluations.append((index, v, -np.inf))
                    return False
                improved = False
                noises = entry_noise * noise_factors if joint else None
                for noise, value in zip(noises if joint else [None], scores(noises)):
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
