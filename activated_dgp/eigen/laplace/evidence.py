"""The prior precision δ and Gaussian noise σ² of the linearised Laplace approximation: by the Laplace evidence
(MacKay 1992; Immer et al. 2021, eq. 5; Daxberger et al. 2021)

    log p(D | δ) ≈ log p(D | θ_MAP) − (δ/2) ‖θ_MAP‖² + (m/2) log δ − ½ Σ_j log(e_j + δ),

over a scalar δ, one δ_l per group (``prior_structure="layerwise"``), or jointly with σ², or by the validation
negative log predictive density over a grid (see :mod:`activated_dgp.eigen.laplace` for each case)."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from .predictive import _Predictive
from .settings import _LOW_RANK, _positive


class _Evidence(_Predictive):
    """The evidence and the choice of δ (and σ²) of :class:`~activated_dgp.eigen.LinearisedLaplace`."""

    def log_marginal_likelihood(self, prior_precision: Optional[float] = None, noise_variance: Optional[float] = None) -> float:
        """The Laplace evidence at δ (default: the fitted one) and, for the Gaussian likelihood, σ² (default: the fitted
        one; the GGN rescaled by σ_fit²/σ²), see :mod:`activated_dgp.eigen.laplace`."""
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
        """The δ-dependent part of the Laplace evidence (:mod:`activated_dgp.eigen.laplace`) for GGN eigenvalues e, and its derivative in
        log δ: −δ‖θ‖²/2 + (m/2) log δ − ½ (Σ_j log(e_j + δ) + (m − k) log δ), the P − k left-out eigenvalues of the
        low-rank methods counted as 0 (m = P there, m = k otherwise)."""
        kept = e.shape[0]
        m = self.num_parameters if self.method in _LOW_RANK else kept
        value = -0.5 * delta * self._theta_norm2 + 0.5 * m * np.log(delta) - 0.5 * (np.sum(np.log(e + delta)) + (m - kept) * np.log(delta))
        return float(value), float(-0.5 * delta * self._theta_norm2 + 0.5 * kept - 0.5 * np.sum(delta / (e + delta)))

    def optimize_prior_precision(self, method: str = "marglik", val_data: Optional[Tuple] = None, grid: Optional[Sequence[float]] = None) -> float:
        """Choose δ again after ``fit`` (laplace-torch's name and methods), set it and return it:

        * ``"marglik"``: maximise the Laplace evidence of :mod:`activated_dgp.eigen.laplace` over log δ (every method), as ``prior_precision="marginal_likelihood"`` does;
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
        """Set σ² (and δ, unless ``fixed_delta``) to the maximiser of the Laplace evidence (:mod:`activated_dgp.eigen.laplace`); returns δ."""
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

    def _layerwise_evidence_and_gradient(self, log_deltas: np.ndarray) -> Tuple[float, np.ndarray]:
        """The Laplace evidence with one δ_l per group (:mod:`activated_dgp.eigen.laplace`, δ‖θ‖² and m log δ summed per group) and
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
