"""The linearised Laplace approximation of a trained tf-keras network, :class:`LinearisedLaplace` (the methods,
equations and references are on :mod:`activated_dgp.eigen.laplace`): its settings and checks, ``fit``, and saving
and loading."""

from __future__ import annotations

import os
import warnings
from typing import Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from ... import saving
from ...validation import check_matrix, check_positive_int
from ..kfac import KroneckerFactors
from ..kfac_chain import KRON_FALLBACKS, KroneckerChain
from ..laplace_likelihoods import LIKELIHOOD_NAMES, PREDICTIVES, log_likelihood, output_hessians
from ..layerwise import layerwise_jacobian
from ..ntk import jacobian_function
from . import persistence
from .curvature import _Curvature
from .settings import (
    _EIGEN_METHODS, _LAYERWISE_PRIOR_METHODS, _LEGACY_CONFIG, COVARIANCES, JACOBIAN_CACHE_BYTES, METHODS, PRIOR_PRECISION_SEARCHES,
    PRIOR_STRUCTURES, _positive,
)
from .subnetwork import _last_dense_variables, _variable_indices

__all__ = ["LinearisedLaplace"]


class LinearisedLaplace(_Curvature):
    """The linearised Laplace approximation of a trained tf-keras model (see :mod:`activated_dgp.eigen.laplace`).

    :param model: a built tf-keras model, X [N, D] → latent outputs [N, C] (logits for classification).
    :param likelihood: ``"gaussian"`` (Y [N, C] reals), ``"bernoulli"`` (C = 1, logistic link, labels 0/1
        [N, 1]) or ``"softmax"`` (C ≥ 2 logits, labels 0..C−1 [N, 1]).
    :param noise_variance: σ² of the Gaussian likelihood (ignored otherwise), or ``"marginal_likelihood"`` (see
        :mod:`activated_dgp.eigen.laplace`).
    :param prior_precision: δ > 0, or ``"marginal_likelihood"`` or ``"validation"``.
    :param method: one of :data:`METHODS`.
    :param num_eigenpairs: k for ``neuralef``, and the rank k < P for ``lowrank``.
    :param eigenfunctions: the eigenpairs for ``eigenfunctions`` (see :mod:`activated_dgp.eigen.laplace`).
    :param ntk_samples: ``None`` (default): NeuralEF trains on the exact NTK, with the per-example Jacobians
        as features (P per point, B C backward passes per step); an integer S: the Rademacher estimate of
        eq. 20 with S forward-mode JVPs per step, for networks whose Jacobians do not fit (slow for large S:
        600 steps took 394 s with S = 1000 against 10 s exact on a P = 49 network).
    :param jacobian_cache_bytes: with the exact NTK, the training Jacobians (N C P float64 numbers) are
        computed once when they take at most this many bytes (default :data:`JACOBIAN_CACHE_BYTES`;
        0 always recomputes them per step); see :mod:`activated_dgp.eigen.laplace`.
    :param neuralef_steps, neuralef_options: ``NeuralEF.fit`` steps and ``NeuralEF`` keyword arguments
        (JSON-serialisable ones, if the fit is to be saved).
    :param predictive: the classification predictive, "probit" or "mc" (defaults: probit for Bernoulli,
        mc for softmax); ``num_samples`` and ``seed`` for "mc".
    :param batch_size: points per Jacobian evaluation (default 256): the training data, the test inputs and, for
        ``neuralef``, the Rayleigh–Ritz step (batch_size · C pairs) go through the network in batches of this size,
        whose Jacobians take batch_size · C · P · 8 bytes (per-example, :func:`~activated_dgp.eigen.jacobian_function`),
        so the memory of a fit or a prediction does not grow with N beyond arrays of N C or N C² numbers (outputs,
        output Hessians, covariances) and, for ``neuralef``, NeuralEF's pair inputs [N C, D + C] and outputs
        [N C, k + oversampling]; see "Memory" in :mod:`activated_dgp.eigen.laplace`.
    :param max_parameters: the largest P (or last-layer size) for which exact/last_layer form P × P.
    :param variables: for exact, diagonal, kron and lowrank, the trainable variables of the subnetwork the posterior covers
        (default: all of them); the others stay at θ_MAP.
    :param kron_fallback: for ``kron``: None (default), a layer without a Kronecker form (an ``ActivatedLayer``) is a
        ValueError; ``"diagonal"``, its GGN block's diagonal (:mod:`~activated_dgp.eigen.kfac`).
    :param prior_precision_grid: the δ values ``"validation"`` tries (default 10^−4 … 10^4, 33 values).
    :param verbose: 1 prints progress of long fits, 0 is silent.
    :param covariance: for ``neuralef`` and ``eigenfunctions``: ``"eq22"`` (default, eq. 22 as written) or
        ``"subspace"`` (the LLA with the GGN projected onto the parameter directions of the eigenfunctions' Nyström
        extension, see :mod:`activated_dgp.eigen.laplace`).
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
        # the layer-wise products (:mod:`activated_dgp.eigen.laplace`), None where the network is not such a chain: the parameter
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
        self._fit_curvature(X, Lambda)
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
            return persistence.load_legacy(cls, directory, model, eigenfunctions, int(verbose))
        if eigenfunctions is not None:
            raise ValueError("eigenfunctions= is for directories saved by activated_dgp 0.1; this one holds its eigenfunctions")
        laplace = saving.load(directory, kind="linearised_laplace")
        if model is not None:
            persistence.check_same_weights(model, laplace.model)
        laplace.verbose = int(verbose)
        return laplace


saving.register_saved_kind(
    saving.SavedKind(
        name="linearised_laplace", matches=lambda obj: isinstance(obj, LinearisedLaplace), describe=persistence.describe,
        rebuild=lambda config, arrays, children: persistence.rebuild(LinearisedLaplace, config, arrays, children),
    )
)
