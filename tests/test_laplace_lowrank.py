"""The low-rank linearised Laplace approximation (``method="lowrank"``) against the dense GGN written in the test:
its top-k eigenpairs by numpy, the Woodbury posterior as a dense inverse, the evidence as a dense log-determinant."""

import os
import sys

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_laplace import data, dense_jacobians, hessians, mlp  # noqa: E402

from activated_dgp.eigen import Laplace, LinearisedLaplace  # noqa: E402


def dense_ggn(model, X, likelihood, noise=None):
    J, F = dense_jacobians(model, X)
    Lambda = hessians(likelihood, F, noise)
    return np.einsum("ncp,ncd,ndq->pq", J, Lambda, J), J


def top(H, k):
    values, vectors = np.linalg.eigh(H)
    return values[::-1][:k], vectors[:, ::-1][:, :k]


def dense_low_rank_evidence(model, X, Y, noise, k):
    """δ ↦ the Laplace evidence (Gaussian likelihood, σ² = ``noise``) with the dense GGN's top-k eigenpairs, P − k
    eigenvalues 0 (:func:`dense_evidence` of the truncated GGN)."""
    H, _ = dense_ggn(model, X, "gaussian", noise)
    values, vectors = top(H, k)
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    _, F = dense_jacobians(model, X)
    sse = float(np.sum((Y - F) ** 2))
    return lambda delta: dense_evidence(vectors @ np.diag(values) @ vectors.T * noise, theta, sse, Y.size, delta, noise)


@pytest.mark.parametrize("likelihood, C, cache", [("gaussian", 2, True), ("softmax", 3, True), ("softmax", 3, False)])
def test_lowrank_eigenpairs_and_predictive_match_the_dense_ggn(likelihood, C, cache, rng):
    X, Y = data(likelihood, 25, 2, C, rng)
    model = mlp(2, C, width=6, seed=3)
    k, delta, noise = 5, 0.7, 0.1
    la = LinearisedLaplace(model, likelihood, noise_variance=noise, prior_precision=delta, method="lowrank", num_eigenpairs=k,
                           jacobian_cache_bytes=2**30 if cache else 0, batch_size=7, verbose=0).fit(X, Y)
    H, _ = dense_ggn(model, X, likelihood, noise)
    values, vectors = top(H, k)
    np.testing.assert_allclose(la.ggn_eigenvalues, values, rtol=1e-8)
    np.testing.assert_allclose(la.ggn_eigenvectors @ la.ggn_eigenvectors.T, vectors @ vectors.T, atol=1e-8)  # same subspace
    X_test = rng.normal(size=(6, 2))
    J_test, _ = dense_jacobians(model, X_test)
    Sigma = np.linalg.inv(vectors @ np.diag(values) @ vectors.T + delta * np.eye(H.shape[0]))  # dense, not Woodbury
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, Sigma, J_test)
    np.testing.assert_allclose(la.predict_f(X_test, full_output_cov=True)[1].numpy(), expected, rtol=1e-8, atol=1e-12)


def test_lowrank_evidence_and_marginal_likelihood_prior_match_a_dense_computation(rng):
    X, Y = data("gaussian", 30, 2, 1, rng)
    model = mlp(2, 1, width=5, seed=6)
    k, noise = 6, 0.05
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision="marginal_likelihood", method="lowrank", num_eigenpairs=k, verbose=0).fit(X, Y)
    evidence = dense_low_rank_evidence(model, X, Y, noise, k)

    for delta in (0.01, 1.0, 30.0):
        np.testing.assert_allclose(la.log_marginal_likelihood(delta), evidence(delta), rtol=1e-9)
    best = minimize_scalar(lambda t: -evidence(np.exp(t)), bounds=(np.log(1e-6), np.log(1e6)), method="bounded", options={"xatol": 1e-10})
    np.testing.assert_allclose(np.log(la.prior_precision), best.x, atol=1e-5)


def test_lowrank_through_the_factory_and_its_errors(rng):
    X, Y = data("softmax", 15, 2, 3, rng)
    model = mlp(2, 3, width=4, seed=1)
    la = Laplace(model, "classification", "last_layer", "lowrank", num_eigenpairs=3, prior_precision=0.5, verbose=0).fit(X, Y)
    assert la.method == "lowrank" and la.num_parameters == 4 * 3 + 3  # the last Dense layer's kernel and bias
    J, F = dense_jacobians(model, X)
    H = np.einsum("ncp,ncd,ndq->pq", J[:, :, -15:], hessians("softmax", F), J[:, :, -15:])
    np.testing.assert_allclose(la.ggn_eigenvalues, top(H, 3)[0], rtol=1e-8)
    with pytest.raises(ValueError, match="rank < P"):
        LinearisedLaplace(model, "softmax", method="lowrank", num_eigenpairs=15, variables=model.layers[-1].trainable_variables, verbose=0).fit(X, Y)


def dense_evidence(H_at_1, theta, sse, n, delta, noise):
    """The Laplace evidence written densely: GGN H_at_1 / σ² (Λ = I/σ²), log p(D | θ_MAP) of the Gaussian."""
    P = theta.size
    return (-0.5 * sse / noise - 0.5 * n * np.log(2 * np.pi * noise) - 0.5 * delta * theta @ theta + 0.5 * P * np.log(delta)
            - 0.5 * np.linalg.slogdet(H_at_1 / noise + delta * np.eye(P))[1])


@pytest.mark.parametrize("method", ["exact", "diagonal", "kron", "lowrank"])
def test_noise_and_prior_by_marginal_likelihood_match_a_dense_2d_optimisation(method, rng):
    X, Y = data("gaussian", 40, 2, 1, rng)
    model = mlp(2, 1, width=4, seed=8)
    options = {"num_eigenpairs": 5} if method == "lowrank" else {}
    la = LinearisedLaplace(model, noise_variance="marginal_likelihood", prior_precision="marginal_likelihood", method=method, verbose=0, **options).fit(X, Y)
    J, F = dense_jacobians(model, X)
    H = np.einsum("ncp,ncq->pq", J, J)  # the GGN at σ² = 1
    if method == "diagonal":
        H = np.diag(np.diag(H))
    elif method == "lowrank":
        values, vectors = top(H, 5)
        H = vectors @ np.diag(values) @ vectors.T
    elif method == "kron":  # the Kronecker blocks, from the library's factors rescaled to σ² = 1 (checked densely in test_laplace_kfac)
        from scipy.linalg import block_diag
        H = block_diag(*la.kron.dense_blocks()) * la.noise_variance
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    sse, n = float(np.sum((Y - F) ** 2)), Y.size
    best = minimize(lambda z: -dense_evidence(H, theta, sse, n, np.exp(z[0]), np.exp(z[1])), np.log([1.0, sse / n]), method="Nelder-Mead",
                    options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 20000})
    np.testing.assert_allclose(np.log([la.prior_precision, la.noise_variance]), best.x, atol=1e-4)
    np.testing.assert_allclose(la.log_marginal_likelihood(), -best.fun, rtol=1e-9)
    for delta, noise in ((0.3, 0.02), (3.0, 0.5)):
        np.testing.assert_allclose(la.log_marginal_likelihood(delta, noise), dense_evidence(H, theta, sse, n, delta, noise), rtol=1e-9)
    # the predictive at the chosen noise: J Σ Jᵀ + σ² with Σ = (H/σ² + δ I)⁻¹, dense
    X_test = rng.normal(size=(5, 2))
    J_test, _ = dense_jacobians(model, X_test)
    Sigma = np.linalg.inv(H / la.noise_variance + la.prior_precision * np.eye(theta.size))
    expected = np.einsum("ncp,pq,ncq->nc", J_test, Sigma, J_test) + la.noise_variance
    np.testing.assert_allclose(la.predict_y(X_test)[1].numpy(), expected, rtol=1e-7)


def test_noise_by_marginal_likelihood_at_a_fixed_prior_and_its_errors(tmp_path, rng):
    X, Y = data("gaussian", 30, 2, 1, rng)
    model = mlp(2, 1, width=4, seed=9)
    la = LinearisedLaplace(model, noise_variance="marginal_likelihood", prior_precision=2.0, method="exact", verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    H = np.einsum("ncp,ncq->pq", J, J)
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    sse = float(np.sum((Y - F) ** 2))
    best = minimize_scalar(lambda t: -dense_evidence(H, theta, sse, Y.size, 2.0, np.exp(t)), bounds=(-15, 5), method="bounded", options={"xatol": 1e-11})
    assert la.prior_precision == 2.0
    np.testing.assert_allclose(np.log(la.noise_variance), best.x, atol=1e-5)
    again = LinearisedLaplace.load(la.save(str(tmp_path)))  # the fitted noise and the setting come back
    assert again.noise_variance == la.noise_variance and again.noise_variance_setting == "marginal_likelihood"
    np.testing.assert_allclose(again.log_marginal_likelihood(2.0, 0.1), la.log_marginal_likelihood(2.0, 0.1), rtol=1e-12)
    with pytest.raises(ValueError, match="gaussian"):
        LinearisedLaplace(mlp(2, 3), "softmax", noise_variance="marginal_likelihood")
    with pytest.raises(ValueError, match="evidence"):
        LinearisedLaplace(model, noise_variance="marginal_likelihood", prior_precision="validation")
    with pytest.raises(ValueError, match="noise_variance"):
        LinearisedLaplace(model, noise_variance="ml")


def test_eigenfunction_lla_evidence_with_exact_ntk_eigenpairs_is_the_dense_low_rank_evidence(rng):
    """Gaussian likelihood, the NTK's exact top-k eigenpairs (dense Gram in the test): eq. 22's evidence (the P − k
    left-out GGN eigenvalues as 0) equals the dense low-rank evidence with the GGN's top k, and its maximiser over δ
    is the dense one's."""
    from test_laplace import DenseNTKEigenpairs

    X, Y = data("gaussian", 20, 2, 1, rng)
    model = mlp(2, 1, width=5, seed=12)
    k, noise = 4, 0.1
    eigen = DenseNTKEigenpairs(model, X, k)
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision="marginal_likelihood", method="eigenfunctions", eigenfunctions=eigen, verbose=0).fit(X, Y)
    evidence = dense_low_rank_evidence(model, X, Y, noise, k)

    for delta in (0.05, 2.0):
        np.testing.assert_allclose(la.log_marginal_likelihood(delta), evidence(delta), rtol=1e-8)
    best = minimize_scalar(lambda t: -evidence(np.exp(t)), bounds=(np.log(1e-6), np.log(1e6)), method="bounded", options={"xatol": 1e-10})
    np.testing.assert_allclose(np.log(la.prior_precision), best.x, atol=1e-5)


@pytest.mark.parametrize("likelihood, C, k", [("gaussian", 1, 4), ("softmax", 3, 6)])
def test_the_subspace_covariance_with_exact_eigenpairs_is_the_lla_with_the_ggn_projected_on_the_top_ntk_directions(likelihood, C, k, rng):
    """J(x) Σ_k J(x)ᵀ with Σ_k⁻¹ = V_k V_kᵀ H V_k V_kᵀ + δ I, V_k the top right singular vectors of the training
    Jacobian (dense SVD in the test); far from the data too, where eq. 22 alone loses most of the prior variance."""
    from test_laplace import DenseNTKEigenpairs

    X, Y = data(likelihood, 20, 2, C, rng)
    model = mlp(2, C, width=5, seed=13)
    delta, noise = 0.8, 0.1
    eigen = DenseNTKEigenpairs(model, X, k)
    common = dict(noise_variance=noise, prior_precision=delta, method="eigenfunctions", eigenfunctions=eigen, verbose=0)
    la = LinearisedLaplace(model, likelihood, covariance="subspace", **common).fit(X, Y)
    plain = LinearisedLaplace(model, likelihood, **common).fit(X, Y)
    H, J = dense_ggn(model, X, likelihood, noise)
    V = np.linalg.svd(J.reshape(-1, J.shape[2]), full_matrices=False)[2][:k].T  # [P, k]
    projector = V @ V.T
    Sigma = np.linalg.inv(projector @ H @ projector + delta * np.eye(H.shape[0]))
    X_test = np.concatenate([rng.normal(size=(4, 2)), 30.0 * rng.normal(size=(3, 2))])  # near and far
    J_test, _ = dense_jacobians(model, X_test)
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, Sigma, J_test)
    covariance = la.predict_f(X_test, full_output_cov=True)[1].numpy()
    np.testing.assert_allclose(covariance, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())
    far = np.trace(plain.predict_f(X_test[4:], full_output_cov=True)[1].numpy(), axis1=1, axis2=2)
    assert np.all(far < 0.5 * np.trace(expected[4:], axis1=1, axis2=2))  # the prior variance eq. 22 loses far away
    # at the training inputs the two differ by δ⁻¹ J (I − V_k V_kᵀ) Jᵀ (module docstring)
    J_train = J
    gap = np.einsum("ncp,pq,ndq->ncd", J_train, np.eye(V.shape[0]) - projector, J_train) / delta
    np.testing.assert_allclose(la.predict_f(X, full_output_cov=True)[1].numpy() - plain.predict_f(X, full_output_cov=True)[1].numpy(), gap,
                               rtol=1e-6, atol=1e-9 * np.abs(gap).max())


@pytest.mark.parametrize("method", ["exact", "diagonal", "kron", "lowrank", "last_layer"])
def test_weight_sample_root_squares_to_the_dense_posterior_covariance(method, rng):
    """R Rᵀ = Σ for the sampler θ = θ_MAP + R z, Σ written densely in the test from the dense GGN (kron: from the
    Kronecker factors computed in numpy, as in test_laplace_kfac)."""
    from scipy.linalg import block_diag
    from test_laplace_kfac import numpy_factors

    from activated_dgp.eigen.laplace_sampling import parameter_root_times

    X, Y = data("softmax", 18, 2, 3, rng)
    model = mlp(2, 3, width=4, seed=21)
    delta = 0.6
    options = {"num_eigenpairs": 5} if method == "lowrank" else {}
    la = LinearisedLaplace(model, "softmax", prior_precision=delta, method=method, verbose=0, **options).fit(X, Y)
    H, J = dense_ggn(model, X, "softmax")
    if method == "diagonal":
        H = np.diag(np.diag(H))
    elif method == "lowrank":
        values, vectors = top(H, 5)
        H = vectors @ np.diag(values) @ vectors.T
    elif method == "kron":
        _, F = dense_jacobians(model, X)
        A, G = numpy_factors(model, X, hessians("softmax", F))
        H = block_diag(*[np.kron(a, g) for a, g in zip(A, G)])
    elif method == "last_layer":
        H = H[-15:, -15:]  # the last Dense layer: kernel 4 × 3 and bias 3
    Sigma = np.linalg.inv(H + delta * np.eye(H.shape[0]))
    R = parameter_root_times(la, np.eye(H.shape[0]))
    np.testing.assert_allclose(R @ R.T, Sigma, rtol=1e-8, atol=1e-10 * np.abs(Sigma).max())


def test_weight_sample_predictive_of_a_model_linear_in_its_weights(rng):
    """g(x) = x W + b is linear in θ, so the NN predictive's mean and variance over S samples are those of the
    sampled linear outputs, and approach the GLM predictive as S grows (within 5 Monte Carlo standard errors)."""
    import tf_keras

    X = rng.normal(size=(30, 2))
    Y = X @ np.array([[1.0], [-2.0]]) + 0.3 * rng.normal(size=(30, 1))
    model = tf_keras.Sequential([tf_keras.Input((2,), dtype="float64"), tf_keras.layers.Dense(1, dtype="float64")])
    model.layers[-1].set_weights([np.array([[0.9], [-1.8]]), np.array([0.1])])
    before = [w.copy() for w in model.get_weights()]
    la = LinearisedLaplace(model, noise_variance=0.09, prior_precision=2.0, method="exact", verbose=0).fit(X, Y)
    X_test = np.concatenate([rng.normal(size=(3, 2)), 10 * rng.normal(size=(2, 2))])
    glm_mean, glm_var = (t.numpy() for t in la.predict_y(X_test))
    S = 4000
    mean, var = (t.numpy() for t in la.predict_y(X_test, pred_type="nn", num_samples=S, seed=3))
    latent = glm_var - 0.09
    np.testing.assert_allclose(mean, glm_mean, atol=5 * np.sqrt(latent.max() / S))
    np.testing.assert_allclose(var - 0.09, latent, rtol=5 * np.sqrt(2 / S))
    for w, b in zip(model.get_weights(), before):  # the network is left at θ_MAP
        np.testing.assert_array_equal(w, b)
    with pytest.raises(ValueError, match="pred_type"):
        la.predict_y(X_test, pred_type="sample")
    with pytest.raises(ValueError, match="marginal"):
        la.predict_y(X_test, pred_type="nn", full_output_cov=True)


@pytest.mark.parametrize("method", ["diagonal", "kron", "exact", "lowrank"])
def test_layerwise_prior_precisions_by_marginal_likelihood_match_a_dense_optimisation(method, rng):
    """One δ per variable (diagonal, exact, lowrank: the dense GGN's top 6 eigenpairs) or per Dense layer (kron): the
    evidence with diag(δ_p) written densely, maximised by scipy in the test, and the predictive J (H + diag δ_p)⁻¹ Jᵀ + σ²."""
    from scipy.linalg import block_diag
    from test_laplace_kfac import numpy_factors

    X, Y = data("gaussian", 40, 2, 1, rng)
    model = mlp(2, 1, width=4, seed=31, hidden=2)
    for variable in model.trainable_variables:  # non-zero biases: a zero group's evidence peaks only at δ → ∞
        variable.assign(0.7 * rng.normal(size=variable.shape))
    noise = 0.05
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision="marginal_likelihood", method=method, prior_structure="layerwise",
                           num_eigenpairs=6, verbose=0).fit(X, Y)
    H, J = dense_ggn(model, X, "gaussian", noise)
    _, F = dense_jacobians(model, X)
    sizes = [int(np.prod(v.shape)) for v in model.trainable_variables]
    if method == "diagonal":
        H = np.diag(np.diag(H))
    elif method == "lowrank":
        values, vectors = np.linalg.eigh(H)
        H = (vectors[:, -6:] * values[-6:]) @ vectors[:, -6:].T
    elif method == "kron":
        A, G = numpy_factors(model, X, hessians("gaussian", F, noise))
        H = block_diag(*[np.kron(a, g) for a, g in zip(A, G)])
        sizes = [a.shape[0] * g.shape[0] for a, g in zip(A, G)]
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    log_lik = -0.5 * np.sum((Y - F) ** 2) / noise - 0.5 * Y.size * np.log(2 * np.pi * noise)

    def evidence(log_deltas):
        d = np.repeat(np.exp(log_deltas), sizes)
        return log_lik - 0.5 * np.sum(d * theta**2) + 0.5 * np.sum(np.log(d)) - 0.5 * np.linalg.slogdet(H + np.diag(d))[1]

    assert np.asarray(la.prior_precision).shape == (len(sizes),)
    np.testing.assert_allclose(la.log_marginal_likelihood(), evidence(np.log(la.prior_precision)), rtol=1e-9)
    best = minimize(lambda z: -evidence(z), np.zeros(len(sizes)), method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-13, "maxiter": 40000})
    assert la.log_marginal_likelihood() >= -best.fun - 1e-7 * abs(best.fun)  # as high as scipy's optimum
    z, h = np.log(la.prior_precision), 1e-5  # and stationary: the dense evidence's central differences vanish there
    gradient = [(evidence(z + h * np.eye(z.size)[i]) - evidence(z - h * np.eye(z.size)[i])) / (2 * h) for i in range(z.size)]
    np.testing.assert_allclose(gradient, 0.0, atol=1e-4)
    X_test = rng.normal(size=(5, 2))
    J_test, _ = dense_jacobians(model, X_test)
    Sigma = np.linalg.inv(H + np.diag(np.repeat(la.prior_precision, sizes)))
    np.testing.assert_allclose(la.predict_y(X_test)[1].numpy(), np.einsum("ncp,pq,ncq->nc", J_test, Sigma, J_test) + noise, rtol=1e-8)
    from activated_dgp.eigen.laplace_sampling import parameter_root_times  # the weight samples' covariance too
    R = parameter_root_times(la, np.eye(theta.size))
    np.testing.assert_allclose(R @ R.T, Sigma, rtol=1e-8, atol=1e-10 * np.abs(Sigma).max())


def test_layerwise_prior_errors(tmp_path, rng):
    X, Y = data("gaussian", 20, 2, 1, rng)
    model = mlp(2, 1, width=4, seed=32)
    with pytest.raises(ValueError, match="layerwise' is for methods.*not 'last_layer'"):
        LinearisedLaplace(model, method="last_layer", prior_structure="layerwise")
    with pytest.raises(ValueError, match="validation"):
        LinearisedLaplace(model, method="diagonal", prior_structure="layerwise", prior_precision="validation")
    with pytest.raises(ValueError, match="4 positive prior precisions"):
        LinearisedLaplace(model, method="diagonal", prior_structure="layerwise", prior_precision=[1.0, 2.0], verbose=0).fit(X, Y).predict_y(X)
    la = LinearisedLaplace(model, method="diagonal", prior_structure="layerwise", prior_precision=[1.0, 2.0, 3.0, 4.0], verbose=0).fit(X, Y)
    again = LinearisedLaplace.load(la.save(str(tmp_path)))
    np.testing.assert_array_equal(again.predict_y(X)[1].numpy(), la.predict_y(X)[1].numpy())
