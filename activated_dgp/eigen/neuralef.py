"""NeuralEF: the top-k eigenfunctions of a kernel as k neural networks (Deng et al., 2022, Sec. 3).

Each eigenfunction is a network ψ̂_j = ψ̂(·, w_j): [N, D] → [N, 1] with its own weights. On a minibatch
X = {x_b} of size B the networks' outputs h_j = ψ̂(X, w_j) [B] pass through the L2 batch normalisation
of eq. 16,

    ψ̂_j(X) = h_j / σ_j,      σ_j = sqrt((1/B) Σ_b h_jb²)     (σ_j differentiable),

so that (1/B) Σ_b ψ̂_j(x_b)² = 1 (the constraint C_j = 1 of eq. 13). With κ = κ(X, X) [B, B],

    R̃_ij = ψ̂_iᵀ κ ψ̂_j / B²                                                   (eq. 15)
    ℓ = −Σ_j ( R̃_jj − Σ_(i<j) R̃_ij² / R̃_ii )  with R̃_ij, R̃_ii of i < j stop-gradient'ed   (eq. 17)
    ∇_(w_j) ℓ = −(2/B²) κ ( ψ̂_j − Σ_(i<j) (R̃_ij / R̃_ii) ψ̂_i ) · ∂_(w_j) ψ̂_j              (eq. 18)

The term in brackets is computed in closed form (G [B, k], column j for ψ̂_j) and pulled back through
the networks and the L2BN with one vector–Jacobian product,
``tape.gradient(ψ̂, weights, output_gradients=G)``: column j of ψ̂ depends on w_j alone, so this is
eq. 18 for every j at once (the stop-gradients of eq. 17 are exactly that nothing flows into ψ̂_i, i < j,
from problem j). Adam (lr 1e-3, batch 256 by default, as in Sec. 4) updates the weights; optionally the
learning rate follows a cosine from lr to 0 over the steps of one ``fit``.

κ ψ̂ comes from the kernel source (:mod:`.kernel_sources`): a GPflow kernel forms the B × B block, a
:class:`FeatureKernel` (``nngp_kernel``, eq. 19; ``ntk_kernel``, eq. 20) computes Φ (Φᵀ ψ̂) / S without
it, a :class:`PrecomputedGram` of the training points (Algorithm 1, line 3) or their
:class:`PrecomputedFeatures` (e.g. cached NTK Jacobians) is indexed by the batch's rows. Nothing N × N
is formed (beyond a precomputed Gram matrix).

Estimators (:func:`minibatch_rayleigh`). ``estimator="paper"`` (the default, as in the official code)
is eq. 15 as written, a V-statistic with the b = b' terms included; over batches its expectation is
about (1 − 1/B) R_ij + E[κ(x, x) ψ̂_i ψ̂_j] / B, i.e. the operator of κ + (1/B) κ(x, x) δ(x − x'). For a
stationary kernel that shifts every eigenvalue by E[κ(x, x)]/B (≈ 0.004 for the RBF kernel and
B = 256) and leaves the eigenfunctions alone. ``estimator="unbiased"`` drops the diagonal:

    R̃_ij = ( ψ̂_iᵀ κ ψ̂_j − Σ_b κ(x_b, x_b) ψ̂_ib ψ̂_jb ) / (B (B − 1)),

with eq. 18 changed accordingly (κ → κ − diag κ, 1/B² → 1/(B(B − 1))). Its R̃_ii can be ≈ 0 or
negative for a network still near the null space, and then 1/R̃_ii in the penalties explodes; so with
either estimator the divisor R̃_ii is floored at the batch mean of κ(x, x)/B, the size of the diagonal's
share in eq. 15. Measured on the paper's RBF set-up (docs/eigen.md) the two estimators end within noise
of each other once the Rayleigh–Ritz step below is applied; the paper's is the default.

Test time. The EMA of σ_j over the training steps replaces the batch σ (eq. 16, "recording the EMA of σ
for testing").

Eigenvalues and the Rayleigh–Ritz step. The minibatch estimates are biased: Algorithm 1's EMA of R̃_jj
(``rayleigh_quotients``) by + E[κ(x, x)]/B with the paper's estimator, which exceeds the tail eigenvalues,
and the EMA of the terms u_j = R̃_jj − Σ_(i<j) R̃_ij²/R̃_ii of eq. 17 (``minibatch_eigenvalues``) low
for converged pairs, because the minibatch noise in R̃_ij² does not average out. They are kept as
diagnostics. ``fit`` ends instead (``rayleigh_ritz=True``) with a Rayleigh–Ritz step over the training
set (:mod:`.rayleigh_ritz`, in row blocks, no N × N matrix): the generalised eigenproblem
A c = λ M c, A = Hᵀ K H / N², M = Hᵀ H / N of the p networks' outputs H. Its top-k Ritz values are the
reported ``eigenvalues`` and ψ = (h / σ̄) C rotates the networks' outputs. This recovers the tail pairs
whose networks have not separated (a network that still mixes ψ_j with earlier eigenfunctions is
un-mixed by the rotation), and with ``oversampling`` > 0 the span of k + oversampling networks contains
the k-th eigenfunction far better than k networks do (as in randomised subspace iteration). Without the
step the outputs are the networks sorted by u_j and ``eigenvalues`` = max(u_j, 0).

State. The networks, σ̄, the minibatch estimates, the output rotation, the step counter and the Adam optimizer
are all tracked. ``activated_dgp.save(neuralef, DIR)`` writes them with the constructor's settings (the default
networks' width, depth and named activation; user networks as tf-keras models, any other callable is refused by
name), and ``activated_dgp.load(DIR)`` rebuilds a NeuralEF whose ψ(x) and eigenvalues are the saved one's. The
kernel is not saved: ψ does not evaluate it, and a loaded NeuralEF needs it again (``fit(X, kernel=…)``) only to
train on or to redo the Rayleigh–Ritz step; training then continues from the saved optimiser state.
``tf.train.Checkpoint(model=NeuralEF(k, input_dim=D)).read(path)`` (same architecture; user networks passed again,
built) restores a ``tf.train.Checkpoint`` of one, a GPflow kernel given to the constructor included.

Resumable fits. ``fit(X, num_steps, checkpoint_dir=DIR)`` writes that state (with the step at which the fit began
and its ``num_steps``) to DIR every ``checkpoint_every`` steps and at the end of training. A fit started again
with the same DIR, on a fresh object of the same architecture, restores the latest checkpoint and takes only the
steps it lacks: the minibatch order of step t is a function of the fit's seed and t alone (permutation
⌊t / ⌊N/B⌋⌋ of the fit's generator), and the cosine schedule's of t, so the resumed fit ends with the networks
of the uninterrupted one. A finished fit's checkpoint makes the call train nothing and only redo the
Rayleigh–Ritz step.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, List, Optional, Sequence, Union

import gpflow
import numpy as np
import tensorflow as tf
import tf_keras

from .. import saving
from .base import EigenApproximation, SavedState, as_float64_matrix, elementwise_activation, elementwise_activation_name
from .kernel_sources import FeatureKernel, GPflowKernel, KernelSource, PrecomputedGram, as_kernel_source, is_indexed
from .rayleigh_ritz import generalised_eigh, span_products

__all__ = ["NeuralEF", "StackedMLP", "neural_eigenfunction", "minibatch_rayleigh"]

ESTIMATORS = ("paper", "unbiased")
SCHEDULES = ("constant", "cosine")


def _check_sizes(**sizes) -> None:
    for what, value in sizes.items():
        smallest = 0 if what == "hidden_layers" else 1
        if int(value) != value or value < smallest:
            raise ValueError(f"{what} must be an integer ≥ {smallest}, got {value!r}")


def neural_eigenfunction(
    input_dim: int,
    width: int = 32,
    hidden_layers: int = 2,
    activation: Union[str, Callable] = "sin_cos",
    seed: Optional[int] = None,
    dtype=None,
) -> tf_keras.Sequential:
    """The default network of one eigenfunction: an MLP [N, D] → [N, 1] with ``hidden_layers`` Dense
    layers of ``width`` units and a linear output (App. B: width 32, half sin and half cos units).

    :param activation: one of ``sin_cos, sin, tanh, relu, softplus, gelu`` or a callable.
    """
    activation = elementwise_activation(activation)
    _check_sizes(input_dim=input_dim, width=width, hidden_layers=hidden_layers)
    dtype = dtype or gpflow.default_float()
    initializer = lambda offset: tf_keras.initializers.GlorotUniform(seed=None if seed is None else seed + offset)  # noqa: E731
    layers: List[tf_keras.layers.Layer] = [tf_keras.Input(shape=(int(input_dim),), dtype=dtype)]
    for layer in range(int(hidden_layers)):
        layers.append(
            tf_keras.layers.Dense(int(width), activation=activation, kernel_initializer=initializer(layer), dtype=dtype)
        )
    layers.append(tf_keras.layers.Dense(1, kernel_initializer=initializer(int(hidden_layers)), dtype=dtype))
    return tf_keras.Sequential(layers)


class StackedMLP(tf.Module):
    """k independent MLPs [N, D] → [N, 1] evaluated together with batched matrix products: [N, D] → [N, k].

    Network j has its own weights W_l[j], [n_(l−1), n_l], and biases b_l[j], [n_l], (He-normal
    initialised, as in the paper's code: N(0, 2/fan_in), zero biases), ``hidden_layers`` hidden layers of ``width`` units and a linear output:
    the same functions as k separate :func:`neural_eigenfunction` models, in about one k-th of the ops.
    """

    def __init__(
        self,
        num_networks: int,
        input_dim: int,
        width: int = 32,
        hidden_layers: int = 2,
        activation: Union[str, Callable] = "sin_cos",
        seed: int = 0,
        name: Optional[str] = None,
    ):
        super().__init__(name=name)
        self._activation = elementwise_activation(activation)
        self.activation = activation
        _check_sizes(input_dim=input_dim, width=width, hidden_layers=hidden_layers)
        k = int(num_networks)
        sizes = [int(input_dim)] + [int(width)] * int(hidden_layers) + [1]
        rng = np.random.default_rng(seed)
        self.kernels, self.biases = [], []
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            weights = rng.normal(0.0, np.sqrt(2.0 / fan_in), (k, fan_in, fan_out))
            self.kernels.append(tf.Variable(weights, dtype=tf.float64, name=f"kernel_{layer}"))
            self.biases.append(tf.Variable(np.zeros((k, 1, fan_out)), dtype=tf.float64, name=f"bias_{layer}"))

    def __call__(self, X) -> tf.Tensor:
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        h = tf.einsum("nd,kdh->knh", X, self.kernels[0]) + self.biases[0]  # [k, N, n_1]
        for W, b in zip(self.kernels[1:], self.biases[1:]):
            h = tf.matmul(self._activation(h), W) + b
        return tf.transpose(h[..., 0])  # [N, k]


def _kernel_products(source: KernelSource, rows: tf.Tensor, X_batch: tf.Tensor, V: tf.Tensor):
    """κ(X_b, X_b) V [B, p] and diag κ(X_b, X_b) [B] (None for a user source that only has a batch
    product), without an N × N matrix.

    A FeatureKernel's features are computed once for both (Φ (Φᵀ V) / S and Σ_s φ_s² / S), or its batch Gram
    when it has one (``batch_gram``); a PrecomputedGram or PrecomputedFeatures is indexed by the batch's row
    numbers ``rows``.
    """
    if isinstance(source, FeatureKernel) and (source.batch_gram is None or is_indexed(source)):
        Phi = tf.cast(source.feature_map(rows if is_indexed(source) else X_batch), tf.float64)
        product = tf.matmul(Phi, tf.matmul(Phi, V, transpose_a=True)) / source.num_samples
        return product, tf.reduce_sum(Phi**2, axis=1) / source.num_samples
    if isinstance(source, FeatureKernel):
        K = source.gram(X_batch)
    elif isinstance(source, PrecomputedGram):
        K = tf.gather(tf.gather(source.matrix, rows), rows, axis=1)
    elif isinstance(source, GPflowKernel) or type(source).batch_product is KernelSource.batch_product:
        K = tf.cast(source.gram(X_batch), tf.float64)
    else:  # a user source with its own batch product
        return tf.cast(source.batch_product(X_batch, V), tf.float64), None
    return tf.matmul(K, V), tf.linalg.diag_part(K)


def minibatch_rayleigh(Psi, KPsi, diagonal, estimator: str = "paper"):
    """The minibatch estimate R̃ [p, p] of R_ij = E_(x,x')[ψ_i(x) κ(x, x') ψ_j(x')], and the matrix
    whose columns eq. 18 pulls back, from Ψ = ψ(X_b) [B, p], κΨ [B, p] and diag κ(X_b, X_b) [B].

    * ``"paper"`` (eq. 15, diagonal included): R̃ = Ψᵀ κ Ψ / B². Over batches drawn without
      replacement from N points its expectation is
      (B−1)/(B(N−1)) Σ_(n≠m) ψ_i(x_n) κ_nm ψ_j(x_m) / N  +  (1/B) Σ_n κ_nn ψ_i(x_n) ψ_j(x_n) / N.
    * ``"unbiased"`` (diagonal removed): R̃ = (Ψᵀ κ Ψ − Σ_b κ_bb ψ_ib ψ_jb) / (B (B − 1)), whose
      expectation is Σ_(n≠m) ψ_i(x_n) κ_nm ψ_j(x_m) / (N (N − 1)).

    Returns (R̃ [p, p] symmetrised, κ'Ψ [B, p], scale) with κ' = κ − diag κ for ``"unbiased"``
    (κ otherwise) and scale the factor 1/B² or 1/(B(B−1)), so that ∂(Σ_ij R̃_ij)/∂ψ = scale · κ'Ψ.
    """
    B = tf.cast(tf.shape(Psi)[0], tf.float64)
    if estimator == "unbiased":
        if diagonal is None:
            raise ValueError("the unbiased estimator needs the kernel's diagonal; this kernel source gives only a batch product")
        KPsi = KPsi - diagonal[:, None] * Psi
        scale = 1.0 / (B * (B - 1.0))
    elif estimator == "paper":
        scale = 1.0 / B**2
    else:
        raise ValueError(f"unknown estimator {estimator!r}; use one of {ESTIMATORS}")
    R = scale * tf.matmul(Psi, KPsi, transpose_a=True)
    return 0.5 * (R + tf.transpose(R)), KPsi, scale


def _minibatches(seed: int, N: int, batch: int, start: int):
    """The row indices of steps start, start + 1, … of a fit: step t takes rows ``(t mod E)·B … + B`` of
    permutation ⌊t / E⌋ (E = ⌊N/B⌋ steps per pass) drawn by ``np.random.default_rng(seed)``, so any step's
    minibatch follows from the seed and t alone (a resumed fit draws what the uninterrupted one drew)."""
    per_pass = N // batch
    rng = np.random.default_rng(seed)
    for _ in range(start // per_pass):
        rng.permutation(N)
    position = start % per_pass
    while True:
        order = rng.permutation(N)
        for index in range(position, per_pass):
            yield order[index * batch : (index + 1) * batch]
        position = 0


class NeuralEF(EigenApproximation):
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
        removed); see the module docstring and :func:`minibatch_rayleigh`.
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

        ``checkpoint_dir``: make the fit resumable (module docstring, "Resumable fits"): the state is written
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

    def _minibatch_order(self) -> np.ndarray:
        return np.argsort(-self._eigenvalue_ema.numpy(), kind="stable")

    def _select_by_minibatch_estimates(self) -> None:
        """Outputs = the k networks with the largest minibatch estimates u_j, in decreasing order."""
        order = self._minibatch_order()[: self.num_eigenpairs]
        self._rotation.assign(np.eye(self.num_networks)[:, order])
        self._eigenvalues.assign(np.maximum(self._eigenvalue_ema.numpy()[order], 0.0))
        self._ritz_done.assign(False)

    def rayleigh_ritz(self, X, block_size: int = 2048) -> "NeuralEF":
        """The Rayleigh–Ritz step (:mod:`.rayleigh_ritz`) over the points X (the training set by
        default in ``fit``; rows of the Gram matrix for a PrecomputedGram): solves
        A c = λ M c with A = Hᵀ K H / N², M = Hᵀ H / N for the p networks' outputs H = h(X)/σ̄, in row
        blocks of ``block_size`` (no N × N matrix), and sets

        * ``eigenvalues`` to the top-k Ritz values (≤ the empirical operator's eigenvalues),
        * ψ(x) = (h(x)/σ̄) C_(:, :k), orthonormal on X (the rotation of the networks' outputs).

        The minibatch estimates stay available as ``minibatch_eigenvalues`` and ``rayleigh_quotients``.
        """
        if self.steps == 0 or self._source is None:
            raise ValueError("the NeuralEF networks are not trained yet (call fit first)")
        X = as_float64_matrix(X)
        if X.shape[1] != self.input_dim:
            raise ValueError(f"inputs have width {X.shape[1]}, the networks expect {self.input_dim}")
        indices = None
        if is_indexed(self._source):
            if X.shape[0] != self._source.num_rows:
                raise ValueError("with a precomputed kernel the Rayleigh–Ritz step runs on the training points (its rows) only")
            indices = np.arange(X.shape[0])
        A, M = span_products(self._source, X, lambda rows: self._normalised(rows).numpy(), block_size, kernel_inputs=indices)
        values, C = generalised_eigh(A, M)
        k = self.num_eigenpairs
        if C.shape[1] < k:
            warnings.warn(
                f"the {self.num_networks} networks span only {C.shape[1]} dimensions on the data; the last "
                f"{k - C.shape[1]} eigenpairs are set to zero",
                RuntimeWarning,
                stacklevel=2,
            )
            C = np.concatenate([C, np.zeros((C.shape[0], k - C.shape[1]))], axis=1)
            values = np.concatenate([values, np.zeros(k - values.shape[0])])
        C, values = C[:, :k], values[:k]
        # sign convention: each Ritz function's largest-magnitude network coefficient is positive
        C = C * np.where(C[np.argmax(np.abs(C), axis=0), np.arange(k)] < 0, -1.0, 1.0)[None, :]
        self._rotation.assign(C)
        self._eigenvalues.assign(np.maximum(values, 0.0))
        self._ritz_done.assign(True)
        return self

    @property
    def ritz_done(self) -> bool:
        """Whether the current outputs come from the Rayleigh–Ritz step."""
        return bool(self._ritz_done.numpy())

    @property
    def minibatch_eigenvalues(self) -> tf.Tensor:
        """Diagnostic: EMA of u_j = R̃_jj − Σ_(i<j) R̃_ij²/R̃_ii (the terms of eq. 17) per network, [p],
        in decreasing order."""
        return tf.constant(self._eigenvalue_ema.numpy()[self._minibatch_order()])

    @property
    def rayleigh_quotients(self) -> tf.Tensor:
        """Diagnostic: EMA of R̃_jj (Algorithm 1, line 7) per network, [p], in the order of
        ``minibatch_eigenvalues``; biased up by about E[κ(x, x)]/B with the paper's estimator."""
        return tf.constant(self._rayleigh_ema.numpy()[self._minibatch_order()])

    # -- prediction ----------------------------------------------------------------------------

    def __call__(self, X) -> tf.Tensor:
        """ψ(X) = (h(X) / σ̄) C [N, k] (EMA σ̄ of eq. 16; C the Ritz vectors, or a column selection
        without the Ritz step), columns in the order of ``eigenvalues``."""
        if tf.executing_eagerly():
            if self.input_dim is None or self.steps == 0:
                raise ValueError("the NeuralEF approximation is not fitted (or restored) yet")
            X = as_float64_matrix(X)
            if X.shape[1] != self.input_dim:
                raise ValueError(f"inputs have width {X.shape[1]}, the networks expect {self.input_dim}")
        return tf.matmul(self._normalised(X), self._rotation)


# ---------------------------------------------------------------- saving (activated_dgp.save / load)


def _state(neuralef: NeuralEF) -> SavedState:
    return SavedState(
        eigenvalues=neuralef._eigenvalues, sigma=neuralef._sigma, eigenvalue_ema=neuralef._eigenvalue_ema,
        rayleigh_ema=neuralef._rayleigh_ema, rotation=neuralef._rotation, ritz_done=neuralef._ritz_done,
        step=neuralef._step, fit_start=neuralef._fit_start, fit_steps=neuralef._fit_steps,
        optimizer=neuralef.optimizer, networks=neuralef.stacked,
    )


def _describe_neuralef(neuralef: NeuralEF) -> saving.Description:
    options = neuralef._network_options
    config = dict(
        num_eigenpairs=neuralef.num_eigenpairs, oversampling=neuralef.num_networks - neuralef.num_eigenpairs,
        input_dim=neuralef.input_dim, width=int(options["width"]), hidden_layers=int(options["hidden_layers"]),
        activation=None, batch_size=neuralef.batch_size, learning_rate=neuralef.learning_rate, ema_decay=neuralef.ema_decay,
        estimator=neuralef.estimator, seed=neuralef.seed, jit_compile=neuralef.jit_compile, user_networks=neuralef.networks is not None,
    )
    children = {}
    if neuralef.networks is None:
        config["activation"] = elementwise_activation_name(options["activation"], "the NeuralEF's networks")
    else:
        for j, network in enumerate(neuralef.networks):
            if not isinstance(network, tf_keras.Model):
                raise ValueError(
                    f"cannot save the NeuralEF: its network {j} is a {type(network).__name__}, not a tf-keras model, so it "
                    "could not be rebuilt; save NeuralEFs with the default networks or tf-keras models (neural_eigenfunction)"
                )
            children[f"network_{j}"] = network
    return saving.Description(config=config, trackable=_state(neuralef), children=children)


def _rebuild_neuralef(config: dict, arrays: dict, children: dict):
    networks = [children[f"network_{j}"] for j in range(config["num_eigenpairs"] + config["oversampling"])] if config["user_networks"] else None
    network_options = {} if networks else dict(width=config["width"], hidden_layers=config["hidden_layers"], activation=config["activation"])
    neuralef = NeuralEF(
        config["num_eigenpairs"], networks=networks, input_dim=config["input_dim"], batch_size=config["batch_size"],
        learning_rate=config["learning_rate"], ema_decay=config["ema_decay"], estimator=config["estimator"],
        oversampling=config["oversampling"], seed=config["seed"], jit_compile=config["jit_compile"], **network_options,
    )
    return neuralef, _state(neuralef)


saving.register_saved_kind(
    saving.SavedKind(name="neuralef", matches=lambda obj: isinstance(obj, NeuralEF), describe=_describe_neuralef, rebuild=_rebuild_neuralef)
)
