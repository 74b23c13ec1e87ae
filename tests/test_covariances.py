"""Kuu/Kuf of ActivationFeature under ZonalArcCosine against independent oracles, and in GPflow models."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu
from scipy.special import roots_legendre, sph_harm_y

from activated_dgp import ActivationFeature, ZonalArcCosine
from activated_dgp.zonal import ZonalKernel, zonal_matern52_shape


def _softplus3(t):
    return np.logaddexp(0.0, 3.0 * t)


def _bumpy(t):
    return np.sin(2.5 * t) + 0.3 * t**3 + np.exp(-4 * t**2)


def _sphere_grid(n_theta=64, n_phi=128):
    """Product Gauss rule on S²: exact for spherical harmonics of degree < ~60."""
    u, w = roots_legendre(n_theta)
    theta = np.arccos(u)
    phi = np.arange(n_phi) * 2 * np.pi / n_phi
    T, P = np.meshgrid(theta, phi, indexing="ij")
    points = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1).reshape(-1, 3)
    weights = (w[:, None] * np.full(n_phi, 2 * np.pi / n_phi)[None, :]).reshape(-1)
    return T.reshape(-1), P.reshape(-1), points, weights


def _harmonics(levels, theta, phi):
    """φ_nm = √(4π) Y_nm, orthonormal under dω/4π (eq. B.1), for n < levels: list of [P, 2n+1]."""
    return [np.sqrt(4 * np.pi) * np.stack([sph_harm_y(n, m, theta, phi) for m in range(-n, n + 1)], -1) for n in range(levels)]


def _angles(unit):
    return np.arccos(np.clip(unit[:, 2], -1, 1)), np.arctan2(unit[:, 1], unit[:, 0])


def test_kuu_kuf_equal_rkhs_inner_products_computed_by_harmonic_projection(rng):
    """Independent of Funk–Hecke and of the addition theorem: project g_m(x̂) = ‖w_m‖ σ(ŵ_m·x̂) onto
    spherical harmonics of S² by quadrature, then ⟨g, h⟩_H = Σ_(n<Ñ) Σ_j g_nj h_nj / (v λ_n) (eq. 9)
    and Cov(u_m, f(x)) = ‖x̃‖ Σ_(n<Ñ) Σ_j g_nj φ_nj(x̂) (reproducing property)."""
    truncation, variance = 8, 1.6
    lengthscales = np.array([0.7, 1.4, 1.1])
    kernel = ZonalArcCosine(2, truncation, variance=variance, lengthscales=lengthscales)
    W = rng.normal(size=(5, 3)) * rng.uniform(0.5, 2.0, size=(5, 1))
    X = rng.normal(size=(6, 2))
    feature = ActivationFeature(W, "softplus", truncation)

    theta, phi, points, weights = _sphere_grid()
    harmonics = _harmonics(truncation, theta, phi)
    norms_w = np.linalg.norm(W, axis=1)
    g = norms_w[:, None] * _softplus3((W / norms_w[:, None]) @ points.T)  # [M, P]
    coefficients = [(g * weights) @ np.conj(Y) / (4 * np.pi) for Y in harmonics]  # [M, 2n+1]

    lam = kernel.eigenvalues
    Kuu_reference = sum(
        (c @ np.conj(c).T).real / (variance * lam[n]) for n, c in enumerate(coefficients) if lam[n] != 0
    )
    X_tilde = np.concatenate([X, np.ones((6, 1))], 1) / lengthscales
    radius = np.linalg.norm(X_tilde, axis=1)
    x_harmonics = _harmonics(truncation, *_angles(X_tilde / radius[:, None]))
    Kuf_reference = radius[None, :] * sum(
        (c @ Y.T).real for n, (c, Y) in enumerate(zip(coefficients, x_harmonics)) if lam[n] != 0
    )
    np.testing.assert_allclose(Kuu(feature, kernel).numpy(), Kuu_reference, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(Kuf(feature, kernel, X).numpy(), Kuf_reference, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("input_dim", [1, 2])
def test_relu_features_converge_to_the_relu_of_the_preactivation(input_dim, rng):
    """For the ReLU the zonal inducing function equals max(0, w·x̃) exactly (Sec. 4.1)."""
    W = rng.normal(size=(6, input_dim + 1))
    X = rng.normal(size=(40, input_dim))
    reference = np.maximum(0.0, W @ np.concatenate([X, np.ones((40, 1))], 1).T)
    errors = []
    for truncation in (5, 20, 80):
        kernel = ZonalArcCosine(input_dim, truncation, threshold=0.0)
        feature = ActivationFeature(W, "relu", truncation, threshold=0.0)
        errors.append(np.max(np.abs(Kuf(feature, kernel, X).numpy() - reference)))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.03 * np.abs(reference).max(), errors


ACTIVATIONS = ["relu", "softplus", "swish", _bumpy]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=["relu", "softplus", "swish", "callable"])
@pytest.mark.parametrize("input_dim,num_inducing", [(1, 12), (4, 30)])
def test_nystrom_gap_is_psd_and_sgpr_bound_below_gpr_evidence(activation, input_dim, num_inducing, rng):
    kernel = ZonalArcCosine(input_dim, 10, variance=1.3, lengthscales=rng.uniform(0.5, 2.0, input_dim + 1))
    feature = ActivationFeature(rng.normal(size=(num_inducing, input_dim + 1)), activation, 10)
    X = rng.normal(size=(80, input_dim))
    K = kernel(X).numpy()
    Kfu = Kuf(feature, kernel, X).numpy().T
    Kmm = Kuu(feature, kernel).numpy()
    Qff = Kfu @ np.linalg.pinv(Kmm, rcond=1e-12, hermitian=True) @ Kfu.T
    gap = np.linalg.eigvalsh(K - Qff)
    assert gap.min() > -1e-8 * np.abs(K).max(), gap.min()

    Y = np.sin(3 * X[:, :1]) + 0.1 * rng.normal(size=(80, 1))
    gpr = gpflow.models.GPR((X, Y), kernel=kernel, noise_variance=0.05)
    sgpr = gpflow.models.SGPR((X, Y), kernel=kernel, inducing_variable=feature, noise_variance=0.05)
    evidence, bound = gpr.log_marginal_likelihood().numpy(), sgpr.elbo().numpy()
    assert np.isfinite(bound) and bound <= evidence + 1e-6 * abs(evidence), (bound, evidence)


def test_gradients_of_kuu_and_kuf_wrt_w_and_x_match_finite_differences(rng):
    kernel = ZonalArcCosine(2, 12, variance=0.9, lengthscales=[1.2, 0.8, 1.5])
    W0, X0 = rng.normal(size=(4, 3)), rng.normal(size=(5, 2))
    probe_uu, probe_uf = rng.normal(size=(4, 4)), rng.normal(size=(4, 5))

    def objective(W, X):
        feature = ActivationFeature(W, "softplus", 12)
        return tf.reduce_sum(probe_uu * Kuu(feature, kernel)) + tf.reduce_sum(probe_uf * Kuf(feature, kernel, X))

    W, X = tf.Variable(W0), tf.Variable(X0)
    feature = ActivationFeature(W0, "softplus", 12)
    feature.W.assign(W0)
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(probe_uu * Kuu(feature, kernel)) + tf.reduce_sum(probe_uf * Kuf(feature, kernel, X))
    grad_W, grad_X = tape.gradient(value, [feature.W.unconstrained_variable, X])
    step = 1e-6
    for gradient, base, which in ((grad_W, W0, "W"), (grad_X, X0, "X")):
        for index in [(0, 0), (1, 2 if which == "W" else 1), (3, 1)]:
            delta = np.zeros_like(base)
            delta[index] = step
            if which == "W":
                up, down = objective(W0 + delta, X0), objective(W0 - delta, X0)
            else:
                up, down = objective(W0, X0 + delta), objective(W0, X0 - delta)
            finite = (up.numpy() - down.numpy()) / (2 * step)
            assert gradient.numpy()[index] == pytest.approx(finite, rel=1e-6, abs=1e-7)


def test_multioutput_wrappers_match_single_output_models(rng):
    """SharedIndependent / SeparateIndependent SVGPs give per-output predictions equal to single-output SVGPs."""
    X = rng.normal(size=(30, 2))
    Xnew = rng.normal(size=(8, 2))
    W1, W2 = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    q_mu = rng.normal(size=(6, 2))
    q_sqrt = np.stack([np.tril(rng.normal(size=(6, 6))) * 0.3 + np.eye(6) for _ in range(2)])
    likelihood = gpflow.likelihoods.Gaussian()

    def single(W, column, kernel):
        model = gpflow.models.SVGP(kernel, likelihood, ActivationFeature(W, "softplus", 10), q_mu=q_mu[:, column:column + 1], q_sqrt=q_sqrt[column:column + 1])
        return [m.numpy() for m in model.predict_f(Xnew)]

    kernel = ZonalArcCosine(2, 10, variance=1.2, lengthscales=[1.0, 0.7, 1.3])
    shared = gpflow.models.SVGP(
        gpflow.kernels.SharedIndependent(kernel, output_dim=2),
        likelihood,
        gpflow.inducing_variables.SharedIndependentInducingVariables(ActivationFeature(W1, "softplus", 10)),
        num_latent_gps=2, q_mu=q_mu, q_sqrt=q_sqrt,
    )
    kernels = [ZonalArcCosine(2, 10, variance=v) for v in (0.7, 1.9)]
    separate = gpflow.models.SVGP(
        gpflow.kernels.SeparateIndependent(kernels),
        likelihood,
        gpflow.inducing_variables.SeparateIndependentInducingVariables(
            [ActivationFeature(W1, "softplus", 10), ActivationFeature(W2, "softplus", 10)]
        ),
        num_latent_gps=2, q_mu=q_mu, q_sqrt=q_sqrt,
    )
    mean, var = [m.numpy() for m in shared.predict_f(Xnew)]
    for column in range(2):
        ref_mean, ref_var = single(W1, column, kernel)
        np.testing.assert_allclose(mean[:, column], ref_mean[:, 0], rtol=1e-10)
        np.testing.assert_allclose(var[:, column], ref_var[:, 0], rtol=1e-8)
    mean, var = [m.numpy() for m in separate.predict_f(Xnew)]
    for column, (W, k) in enumerate(zip((W1, W2), kernels)):
        ref_mean, ref_var = single(W, column, k)
        np.testing.assert_allclose(mean[:, column], ref_mean[:, 0], rtol=1e-10)
        np.testing.assert_allclose(var[:, column], ref_var[:, 0], rtol=1e-8)
    assert np.isfinite(shared.elbo((X, rng.normal(size=(30, 2)))).numpy())


def test_svgp_with_softplus_features_fits_a_1d_toy_problem(rng):
    """Fig. 4/5 setting: 1-D inputs plus bias (d = 2, α = 0), Softplus features, Ñ = 20."""
    X = np.sort(rng.uniform(-2, 2, size=(200, 1)), axis=0)
    f = np.sin(2.5 * X) + 0.5 * X
    Y = f + 0.1 * rng.normal(size=X.shape)
    X_test = np.linspace(-1.9, 1.9, 100)[:, None]
    f_test = np.sin(2.5 * X_test) + 0.5 * X_test
    kernel = ZonalArcCosine(1, 20, variance=1.0, lengthscales=[1.0, 1.0])
    W = np.stack([rng.normal(size=20) * 2, rng.normal(size=20)], 1)
    model = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(0.1), ActivationFeature(W, "softplus", 20), num_data=200)
    elbo_before = model.elbo((X, Y)).numpy()
    gpflow.optimizers.Scipy().minimize(model.training_loss_closure((X, Y)), model.trainable_variables, options=dict(maxiter=400))
    mean, var = model.predict_y(X_test)
    rmse = np.sqrt(np.mean((mean.numpy() - f_test) ** 2))
    assert model.elbo((X, Y)).numpy() > elbo_before
    assert rmse < 0.06, rmse  # noise std is 0.1
    assert np.all(var.numpy() > 0)
    assert model.likelihood.variance.numpy() == pytest.approx(0.01, rel=0.5)


def test_matern_kernel_with_softplus_features_is_consistent(rng):
    """The generic zonal kernel shares Kuu/Kuf; its full spectrum makes the gap larger but still PSD."""
    kernel = ZonalKernel(zonal_matern52_shape, 2, 10)
    feature = ActivationFeature(rng.normal(size=(10, 3)), "softplus", 10)
    X = rng.normal(size=(40, 2))
    Kfu = Kuf(feature, kernel, X).numpy().T
    gap = kernel(X).numpy() - Kfu @ np.linalg.pinv(Kuu(feature, kernel).numpy(), rcond=1e-12, hermitian=True) @ Kfu.T
    assert np.linalg.eigvalsh(gap).min() > -1e-8


def test_bad_inducing_inputs_raise_value_errors(rng):
    kernel = ZonalArcCosine(3, 10)
    with pytest.raises(ValueError, match="W must be \\[M, 4\\]"):
        Kuu(ActivationFeature(rng.normal(size=(5, 3)), "relu", 10), kernel)
    with pytest.raises(ValueError, match="zero norm"):
        ActivationFeature(np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]]), "relu", 10)
    with pytest.raises(ValueError, match="unknown activation 'tanhh'"):
        ActivationFeature(rng.normal(size=(5, 4)), "tanhh", 10)
    with pytest.raises(ValueError, match="truncation_level"):
        ActivationFeature(rng.normal(size=(5, 4)), "relu", 0)
    with pytest.raises(ValueError, match="NaN or inf"):
        ActivationFeature(np.full((2, 4), np.nan), "relu", 10)
    feature = ActivationFeature(rng.normal(size=(5, 4)), "relu", 10)
    with pytest.raises(ValueError, match="3 columns"):
        Kuf(feature, kernel, rng.normal(size=(7, 2)))
    # values (NaN/inf inputs, a W trained to zero rows) are checked at the entry points, not in every Kuu/Kuf
    # call: tests/test_reliability.py and test_kernels.test_values_are_checked_at_the_entry_points_not_in_every_kernel_call


def test_gpflux_gp_layers_with_activated_features_train(rng):
    """A two-layer gpflux DeepGP of activated GP layers builds, and one epoch of ELBO training runs."""
    import gpflux
    import tf_keras

    X = rng.uniform(-2, 2, size=(64, 2))
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:])
    layers = []
    for input_dim, output_dim in ((2, 2), (2, 1)):
        kernel = gpflow.kernels.SharedIndependent(ZonalArcCosine(input_dim, 10), output_dim=output_dim)
        feature = gpflow.inducing_variables.SharedIndependentInducingVariables(
            ActivationFeature(rng.normal(size=(16, input_dim + 1)), "softplus", 10)
        )
        layers.append(gpflux.layers.GPLayer(kernel, feature, num_data=64, num_latent_gps=output_dim, mean_function=gpflow.mean_functions.Zero()))
    model = gpflux.models.DeepGP(layers, gpflux.layers.LikelihoodLayer(gpflow.likelihoods.Gaussian(0.1)))
    training = model.as_training_model()
    training.compile(tf_keras.optimizers.Adam(0.01))
    history = training.fit({"inputs": X, "targets": Y}, batch_size=32, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    mean, var = model.predict_f(X[:5])
    assert mean.shape == (5, 1) and np.all(var.numpy() > 0)
