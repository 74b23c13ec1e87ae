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

:class:`NeuralEF` is assembled from one module per part, each importing only those before it: the networks of the
eigenfunctions (:mod:`~activated_dgp.eigen.neuralef.networks`), the minibatch estimate of eq. 15 and the kernel
products it needs (:mod:`~activated_dgp.eigen.neuralef.objective`), the minibatch order of a fit
(:mod:`~activated_dgp.eigen.neuralef.minibatches`), the training loop of Algorithm 1 with its schedule and checkpoints
(:mod:`~activated_dgp.eigen.neuralef.training`), the Rayleigh–Ritz step and the fitted eigenpairs
(:mod:`~activated_dgp.eigen.neuralef.eigenpairs`), the class itself (:mod:`~activated_dgp.eigen.neuralef.model`) and
saving and loading (:mod:`~activated_dgp.eigen.neuralef.persistence`).
"""

from .networks import StackedMLP, neural_eigenfunction
from .objective import ESTIMATORS, minibatch_rayleigh  # noqa: F401
from .minibatches import SCHEDULES  # noqa: F401
from .model import NeuralEF
from . import persistence  # noqa: F401  (registers the "neuralef" kind of activated_dgp.save / load)

__all__ = ["NeuralEF", "StackedMLP", "neural_eigenfunction", "minibatch_rayleigh"]
