"""The linearised Laplace approximation (LLA) of a trained tf-keras network, with the covariance in
parameter space (exact, last layer, diagonal) or through the top-k eigenfunctions of the network's
empirical NTK (Deng et al. 2022, "NeuralEF: Deconstructing kernels by deep neural networks", §4.3).

The network g(x, θ): R^D → R^C is trained to θ_MAP under an isotropic Gaussian prior
p(θ) = N(0, δ⁻¹ I) (δ = ``prior_precision`` = 1/σ₀²) and a likelihood p(y | f) of its latent output f
(regression outputs, or logits: the model must not end in a sigmoid/softmax). Linearising g about θ_MAP
(Immer et al. 2021, "Improving predictions of Bayesian neural nets via local linearization"; Foong
et al. 2019) and taking the Laplace/generalised Gauss–Newton posterior gives the GP (Deng et al. eq. 21)

    f(x) ~ GP( g(x, θ_MAP),  J(x) Σ J(x')ᵀ ),      Σ⁻¹ = Σ_i J_iᵀ Λ_i J_i + δ I_P,

with J(x) = ∂_θ g(x, θ_MAP) [C, P] and Λ_i = −∂²_ff log p(y_i | f) at f = g(x_i, θ_MAP)
(:mod:`.laplace_likelihoods`: I/σ², s(1 − s), diag(p) − ppᵀ). Methods (``method=``):

* ``"exact"``: the full P × P GGN above (P ≤ ``max_parameters``, default 5,000).
* ``"last_layer"``: the same over the last Dense layer's kernel and bias only, the other weights fixed at
  θ_MAP (Kristiadi et al. 2020; Daxberger et al. 2021). With a Gaussian likelihood and a linear last
  layer this is Bayesian linear regression on the penultimate features.
* ``"diagonal"``: Σ⁻¹ ≈ diag(Σ_i J_iᵀ Λ_i J_i) + δ I (the diagonal GGN).
* ``"kron"``: Σ⁻¹ ≈ blockdiag_l(A_l ⊗ G_l) + δ I, the Kronecker-factored GGN of each Dense and Conv2D layer (KFAC;
  Martens & Grosse 2015, Ritter et al. 2018; KFC for convolutions, Grosse & Martens 2016), A_l = E[ã ãᵀ] of the
  layer's bias-augmented inputs (a convolution's unfolded patches) and G_l = Σ_i E_iᵀ Λ_i E_i of its back-propagated
  output signals (summed over a convolution's output positions), inverted through the factors' eigendecompositions
  (:mod:`.kfac`); for a Sequential chain (nested ones allowed). An ``ActivatedLayer`` has no Kronecker form:
  ``kron_fallback="diagonal"`` takes its diagonal GGN block, otherwise it is a ValueError.
* ``"lowrank"``: Σ⁻¹ ≈ V diag(e) Vᵀ + δ I with the top k = ``num_eigenpairs`` eigenpairs of the GGN by Lanczos
  (:mod:`.lowrank`; Daxberger et al. 2021, §3.2), inverted by Woodbury: Σ = δ⁻¹ I − V diag(e / (δ (e + δ))) Vᵀ.
  No P × P matrix is formed; the test covariances need J(x) V and the NTK block J(x) J(x)ᵀ.

``variables=`` restricts exact, diagonal, kron and lowrank to a subnetwork: some of the model's trainable variables (whole
layers for kron), the others fixed at θ_MAP.

For a chain of Dense and ``ActivatedLayer`` layers (the library's twins, :func:`~activated_dgp.build_activated_nn`)
the parameter methods compute the test covariances layer by layer without forming J (:mod:`.layerwise`): J(x) V
for the eigenvectors V (exact, last_layer), and the diagonal method's GGN diagonal and J(x) Σ J(x)ᵀ. The Jacobians
themselves (the exact GGN, NeuralEF's cached NTK) and NeuralEF's per-step NTK features of its (x, c) pairs come from
the same factors. Other networks use their per-example Jacobians.
* ``"neuralef"``: eq. 22 of Deng et al.,

      f(x) ~ GP( g(x, θ_MAP),  Ψ̃(x) [Σ_i Ψ̃(x_i)ᵀ Λ_i Ψ̃(x_i) + δ I_k]⁻¹ Ψ̃(x')ᵀ ),

  Ψ̃(x) = [√μ_1 ψ_1(x), …, √μ_k ψ_k(x)], [C, k], with (μ_j, ψ_j) the top-k eigenpairs of the empirical
  NTK κ(x, x') = J(x) J(x')ᵀ under the training inputs, learnt by :class:`~activated_dgp.eigen.NeuralEF`
  on the exact empirical NTK (Jacobian features, the default) or on :func:`~activated_dgp.eigen.ntk_kernel`
  (eq. 20, ``ntk_samples`` Rademacher directions). Eq. 22 follows from eq. 21 by Woodbury and
  Mercer's κ ≈ Ψ̃ Ψ̃ᵀ (their App. A.3): only a k × k matrix is inverted. For C > 1 outputs the
  matrix-valued NTK (their §3.2) is taken as a scalar kernel on pairs (x, c):
  κ((x, c), (x', c')) = ∂_θ g_c(x) · ∂_θ g_c'(x'); the eigenfunction networks take (x, one-hot c)
  [D + C] and ψ_j(x) [C] collects ψ_j(x, c) over c. The eigenproblem is that of §3.2 (eigenvectors of
  the NC × NC Gram, normalised over the NC pairs); only the network architecture (one output per input
  pair rather than C output heads) differs. With the exact NTK (``ntk_samples=None``) the Jacobians of
  the N C training pairs are computed once when they fit ``jacobian_cache_bytes`` (N C P · 8 bytes;
  default :data:`JACOBIAN_CACHE_BYTES`), and NeuralEF trains on them: on the Gram matrix J Jᵀ
  (:class:`~activated_dgp.eigen.PrecomputedGram`) when N C ≤ P, else on the cached features
  (:class:`~activated_dgp.eigen.PrecomputedFeatures`). Both give the same minibatch products κ Ψ as
  recomputing J every step (up to floating-point summation order), without B C backward passes per
  step; larger problems fall back to recomputing them (for a chain of Dense and ``ActivatedLayer`` layers, a step's
  B × B Gram is then computed layer by layer without the [B, P] rows,
  :meth:`~activated_dgp.eigen.layerwise.LayerwiseJacobian.combination_gram`). Truncating to k pairs drops the kernel's tail, so eq. 22's
  variances differ from eq. 21's unless the k pairs cover the NTK's spectrum.
  With ``covariance="subspace"`` the eigenfunctions are used only on the training inputs, to find the directions
  in parameter space they stand for: their Nyström extension through the NTK, ψ_j(x) = J(x) Jᵀ ψ_j(X) / (N μ_j),
  is linear in J(x), ψ_j(x) √μ_j = J(x) w_j with w_j = Σ_i J_iᵀ ψ_j(x_i) / (N √μ_j) (N counting the (x, c) pairs).
  With V_k an orthonormal basis of the w_j, the posterior is the LLA with the GGN projected onto them,

      f(x) ~ GP( g(x, θ_MAP),  J(x) Σ_k J(x')ᵀ ),   Σ_k⁻¹ = V_k V_kᵀ H V_k V_kᵀ + δ I,

  computed as ``lowrank`` does (Woodbury: δ⁻¹ J Jᵀ − (J V) diag(e / (δ (e + δ))) (J V)ᵀ, e the eigenvalues of
  V_kᵀ H V_k). With the NTK's exact eigenpairs, w_j = V_j, the top right singular vectors of the training Jacobian,
  and eq. 22 at the training inputs is this posterior minus δ⁻¹ J (I − V_k V_kᵀ) Jᵀ; away from the data eq. 22
  keeps only the learnt networks' extrapolation of ψ_j, where this form keeps the prior variance of every direction
  the data do not constrain. It costs two passes of Jacobians over the training data and, per test point, J(x) V_k
  and J(x) J(x)ᵀ (as ``lowrank``).
* ``"eigenfunctions"``: eq. 22 with eigenpairs the user gives (``eigenfunctions=``, any object with
  ``eigenvalues`` [k] and ``__call__(inputs) -> [M, k]`` on the inputs above, e.g. a fitted
  :class:`~activated_dgp.eigen.Nystrom` on the NTK, or exact eigenpairs in a test).

All methods share one computation: with features F(x) [C, m] (J(x), last-layer J(x), Ψ̃(x)),
H = Σ_i F_iᵀ Λ_i F_i is eigendecomposed once, H = V diag(e) Vᵀ, so that Σ = V diag(1/(e + δ)) Vᵀ for any
δ (the diagonal method keeps diag H). The latent variance is J(x) Σ J(x)ᵀ = ‖diag(e + δ)^(−1/2) Vᵀ F(x)ᵀ‖².

Prior precision (``prior_precision=``): a positive float; ``"marginal_likelihood"`` (every method) maximises the Laplace evidence over δ,

    log p(D | δ) ≈ log p(D | θ_MAP) + log p(θ_MAP | δ) + (m/2) log 2π − ½ log det Σ⁻¹
                 = log p(D | θ_MAP) − (δ/2) ‖θ_MAP‖² + (m/2) log δ − ½ Σ_j log(e_j + δ),

(MacKay 1992; Immer et al. 2021, eq. 5; Daxberger et al. 2021), m the number of parameters in the
posterior (those of the last layer for ``last_layer``), with θ_MAP fixed (for ``lowrank`` the P − k eigenvalues
left out count as 0, so their terms are (P − k) log δ; for ``neuralef`` and ``eigenfunctions`` likewise, with the
eigenvalues e_j of Σ_i Ψ̃_iᵀ Λ_i Ψ̃_i; for the Gaussian likelihood (Λ = I/σ²) with the NTK's exact top-k eigenpairs
these are the GGN's top k, since H = Σ J_iᵀ J_i / σ² and the Gram J Jᵀ / σ² share their non-zero spectrum, so the
evidence is then ``lowrank``'s); by a grid over log δ refined
by a bounded scalar search. ``"validation"`` picks δ from ``prior_precision_grid`` by the validation
negative log predictive density; ``fit`` then needs ``validation_data=(X_val, Y_val)``. After ``fit``,
:meth:`LinearisedLaplace.optimize_prior_precision` (``"marglik"`` or ``"gridsearch"``, laplace-torch's names) does
either again; for ``kron`` the e_j are the products a_i g_j of the Kronecker factors' eigenvalues.
With ``prior_structure="layerwise"`` (exact, diagonal, kron, lowrank) the prior is N(0, D⁻¹), D = diag(δ_l) with one
δ_l per variable (per layer for kron), and L-BFGS-B maximises the evidence with −½ Σ_l δ_l ‖θ_l‖² + ½ Σ_l m_l log δ_l −
½ log det(H + D) over the log δ_l, from the best common δ, with its analytic gradient (exact and lowrank:
:mod:`.grouped_prior`, log det(H + D) through an r × r matrix for a GGN of rank r).

Gaussian noise (``noise_variance=``): a positive σ², or ``"marginal_likelihood"`` (every method): the GGN is accumulated at the maximum-likelihood noise σ₀² = Σ‖y − g(x)‖² / (N C) and, since every
variant's GGN is proportional to 1/σ², rescaled by σ₀²/σ² for any other σ², so that the evidence above, with
log p(D | θ_MAP) = −Σ‖y − g(x)‖²/(2σ²) − (N C/2) log 2πσ², is maximised over (log δ, log σ²) jointly by L-BFGS-B with its
analytic gradient (or over σ² alone at a fixed δ); laplace-torch leaves σ to a gradient loop of the user's.

Predictives (``predict_y``; with ``pred_type="nn"`` by weight samples through the network instead,
:mod:`.laplace_sampling`): Gaussian N(μ, J Σ Jᵀ + σ² I) exactly; Bernoulli by the probit
approximation (default, MacKay 1992) or Monte Carlo; softmax by Monte Carlo over the Gaussian latent
(default: 1,000 samples from ``numpy.random.default_rng(seed)``) or the generalised probit.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras
from scipy.optimize import minimize, minimize_scalar

from .. import saving
from ..deep import persistence  # noqa: F401  (registers the kind "network", which a saved approximation holds)
from ..deep.likelihoods import output_width
from ..validation import check_inputs, check_matrix, check_positive_int
from .base import EigenApproximation
from .kernel_sources import FeatureKernel, PrecomputedFeatures, PrecomputedGram, ntk_kernel
from .layerwise import layerwise_jacobian
from .laplace_likelihoods import (
    LIKELIHOOD_NAMES,
    PREDICTIVES,
    log_likelihood,
    log_predictive_density,
    output_hessians,
    predictive_probabilities,
)
from .grouped_prior import GroupedPrior
from .kfac import KroneckerFactors
from .kfac_chain import KRON_FALLBACKS, KroneckerChain
from .laplace_sampling import weight_sample_predictive
from .lowrank import top_ggn_eigenpairs
from .neuralef import NeuralEF
from . import ika, nystrom  # noqa: F401  (register the kinds of the eigenfunctions a saved approximation may hold)
from .ntk import jacobian_function, jacobian_kernel

__all__ = ["LinearisedLaplace", "METHODS", "COVARIANCES", "JACOBIAN_CACHE_BYTES"]

METHODS = ("exact", "last_layer", "diagonal", "kron", "lowrank", "neuralef", "eigenfunctions")
PRIOR_PRECISION_SEARCHES = ("marginal_likelihood", "validation")
_EIGEN_METHODS = ("neuralef", "eigenfunctions")
#: the methods whose GGN keeps k < P eigenvalues: their evidence counts the P − k others as 0
_LOW_RANK = ("lowrank",) + _EIGEN_METHODS
#: the covariances of the eigenfunction methods (:class:`LinearisedLaplace`'s ``covariance``)
COVARIANCES = ("eq22", "subspace")
#: one prior precision for all weights, or one per layer (exact, diagonal, lowrank: per variable; kron: per layer)
PRIOR_STRUCTURES = ("scalar", "layerwise")
_LAYERWISE_PRIOR_METHODS = ("exact", "diagonal", "kron", "lowrank")
#: the largest training-Jacobian array (N C P float64 numbers, in bytes) that ``method="neuralef"`` computes
#: once and trains NeuralEF on, instead of recomputing the batch's Jacobians at every step (1 GiB)
JACOBIAN_CACHE_BYTES = 2**30
_LEGACY_CONFIG = "laplace.json"  # the file of a directory saved by activated_dgp 0.1
#: the constructor arguments a saved fit records (besides the prior precision), under the same names
_SETTINGS = (
    "likelihood", "noise_variance", "method", "num_eigenpairs", "ntk_samples", "neuralef_steps", "neuralef_options",
    "predictive", "num_samples", "seed", "batch_size", "max_parameters", "covariance", "prior_structure", "kron_fallback",
)


def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be positive and finite, got {value!r}")
    return float(value)


def _last_dense_variables(model) -> list:
    """The kernel and bias of the model's last tf-keras Dense layer (searched through nested models)."""

    def dense_layers(layer):
        for inner in getattr(layer, "layers", []):
            yield from dense_layers(inner)
        if isinstance(layer, tf_keras.layers.Dense):
            yield layer

    layers = list(dense_layers(model))
    if not layers:
        raise ValueError("method='last_layer' needs a tf-keras Dense layer in the model; none was found")
    return list(layers[-1].trainable_variables)


def _variable_indices(model, variables, method: str) -> list:
    """The positions of ``variables`` in ``model.trainable_variables`` (a subnetwork), checked."""
    if method not in ("exact", "diagonal", "kron", "lowrank"):
        raise ValueError(f"variables= (a subnetwork) is for methods exact, diagonal, kron and lowrank, not {method!r}")
    position = {v.ref(): i for i, v in enumerate(model.trainable_variables)}
    variables = list(variables)
    if not variables:
        raise ValueError("variables= must name at least one of the model's trainable variables")
    indices = []
    for v in variables:
        if not hasattr(v, "ref") or v.ref() not in position:
            raise ValueError(f"variables= must hold the model's trainable variables; {getattr(v, 'name', v)!r} is not one of them")
        indices.append(position[v.ref()])
    if len(set(indices)) != len(indices):
        raise ValueError("variables= names a variable twice")
    return sorted(indices)


class _OutputSelector(tf.Module):
    """The network as a scalar function on pairs: (x, one-hot c) [M, D + C] → g_c(x) [M, 1], so that the
    matrix-valued NTK becomes a scalar kernel on X × {1..C} (NeuralEF §3.2)."""

    def __init__(self, model, input_dim: int, num_outputs: int):
        super().__init__()
        self.model, self.input_dim, self.num_outputs = model, int(input_dim), int(num_outputs)

    @property
    def trainable_variables(self):
        return tuple(self.model.trainable_variables)

    def __call__(self, inputs):
        inputs = tf.convert_to_tensor(inputs, tf.float64)
        outputs = tf.cast(self.model(inputs[:, : self.input_dim], training=False), tf.float64)
        return tf.reduce_sum(outputs * inputs[:, self.input_dim :], axis=1, keepdims=True)


def pair_inputs(X: np.ndarray, num_outputs: int) -> np.ndarray:
    """The inputs of the multi-output eigenfunctions: rows (x_n, e_c) for n = 1..N, c = 1..C (n-major),
    [N C, D + C]; X itself when C = 1."""
    if num_outputs == 1:
        return X
    return np.concatenate([np.repeat(X, num_outputs, axis=0), np.tile(np.eye(num_outputs), (X.shape[0], 1))], axis=1)


class LinearisedLaplace:
    """The linearised Laplace approximation of a trained tf-keras model (see the module docstring).

    :param model: a built tf-keras model, X [N, D] → latent outputs [N, C] (logits for classification).
    :param likelihood: ``"gaussian"`` (Y [N, C] reals), ``"bernoulli"`` (C = 1, logistic link, labels 0/1
        [N, 1]) or ``"softmax"`` (C ≥ 2 logits, labels 0..C−1 [N, 1]).
    :param noise_variance: σ² of the Gaussian likelihood (ignored otherwise), or ``"marginal_likelihood"`` (see the
        module docstring).
    :param prior_precision: δ > 0, or ``"marginal_likelihood"`` or ``"validation"``.
    :param method: one of :data:`METHODS`.
    :param num_eigenpairs: k for ``neuralef``, and the rank k < P for ``lowrank``.
    :param eigenfunctions: the eigenpairs for ``eigenfunctions`` (see the module docstring).
    :param ntk_samples: ``None`` (default): NeuralEF trains on the exact NTK, with the per-example Jacobians
        as features (P per point, B C backward passes per step); an integer S: the Rademacher estimate of
        eq. 20 with S forward-mode JVPs per step, for networks whose Jacobians do not fit (slow for large S:
        600 steps took 394 s with S = 1000 against 10 s exact on a P = 49 network).
    :param jacobian_cache_bytes: with the exact NTK, the training Jacobians (N C P float64 numbers) are
        computed once when they take at most this many bytes (default :data:`JACOBIAN_CACHE_BYTES`;
        0 always recomputes them per step); see the module docstring.
    :param neuralef_steps, neuralef_options: ``NeuralEF.fit`` steps and ``NeuralEF`` keyword arguments
        (JSON-serialisable ones, if the fit is to be saved).
    :param predictive: the classification predictive, "probit" or "mc" (defaults: probit for Bernoulli,
        mc for softmax); ``num_samples`` and ``seed`` for "mc".
    :param batch_size: points per Jacobian evaluation (its Jacobians take batch_size · C · P · 8 bytes).
    :param max_parameters: the largest P (or last-layer size) for which exact/last_layer form P × P.
    :param variables: for exact, diagonal, kron and lowrank, the trainable variables of the subnetwork the posterior covers
        (default: all of them); the others stay at θ_MAP.
    :param kron_fallback: for ``kron``: None (default), a layer without a Kronecker form (an ``ActivatedLayer``) is a
        ValueError; ``"diagonal"``, its GGN block's diagonal (:mod:`.kfac`).
    :param prior_precision_grid: the δ values ``"validation"`` tries (default 10^−4 … 10^4, 33 values).
    :param verbose: 1 prints progress of long fits, 0 is silent.
    :param covariance: for ``neuralef`` and ``eigenfunctions``: ``"eq22"`` (default, eq. 22 as written) or
        ``"subspace"`` (the LLA with the GGN projected onto the parameter directions of the eigenfunctions' Nyström
        extension, see the module docstring).
    """

    def __init__(
        self,
        model,
        likelihood: str = "gaussian",
        noise_variance=1.0,
        prior_precision=1.0,
        method: str = "exact",
        num_eigenpairs: int = 10,
        eigenfunctions=None,
        ntk_samples: Optional[int] = None,
        jacobian_cache_bytes: int = JACOBIAN_CACHE_BYTES,
        neuralef_steps: int = 2000,
        neuralef_options: Optional[dict] = None,
        predictive: Optional[str] = None,
        num_samples: int = 1000,
        seed: int = 0,
        batch_size: int = 256,
        max_parameters: int = 5000,
        prior_precision_grid: Optional[Sequence[float]] = None,
        verbose: int = 1,
        variables: Optional[Sequence[tf.Variable]] = None,
        covariance: str = "eq22",
        prior_structure: str = "scalar",
        kron_fallback: Optional[str] = None,
    ):
        if not isinstance(model, tf_keras.Model):
            raise ValueError(f"model must be a tf-keras Model, got {type(model).__name__}")
        if not model.trainable_variables:
            raise ValueError("the model has no trainable variables; build it (call it once) first")
        if likelihood not in LIKELIHOOD_NAMES:
            raise ValueError(f"unknown likelihood {likelihood!r}; use one of {LIKELIHOOD_NAMES}")
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; use one of {METHODS}")
        if prior_structure not in PRIOR_STRUCTURES:
            raise ValueError(f"unknown prior_structure {prior_structure!r}; use one of {PRIOR_STRUCTURES}")
        if prior_structure == "layerwise" and method not in _LAYERWISE_PRIOR_METHODS:
            raise ValueError(f"prior_structure='layerwise' is for methods {_LAYERWISE_PRIOR_METHODS}, not {method!r}")
        if isinstance(prior_precision, str):
            if prior_precision not in PRIOR_PRECISION_SEARCHES:
                raise ValueError(f"prior_precision must be a positive number or one of {PRIOR_PRECISION_SEARCHES}, got {prior_precision!r}")
            if prior_structure == "layerwise" and prior_precision == "validation":
                raise ValueError("prior_structure='layerwise' chooses its precisions by 'marginal_likelihood', not 'validation'")
        elif prior_structure == "layerwise" and np.ndim(prior_precision) == 1:
            prior_precision = np.array([_positive(value, "prior_precision") for value in prior_precision])
        else:
            prior_precision = _positive(prior_precision, "prior_precision")
        predictive = PREDICTIVES[likelihood][0] if predictive is None else predictive
        if predictive not in PREDICTIVES[likelihood]:
            raise ValueError(f"unknown predictive {predictive!r} for the {likelihood} likelihood; use one of {PREDICTIVES[likelihood]}")
        if method == "eigenfunctions":
            if eigenfunctions is None or not callable(eigenfunctions) or not hasattr(eigenfunctions, "eigenvalues"):
                raise ValueError("method='eigenfunctions' needs eigenfunctions=<object with eigenvalues [k] and __call__(inputs) -> [M, k]>")
        elif eigenfunctions is not None:
            raise ValueError(f"eigenfunctions= is only used by method='eigenfunctions', not {method!r}")
        if ntk_samples is not None:
            ntk_samples = check_positive_int(ntk_samples, "ntk_samples")
        if isinstance(jacobian_cache_bytes, bool) or not isinstance(jacobian_cache_bytes, (int, np.integer)) or jacobian_cache_bytes < 0:
            raise ValueError(f"jacobian_cache_bytes must be a non-negative integer, got {jacobian_cache_bytes!r}")
        grid = np.logspace(-4, 4, 33) if prior_precision_grid is None else np.asarray(prior_precision_grid, dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid) & (grid > 0)):
            raise ValueError("prior_precision_grid must be a non-empty list of positive numbers")
        if verbose not in (0, 1, True, False):
            raise ValueError(f"verbose must be 0 or 1, got {verbose!r}")
        if covariance not in COVARIANCES:
            raise ValueError(f"unknown covariance {covariance!r}; use one of {COVARIANCES}")
        if covariance != "eq22" and method not in _EIGEN_METHODS:
            raise ValueError(f"covariance={covariance!r} is for the eigenfunction methods {_EIGEN_METHODS}, not {method!r}")
        self.covariance = covariance
        self.prior_structure = prior_structure
        self.model, self.likelihood, self.method = model, likelihood, method
        if isinstance(noise_variance, str):
            if noise_variance != "marginal_likelihood":
                raise ValueError(f"noise_variance must be a positive number or 'marginal_likelihood', got {noise_variance!r}")
            if likelihood != "gaussian":
                raise ValueError(f"noise_variance='marginal_likelihood' is for the gaussian likelihood, not {likelihood!r}")
            if isinstance(prior_precision, str) and prior_precision == "validation" or prior_structure != "scalar":
                raise ValueError("noise_variance='marginal_likelihood' needs the Laplace evidence at a scalar fixed or "
                                 "'marginal_likelihood' prior precision")
            self.noise_variance_setting, self.noise_variance = noise_variance, 1.0
        else:
            self.noise_variance = _positive(noise_variance, "noise_variance")
            self.noise_variance_setting = self.noise_variance
        self.prior_precision_setting = prior_precision
        self.num_eigenpairs = check_positive_int(num_eigenpairs, "num_eigenpairs")
        self.eigenfunctions = eigenfunctions
        self.ntk_samples = ntk_samples
        self.jacobian_cache_bytes = int(jacobian_cache_bytes)
        self.ntk_source: Optional[str] = None  # how NeuralEF got the NTK: "gram", "features", "jacobians", "rademacher"
        self.neuralef_steps = check_positive_int(neuralef_steps, "neuralef_steps")
        self.neuralef_options = dict(neuralef_options or {})
        self.predictive, self.num_samples, self.seed = predictive, check_positive_int(num_samples, "num_samples"), int(seed)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.max_parameters = check_positive_int(max_parameters, "max_parameters")
        self.prior_precision_grid = grid
        self.verbose = int(verbose)
        self.variable_indices = None if variables is None else _variable_indices(model, variables, method)
        if method == "last_layer":
            self.variables = _last_dense_variables(model)
        elif variables is None:
            self.variables = list(model.trainable_variables)
        else:
            self.variables = [model.trainable_variables[i] for i in self.variable_indices]
        self.num_parameters = int(sum(np.prod(v.shape) for v in self.variables))
        if method in ("exact", "last_layer") and self.num_parameters > self.max_parameters:
            raise ValueError(
                f"method={method!r} forms a {self.num_parameters} × {self.num_parameters} matrix, more than "
                f"max_parameters={self.max_parameters}; raise max_parameters, or use 'diagonal' or 'neuralef'"
            )
        self._jacobian = jacobian_function(lambda X: self.model(X, training=False), self.variables)
        # the layer-wise products (module docstring), None where the network is not such a chain: the parameter
        # methods' covariances, and the Jacobians of the NTK that the eigen methods learn
        self._layerwise = layerwise_jacobian(model, self.variables)
        self._layerwise_covariance = self._layerwise is not None and method not in _EIGEN_METHODS
        if kron_fallback not in KRON_FALLBACKS:
            raise ValueError(f"unknown kron_fallback {kron_fallback!r}; use one of {KRON_FALLBACKS}")
        if kron_fallback is not None and method != "kron":
            raise ValueError(f"kron_fallback= is for method='kron', not {method!r}")
        self.kron_fallback = kron_fallback
        # the layers of the Kronecker-factored GGN (Dense, Conv2D; ActivatedLayer by its diagonal with kron_fallback)
        self._kron_chain = KroneckerChain(model, self.variables, kron_fallback) if method == "kron" else None
        self.kron: Optional[KroneckerFactors] = None  # the Kronecker factors, for method kron
        self.input_dim = self.num_outputs = None
        self.prior_precision: Optional[float] = None
        self.log_evidence: Optional[float] = None
        self.validation_nll: Optional[np.ndarray] = None

    # -- helpers -----------------------------------------------------------------------------------

    def _log(self, message: str) -> None:
        if self.verbose:
            print(f"LinearisedLaplace: {message}", flush=True)

    def _batches(self, N: int):
        return [slice(start, min(start + self.batch_size, N)) for start in range(0, N, self.batch_size)]

    def _outputs(self, X: np.ndarray) -> np.ndarray:
        """g(X, θ_MAP) [N, C] float64, in batches."""
        parts = []
        for rows in self._batches(X.shape[0]):
            output = tf.cast(self.model(tf.constant(X[rows]), training=False), tf.float64).numpy()
            parts.append(output.reshape(output.shape[0], -1))
        return np.concatenate(parts, axis=0)

    def _check_X(self, X, what: str = "X") -> np.ndarray:
        if self.input_dim is None:
            raise ValueError("the LinearisedLaplace approximation is not fitted yet (call fit first)")
        return check_inputs(X, self.input_dim, what)

    def _check_Y(self, Y, N: int, what: str = "Y") -> np.ndarray:
        Y = check_matrix(Y, what)
        if Y.shape[0] != N:
            raise ValueError(f"{what} has {Y.shape[0]} rows but X has {N}")
        C = self.num_outputs
        if self.likelihood == "gaussian" and Y.shape[1] != C:
            raise ValueError(f"{what} has {Y.shape[1]} columns but the model has {C} outputs")
        if self.likelihood == "bernoulli" and C != 1:
            raise ValueError(f"the bernoulli likelihood needs a model with one output (a logit), this one has {C}")
        if self.likelihood == "softmax" and C < 2:
            raise ValueError("the softmax likelihood needs a model with C ≥ 2 outputs (logits)")
        output_width(self.likelihood, Y, num_classes=C if self.likelihood == "softmax" else None)
        return Y

    def _eigen_features(self, X: np.ndarray) -> np.ndarray:
        """Ψ̃(X) [B, C, k] = √μ_j ψ_j(x, c) of the eigenfunctions (eq. 22)."""
        C = self.num_outputs
        psi = tf.cast(self.eigenfunctions(tf.constant(pair_inputs(X, C))), tf.float64).numpy()
        mu = np.maximum(np.asarray(tf.convert_to_tensor(self.eigenfunctions.eigenvalues), dtype=np.float64).reshape(-1), 0.0)
        if psi.ndim != 2 or psi.shape[0] != X.shape[0] * C or psi.shape[1] != mu.shape[0]:
            raise ValueError(
                f"the eigenfunctions returned shape {psi.shape} for {X.shape[0] * C} inputs and have {mu.shape[0]} "
                f"eigenvalues; expected [{X.shape[0] * C}, {mu.shape[0]}]"
            )
        return (psi * np.sqrt(mu)[None, :]).reshape(X.shape[0], C, -1)

    def _features(self, X: np.ndarray, eigen: Optional[bool] = None) -> np.ndarray:
        """F(X) [B, C, m]: the Jacobians (parameter methods, or ``eigen=False``) or Ψ̃ (eigen methods) of one batch."""
        if self.method in _EIGEN_METHODS if eigen is None else eigen:
            return self._eigen_features(X)
        if self._layerwise is not None:
            return self._layerwise.jacobian(X)
        return self._jacobian(tf.constant(X)).numpy()

    def _progress_batches(self, N: int, what: str):
        """The batches' row slices, logging progress about every tenth batch."""
        batches = self._batches(N)
        start, report = time.perf_counter(), max(1, len(batches) // 10)
        for index, rows in enumerate(batches):
            yield rows
            if len(batches) > 1 and ((index + 1) % report == 0 or index + 1 == len(batches)):
                self._log(f"{what}: batch {index + 1}/{len(batches)} ({time.perf_counter() - start:.1f} s)")

    def _feature_batches(self, X: np.ndarray, what: str, eigen: Optional[bool] = None):
        for rows in self._progress_batches(X.shape[0], what):
            yield rows, self._features(X[rows], eigen)

    def _parameter_vector(self) -> np.ndarray:
        return np.concatenate([np.asarray(v.numpy(), dtype=np.float64).reshape(-1) for v in self.variables])

    # -- fitting -----------------------------------------------------------------------------------

    def _ntk_source(self, X: np.ndarray):
        """The NTK on the N C training pairs (rows in the order of :func:`pair_inputs`) as NeuralEF's kernel
        source: cached Jacobians (Gram or features) when they fit the budget, else recomputed per batch."""
        C = self.num_outputs
        rows = X.shape[0] * C
        if self.ntk_samples is None and rows * self.num_parameters * 8 <= self.jacobian_cache_bytes:
            start = time.perf_counter()
            J = np.concatenate([F.reshape(-1, F.shape[2]) for _, F in self._feature_batches(X, "training Jacobians", eigen=False)], axis=0)
            if rows <= self.num_parameters:  # the Gram matrix is the smaller, and a batch product the cheaper
                gram = J @ J.T
                source, self.ntk_source = PrecomputedGram(0.5 * (gram + gram.T)), "gram"
            else:
                source, self.ntk_source = PrecomputedFeatures(J), "features"
            self._log(f"NTK of {rows} training pairs from cached Jacobians [{rows}, {self.num_parameters}] as {self.ntk_source} ({time.perf_counter() - start:.1f} s)")
            return source
        network = self.model if C == 1 else _OutputSelector(self.model, self.input_dim, C)
        if self.ntk_samples is None:
            self.ntk_source = "jacobians"
            if self._layerwise is not None:  # the pairs' Jacobians layer by layer (module docstring)
                D, layerwise = self.input_dim, self._layerwise
                weights = lambda A: A[:, D:] if C > 1 else tf.ones_like(A[:, :1])  # noqa: E731
                pairs = lambda A: layerwise.combination_jacobian(A[:, :D], weights(A))  # noqa: E731
                # a step's Gram of B pairs layer by layer, B² (D_in + D_out) per layer instead of forming [B, P] rows
                return FeatureKernel(pairs, 1, batch_gram=lambda A: layerwise.combination_gram(A[:, :D], weights(A)))
            return jacobian_kernel(network)
        self.ntk_source = "rademacher"
        return ntk_kernel(network, self.ntk_samples, seed=self.seed)

    def _fit_neuralef(self, X: np.ndarray, checkpoint_dir: Optional[str]) -> None:
        source = self._ntk_source(X)
        inputs = pair_inputs(X, self.num_outputs)
        options = {"seed": self.seed, **self.neuralef_options}
        self.eigenfunctions = NeuralEF(self.num_eigenpairs, input_dim=inputs.shape[1], **options)
        self._log(f"NeuralEF: top-{self.num_eigenpairs} eigenfunctions of the NTK on {inputs.shape[0]} inputs ({self.ntk_source}), {self.neuralef_steps} steps")
        # the Rayleigh–Ritz step in blocks of batch_size · C pairs, the size of a GGN batch's Jacobians [batch, C, P]
        # (NeuralEF's default 2,048 pairs held 16.7 GB in one Jacobian of the rotated-MNIST head and was killed)
        self.eigenfunctions.fit(inputs, num_steps=self.neuralef_steps, kernel=source, print_every=self.neuralef_steps // 10 if self.verbose else 0,
                                ritz_block_size=self.batch_size * self.num_outputs, checkpoint_dir=checkpoint_dir)

    def fit(self, X, Y, validation_data: Optional[Tuple] = None, checkpoint_dir: Optional[str] = None) -> "LinearisedLaplace":
        """Accumulate the GGN Σ_i F_iᵀ Λ_i F_i over the training data (after learning the NTK
        eigenfunctions, for ``neuralef``), eigendecompose it, and set the prior precision.

        :param validation_data: (X_val, Y_val), required by (and only by) ``prior_precision="validation"``.
        :param checkpoint_dir: ``neuralef`` only: NeuralEF's training (its longest part: minutes to hours on a
            CNN's head) is checkpointed there and resumes from it when the fit is started again
            (:meth:`NeuralEF.fit`'s ``checkpoint_dir``).
        Raises ValueError for badly shaped or non-finite X/Y, labels the likelihood does not model, or a
        model output that is not finite.
        """
        X = check_matrix(X, "X")
        if (validation_data is not None) != (isinstance(self.prior_precision_setting, str) and self.prior_precision_setting == "validation"):
            raise ValueError("validation_data=(X_val, Y_val) is required by, and only used by, prior_precision='validation'")
        self.input_dim = X.shape[1]
        F_map = self._outputs(X)
        if not np.all(np.isfinite(F_map)):
            raise ValueError("the model's outputs on X contain NaN or inf")
        self.num_outputs = F_map.shape[1]
        Y = self._check_Y(Y, X.shape[0])
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("validation_data must be a pair (X_val, Y_val)")
            X_val = self._check_X(validation_data[0], "X_val")
            Y_val = self._check_Y(validation_data[1], X_val.shape[0], "Y_val")
        if checkpoint_dir is not None and self.method != "neuralef":
            raise ValueError(f"checkpoint_dir checkpoints NeuralEF's training; method {self.method!r} has none")
        if self.method == "neuralef":
            self._fit_neuralef(X, checkpoint_dir)
        if self.likelihood == "gaussian":
            self._squared_error, self._num_targets = float(np.sum((Y - F_map) ** 2)), int(Y.size)
            if self.noise_variance_setting == "marginal_likelihood":  # σ₀², the maximum-likelihood noise at θ_MAP
                self.noise_variance = max(self._squared_error / self._num_targets, 1e-12 * max(float(np.var(Y)), 1e-300))
        Lambda = output_hessians(self.likelihood, F_map, self.noise_variance)
        self._log(f"GGN of method {self.method!r} over {X.shape[0]} points ({self.num_outputs} outputs)")
        ggn = None
        if self.method == "lowrank":
            batches = lambda: self._feature_batches(X, "GGN Jacobians", eigen=False)  # noqa: E731
            values, vectors = top_ggn_eigenpairs(batches, Lambda, self.num_parameters, self.num_eigenpairs, self.jacobian_cache_bytes, self._log, self.seed)
        elif self._woodbury:  # the eigenfunctions' subspace V, then V_kᵀ H V_k = Σ (J V)ᵀ Λ (J V)
            subspace, projected = self._eigenfunction_subspace(X), 0.0
            for rows, J in self._feature_batches(X, "GGN in the eigenfunction subspace", eigen=False):
                F = J @ subspace
                projected = projected + F.reshape(-1, F.shape[2]).T @ np.einsum("bcd,bdq->bcq", Lambda[rows], F).reshape(-1, F.shape[2])
            values, rotation = np.linalg.eigh(0.5 * (projected + projected.T))
            values, vectors = np.maximum(values[::-1], 0.0), subspace @ rotation[:, ::-1]
        elif self.method == "kron":
            self.kron = KroneckerFactors(self._kron_chain)
            for rows in self._progress_batches(X.shape[0], "Kronecker factors"):
                self.kron.accumulate(X[rows], Lambda[rows])
            ggn = self.kron.finalise().eigenvalues()
        elif self._layerwise_covariance and self.method == "diagonal":
            ggn = sum(self._layerwise.ggn_diagonal(X[rows], Lambda[rows]) for rows in self._progress_batches(X.shape[0], "GGN (layer-wise)"))
        for rows, F in self._feature_batches(X, "GGN") if ggn is None and not self._woodbury else ():
            # Λ_i F_i first, then one product: a three-operand np.einsum loops over b, c, d, p and q at once
            # (50 s per batch of 256 at m = 1,280, C = 10)
            weighted = np.einsum("bcd,bdq->bcq", Lambda[rows], F)
            if self.method == "diagonal":
                term = np.einsum("bcp,bcp->p", F, weighted)
            else:
                term = F.reshape(-1, F.shape[2]).T @ weighted.reshape(-1, F.shape[2])
            ggn = term if ggn is None else ggn + term
        if self._woodbury:
            self.ggn_eigenvalues, self.ggn_eigenvectors = values, vectors
        elif self.method in ("diagonal", "kron"):
            self.ggn_eigenvalues, self.ggn_eigenvectors = ggn, None
        else:
            values, vectors = np.linalg.eigh(0.5 * (ggn + ggn.T))
            self.ggn_eigenvalues, self.ggn_eigenvectors = np.maximum(values, 0.0), vectors
        self._log_likelihood = log_likelihood(self.likelihood, F_map, Y, self.noise_variance)
        self._theta_norm2 = float(np.sum(self._parameter_vector() ** 2))
        setting = self.prior_precision_setting
        search = setting if isinstance(setting, str) else None
        if self.noise_variance_setting == "marginal_likelihood":
            self.prior_precision = self._maximise_evidence_with_noise(None if search == "marginal_likelihood" else setting)
        elif search == "marginal_likelihood":
            self.prior_precision = self._maximise_evidence()
        elif search == "validation":
            self.prior_precision = self._select_by_validation(X_val, Y_val)
        else:
            self.prior_precision = setting
        self.log_evidence = self.log_marginal_likelihood()
        return self

    def log_marginal_likelihood(self, prior_precision: Optional[float] = None, noise_variance: Optional[float] = None) -> float:
        """The Laplace evidence at δ (default: the fitted one) and, for the Gaussian likelihood, σ² (default: the fitted
        one; the GGN rescaled by σ_fit²/σ²), see the module docstring."""
        if noise_variance is not None:
            return self._evidence_and_gradient(np.log(_positive(self.prior_precision if prior_precision is None else prior_precision, "prior_precision")),
                                               np.log(self._checked_noise(noise_variance)))[0]
        if self.input_dim is None:
            raise ValueError("the LinearisedLaplace approximation is not fitted yet (call fit first)")
        if self.prior_structure == "layerwise":
            return self._layerwise_evidence_and_gradient(np.log(self._checked_layer_precisions(self.prior_precision if prior_precision is None else prior_precision)))[0]
        delta = _positive(self.prior_precision if prior_precision is None else prior_precision, "prior_precision")
        return float(self._log_likelihood + self._prior_terms(delta, self.ggn_eigenvalues)[0])

    def _prior_terms(self, delta: float, e: np.ndarray) -> Tuple[float, float]:
        """The δ-dependent part of the Laplace evidence (module docstring) for GGN eigenvalues e, and its derivative in
        log δ: −δ‖θ‖²/2 + (m/2) log δ − ½ (Σ_j log(e_j + δ) + (m − k) log δ), the P − k left-out eigenvalues of the
        low-rank methods counted as 0 (m = P there, m = k otherwise)."""
        kept = e.shape[0]
        m = self.num_parameters if self.method in _LOW_RANK else kept
        value = -0.5 * delta * self._theta_norm2 + 0.5 * m * np.log(delta) - 0.5 * (np.sum(np.log(e + delta)) + (m - kept) * np.log(delta))
        return float(value), float(-0.5 * delta * self._theta_norm2 + 0.5 * kept - 0.5 * np.sum(delta / (e + delta)))

    def optimize_prior_precision(self, method: str = "marglik", val_data: Optional[Tuple] = None, grid: Optional[Sequence[float]] = None) -> float:
        """Choose δ again after ``fit`` (laplace-torch's name and methods), set it and return it:

        * ``"marglik"``: maximise the Laplace evidence of the module docstring over log δ (every method), as ``prior_precision="marginal_likelihood"`` does;
        * ``"gridsearch"``: the δ of ``grid`` (default ``prior_precision_grid``) with the smallest negative log
          predictive density on ``val_data=(X_val, Y_val)``, as ``prior_precision="validation"`` does.
        """
        if self.input_dim is None:
            raise ValueError("the LinearisedLaplace approximation is not fitted yet (call fit first)")
        if method == "marglik":
            if val_data is not None or grid is not None:
                raise ValueError("method='marglik' takes no val_data or grid")
            self.prior_precision = self._maximise_evidence()
        elif method == "gridsearch":
            if self.prior_structure == "layerwise":
                raise ValueError("prior_structure='layerwise' chooses its precisions by method='marglik', not 'gridsearch'")
            if not isinstance(val_data, (tuple, list)) or len(val_data) != 2:
                raise ValueError("method='gridsearch' needs val_data=(X_val, Y_val)")
            if grid is not None:
                grid = np.asarray(grid, dtype=np.float64)
                if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid) & (grid > 0)):
                    raise ValueError("grid must be a non-empty list of positive numbers")
                self.prior_precision_grid = grid
            X_val = self._check_X(val_data[0], "X_val")
            self.prior_precision = self._select_by_validation(X_val, self._check_Y(val_data[1], X_val.shape[0], "Y_val"))
        else:
            raise ValueError(f"unknown prior-precision method {method!r}; use 'marglik' or 'gridsearch'")
        self.log_evidence = self.log_marginal_likelihood()
        return self.prior_precision

    def _checked_noise(self, noise_variance) -> float:
        if self.likelihood != "gaussian":
            raise ValueError(f"noise_variance is a parameter of the gaussian likelihood, not of {self.likelihood!r}")
        if self.input_dim is None:
            raise ValueError("the LinearisedLaplace approximation is not fitted yet (call fit first)")
        return _positive(noise_variance, "noise_variance")

    def _evidence_and_gradient(self, log_delta: float, log_noise: float) -> Tuple[float, np.ndarray]:
        """The Laplace evidence at δ = exp(log_delta), σ² = exp(log_noise) and its gradient in (log δ, log σ²).

        With c = σ_fit²/σ² the GGN's eigenvalues are c e_j, and
        ∂/∂log δ = −δ‖θ‖²/2 + m/2 − ½ Σ δ/(c e_j + δ) − (m − k)/2,  ∂/∂log σ² = SSE/(2σ²) − n/2 + ½ Σ c e_j/(c e_j + δ)."""
        delta, noise = np.exp(log_delta), np.exp(log_noise)
        e = self.ggn_eigenvalues * (self.noise_variance / noise)
        n, sse = self._num_targets, self._squared_error
        prior, prior_gradient = self._prior_terms(delta, e)
        value = -0.5 * sse / noise - 0.5 * n * np.log(2 * np.pi * noise) + prior
        return float(value), np.array([prior_gradient, 0.5 * sse / noise - 0.5 * n + 0.5 * np.sum(e / (e + delta))])

    def _set_noise_variance(self, noise: float) -> None:
        """Move the fitted approximation to noise σ²: the GGN (eigenvalues, or the Kronecker factors G) scales by σ_fit²/σ²."""
        scale = self.noise_variance / noise
        self.ggn_eigenvalues = self.ggn_eigenvalues * scale
        if self.kron is not None:
            self.kron.scale_output_factors(scale)
        self.noise_variance = float(noise)
        self._log_likelihood = float(-0.5 * self._squared_error / noise - 0.5 * self._num_targets * np.log(2 * np.pi * noise))

    def _maximise_evidence_with_noise(self, fixed_delta: Optional[float]) -> float:
        """Set σ² (and δ, unless ``fixed_delta``) to the maximiser of the Laplace evidence (module docstring); returns δ."""
        start_noise = np.log(self.noise_variance)
        if fixed_delta is None:
            start_delta = np.log(self._maximise_evidence())
            objective = lambda z: tuple(-part for part in self._evidence_and_gradient(z[0], z[1]))  # noqa: E731
            bounds = [(np.log(1e-8), np.log(1e8)), (start_noise - 30.0, start_noise + 30.0)]
            result = minimize(objective, np.array([start_delta, start_noise]), jac=True, method="L-BFGS-B", bounds=bounds,
                              options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000})
            log_delta, log_noise = result.x
        else:
            log_delta = np.log(fixed_delta)
            objective = lambda z: tuple(-part if i == 0 else -part[1:] for i, part in enumerate(self._evidence_and_gradient(log_delta, z[0])))  # noqa: E731
            result = minimize(objective, np.array([start_noise]), jac=True, method="L-BFGS-B", bounds=[(start_noise - 30.0, start_noise + 30.0)],
                              options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000})
            (log_noise,) = result.x
        self._set_noise_variance(float(np.exp(log_noise)))
        self._log(f"noise and prior precision by marginal likelihood: σ² = {self.noise_variance:.6g}, δ = {np.exp(log_delta):.6g}")
        return float(np.exp(log_delta))

    def _per_parameter(self, delta):
        """δ as one value per parameter (layerwise), or the scalar itself."""
        if self.prior_structure != "layerwise":
            return delta
        return np.repeat(self._checked_layer_precisions(delta), self._prior_groups())

    def _prior_groups(self) -> List[int]:
        """The sizes of the parameter groups that share a prior precision under ``prior_structure="layerwise"``, in
        parameter order: each variable (exact, diagonal, lowrank) or each layer's kernel and bias (kron)."""
        if self.method == "kron":
            return self.kron.layer_sizes()
        return [int(np.prod(v.shape)) for v in self.variables]

    def _checked_layer_precisions(self, values) -> np.ndarray:
        values = np.atleast_1d(np.asarray(values, dtype=np.float64))
        groups = self._prior_groups()
        if values.size == 1:
            values = np.full(len(groups), values[0])
        if values.shape != (len(groups),) or not np.all(np.isfinite(values) & (values > 0)):
            raise ValueError(f"prior_structure='layerwise' needs {len(groups)} positive prior precisions (one per "
                             f"{'layer' if self.method == 'kron' else 'variable'}), got {values.tolist()}")
        return values

    def _layerwise_evidence_and_gradient(self, log_deltas: np.ndarray) -> Tuple[float, np.ndarray]:
        """The Laplace evidence with one δ_l per group (module docstring, δ‖θ‖² and m log δ summed per group) and
        its gradient in log δ_l: −δ_l‖θ_l‖²/2 + m_l/2 − (δ_l/2) Σ_(p in l) [(H + D)⁻¹]_pp, with log det(H + D) and the
        traces from the GGN's eigenvalues (diagonal, kron: Σ log(e + δ), Σ 1/(e + δ)) or, for exact and lowrank,
        its eigenpairs (:class:`~activated_dgp.eigen.grouped_prior.GroupedPrior`)."""
        deltas = np.exp(np.asarray(log_deltas, dtype=np.float64))
        sizes = self._prior_groups()
        theta2 = np.add.reduceat(self._parameter_vector() ** 2, np.cumsum([0] + sizes[:-1]))
        if self.method in ("exact", "lowrank"):
            logdet, traces = self._grouped_prior().logdet_and_traces(deltas)
        else:
            per_parameter = np.repeat(deltas, sizes)
            e = self.ggn_eigenvalues  # diagonal: per parameter; kron: the products a_i g_j, layer by layer
            logdet = np.sum(np.log(e + per_parameter))
            traces = np.add.reduceat(1.0 / (e + per_parameter), np.cumsum([0] + sizes[:-1]))
        value = self._log_likelihood - 0.5 * np.sum(deltas * theta2) + 0.5 * np.sum(np.asarray(sizes) * np.log(deltas)) - 0.5 * logdet
        return float(value), -0.5 * deltas * theta2 + 0.5 * np.asarray(sizes) - 0.5 * deltas * traces

    def _grouped_prior(self) -> GroupedPrior:
        """The GGN's eigenpairs as a :class:`~activated_dgp.eigen.grouped_prior.GroupedPrior` over the variables (exact,
        lowrank), built once per fit."""
        cached = getattr(self, "_grouped_cache", (None, None))
        if cached[0] is not self.ggn_eigenvalues:
            cached = (self.ggn_eigenvalues, GroupedPrior.of_eigenpairs(self.ggn_eigenvalues, self.ggn_eigenvectors, self._prior_groups()))
            self._grouped_cache = cached
        return cached[1]

    def _maximise_layerwise_evidence(self) -> np.ndarray:
        start = np.full(len(self._prior_groups()), np.log(self._maximise_evidence_scalar()))
        objective = lambda z: tuple(-part for part in self._layerwise_evidence_and_gradient(z))  # noqa: E731
        result = minimize(objective, start, jac=True, method="L-BFGS-B", bounds=[(np.log(1e-8), np.log(1e8))] * start.size,
                          options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 2000})
        deltas = np.exp(result.x)
        self._log(f"prior precisions by marginal likelihood, one per group: {np.array2string(deltas, precision=4)}")
        return deltas

    def _maximise_evidence(self):
        """The δ (or, layerwise, the δ_l) maximising the Laplace evidence."""
        return self._maximise_layerwise_evidence() if self.prior_structure == "layerwise" else self._maximise_evidence_scalar()

    def _maximise_evidence_scalar(self) -> float:
        # one δ for every group: the scalar evidence (equal to the layer-wise one at equal δ_l)
        evidence = lambda delta: float(self._log_likelihood + self._prior_terms(delta, self.ggn_eigenvalues)[0])  # noqa: E731
        log_grid = np.linspace(np.log(1e-8), np.log(1e8), 161)
        values = np.array([evidence(np.exp(t)) for t in log_grid])
        best = int(np.argmax(values))
        low, high = log_grid[max(best - 1, 0)], log_grid[min(best + 1, len(log_grid) - 1)]
        result = minimize_scalar(lambda t: -evidence(np.exp(t)), bounds=(low, high), method="bounded", options={"xatol": 1e-10})
        delta = float(np.exp(result.x)) if -result.fun >= values[best] else float(np.exp(log_grid[best]))
        if best in (0, len(log_grid) - 1):
            self._log(f"the evidence is largest at the edge of δ ∈ [1e-8, 1e8] (δ = {delta:.3g})")
        self._log(f"prior precision by marginal likelihood: δ = {delta:.6g} (log evidence {evidence(delta):.6g})")
        return delta

    def _edge_message(self, best: int, delta: float) -> str:
        """What a validation optimum at an edge of the grid means. Flat there (the NLL of the edge and of its neighbour
        equal to 1e-6 relative): the predictive no longer changes with δ, as at δ → 0 once δ is negligible against the
        GGN's (or eq. 22's k eigenvalues') spectrum, so a wider grid would not change it. Otherwise it would."""
        nll = self.validation_nll
        neighbour = 1 if best == 0 else len(nll) - 2
        if abs(nll[neighbour] - nll[best]) <= 1e-6 * max(1.0, abs(nll[best])):
            return (f"the validation NLL is smallest at an edge of prior_precision_grid (δ = {delta:.3g}) but flat there: "
                    "the predictive no longer changes with δ, and a wider grid would not change it")
        return f"the validation NLL is smallest at an edge of prior_precision_grid (δ = {delta:.3g}) and still falling there; widen the grid"

    def _select_by_validation(self, X_val: np.ndarray, Y_val: np.ndarray) -> float:
        mean = self._outputs(X_val)
        diagonal_layerwise = self.method == "kron" or (self._layerwise_covariance and self.ggn_eigenvectors is None)
        if not diagonal_layerwise:  # the δ-independent part, once: F, or J V for the eigenvector methods
            projected = np.concatenate([self._projected(X_val[rows]) for rows in self._progress_batches(X_val.shape[0], "validation features")])
        nll = []
        for delta in self.prior_precision_grid:
            covariance = self._latent_covariance(X_val, delta) if diagonal_layerwise else self._covariance(projected, delta)
            nll.append(-np.mean(self._log_density(mean, covariance, Y_val)))
        self.validation_nll = np.array(nll)
        best = int(np.argmin(nll))
        delta = float(self.prior_precision_grid[best])
        if len(nll) > 1 and best in (0, len(nll) - 1):
            self._log(self._edge_message(best, delta))
        self._log(f"prior precision by validation NLL: δ = {delta:.6g} (NLL {min(nll):.6g})")
        return delta

    # -- prediction --------------------------------------------------------------------------------

    def _projected(self, X: np.ndarray) -> np.ndarray:
        """The δ-independent factor of one batch's covariance: F V [B, C, m] (eigenvector methods; layer-wise J V
        where it can), or F itself (diagonal)."""
        if self.ggn_eigenvectors is None:
            return self._features(X)
        if self._woodbury:  # [J V, J Jᵀ]: [B, C, k + C]
            F = self._features(X, eigen=False)
            return np.concatenate([F @ self.ggn_eigenvectors, F @ np.swapaxes(F, 1, 2)], axis=2)
        if self._layerwise_covariance:
            return self._layerwise.jacobian_times(X, self.ggn_eigenvectors)
        return self._features(X) @ self.ggn_eigenvectors

    def _covariance(self, projected: np.ndarray, delta: float) -> np.ndarray:
        """F Σ Fᵀ [B, C, C] for Σ = (H + δ I)⁻¹, from :meth:`_projected`'s F V (or F, diagonal)."""
        if self.ggn_eigenvectors is None:  # diagonal
            F = projected
            return (F / (self.ggn_eigenvalues + self._per_parameter(delta))[None, None, :]) @ np.swapaxes(F, 1, 2)  # batched BLAS, not a 3-operand einsum
        if self._woodbury:  # δ⁻¹ J Jᵀ − (J V) diag(e / (δ (e + δ))) (J V)ᵀ (module docstring)
            e = self.ggn_eigenvalues
            JV, JJ = projected[:, :, : e.size], projected[:, :, e.size :]
            return JJ / delta - (JV * (e / (delta * (e + delta)))[None, None, :]) @ np.swapaxes(JV, 1, 2)
        root = projected / np.sqrt(self.ggn_eigenvalues + delta)[None, None, :]
        return root @ np.swapaxes(root, 1, 2)

    @property
    def _woodbury(self) -> bool:
        """Whether the posterior is δ I plus a rank-k GGN in the parameter directions ``ggn_eigenvectors`` [P, k]
        (``lowrank``, and the eigen methods with ``covariance="subspace"``)."""
        return self.method == "lowrank" or (self.method in _EIGEN_METHODS and self.covariance == "subspace")

    def _eigenfunction_subspace(self, X: np.ndarray) -> np.ndarray:
        """V_k [P, k]: an orthonormal basis of the parameter directions w_j = Σ_i J_iᵀ ψ_j(x_i) / (N √μ_j) of the
        eigenfunctions' Nyström extension (module docstring), eigenvalues μ_j ≤ 0 left out."""
        mu = np.asarray(tf.convert_to_tensor(self.eigenfunctions.eigenvalues), dtype=np.float64).reshape(-1)
        W = 0.0
        for rows, J in self._feature_batches(X, "eigenfunction subspace", eigen=False):
            W = W + np.einsum("bcp,bck->pk", J, self._eigen_features(X[rows]))  # Σ J_iᵀ √μ ψ(x_i)
        keep = mu > 0
        W = W[:, keep] / (X.shape[0] * self.num_outputs * mu[keep])
        Q, R = np.linalg.qr(W)
        return Q[:, np.abs(np.diag(R)) > 1e-12 * max(np.abs(np.diag(R)).max(), 1e-300)]

    def _latent_covariance(self, X: np.ndarray, delta: float) -> np.ndarray:
        """J(X) Σ J(X)ᵀ [N, C, C] at prior precision δ, in batches (layer-wise where the network allows)."""
        if self.prior_structure == "layerwise" and self.method in ("exact", "lowrank"):
            deltas, grouped = self._checked_layer_precisions(delta), self._grouped_prior()
            return np.concatenate([grouped.covariance(self._features(X[rows], eigen=False), deltas) for rows in self._batches(X.shape[0])], axis=0)
        if self.method == "kron":
            delta = self._checked_layer_precisions(delta) if self.prior_structure == "layerwise" else delta
            return np.concatenate([self.kron.covariance(X[rows], delta) for rows in self._batches(X.shape[0])], axis=0)
        if self._layerwise_covariance and self.ggn_eigenvectors is None:
            variances = 1.0 / (self.ggn_eigenvalues + self._per_parameter(delta))
            return np.concatenate([self._layerwise.covariance(X[rows], variances) for rows in self._batches(X.shape[0])], axis=0)
        return np.concatenate([self._covariance(self._projected(X[rows]), delta) for rows in self._batches(X.shape[0])], axis=0)

    def _latent(self, X: np.ndarray):
        return self._outputs(X), self._latent_covariance(X, self.prior_precision)

    def _log_density(self, mean, covariance, Y) -> np.ndarray:
        return log_predictive_density(
            self.likelihood, mean, covariance, Y, self.noise_variance, self.predictive, self.num_samples, self.seed
        )

    def predict_f(self, X, full_output_cov: Optional[bool] = None):
        """Latent mean g(X, θ_MAP) [N, C] and covariance J(x) Σ J(x)ᵀ: [N, C, C] with ``full_output_cov``
        (the default for softmax), else the marginal variances [N, C]. float64 tensors."""
        mean, covariance = self._latent(self._check_X(X))
        full = self.likelihood == "softmax" if full_output_cov is None else bool(full_output_cov)
        variance = covariance if full else np.diagonal(covariance, axis1=1, axis2=2).copy()
        return tf.constant(mean), tf.constant(variance)

    def predict_y(self, X, full_output_cov: bool = False, pred_type: str = "glm", num_samples: int = 100, seed: Optional[int] = None):
        """The predictive of y: Gaussian, mean g(X) and variance J Σ Jᵀ + σ² ([N, C], or [N, C, C] with
        ``full_output_cov``); classification, class probabilities p [N, C] (p(y = 1) [N, 1] for Bernoulli,
        by the probit approximation or Monte Carlo, see the module docstring) and the variance p(1 − p)
        of each class indicator. float64 tensors.

        ``pred_type="nn"`` (laplace-torch's name) is the predictive of ``num_samples`` weight samples θ ~ N(θ_MAP, Σ)
        run through the network instead (:mod:`.laplace_sampling`; seeded by ``seed``, default the approximation's);
        marginal variances only."""
        if pred_type not in ("glm", "nn"):
            raise ValueError(f"unknown pred_type {pred_type!r}; use 'glm' (the linearised predictive) or 'nn' (weight samples)")
        if pred_type == "nn":
            if full_output_cov:
                raise ValueError("pred_type='nn' gives marginal variances only; use full_output_cov=False")
            mean, variance = weight_sample_predictive(self, self._check_X(X), check_positive_int(num_samples, "num_samples"),
                                                      self.seed if seed is None else int(seed))
            return tf.constant(mean), tf.constant(variance)
        mean, covariance = self._latent(self._check_X(X))
        if self.likelihood == "gaussian":
            covariance = covariance + self.noise_variance * np.eye(self.num_outputs)[None]
            variance = covariance if full_output_cov else np.diagonal(covariance, axis1=1, axis2=2).copy()
            return tf.constant(mean), tf.constant(variance)
        p = predictive_probabilities(self.likelihood, mean, covariance, self.predictive, self.num_samples, self.seed)
        return tf.constant(p), tf.constant(p * (1.0 - p))

    def predict_log_density(self, X, Y) -> tf.Tensor:
        """log p(y_i | x_i, D) [N] under ``predict_y``'s predictive (Gaussian outputs independent)."""
        X = self._check_X(X)
        Y = self._check_Y(Y, X.shape[0])
        mean, covariance = self._latent(X)
        return tf.constant(self._log_density(mean, covariance, Y))

    # -- persistence -------------------------------------------------------------------------------

    def save(self, directory):
        """Save the fitted approximation to ``directory`` with :func:`activated_dgp.save`: its settings, δ, σ² and
        the fitted scalars, the GGN's eigendecomposition (or diagonal, or Kronecker factors), the network (as a
        tf-keras model Keras rebuilds from its JSON) and, for ``neuralef``, the NeuralEF eigenfunctions (for
        ``eigenfunctions``, the given ones, which must be a saved kind: Nystrom, IKA, NeuralEF). Raises ValueError,
        naming the part, for anything that would not load back exactly. Returns the directory."""
        return saving.save(self, directory)

    @classmethod
    def load(cls, directory, model=None, eigenfunctions=None, verbose: int = 0) -> "LinearisedLaplace":
        """The approximation saved in ``directory`` (:meth:`save`, or :func:`activated_dgp.save`), with its network:
        it predicts as the saved one did. With ``model``, a ValueError unless its weights equal the saved
        network's (θ_MAP).

        Directories written by activated_dgp 0.1 (``laplace.json``, no network) load with a DeprecationWarning;
        they need ``model`` (and ``eigenfunctions`` for method ``eigenfunctions``): save them again."""
        if verbose not in (0, 1, True, False):
            raise ValueError(f"verbose must be 0 or 1, got {verbose!r}")
        if not saving.is_saved_directory(directory) and os.path.isfile(os.path.join(directory, _LEGACY_CONFIG)):
            warnings.warn(
                f"{directory} was saved by activated_dgp 0.1 ({_LEGACY_CONFIG}); reading that format is deprecated and "
                "goes in the next release: save it again with LinearisedLaplace.save (activated_dgp.save)",
                DeprecationWarning,
                stacklevel=2,
            )
            return _load_legacy(directory, model, eigenfunctions, int(verbose))
        if eigenfunctions is not None:
            raise ValueError("eigenfunctions= is for directories saved by activated_dgp 0.1; this one holds its eigenfunctions")
        laplace = saving.load(directory, kind="linearised_laplace")
        if model is not None:
            _check_same_weights(model, laplace.model)
        laplace.verbose = int(verbose)
        return laplace

    def _restore_fit(self, config: dict, arrays: dict) -> None:
        """Set the fitted state saved by :func:`_describe_laplace` (or the 0.1 writer), after checking that the
        network's parameters are those it was fitted at."""
        fingerprint = float(np.sum(self._parameter_vector() ** 2))
        if self.num_parameters != config["num_parameters"] or not np.isclose(fingerprint, config["parameter_fingerprint"], rtol=1e-10, atol=0.0):
            raise ValueError("the model's parameters are not those the saved approximation was fitted at (θ_MAP differs)")
        self.input_dim, self.num_outputs = config["input_dim"], config["num_outputs"]
        self.prior_precision, self.log_evidence = config["prior_precision"], config["log_evidence"]
        self._log_likelihood, self._theta_norm2 = config["log_likelihood_at_map"], config["parameter_norm2"]
        self.ntk_source = config.get("ntk_source")
        self.noise_variance_setting = config.get("noise_variance_setting", self.noise_variance)
        if config.get("squared_error") is not None:
            self._squared_error, self._num_targets = config["squared_error"], config["num_targets"]
        self.ggn_eigenvalues = arrays["ggn_eigenvalues"]
        self.ggn_eigenvectors = arrays["ggn_eigenvectors"] if "ggn_eigenvectors" in arrays else None
        if self.method == "kron":
            self.kron = KroneckerFactors.from_arrays(self._kron_chain, arrays)
        if "validation_nll" in arrays:
            self.validation_nll = arrays["validation_nll"]
        if "prior_precision_grid" in arrays:
            self.prior_precision_grid = arrays["prior_precision_grid"]


# ---------------------------------------------------------------- saving (activated_dgp.save / load)


def _as_json(value):
    """A prior precision as JSON: a number, a name, or a list (one per layer)."""
    return np.asarray(value).tolist() if isinstance(value, np.ndarray) else value


def _settings(laplace: LinearisedLaplace) -> dict:
    return dict(
        {name: getattr(laplace, name) for name in _SETTINGS},
        prior_precision=_as_json(laplace.prior_precision),
        prior_precision_setting=_as_json(laplace.prior_precision_setting),
        jacobian_cache_bytes=laplace.jacobian_cache_bytes,
        input_dim=laplace.input_dim,
        num_outputs=laplace.num_outputs,
        num_parameters=laplace.num_parameters,
        parameter_fingerprint=float(np.sum(laplace._parameter_vector() ** 2)),
        log_evidence=laplace.log_evidence,
        log_likelihood_at_map=laplace._log_likelihood,
        parameter_norm2=getattr(laplace, "_theta_norm2", None),
        variable_indices=laplace.variable_indices,
        ntk_source=laplace.ntk_source,
        noise_variance_setting=laplace.noise_variance_setting,
        squared_error=getattr(laplace, "_squared_error", None),
        num_targets=getattr(laplace, "_num_targets", None),
    )


def _describe_laplace(laplace: LinearisedLaplace) -> saving.Description:
    if laplace.input_dim is None:
        raise ValueError("cannot save the LinearisedLaplace approximation: it is not fitted yet (call fit first)")
    try:
        json.dumps(laplace.neuralef_options)
    except TypeError as error:
        raise ValueError(f"cannot save the LinearisedLaplace approximation: neuralef_options must be JSON-serialisable ({error})") from None
    arrays = {"ggn_eigenvalues": laplace.ggn_eigenvalues, "prior_precision_grid": laplace.prior_precision_grid}
    if laplace.ggn_eigenvectors is not None:
        arrays["ggn_eigenvectors"] = laplace.ggn_eigenvectors
    if laplace.kron is not None:
        arrays.update(laplace.kron.arrays())
    if laplace.validation_nll is not None:
        arrays["validation_nll"] = laplace.validation_nll
    children = {"network": laplace.model}
    if laplace.method in _EIGEN_METHODS:
        if not isinstance(laplace.eigenfunctions, EigenApproximation):
            raise ValueError(
                f"cannot save the LinearisedLaplace approximation: its eigenfunctions are a {type(laplace.eigenfunctions).__name__}, "
                "which could not be rebuilt; saved eigenfunctions are a Nystrom, IKA or NeuralEF approximation"
            )
        children["eigenfunctions"] = laplace.eigenfunctions
    return saving.Description(config=_settings(laplace), arrays=arrays, children=children)


def _rebuild_laplace(config: dict, arrays: dict, children: dict):
    network, indices = children["network"], config["variable_indices"]
    laplace = LinearisedLaplace(
        network,
        prior_precision=config["prior_precision_setting"],
        eigenfunctions=children["eigenfunctions"] if config["method"] == "eigenfunctions" else None,
        jacobian_cache_bytes=config["jacobian_cache_bytes"],
        verbose=0,
        variables=None if indices is None else [network.trainable_variables[i] for i in indices],
        **{name: config[name] for name in _SETTINGS if name in config},  # settings added later keep their defaults
    )
    laplace._restore_fit(config, arrays)
    if config["method"] == "neuralef":
        laplace.eigenfunctions = children["eigenfunctions"]
    return laplace, None


def _check_same_weights(model, network) -> None:
    """A ValueError unless ``model``'s weights equal the saved ``network``'s, in order (θ_MAP)."""
    if not isinstance(model, tf_keras.Model):
        raise ValueError(f"model must be a tf-keras Model, got {type(model).__name__}")
    ours, saved = model.weights, network.weights
    if len(ours) != len(saved):
        raise ValueError(
            f"the model's parameters are not those the saved approximation was fitted at (θ_MAP differs: {len(ours)} weights, saved {len(saved)})"
        )
    for a, b in zip(ours, saved):
        if tuple(a.shape) != tuple(b.shape) or not np.array_equal(a.numpy(), b.numpy()):
            raise ValueError(f"the model's parameters are not those the saved approximation was fitted at (θ_MAP differs in {a.name})")


def _load_legacy(directory, model, eigenfunctions, verbose: int) -> LinearisedLaplace:
    """An approximation saved by activated_dgp 0.1: ``laplace.json`` (settings, fitted scalars), ``laplace.npz``
    (the GGN's arrays) and for ``neuralef`` a NeuralEF ``tf.train.Checkpoint`` in ``neuralef/``; the network was
    saved apart, so ``model`` is needed."""
    if model is None:
        raise ValueError(f"{directory} was saved by activated_dgp 0.1 without the network: pass model= (the fitted network)")
    with open(os.path.join(directory, _LEGACY_CONFIG)) as handle:
        config = json.load(handle)
    indices = config.get("variable_indices")
    laplace = LinearisedLaplace(
        model,
        prior_precision=config["prior_precision_setting"],
        eigenfunctions=eigenfunctions,
        verbose=verbose,
        variables=None if indices is None else [model.trainable_variables[i] for i in indices],
        **{name: config[name] for name in _SETTINGS if name in config},  # settings added later keep their defaults
    )
    with np.load(os.path.join(directory, "laplace.npz")) as arrays:
        laplace._restore_fit(config, {name: arrays[name] for name in arrays.files})
    if laplace.method == "neuralef":
        inputs_width = laplace.input_dim + (laplace.num_outputs if laplace.num_outputs > 1 else 0)
        # 0.1 saved NeuralEF with its then default of no extra networks
        laplace.eigenfunctions = NeuralEF(laplace.num_eigenpairs, input_dim=inputs_width, **{"seed": laplace.seed, "oversampling": 0, **laplace.neuralef_options})
        tf.train.Checkpoint(model=laplace.eigenfunctions).read(os.path.join(directory, "neuralef", "ckpt")).expect_partial()
    return laplace


saving.register_saved_kind(
    saving.SavedKind(
        name="linearised_laplace", matches=lambda obj: isinstance(obj, LinearisedLaplace), describe=_describe_laplace, rebuild=_rebuild_laplace
    )
)
