"""NeuralEF's training (Algorithm 1 of Deng et al., 2022): the step of eqs. 15–18 with the L2 batch normalisation of
eq. 16 and Adam, the loop of ``fit`` with its learning-rate schedule and progress, and its resumable checkpoints
(see :mod:`activated_dgp.eigen.neuralef`)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import tensorflow as tf

from ..base import as_float64_matrix
from ..kernel_sources import FeatureKernel, GPflowKernel, KernelSource, PrecomputedGram, is_indexed
from .minibatches import SCHEDULES, _minibatches
from .objective import _kernel_products, minibatch_rayleigh


class _Training:
    """The training half of :class:`~activated_dgp.eigen.neuralef.NeuralEF` (its state is created by the class)."""

    # -- training ------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Number of training steps taken so far (over all ``fit`` calls)."""
        return int(self._step.numpy())

    def _raw(self, X: tf.Tensor) -> tf.Tensor:
        """h(X) = [ψ̂(X, w_1), …, ψ̂(X, w_p)] before normalisation, [N, p] float64."""
        if self.stacked is not None:
            return self.stacked(X)
        return tf.concat([tf.reshape(tf.cast(network(X), tf.float64), [-1, 1]) for network in self.networks], axis=1)

    def _normalised(self, X) -> tf.Tensor:
        """h(X) / σ̄ [N, p] (EMA σ̄ of eq. 16): the networks' outputs, before the rotation."""
        return self._raw(tf.convert_to_tensor(X, dtype=tf.float64)) / self._sigma[None, :]

    def _make_step(self, X: tf.Tensor, source: KernelSource):
        p = self.num_networks
        estimator = self.estimator
        upper = tf.constant(np.triu(np.ones((p, p)), 1), dtype=tf.float64)  # strictly i < j
        variables = self._variables()
        decay = tf.constant(self.ema_decay, tf.float64)

        def step(rows, learning_rate):
            X_batch = tf.gather(X, rows)
            with tf.GradientTape() as tape:
                H = self._raw(X_batch)  # [B, p]
                sigma = tf.sqrt(tf.reduce_mean(H**2, axis=0))  # eq. 16, differentiable
                Psi = H / sigma
            Psi_fixed = tf.stop_gradient(Psi)
            KPsi, diagonal = _kernel_products(source, rows, X_batch, Psi_fixed)
            R, KPsi, scale = minibatch_rayleigh(Psi_fixed, KPsi, diagonal, estimator)  # eq. 15
            R_diag = tf.linalg.diag_part(R)
            # R̃_ii divides the penalties; floor it at E[κ(x, x)]/B, the size of the diagonal's share
            # in eq. 15, so that a network still near the null space cannot blow the ratios up
            if diagonal is None:
                floor = 1e-12 * tf.reduce_max(tf.abs(R_diag)) + 1e-300
            else:
                floor = tf.reduce_mean(diagonal) / tf.cast(tf.shape(rows)[0], tf.float64)
            ratio = upper * R / tf.maximum(R_diag, floor)[:, None]  # R_ij / R_ii for i < j
            utilities = R_diag - tf.reduce_sum(ratio * R, axis=0)  # u_j, the terms of eq. 17
            loss = -tf.reduce_sum(utilities)  # eq. 17
            output_gradients = -2.0 * scale * (KPsi - tf.matmul(KPsi, ratio))  # eq. 18, ∂ℓ/∂ψ̂_j
            gradients = tape.gradient(Psi, variables, output_gradients=output_gradients)
            self.optimizer.learning_rate.assign(tf.cast(learning_rate, self.optimizer.learning_rate.dtype))
            self.optimizer.apply_gradients(zip(gradients, variables))
            first = tf.equal(self._step, 0)
            self._sigma.assign(tf.where(first, sigma, decay * self._sigma + (1 - decay) * sigma))
            self._eigenvalue_ema.assign(tf.where(first, utilities, decay * self._eigenvalue_ema + (1 - decay) * utilities))
            self._rayleigh_ema.assign(tf.where(first, R_diag, decay * self._rayleigh_ema + (1 - decay) * R_diag))
            self._step.assign_add(1)
            return loss

        return tf.function(step, jit_compile=self.jit_compile)

    def _check_source(self, X: tf.Tensor, batch: int) -> None:
        """Evaluate the kernel source once on a batch, to report an output of the wrong shape clearly."""
        source, rows = self._source, tf.range(batch)
        X_batch = tf.gather(X, rows)
        if is_indexed(source):
            return  # its number of rows is checked against X in fit
        if isinstance(source, FeatureKernel):
            shape, expected = tuple(source.feature_map(X_batch).shape), "[B, S] (one row of features per point)"
            good = len(shape) == 2 and shape[0] == batch
        elif isinstance(source, GPflowKernel) or type(source).batch_product is KernelSource.batch_product:
            shape, expected = tuple(source.gram(X_batch).shape), f"[{batch}, {batch}]"
            good = shape == (batch, batch)
        else:
            shape = tuple(source.batch_product(X_batch, tf.ones([batch, self.num_networks], tf.float64)).shape)
            expected = f"[{batch}, {self.num_networks}]"
            good = shape == (batch, self.num_networks)
        if not good:
            raise ValueError(f"the kernel source returned shape {shape} on a batch of {batch} points; expected {expected}")
        if self.estimator == "unbiased" and _kernel_products(source, rows, X_batch, tf.ones([batch, 1], tf.float64))[1] is None:
            raise ValueError("the unbiased estimator needs the kernel's diagonal; this kernel source gives only a batch product")

    def fit(
        self,
        X,
        num_steps: int = 2000,
        kernel=None,
        schedule: str = "constant",
        print_every: Optional[int] = None,
        seed: Optional[int] = None,
        rayleigh_ritz: bool = True,
        ritz_block_size: int = 2048,
        checkpoint_dir: Optional[str] = None,
        checkpoint_every: Optional[int] = None,
    ) -> "NeuralEF":
        """Train for ``num_steps`` minibatch steps of Algorithm 1 on the data X [N, D], then (by
        default) run the Rayleigh–Ritz step on all N points (:meth:`rayleigh_ritz`).

        Minibatches of B = min(batch_size, N) rows are drawn without replacement, reshuffling each
        epoch. ``schedule="cosine"`` anneals the learning rate lr · (1 + cos(π t / T)) / 2 over these
        T = num_steps steps. Prints step, loss and the minibatch eigenvalue
        estimates every ``print_every`` steps (default: num_steps // 10; 0 is silent). May be called again to continue training (the optimizer state is kept;
        the Ritz step is recomputed from the networks). With ``rayleigh_ritz=False`` the outputs are the
        networks sorted by their minibatch eigenvalue estimate, which are then the ``eigenvalues``.

        ``checkpoint_dir``: make the fit resumable (:mod:`activated_dgp.eigen.neuralef`, "Resumable fits"): the state is written
        there every ``checkpoint_every`` steps (default num_steps // 20) and when training ends; a fit started
        again with the same directory continues from its latest checkpoint. The directory must belong to a
        fit of the same ``num_steps`` (and architecture).

        Raises ValueError for NaN/inf or badly shaped inputs, a width other than the networks',
        no kernel, an unknown schedule, a Gram matrix that does not match X, fewer points than
        networks, a kernel source whose output has the wrong shape, a bad ``checkpoint_every``, or a
        checkpoint directory of another fit.
        """
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; use one of {SCHEDULES}")
        if int(num_steps) != num_steps or num_steps < 1:
            raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
        if print_every is None:  # progress by default: about ten lines per fit (0 silences)
            print_every = max(1, int(num_steps) // 10)
        if int(print_every) != print_every or print_every < 0:
            raise ValueError(f"print_every must be a non-negative integer, got {print_every!r}")
        if kernel is not None:
            self._set_kernel(kernel)
        if self._source is None:
            raise ValueError("no kernel: pass one to fit(X, kernel=...) or to the constructor")
        X = as_float64_matrix(X)
        N, D = X.shape
        if self.input_dim is not None and D != self.input_dim:
            raise ValueError(f"inputs have width {D}, the networks expect {self.input_dim}")
        if is_indexed(self._source) and self._source.num_rows != N:
            what = "Gram matrix is {0} × {0}" if isinstance(self._source, PrecomputedGram) else "features have {0} rows"
            raise ValueError(
                f"the precomputed {what.format(self._source.num_rows)}, but there are N = {N} training points "
                f"(its rows must be those of X)"
            )
        batch = min(self.batch_size, N)
        if batch < 2:
            raise ValueError("NeuralEF needs at least 2 training points")
        if self.num_networks > batch:
            raise ValueError(
                f"num_eigenpairs + oversampling = {self.num_networks} exceeds the batch of {batch} points "
                f"(N = {N}): a batch of B points determines at most B eigenfunctions"
            )
        if self.input_dim is None:
            self._build(D)
        num_steps = int(num_steps)
        if checkpoint_every is None:
            checkpoint_every = max(1, num_steps // 20)
        if isinstance(checkpoint_every, bool) or int(checkpoint_every) != checkpoint_every or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be a positive integer, got {checkpoint_every!r}")
        checkpoint_every = int(checkpoint_every)
        manager = self._checkpoints(checkpoint_dir, num_steps)
        if manager is None or manager.latest_checkpoint is None:
            self._fit_start.assign(self._step)
            self._fit_steps.assign(num_steps)
        done = self.steps - int(self._fit_start.numpy())  # steps of this fit already taken (restored)
        X_tensor = tf.constant(X)
        self._check_source(X_tensor, batch)
        step = self._make_step(X_tensor, self._source)
        rng_seed = self.seed + int(self._fit_start.numpy()) if seed is None else seed
        start = time.perf_counter()
        for t, rows in zip(range(done, num_steps), _minibatches(rng_seed, N, batch, done)):
            rate = self.learning_rate
            if schedule == "cosine":
                rate *= 0.5 * (1.0 + np.cos(np.pi * t / num_steps))
            loss = step(tf.constant(rows, dtype=tf.int32), tf.constant(rate, tf.float64))
            if t == 0 and not np.isfinite(loss.numpy()):
                raise ValueError("the first training step gave a non-finite loss: check the kernel values on the data")
            if manager is not None and ((t + 1) % checkpoint_every == 0 or t + 1 == num_steps):
                manager.save(checkpoint_number=self.steps)
            if print_every and ((t + 1) % print_every == 0 or t + 1 == num_steps):
                estimates = " ".join(f"{value:.4g}" for value in self._eigenvalue_ema.numpy())
                print(
                    f"NeuralEF step {self.steps:6d}  loss {loss.numpy(): .6g}  lr {rate:.2e}  "
                    f"eigenvalues [{estimates}]  ({time.perf_counter() - start:.1f} s)",
                    flush=True,
                )
        if not np.all(np.isfinite(self._eigenvalue_ema.numpy())) or not np.all(np.isfinite(self._sigma.numpy())):
            raise ValueError("training diverged (non-finite eigenvalue or σ estimates)")
        if rayleigh_ritz:
            self.rayleigh_ritz(X, block_size=ritz_block_size)
        else:
            self._select_by_minibatch_estimates()
        return self

    def _checkpoints(self, directory: Optional[str], num_steps: int) -> Optional[tf.train.CheckpointManager]:
        """The fit's checkpoint manager for ``directory`` (None without one), after restoring its latest
        checkpoint into this object, if there is one; ValueError when that checkpoint is of another fit."""
        if directory is None:
            return None
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=self), str(directory), max_to_keep=1)
        if manager.latest_checkpoint is None:
            return manager
        try:
            manager.checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise ValueError(f"the checkpoint in {directory} does not match this NeuralEF (another architecture?): {error}") from None
        if int(self._fit_steps.numpy()) != num_steps:
            raise ValueError(f"the checkpoint in {directory} belongs to a fit of {int(self._fit_steps.numpy())} steps, "
                             f"not {num_steps}: pass another checkpoint_dir, or the same num_steps to resume it")
        return manager
