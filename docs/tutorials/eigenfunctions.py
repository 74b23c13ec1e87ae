# %% [markdown]
# # Eigenfunctions of kernels: Nyström, NeuralEF, IKA — and EigenPro 3
#
# A kernel's integral operator (K f)(x) = E_x'[k(x, x') f(x')] has eigenfunctions ψ_j and eigenvalues μ_j.
# The library has three ways to approximate the top ones, behind one interface (`.eigenvalues`, `ψ = approx(X)`
# orthonormal in L²(data), `approx.features(X)` = √μ ψ(X)):
#
# * `Nystrom`: the reference, from the eigendecomposition of the Gram matrix of a sample;
# * `NeuralEF` (Deng et al., 2022): neural networks trained so that their outputs are the eigenfunctions, without
#   ever forming the N × N matrix;
# * `IKA` (the independent kernel approximator): the eigenproblem restricted to a fixed basis of activations.

# %%
import os

import gpflow
import matplotlib.pyplot as plt
import numpy as np

from activated_dgp import eigen
from activated_dgp.eigen import IKA, FeatureRidge, NeuralEF, Nystrom
from activated_dgp.kernel_machines import EigenPro3

FAST = os.environ.get("ADGP_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(0)
X = rng.normal(size=(1000 if FAST else 2000, 2))
rbf = gpflow.kernels.SquaredExponential()

# %%
k = 6
reference = Nystrom(num_eigenpairs=k).fit(X, rbf)
neural = NeuralEF(num_eigenpairs=k, kernel=rbf, input_dim=2).fit(X, num_steps=200 if FAST else 3000, schedule="cosine")
ika = IKA(k, eigen.activation_basis(eigen.kmeans_filters(X, 128))).fit(X, rbf)
for name, approximation in (("NeuralEF", neural), ("IKA", ika)):
    errors = np.abs(approximation.eigenvalues.numpy() / reference.eigenvalues.numpy() - 1)
    print(f"{name}: largest relative eigenvalue error against Nyström {errors.max():.3f}")

# %% [markdown]
# The eigenfunctions on a grid (signs are arbitrary):

# %%
grid = np.stack(np.meshgrid(np.linspace(-3, 3, 60), np.linspace(-3, 3, 60)), -1).reshape(-1, 2)
fig, axes = plt.subplots(3, 3, figsize=(9, 8))
for row, (name, approximation) in enumerate((("Nyström", reference), ("NeuralEF", neural), ("IKA", ika))):
    values = approximation(grid).numpy()
    for j in range(3):
        axes[row, j].contourf(grid[:, 0].reshape(60, 60), grid[:, 1].reshape(60, 60), values[:, j].reshape(60, 60), 20)
        axes[row, j].set_title(f"{name} ψ_{j + 1}")
        axes[row, j].set_xticks([]), axes[row, j].set_yticks([])
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Regression on the feature map
# Any approximation's features √μ ψ(x) feed ridge regression (`FeatureRidge`): a finite-rank kernel machine.

# %%
y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(len(X), 1))
for name, approximation in (("Nyström", reference), ("NeuralEF", neural), ("IKA", ika)):
    model = FeatureRidge(approximation.features, regularisation=1e-3).fit(X, y)
    rmse = float(np.sqrt(np.mean((model.predict(X) - np.sin(X[:, :1])) ** 2)))
    print(f"{name} features, {k} of them: RMSE to the noise-free function {rmse:.3f}")

# %% [markdown]
# ## EigenPro 3: kernel machines with many centers
# EigenPro 3 (Abedsoltan et al., 2023) fits f = Σ_j α_j k(·, z_j) by preconditioned SGD, the preconditioner built
# from the top eigenpairs (Nyström by default, or any approximation above).

# %%
laplace = gpflow.kernels.Exponential(lengthscales=2.0)
machine = EigenPro3(laplace, num_centers=200, num_eigenpairs=20, subsample_size=500).fit(X, y, epochs=2 if FAST else 10, progress=False)
rmse = float(np.sqrt(np.mean((machine.predict(X) - np.sin(X[:, :1])) ** 2)))
print(f"EigenPro 3, 200 centers: RMSE to the noise-free function {rmse:.3f}")
