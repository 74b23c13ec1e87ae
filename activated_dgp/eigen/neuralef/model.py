"""The class :class:`NeuralEF` (Deng et al., 2022): its settings, state and networks; training and the eigenpairs come
from :mod:`~activated_dgp.eigen.neuralef.training` and :mod:`~activated_dgp.eigen.neuralef.eigenpairs`."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from ..base import EigenApproximation, elementwise_activation
from ..kernel_sources import KernelSource, as_kernel_source
from .eigenpairs import _Eigenpairs
from .networks import StackedMLP, _check_sizes
from .objective import ESTIMATORS
from .training import _Training


class NeuralEF(_Eigenpairs, _Training, EigenApproximation):
    """Top-k eigenpairs of κ's integral operator under the data distribution, by k (+ oversampling)
    neural networks trained with eq. 17 and a final Rayleigh–Ritz step.

    :param num_eigenpairs: k ≥ 1, the number of reported eigenpairs.
    :param kernel: optional here (or given to ``fit``): a gpflow kernel, a :class:`KernelSource`
        (FeatureKernel, ``nngp_kernel``, ``ntk_kernel``), or a square Gram matrix of the training
        points (Algorithm 1's precomputed κ^(X_tr, X_tr), rows in the order of ``fit``'s X).
    :param networks: p = k + oversampling callables [N, D] → [N, 1] (or [N]) with trainable
        variables, e.g. tf-keras models, built or buildable by one call (e.g. from
        :func:`neural_eigenfunction`); default: p independent MLPs evaluated together as a
        :class:`StackedMLP` (``width``, ``hidden_layers``, ``activation``; App. B: width 32, sin/cos).
    :param input_dim: D; needed for the default networks at construction (so that a checkpoint can
        be restored into a fresh object); without it they are built by ``fit``.
    :param batch_size: B (min(B, N) is used); 256 as in the paper. Must be ≥ p.
    :param learning_rate: Adam's learning rate (1e-3 as in the paper).
    :param ema_decay: decay of the moving averages of σ_j and of the minibatch eigenvalue estimates.
    :param estimator: ``"paper"`` (eq. 15, diagonal included; default) or ``"unbiased"`` (diagonal
        removed); see :mod:`activated_dgp.eigen.neuralef` and :func:`~activated_dgp.eigen.neuralef.minibatch_rayleigh`.
    :param oversampling: extra networks trained beyond k (default None: k of them, at most batch_size − k;
        0 is the paper's setting). The hierarchy of eq. 14 puts them on eigenfunctions k+1, …; the
        Rayleigh–Ritz step then picks the top k within the span of all p networks (as in randomised subspace
        iteration), which helps the slowest pairs: on the RBF kernel of the paper's §4.1 (N = 2,000, 2,000
        steps, cosine schedule) 6 of 10 eigenvalues were within 10 % with none and 10 of 10 with 10
        (``docs/figures/neuralef_oversampling_*.jsonl``, docs/eigen.md).
    :param seed: seeds the default networks' initialisation and the minibatch order.
    :param jit_compile: compile the training step with XLA (faster for small networks; the kernel
        and networks must be XLA-compatible).
    """

    def __init__(
        self,
        num_eigenpairs: int,
        kernel=None,
        networks: Optional[Sequence[Callable]] = None,
        input_dim: Optional[int] = None,
        width: int = 32,
        hidden_layers: int = 2,
        activation: Union[str, Callable] = "sin_cos",
        batch_size: int = 256,
        learning_rate: float = 1e-3,
        ema_decay: float = 0.99,
        estimator: str = "paper",
        oversampling: Optional[int] = None,
        seed: int = 0,
        jit_compile: bool = False,
        name: Optional[str] = None,
    ):
        super().__init__(num_eigenpairs, name=name)
        if estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {estimator!r}; use one of {ESTIMATORS}")
        if int(batch_size) != batch_size or batch_size < 2:
            raise ValueError(f"batch_size must be an integer ≥ 2, got {batch_size!r}")
        if not (np.isfinite(learning_rate) and learning_rate > 0):
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        if not 0.0 < ema_decay < 1.0:
            raise ValueError(f"ema_decay must lie in (0, 1), got {ema_decay!r}")
        if input_dim is not None and (int(input_dim) != input_dim or input_dim < 1):
            raise ValueError(f"input_dim must be a positive integer, got {input_dim!r}")
        if oversampling is None:  # k extra networks, as many as the batch allows
            oversampling = max(0, min(self.num_eigenpairs, int(batch_size) - self.num_eigenpairs)) if networks is None else len(networks) - self.num_eigenpairs
        if isinstance(oversampling, bool) or int(oversampling) != oversampling or oversampling < 0:
            raise ValueError(f"oversampling must be an integer ≥ 0, got {oversampling!r}")
        self.num_networks = p = self.num_eigenpairs + int(oversampling)
        if p > batch_size:
            raise ValueError(
                f"num_eigenpairs + oversampling = {p} networks exceed the batch size {batch_size}: "
                f"a batch of B points determines at most B eigenfunctions"
            )
        self.estimator = estimator
        self.batch_size = int(batch_size)
        self.learning_rate = float(learning_rate)
        self.ema_decay = float(ema_decay)
        self.seed = int(seed)
        self.jit_compile = bool(jit_compile)
        self.input_dim = None if input_dim is None else int(input_dim)
        self._network_options = dict(width=width, hidden_layers=hidden_layers, activation=activation)
        self.stacked: Optional[StackedMLP] = None  # the default networks
        self.networks: Optional[List[Callable]] = None  # user networks
        if networks is None:
            elementwise_activation(activation)  # validates the options now
            _check_sizes(width=width, hidden_layers=hidden_layers)
        else:
            networks = list(networks)
            if len(networks) != p:
                raise ValueError(f"{len(networks)} networks given for num_eigenpairs + oversampling = {p}")
            if not all(callable(network) for network in networks):
                raise ValueError("every network must be callable X [N, D] → [N, 1]")
            self.networks = networks
        self._source: Optional[KernelSource] = None
        self.kernel = None  # the gpflow kernel, when there is one (tracked: its parameters are saved)
        if kernel is not None:
            self._set_kernel(kernel)
        self._sigma = tf.Variable(np.ones(p), dtype=tf.float64, trainable=False, name="sigma_ema")
        self._eigenvalue_ema = tf.Variable(np.zeros(p), dtype=tf.float64, trainable=False, name="eigenvalue_ema")
        self._rayleigh_ema = tf.Variable(np.zeros(p), dtype=tf.float64, trainable=False, name="rayleigh_ema")
        # ψ(x) = (h(x) / σ̄) · rotation: a column selection after plain training, the Ritz vectors after the RR step
        self._rotation = tf.Variable(np.eye(p)[:, : self.num_eigenpairs], dtype=tf.float64, trainable=False, name="rotation")
        self._ritz_done = tf.Variable(False, trainable=False, name="ritz_done")
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        # the step at which the latest fit began and its num_steps (what a resumed fit continues)
        self._fit_start = tf.Variable(0, dtype=tf.int64, trainable=False, name="fit_start")
        self._fit_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="fit_steps")
        self.optimizer = tf_keras.optimizers.Adam(self.learning_rate)
        if self.input_dim is not None:
            self._build(self.input_dim)

    # -- construction --------------------------------------------------------------------------

    def _set_kernel(self, kernel):
        self._source = as_kernel_source(kernel)
        if isinstance(kernel, gpflow.kernels.Kernel):
            self.kernel = kernel

    def _build(self, input_dim: int) -> None:
        """Create the default networks (or build the given ones) for inputs of width D, and Adam's slots."""
        self.input_dim = int(input_dim)
        if self.networks is None:
            self.stacked = StackedMLP(self.num_networks, self.input_dim, seed=self.seed, **self._network_options)
            self.optimizer.build(self._variables())
            return
        probe = tf.zeros([2, self.input_dim], dtype=tf.float64)
        for j, network in enumerate(self.networks):
            output = network(probe)
            if output.shape.num_elements() != 2:
                raise ValueError(f"network {j} maps [2, {self.input_dim}] inputs to shape {tuple(output.shape)}; expected [2, 1] or [2]")
            if not network.trainable_variables:
                raise ValueError(f"network {j} has no trainable variables")
        self.optimizer.build(self._variables())

    def _variables(self) -> List[tf.Variable]:
        if self.stacked is not None:
            return list(self.stacked.trainable_variables)
        return [v for network in self.networks for v in network.trainable_variables]
