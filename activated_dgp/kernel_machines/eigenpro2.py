"""EigenPro 2 (Ma & Belkin 2019; EigenPro 3 paper, Algorithm 3): K θ = b by preconditioned stochastic
Richardson iterations, for a Gram operator K [N, N] (the data's K(X, X), or the centers' K(Z, Z)).

Setup (``EigenPro2_setup``): a subsample S of s indices, the top q + 1 Nyström eigenpairs of K[S, S]
(ψ_i = K(·, S) C_i, μ_i; :func:`fit_nystrom`), β and (m, η) from λ = max(μ_(q+1), the preconditioned
operator's top eigenvalue on ≤ 1000 points, which must be positive semi-definite) (:func:`step_schedule`).
Iteration (``EigenPro2_iteration``) on a minibatch M of m indices, with g = K[M, :] θ − b_M [m, L]:

    θ_M ← θ_M − (η/m) g                                    (stochastic gradient step)
    θ_S ← θ_S + (η/m) C diag(μ_i − μ_(q+1)) ψ(M)ᵀ g         (gradient correction, eq. 34)

which is f ← f − (η/m) P{K(·, M) g} in the RKHS (Lemma 3). C diag(μ − μ_(q+1)) Cᵀ K[S, M] equals the
paper's E D Eᵀ K(X_s, X_m) up to its 1/s, which here sits in μ = λ/s. Only K[M, :] (in column blocks)
and K[M, S] are formed per step.

Fixed schedules (``solve`` / ``solve_adjoint``). EigenPro 3 projects with the same minibatch order at every
step (a fixed rng), so ψ(M_k) [m_k, q] of each minibatch is the same every time: the solver keeps the last
schedule's ψ blocks (E·N·q floats for E epochs, when they fit in ``schedule_cache_bytes``; otherwise they are
recomputed per step, as in ``epoch``) and reuses them whenever the same minibatches come again. The arithmetic is
that of the per-step iteration; only the K[M, S] C products are not repeated. With the Gram matrix held, a step is
then two NumPy BLAS products on a copy of K[M, :] (:class:`BasisGram`).
"""

from __future__ import annotations

from typing import Optional

import gpflow
import numpy as np
import tensorflow as tf

from .. import saving
from ..eigen import saved_kernels  # noqa: F401  (registers the kind "kernel", which a saved model holds)
from ..eigen.base import SavedState, require_float64
from ..validation import check_positive_int
from .blocks import DEFAULT_BLOCK, BasisGram, IndexedGramSource, KernelCenters, KernelGram, check_data, check_targets
from .preconditioner import Preconditioner, batch_step, fit_nystrom, step_schedule
from .training_loop import TrainedWeights, TrainingState, run_epochs

__all__ = ["EigenPro2Solver", "EigenPro2", "SCHEDULE_CACHE_BYTES"]

SCHEDULE_CACHE_BYTES = 1 << 28  # EigenPro2Solver's default: ψ blocks of one fixed schedule up to 256 MiB


class EigenPro2Solver:
    """Algorithm 3 on a Gram operator (see the module docstring).

    :param operator: a :class:`BasisGram` [N, N].
    :param subsample_size: s ≤ N (clipped to N).
    :param num_eigenpairs: the preconditioner level q < s.
    :param max_batch: the largest batch (the paper's bs_gpu).
    :param schedule_cache_bytes: memory for the ψ(M_k) blocks of the last ``solve``/``solve_adjoint`` schedule
        (8·E·N·q bytes for E epochs; module docstring); 0 recomputes them at every step.
    """

    def __init__(self, operator: BasisGram, subsample_size: int, num_eigenpairs: int, max_batch: int = 4096, seed: int = 0,
                 schedule_cache_bytes: int = SCHEDULE_CACHE_BYTES):
        self.operator = operator
        N = operator.size
        s = min(check_positive_int(subsample_size, "subsample_size"), N)
        q = int(num_eigenpairs)
        if q != num_eigenpairs or q < 0:
            raise ValueError(f"num_eigenpairs q must be a non-negative integer, got {num_eigenpairs!r}")
        if q >= s:
            raise ValueError(f"the preconditioner level q = {q} must be smaller than the Nyström subsample size s = {s}")
        rng = np.random.default_rng(seed)
        self.subsample = np.sort(rng.choice(N, size=s, replace=False))
        landmarks = self.subsample[:, None].astype(np.float64)
        self.preconditioner = Preconditioner(fit_nystrom(landmarks, IndexedGramSource(operator), q + 1), q)
        self._C = self.preconditioner.approximation.coefficients[:, :q].numpy()  # [s, q]
        self._weights = self.preconditioner.weights.numpy()[:, None]  # μ_i − μ_(q+1), [q, 1]
        self.schedule_cache_bytes = int(schedule_cache_bytes)
        self._schedule = None  # (the minibatches concatenated, [ψ(M_k)]) of the last fixed schedule
        Psi_S = self.preconditioner.eigenfunctions(landmarks)
        self.beta = self.preconditioner.beta(operator.diagonal(self.subsample).numpy(), Psi_S)
        self.top_eigenvalue = max(self.preconditioner.tail, self._check_top(rng))
        self.batch_size, self.step_size = step_schedule(self.beta, self.top_eigenvalue, min(check_positive_int(max_batch, "max_batch"), N))

    def _check_top(self, rng, size: int = 1000) -> float:
        """The top eigenvalue of the preconditioned Gram (G_RR − Ψ_R D Ψ_Rᵀ)/r on r ≤ 1000 points R
        (:meth:`Preconditioner.check_on_sample`, which raises ValueError when it is indefinite), and β
        raised to that Gram's largest diagonal on R. μ_(q+1) of the s-point Nyström block
        underestimates the top eigenvalue when s/q is small (the paper asks s/q > 10), and β from the
        landmarks alone underestimates k_P(x, x) elsewhere: SE kernel, n = 300, s = 150, q = 30 gave
        β = 2.3e-5 on the landmarks but 2.4e-2 off them, and the loss went to 1e109."""
        R = np.sort(rng.choice(self.operator.size, size=min(size, self.operator.size), replace=False))
        Psi = self.preconditioner.eigenfunctions(R[:, None].astype(np.float64)).numpy()
        top, largest_diagonal = self.preconditioner.check_on_sample(self.operator.block(R, R).numpy(), Psi)
        self.beta = max(self.beta, largest_diagonal)
        return top

    def _eigenfunctions(self, rows: np.ndarray) -> np.ndarray:
        """ψ(M) [m, q] for the operator's indices ``rows``."""
        return self.preconditioner.eigenfunctions(rows[:, None].astype(np.float64)).numpy()

    def _rate(self, m: int) -> float:
        """η(m)/m, also for a ragged last batch."""
        return batch_step(self.beta, self.top_eigenvalue, m) / m

    def step(self, theta: np.ndarray, rows: np.ndarray, b_rows: np.ndarray, Psi: Optional[np.ndarray] = None) -> float:
        """One iteration on the minibatch ``rows`` (in place on θ [N, L]); returns mean ‖g‖² before it.
        ``Psi``: ψ(rows) [m, q] when already known (computed otherwise)."""
        g = self.operator.matmul(rows, theta).numpy() - b_rows
        rate = self._rate(len(rows))
        theta[rows] -= rate * g
        if self.preconditioner.q:
            Psi = self._eigenfunctions(rows) if Psi is None else Psi
            theta[self.subsample] += rate * (self._C @ (self._weights * (Psi.T @ g)))
        return float(np.mean(np.sum(g**2, axis=1)))

    def _minibatches(self, rng: np.random.Generator):
        """One epoch's minibatches: a permutation of all N indices drawn from ``rng``, cut into sorted
        index arrays of m (the last one ragged)."""
        order = rng.permutation(self.operator.size)
        return [np.sort(order[i : i + self.batch_size]) for i in range(0, len(order), self.batch_size)]

    def _fixed_schedule(self, epochs: int, rng: np.random.Generator) -> list:
        """[(M_k, ψ(M_k) or None)] for ``epochs`` epochs of minibatches drawn from ``rng``: ψ from the held schedule
        when these are its minibatches, else computed and held (when they fit in ``schedule_cache_bytes``), else
        None (each step computes its own)."""
        batches = [rows for _ in range(int(epochs)) for rows in self._minibatches(rng)]
        if not self.preconditioner.q:
            return [(rows, None) for rows in batches]
        order = np.concatenate(batches)  # the batch sizes are fixed, so equal orders are equal schedules
        if self._schedule is not None and np.array_equal(self._schedule[0], order):
            return list(zip(batches, self._schedule[1]))
        if 8 * order.size * self.preconditioner.q > self.schedule_cache_bytes:
            return [(rows, None) for rows in batches]
        self._schedule = None  # release the old blocks before computing the new ones
        self._schedule = (order, [self._eigenfunctions(rows) for rows in batches])
        return list(zip(batches, self._schedule[1]))

    def epoch(self, theta: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> float:
        """One pass over all N indices in minibatches of m; returns the mean squared residual."""
        return float(np.mean([self.step(theta, rows, b[rows]) for rows in self._minibatches(rng)]))

    def solve(self, b, epochs: int = 1, rng: Optional[np.random.Generator] = None, theta=None) -> np.ndarray:
        """θ ≈ K⁻¹ b [N, L] after ``epochs`` passes (T = epochs · ⌈N/m⌉ iterations), from θ = 0 or ``theta``:
        the steps of ``epoch``, with ψ(M_k) held across calls with the same minibatches (module docstring)."""
        b = np.asarray(b, dtype=np.float64)
        theta = np.zeros_like(b) if theta is None else np.array(theta, dtype=np.float64)
        rng = np.random.default_rng(0) if rng is None else rng
        for rows, Psi in self._fixed_schedule(epochs, rng):
            self.step(theta, rows, b[rows], Psi)
        return theta

    def solve_adjoint(self, b, epochs: int = 1, rng: Optional[np.random.Generator] = None) -> np.ndarray:
        """Sᵀ b [N, L], where S is the linear map b ↦ ``solve(b, epochs, rng)`` from θ = 0 (``rng`` in the same state).

        Step k on minibatch M_k is θ ← A_k θ + R_k b with A_k = I − R_k K and
        R_k x = (η_k/m_k) (E_k x_(M_k) − E_S C D ψ(M_k)ᵀ x_(M_k)) (E_k, E_S: the columns of I at M_k, S), so
        S = Σ_k A_(T−1) ⋯ A_(k+1) R_k and Sᵀ b = Σ_k R_kᵀ v_(k+1), with v_T = b, v_k = (I − K R_kᵀ) v_(k+1) and
        R_kᵀ v = (η_k/m_k) E_k (v_(M_k) − ψ(M_k) D Cᵀ v_S): the same minibatches in reverse order, each costing
        one K[M_k, :] block as in ``solve``. S is not symmetric (SGD steps in one order, the correction on S only),
        although K⁻¹ is; EigenPro 3's consistent update needs S P Sᵀ, not S P S (eigenpro3.py)."""
        b = np.asarray(b, dtype=np.float64)
        rng = np.random.default_rng(0) if rng is None else rng
        v, out = b.copy(), np.zeros_like(b)
        for rows, Psi in reversed(self._fixed_schedule(epochs, rng)):
            r = v[rows]
            if self.preconditioner.q:
                Psi = self._eigenfunctions(rows) if Psi is None else Psi
                r = r - Psi @ (self._weights * (self._C.T @ v[self.subsample]))
            r = self._rate(len(rows)) * r
            out[rows] += r
            v -= self.operator.matmul_transpose(rows, r).numpy()
        return out


class EigenPro2(TrainedWeights, tf.Module):
    """Kernel regression (interpolation) K(X, X) θ = y with EigenPro 2; f(x) = K(x, X) θ.

    :param kernel: any gpflow kernel.
    :param subsample_size: s, the Nyström subsample.
    :param num_eigenpairs: q < s, the preconditioner level.
    :param max_batch: upper bound on the batch size m (otherwise m = β/μ_(q+1)).
    :param block_size: points and centers per kernel block.

    ``activated_dgp.save(model, DIR)`` writes θ, the epoch history, the training inputs (f evaluates K(x, X)), the
    kernel (:mod:`activated_dgp.eigen.saved_kernels`) and the settings; ``activated_dgp.load(DIR)`` rebuilds a model
    that predicts as the saved one did, and that ``fit`` on the same data continues from its epoch.
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, subsample_size: int = 2000, num_eigenpairs: int = 100, max_batch: int = 4096, block_size: int = DEFAULT_BLOCK, seed: int = 0, name=None):
        super().__init__(name=name)
        require_float64("EigenPro2")
        if not isinstance(kernel, gpflow.kernels.Kernel):
            raise ValueError(f"the kernel must be a gpflow kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.subsample_size, self.num_eigenpairs = subsample_size, num_eigenpairs
        self.max_batch, self.block_size, self.seed = max_batch, block_size, int(seed)
        self.state = TrainingState()
        self.solver: Optional[EigenPro2Solver] = None
        self._X = None

    def fit(self, X, y, epochs: int = 10, *, checkpoint_dir=None, progress: bool = True, tolerance: Optional[float] = None, callback=None) -> "EigenPro2":
        """Run EigenPro 2 until ``epochs`` epochs in total (see :func:`run_epochs`); y [n] or [n, L]."""
        X = check_data(X)
        y = check_targets(y, X.shape[0])
        self._X = X
        self.solver = EigenPro2Solver(KernelGram(self.kernel, X, self.block_size), self.subsample_size, self.num_eigenpairs, self.max_batch, self.seed)
        self.state.ensure_weights(y.shape)

        def epoch_fn(rng):
            theta = self.state.weights.numpy()
            loss = self.solver.epoch(theta, y, rng)
            self.state.weights.assign(theta)
            return loss

        run_epochs(self.state, tf.train.Checkpoint(state=self.state), epoch_fn, epochs, self.seed, checkpoint_dir=checkpoint_dir, progress=progress, tolerance=tolerance, callback=callback, label="EigenPro2")
        return self

    def predict(self, X) -> np.ndarray:
        """f(X) = K(X, X_train) θ [N, L], in blocks."""
        if self._X is None:
            raise ValueError("the model is not fitted")
        return KernelCenters(self.kernel, self._X, self.block_size).apply(check_data(X), self.weights).numpy()


# ---------------------------------------------------------------- saving (activated_dgp.save / load)


def _describe_eigenpro2(model: EigenPro2) -> saving.Description:
    config = dict(
        subsample_size=model.subsample_size, num_eigenpairs=model.num_eigenpairs, max_batch=model.max_batch, block_size=model.block_size, seed=model.seed
    )
    arrays = {} if model._X is None else {"inputs": model._X}
    return saving.Description(config=config, trackable=SavedState(state=model.state), arrays=arrays, children={"kernel": model.kernel})


def _rebuild_eigenpro2(config: dict, arrays: dict, children: dict):
    model = EigenPro2(children["kernel"], **config)
    model._X = arrays.get("inputs")
    return model, SavedState(state=model.state)


saving.register_saved_kind(
    saving.SavedKind(name="eigenpro2", matches=lambda obj: isinstance(obj, EigenPro2), describe=_describe_eigenpro2, rebuild=_rebuild_eigenpro2)
)
