"""EigenfunctionFeature: eigenfunctions as interdomain inducing variables (activated_dgp/eigen/features.py).

Truths used:
* real spherical harmonics of levels 0–2 in closed (Cartesian) form, which are the eigenfunctions of
  any zonal kernel under the uniform distribution on S² (Funk–Hecke), against spherical harmonic
  features in the RKHS normalisation of Dutordoir et al. (2020), Kuu = diag(1/λ), Kuf = Y(x),
  registered here independently of the library: SGPR and SVGP must agree exactly;
* the Schur complement K − Qff of a Gaussian vector [f, u] is PSD whenever u is a linear functional
  of f, whatever the ψ;
* GPflow's SVGP as the reference for GPflux's GPLayer.
"""

import gpflow
import gpflux
import numpy as np
import pytest
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu

import activated_dgp as adgp
from activated_dgp.eigen import EigenfunctionFeature, NeuralEF, Nystrom

LEVELS = (0, 1, 2)


def _sphere(n, seed):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _harmonics(X):
    """√(4π) Y_nj(x) for n ≤ 2 (textbook real spherical harmonics), unit mean square under the uniform
    distribution on S²: [N, 9]."""
    X = np.asarray(X)
    x, y, z = X[:, 0], X[:, 1], X[:, 2]
    c1, c2, c20, c22 = np.sqrt(3 / (4 * np.pi)), 0.5 * np.sqrt(15 / np.pi), 0.25 * np.sqrt(5 / np.pi), 0.25 * np.sqrt(15 / np.pi)
    Y = np.stack(
        [np.full_like(x, 0.5 / np.sqrt(np.pi)), c1 * x, c1 * y, c1 * z,
         c2 * x * y, c2 * y * z, c20 * (3 * z**2 - 1), c2 * x * z, c22 * (x**2 - y**2)],
        axis=1,
    )
    return np.sqrt(4 * np.pi) * Y


class _RKHSHarmonics(gpflow.inducing_variables.InducingVariables):
    """Spherical harmonic features in the RKHS inner product (Dutordoir et al. 2020, eq. 15–16)."""

    def __init__(self, eigenvalues):
        super().__init__()
        self.lam = tf.constant(eigenvalues)

    def __len__(self):
        return int(self.lam.shape[0])

    @property
    def num_inducing(self):
        return tf.constant(len(self))

    @property
    def shape(self):
        return (len(self), None, 1)


@Kuu.register(_RKHSHarmonics, gpflow.kernels.Kernel)
def _kuu_rkhs(feature, kernel, *, jitter=0.0):
    return tf.linalg.diag(1.0 / feature.lam) + jitter * tf.eye(len(feature), dtype=tf.float64)


@Kuf.register(_RKHSHarmonics, gpflow.kernels.Kernel, object)
def _kuf_rkhs(feature, kernel, X):
    return tf.transpose(tf.constant(_harmonics(np.asarray(X))))


@pytest.fixture(scope="module")
def sphere_problem():
    gpflow.config.set_default_float(np.float64)
    X = _sphere(150, 0)
    y = (X[:, :1] * X[:, 1:2] + 0.5 * X[:, 2:3] + 0.1 * np.random.default_rng(1).normal(size=(150, 1)))
    kernel = adgp.ZonalArcCosine(input_dim=3, truncation_level=6, bias=False, lengthscales=1.0, variance=1.7)
    lam = 1.7 * np.repeat(kernel.eigenvalues[: len(LEVELS)], [1, 3, 5])
    return X, y, kernel, lam


@pytest.fixture
def no_jitter():
    """Both feature sets are exact: GPflow's jitter (added to Kuu = diag(λ) in one, diag(1/λ) in the
    other) would perturb them differently."""
    jitter = gpflow.config.default_jitter()
    gpflow.config.set_default_jitter(0.0)
    yield
    gpflow.config.set_default_jitter(jitter)


def test_harmonic_features_reproduce_the_zonal_svgp(sphere_problem, no_jitter):
    X, y, kernel, lam = sphere_problem
    ours = EigenfunctionFeature(_harmonics, form="diagonal", eigenvalues=lam)
    reference = _RKHSHarmonics(lam)
    noise = 0.05
    sgpr = [gpflow.models.SGPR((X, y), kernel, feature, noise_variance=noise) for feature in (ours, reference)]
    X_new = _sphere(20, 2)
    np.testing.assert_allclose(sgpr[0].elbo().numpy(), sgpr[1].elbo().numpy(), rtol=1e-10)
    for a, b in zip(sgpr[0].predict_f(X_new), sgpr[1].predict_f(X_new)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12)
    # SVGP: u_ours = ⟨f, ψ⟩_(L²) = λ ⟨f, ψ⟩_H = λ u_ref, so q(u_ours) = N(Λ m, Λ S Λ) gives the same ELBO
    rng = np.random.default_rng(3)
    m = rng.normal(size=(9, 1))
    L = np.tril(rng.normal(size=(9, 9))) * 0.1 + np.eye(9)
    elbos = []
    for feature, scale in ((reference, np.ones(9)), (ours, lam)):
        model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(noise), feature, whiten=False,
                                   q_mu=scale[:, None] * m, q_sqrt=(scale[:, None] * L)[None])
        elbos.append(model.elbo((X, y)).numpy())
    np.testing.assert_allclose(elbos[0], elbos[1], rtol=1e-10)


def test_monte_carlo_form_approaches_the_diagonal_form(sphere_problem):
    X, _, kernel, lam = sphere_problem
    Z = _sphere(3000, 4)
    feature = EigenfunctionFeature(_harmonics, samples=Z)
    K = Kuu(feature, kernel).numpy()
    np.testing.assert_allclose(np.diag(K), lam, rtol=0.15)
    assert np.abs(K - np.diag(np.diag(K))).max() < 0.1 * lam[0]
    np.testing.assert_allclose(Kuf(feature, kernel, X).numpy(), lam[:, None] * _harmonics(X).T, atol=0.1 * lam[0])


def _schur_min_eigenvalue(feature, kernel, X):
    Kff = kernel(X).numpy()
    Kmn = Kuf(feature, kernel, X).numpy()
    Kmm = Kuu(feature, kernel).numpy()
    S = Kff - Kmn.T @ np.linalg.solve(Kmm, Kmn)
    return np.linalg.eigvalsh(0.5 * (S + S.T)).min() / np.abs(Kff).max()


def test_k_minus_qff_psd_with_approximate_eigenfunctions():
    """ψ from a NeuralEF trained briefly (rough eigenfunctions) and from a Nyström fit with another
    lengthscale: the Monte Carlo form keeps K − Qff ⪰ 0, the diagonal form does not."""
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(5)
    X_train, X = rng.uniform(-2, 2, (400, 1)), rng.uniform(-2, 2, (120, 1))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.7)
    rough = NeuralEF(6, kernel=kernel, input_dim=1, seed=0).fit(X_train, num_steps=60)
    other = Nystrom(6).fit(X_train, gpflow.kernels.SquaredExponential(lengthscales=1.3))
    for approximation in (rough, other):
        mc = EigenfunctionFeature(approximation, samples=X_train)
        assert _schur_min_eigenvalue(mc, kernel, X) > -1e-9
        diagonal = EigenfunctionFeature(approximation, form="diagonal")
        assert _schur_min_eigenvalue(diagonal, kernel, X) < -1e-3


def test_svgp_and_gpflux_layer_agree():
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(6)
    X = rng.uniform(-1, 1, (200, 2))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.8)
    feature = EigenfunctionFeature(Nystrom(8).fit(X[:100], kernel), samples=X[:100])
    q_mu, q_sqrt = rng.normal(size=(8, 1)), (np.tril(rng.normal(size=(8, 8))) * 0.2 + np.eye(8))[None]
    svgp = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(0.1), feature, whiten=False, q_mu=q_mu, q_sqrt=q_sqrt)
    layer = gpflux.layers.GPLayer(
        gpflow.kernels.SharedIndependent(kernel, output_dim=1),
        gpflow.inducing_variables.SharedIndependentInducingVariables(feature),
        num_data=200,
        mean_function=gpflow.mean_functions.Zero(),
        whiten=False,
    )
    layer.q_mu.assign(q_mu)
    layer.q_sqrt.assign(q_sqrt)
    X_new = rng.uniform(-1, 1, (15, 2))
    mean, var = layer.predict(X_new, full_cov=False)
    reference_mean, reference_var = svgp.predict_f(X_new)
    np.testing.assert_allclose(mean.numpy(), reference_mean.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), reference_var.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(layer.prior_kl().numpy(), svgp.prior_kl().numpy(), rtol=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match="unknown form"):
        EigenfunctionFeature(_harmonics, form="exact")
    with pytest.raises(ValueError, match="needs samples"):
        EigenfunctionFeature(_harmonics)
    with pytest.raises(ValueError, match="needs the eigenvalues"):
        EigenfunctionFeature(_harmonics, form="diagonal")
    with pytest.raises(ValueError, match="expected \\[N, M\\]"):
        EigenfunctionFeature(lambda X: np.ones(len(X)), samples=_sphere(10, 0))
    with pytest.raises(ValueError, match="NaN"):
        EigenfunctionFeature(lambda X: np.full((len(X), 2), np.nan), samples=_sphere(10, 0))
    with pytest.raises(ValueError, match="callable"):
        EigenfunctionFeature(np.ones((3, 3)), samples=_sphere(10, 0))
