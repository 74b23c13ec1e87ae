# %% [markdown]
# # An activated SVGP: what Kuu and Kuf are
#
# An *activated* sparse GP (Dutordoir et al., 2021, Sec. 3–4) keeps GPflow's SVGP and changes two things:
#
# * the kernel is **zonal**: on bias-extended, length-scaled inputs x̃ = [x, 1]/ℓ it is a truncated
#   Gegenbauer series k(x, x') = ‖x̃‖‖x̃'‖ Σ_n λ_n N_n Ĉ_n(cos θ), which converges to the arc-cosine kernel;
# * the inducing variables are **activations**: u_m = ⟨f, g_m⟩_H, with g_m(x̃) = ‖x̃‖‖w_m‖ σ(ŵ_m · x̂) a
#   neural-network unit. Then Kuf[m, n] = g̃_m(x_n) is that unit's output and Kuu = Σ_n (σ_n² / λ_n) N_n Ĉ_n(ŵ·ŵ').
#
# Both are registered with `gpflow.covariances`, so any GPflow model takes them unchanged.

# %%
import os

import gpflow
import matplotlib.pyplot as plt
import numpy as np

from activated_dgp import ActivationFeature, ZonalArcCosine

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"  # CI runs every tutorial in a fast mode
rng = np.random.default_rng(0)

# %% [markdown]
# ## Data: a 1-D regression with a gap

# %%
X = rng.uniform(-2, 2, size=(600, 1))
X = X[(X[:, 0] < 0.3) | (X[:, 0] > 0.8)][:300]
Y = np.sin(2.5 * X) + 0.5 * X + 0.1 * rng.normal(size=X.shape)

# %% [markdown]
# ## Kernel, features and the two covariances
# The features' directions W [M, D + 1] live in the bias-extended input space: [slope, offset].

# %%
M, truncation = 30, 20
W = np.stack([2.0 * rng.normal(size=M), rng.normal(size=M)], axis=1)
kernel = ZonalArcCosine(input_dim=1, truncation_level=truncation, lengthscales=[1.0, 1.0])
feature = ActivationFeature(W, activation="softplus", truncation_level=truncation)

Kuu = gpflow.covariances.Kuu(feature, kernel, jitter=0.0).numpy()
Kuf = gpflow.covariances.Kuf(feature, kernel, X).numpy()
print("Kuu", Kuu.shape, "Kuf", Kuf.shape, "smallest eigenvalue of Kuu", np.linalg.eigvalsh(Kuu)[0])

# %% [markdown]
# Each row of Kuf is one activated unit evaluated on the data: plotting a few shows softplus-like ridges.
# The Funk–Hecke coefficients behind them are `kernel.eigenvalues` (λ_n) and `feature.eigenvalues` (σ_n).

# %%
order = np.argsort(X[:, 0])
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
for m in range(6):
    left.plot(X[order, 0], Kuf[m, order])
left.set(title="rows of Kuf: activated units g̃_m(x)", xlabel="x")
right.semilogy(np.abs(kernel.eigenvalues) + 1e-16, "o-", label="kernel λ_n")
right.semilogy(np.abs(feature.eigenvalues) + 1e-16, "s-", label="softplus σ_n")
right.set(title="Funk–Hecke coefficients", xlabel="level n")
right.legend()
plt.show()

# %% [markdown]
# ## Train an SVGP with them
# GPflow's own SVGP and its optimiser: nothing else changes.

# %%
model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(0.1), feature, num_data=len(X))
before = float(model.elbo((X, Y)))
gpflow.optimizers.Scipy().minimize(
    model.training_loss_closure((X, Y)), model.trainable_variables, options=dict(maxiter=30 if FAST else 500)
)
print(f"ELBO {before:.1f} → {float(model.elbo((X, Y))):.1f}; noise variance {model.likelihood.variance.numpy():.4f} (true 0.01)")

# %%
grid = np.linspace(-4, 4, 400)[:, None]
mean, variance = (t.numpy()[:, 0] for t in model.predict_y(grid))
plt.figure(figsize=(7, 3.5))
plt.plot(X, Y, "k.", ms=3, label="data")
plt.plot(grid, mean, label="predictive mean")
plt.fill_between(grid[:, 0], mean - 2 * np.sqrt(variance), mean + 2 * np.sqrt(variance), alpha=0.3, label="±2σ")
plt.axvspan(0.3, 0.8, color="grey", alpha=0.15, label="gap in the data")
plt.legend()
plt.show()

# %% [markdown]
# The same kernel and features build deep models: see [Convert your own network](../convert_your_network/) and
# [GPflux layers](../gpflux_layers/).
