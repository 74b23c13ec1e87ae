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
(:mod:`~activated_dgp.eigen.laplace_likelihoods`: I/σ², s(1 − s), diag(p) − ppᵀ). Methods (``method=``):

* ``"exact"``: the full P × P GGN above (P ≤ ``max_parameters``, default 5,000).
* ``"last_layer"``: the same over the last Dense layer's kernel and bias only, the other weights fixed at
  θ_MAP (Kristiadi et al. 2020; Daxberger et al. 2021). With a Gaussian likelihood and a linear last
  layer this is Bayesian linear regression on the penultimate features.
* ``"diagonal"``: Σ⁻¹ ≈ diag(Σ_i J_iᵀ Λ_i J_i) + δ I (the diagonal GGN).
* ``"kron"``: Σ⁻¹ ≈ blockdiag_l(A_l ⊗ G_l) + δ I, the Kronecker-factored GGN of each Dense and Conv2D layer (KFAC;
  Martens & Grosse 2015, Ritter et al. 2018; KFC for convolutions, Grosse & Martens 2016), A_l = E[ã ãᵀ] of the
  layer's bias-augmented inputs (a convolution's unfolded patches) and G_l = Σ_i E_iᵀ Λ_i E_i of its back-propagated
  output signals (summed over a convolution's output positions), inverted through the factors' eigendecompositions
  (:mod:`~activated_dgp.eigen.kfac`); for a Sequential chain (nested ones allowed). An ``ActivatedLayer`` has no Kronecker form:
  ``kron_fallback="diagonal"`` takes its diagonal GGN block, otherwise it is a ValueError.
* ``"lowrank"``: Σ⁻¹ ≈ V diag(e) Vᵀ + δ I with the top k = ``num_eigenpairs`` eigenpairs of the GGN by Lanczos
  (:mod:`~activated_dgp.eigen.lowrank`; Daxberger et al. 2021, §3.2), inverted by Woodbury: Σ = δ⁻¹ I − V diag(e / (δ (e + δ))) Vᵀ.
  No P × P matrix is formed; the test covariances need J(x) V and the NTK block J(x) J(x)ᵀ.

``variables=`` restricts exact, diagonal, kron and lowrank to a subnetwork: some of the model's trainable variables (whole
layers for kron), the others fixed at θ_MAP.

For a chain of Dense and ``ActivatedLayer`` layers (the library's twins, :func:`~activated_dgp.build_activated_nn`)
the parameter methods compute the test covariances layer by layer without forming J (:mod:`~activated_dgp.eigen.layerwise`): J(x) V
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

Memory. Everything that passes the network goes in batches of ``batch_size`` points: the outputs, the Jacobians
(per example, ``tf.vectorized_map``, batch_size · C · P float64 numbers and one example's activations each), the
GGN's terms, the test covariances; the Monte Carlo predictive draws its samples in blocks of at most
:data:`~activated_dgp.eigen.laplace_likelihoods.MC_BLOCK_NUMBERS` numbers. So a fit or prediction holds, besides the
data and O(N C²) numbers (outputs, output Hessians Λ, covariances), one batch's Jacobians and, for ``neuralef``:
NeuralEF's pair inputs [N C, D + C] and the networks' outputs on them [N C, k + oversampling] (its Rayleigh–Ritz step
in blocks of batch_size · C pairs), the Jacobians of one NeuralEF minibatch of pairs [B, P] per step, and the cached
training Jacobians when N C P · 8 ≤ ``jacobian_cache_bytes`` (about twice that while their kernel source is built).
A Jacobian of the whole batch's outputs at once would instead hold the activations of all B inputs for each of its
B C outputs (:func:`~activated_dgp.eigen.jacobian_function`), quadratic in the batch.

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
:mod:`~activated_dgp.eigen.grouped_prior`, log det(H + D) through an r × r matrix for a GGN of rank r).

Gaussian noise (``noise_variance=``): a positive σ², or ``"marginal_likelihood"`` (every method): the GGN is accumulated at the maximum-likelihood noise σ₀² = Σ‖y − g(x)‖² / (N C) and, since every
variant's GGN is proportional to 1/σ², rescaled by σ₀²/σ² for any other σ², so that the evidence above, with
log p(D | θ_MAP) = −Σ‖y − g(x)‖²/(2σ²) − (N C/2) log 2πσ², is maximised over (log δ, log σ²) jointly by L-BFGS-B with its
analytic gradient (or over σ² alone at a fixed δ); laplace-torch leaves σ to a gradient loop of the user's.

Predictives (``predict_y``; with ``pred_type="nn"`` by weight samples through the network instead,
:mod:`~activated_dgp.eigen.laplace_sampling`): Gaussian N(μ, J Σ Jᵀ + σ² I) exactly; Bernoulli by the probit
approximation (default, MacKay 1992) or Monte Carlo; softmax by Monte Carlo over the Gaussian latent
(default: 1,000 samples from ``numpy.random.default_rng(seed)``) or the generalised probit.

:class:`LinearisedLaplace` is assembled from one module per part, each importing only those before it: the
settings (:mod:`~activated_dgp.eigen.laplace.settings`), the parameters a posterior covers
(:mod:`~activated_dgp.eigen.laplace.subnetwork`), the NTK on (x, c) pairs (:mod:`~activated_dgp.eigen.laplace.pairs`),
the network's outputs and features in batches (:mod:`~activated_dgp.eigen.laplace.network`), the posterior covariance
of each curvature structure (:mod:`~activated_dgp.eigen.laplace.covariance`), the predictives
(:mod:`~activated_dgp.eigen.laplace.predictive`), the prior precision and noise (:mod:`~activated_dgp.eigen.laplace.evidence`),
the curvature's fit (:mod:`~activated_dgp.eigen.laplace.curvature`), saving and loading
(:mod:`~activated_dgp.eigen.laplace.persistence`) and the class itself (:mod:`~activated_dgp.eigen.laplace.approximation`).
"""

from .settings import COVARIANCES, JACOBIAN_CACHE_BYTES, METHODS
from .subnetwork import _last_dense_variables  # noqa: F401  (laplace_factory's last layer)
from .pairs import _OutputSelector, pair_inputs  # noqa: F401
from .approximation import LinearisedLaplace

__all__ = ["LinearisedLaplace", "METHODS", "COVARIANCES", "JACOBIAN_CACHE_BYTES"]
