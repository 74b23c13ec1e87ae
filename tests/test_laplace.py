"""The linearised Laplace approximation (activated_dgp.eigen.laplace) against independent computations
written here: dense GGNs from per-example Jacobians of a hand-written forward pass on a flat parameter
vector, eq. 22 of Deng et al. (2022) in its N C × N C (pre-Woodbury) form with eigenpairs of the dense
NTK Gram, Bayesian linear regression on the last layer's features, Gauss–Hermite quadrature and Monte
Carlo for the classification predictives."""

import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from scipy.special import expit, logsumexp, softmax

from activated_dgp import saving
from activated_dgp.eigen import LinearisedLaplace



def mlp(input_dim, outputs, width=8, seed=0, hidden=1):
    tf_keras.utils.set_random_seed(seed)
    layers = [tf_keras.Input((input_dim,), dtype="float64")]
    layers += [tf_keras.layers.Dense(width, activation="tanh", dtype="float64") for _ in range(hidden)]
    layers.append(tf_keras.layers.Dense(outputs, dtype="float64"))
    return tf_keras.Sequential(layers)


def dense_jacobians(model, X):
    """J [N, C, P]: ∂g(x_n)_c/∂θ by tf.GradientTape.jacobian of a hand-written forward pass of the MLP
    on one flat parameter vector θ (kernel then bias per layer, the order of trainable_variables)."""
    dense = [layer for layer in model.layers if isinstance(layer, tf_keras.layers.Dense)]
    theta = tf.Variable(np.concatenate([w.numpy().ravel() for layer in dense for w in (layer.kernel, layer.bias)]))
    with tf.GradientTape() as tape:
        h, offset = tf.constant(X), 0
        for layer in dense:
            a, b = layer.kernel.shape
            W = tf.reshape(theta[offset : offset + a * b], (a, b))
            bias = theta[offset + a * b : offset + a * b + b]
            offset += a * b + b
            h = layer.activation(h @ W + bias)
    return tape.jacobian(h, theta).numpy(), h.numpy()


def hessians(likelihood, F, noise=None):
    if likelihood == "gaussian":
        return np.stack([np.eye(F.shape[1]) / noise] * F.shape[0])
    if likelihood == "bernoulli":
        s = 1 / (1 + np.exp(-F))
        return (s * (1 - s))[:, :, None]
    p = np.exp(F - logsumexp(F, axis=1, keepdims=True))
    return np.stack([np.diag(q) - np.outer(q, q) for q in p])


def data(likelihood, N, D, C, rng):
    X = rng.normal(size=(N, D))
    if likelihood == "gaussian":
        return X, np.sin(X[:, :C]) + 0.1 * rng.normal(size=(N, C))
    if likelihood == "bernoulli":
        return X, (X[:, :1] > 0).astype(float)
    return X, rng.integers(0, C, size=(N, 1)).astype(float)


@pytest.mark.parametrize("likelihood, C", [("gaussian", 2), ("bernoulli", 1), ("softmax", 3)])
def test_exact_matches_dense_ggn(likelihood, C, rng):
    X, Y = data(likelihood, 30, 3, C, rng)
    X_test = rng.normal(size=(7, 3))
    model = mlp(3, C, seed=1)
    noise, delta = 0.3, 2.5
    la = LinearisedLaplace(model, likelihood, noise_variance=noise, prior_precision=delta, method="exact", verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    Lambda = hessians(likelihood, F, noise)
    precision = np.einsum("ncp,ncd,ndq->pq", J, Lambda, J) + delta * np.eye(J.shape[2])
    J_test, F_test = dense_jacobians(model, X_test)
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, np.linalg.inv(precision), J_test)
    mean, covariance = la.predict_f(X_test, full_output_cov=True)
    np.testing.assert_allclose(mean.numpy(), F_test, rtol=1e-12)
    np.testing.assert_allclose(covariance.numpy(), expected, rtol=1e-6, atol=1e-12 * np.abs(expected).max())
    _, variance = la.predict_f(X_test, full_output_cov=False)
    np.testing.assert_allclose(variance.numpy(), np.diagonal(expected, axis1=1, axis2=2), rtol=1e-6)


def test_diagonal_matches_dense_diagonal_ggn(rng):
    X, Y = data("softmax", 25, 2, 3, rng)
    model = mlp(2, 3, seed=2)
    la = LinearisedLaplace(model, "softmax", prior_precision=0.7, method="diagonal", verbose=0).fit(X, Y)
    J, F = dense_jacobians(model, X)
    diagonal = np.diagonal(np.einsum("ncp,ncd,ndq->pq", J, hessians("softmax", F), J)) + 0.7
    X_test = rng.normal(size=(5, 2))
    J_test, _ = dense_jacobians(model, X_test)
    expected = np.einsum("ncp,p,ndp->ncd", J_test, 1 / diagonal, J_test)
    np.testing.assert_allclose(la.predict_f(X_test)[1].numpy(), expected, rtol=1e-8)


def twin(input_dim, outputs, seed):
    """The library's activated twin (ActivatedLayer, Dense without bias, ×2): a chain the diagonal method
    handles layer by layer."""
    from activated_dgp import build_activated_nn

    model = build_activated_nn(input_dim, num_layers=2, num_units=6, layer_widths=[4], output_dim=outputs,
                               truncation_level=6, seed=seed)
    model(np.zeros((1, input_dim)))
    return model


def autodiff_jacobians(model, X):
    """J [N, C, P] by tf.GradientTape.jacobian of the batch's outputs [N, C] over model.trainable_variables (their
    order), and the outputs."""
    with tf.GradientTape() as tape:
        output = model(tf.constant(X))
    blocks = tape.jacobian(output, model.trainable_variables)
    N, C = output.shape
    return np.concatenate([b.numpy().reshape(N, C, -1) for b in blocks], axis=2), output.numpy()


def test_diagonal_of_the_activated_twin_is_computed_layer_wise_and_matches_its_dense_jacobians(rng):
    X, Y = data("softmax", 20, 3, 3, rng)
    model = twin(3, 3, seed=4)
    la = LinearisedLaplace(model, "softmax", prior_precision=0.4, method="diagonal", batch_size=8, verbose=0).fit(X, Y)
    assert la._layerwise is not None  # the layer-wise path, not the per-example Jacobians
    J, F = autodiff_jacobians(model, X)
    diagonal = np.einsum("ncp,ncd,ndp->p", J, hessians("softmax", F), J)
    np.testing.assert_allclose(la.ggn_eigenvalues, diagonal, rtol=1e-9, atol=1e-12 * diagonal.max())
    X_test = 3 * rng.normal(size=(6, 3))
    J_test, _ = autodiff_jacobians(model, X_test)
    expected = np.einsum("ncp,p,ndp->ncd", J_test, 1 / (diagonal + 0.4), J_test)
    np.testing.assert_allclose(la.predict_f(X_test)[1].numpy(), expected, rtol=1e-8, atol=1e-12 * np.abs(expected).max())


@pytest.mark.parametrize("method", ["exact", "last_layer"])
def test_full_covariance_methods_on_the_twin_are_computed_layer_wise_and_match_its_dense_jacobians(method, rng):
    X, Y = data("softmax", 20, 3, 3, rng)
    model = twin(3, 3, seed=6)
    la = LinearisedLaplace(model, "softmax", prior_precision=0.6, method=method, batch_size=8, verbose=0).fit(X, Y)
    assert la._layerwise is not None
    J, F = autodiff_jacobians(model, X)
    X_test = 3 * rng.normal(size=(5, 3))
    J_test, _ = autodiff_jacobians(model, X_test)
    if method == "last_layer":  # the last Dense layer's kernel: the last 6 · 3 parameters
        J, J_test = J[:, :, -18:], J_test[:, :, -18:]
    precision = np.einsum("ncp,ncd,ndq->pq", J, hessians("softmax", F), J) + 0.6 * np.eye(J.shape[2])
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, np.linalg.inv(precision), J_test)
    np.testing.assert_allclose(la.predict_f(X_test)[1].numpy(), expected, rtol=1e-7, atol=1e-12 * np.abs(expected).max())


def test_the_pairs_ntk_features_of_the_twin_are_its_jacobian_rows(rng):
    """The layer-wise Jacobian of the pairs (x_b, c_b) NeuralEF learns the multi-output NTK on (§3.2): row b is
    ∂_θ g_(c_b)(x_b), against autodiff; and a weighted combination of outputs is that combination of rows."""
    from activated_dgp.eigen.layerwise import layerwise_jacobian

    model = twin(3, 3, seed=7)
    X = 2 * rng.normal(size=(5, 3))
    J, _ = autodiff_jacobians(model, X)
    layerwise = layerwise_jacobian(model, model.trainable_variables)
    classes = np.array([0, 2, 1, 1, 0])
    rows = layerwise.combination_jacobian(tf.constant(X), tf.constant(np.eye(3)[classes])).numpy()
    np.testing.assert_allclose(rows, J[np.arange(5), classes], rtol=1e-10, atol=1e-13 * np.abs(J).max())
    weights = rng.normal(size=(5, 3))
    combined = layerwise.combination_jacobian(tf.constant(X), tf.constant(weights)).numpy()
    np.testing.assert_allclose(combined, np.einsum("bc,bcp->bp", weights, J), rtol=1e-9, atol=1e-12 * np.abs(J).max())
    # the batch's NTK Gram without its rows: R Rᵀ of the autodiff rows, for pairs and for a combination
    for w, R in ((np.eye(3)[classes], J[np.arange(5), classes]), (weights, np.einsum("bc,bcp->bp", weights, J))):
        gram = layerwise.combination_gram(tf.constant(X), tf.constant(w)).numpy()
        np.testing.assert_allclose(gram, R @ R.T, rtol=1e-9, atol=1e-12 * np.abs(R @ R.T).max())


def test_diagonal_validation_prior_of_the_twin_matches_the_dense_gaussian_validation_nll(rng):
    X, Y = data("gaussian", 24, 2, 1, rng)
    X_val, Y_val = data("gaussian", 9, 2, 1, rng)
    model, noise, grid = twin(2, 1, seed=5), 0.2, np.logspace(-2, 2, 5)
    la = LinearisedLaplace(model, "gaussian", noise_variance=noise, prior_precision="validation", method="diagonal",
                           prior_precision_grid=grid, verbose=0).fit(X, Y, validation_data=(X_val, Y_val))
    J, _ = autodiff_jacobians(model, X)
    diagonal = np.einsum("ncp,ncp->p", J, J) / noise
    J_val, F_val = autodiff_jacobians(model, X_val)
    expected = []
    for delta in grid:
        variance = np.einsum("ncp,p,ncp->n", J_val, 1 / (diagonal + delta), J_val) + noise
        expected.append(np.mean(0.5 * np.log(2 * np.pi * variance) + 0.5 * (Y_val[:, 0] - F_val[:, 0]) ** 2 / variance))
    np.testing.assert_allclose(la.validation_nll, expected, rtol=1e-9)
    assert la.prior_precision == grid[int(np.argmin(expected))]


def test_diagonal_of_a_network_that_is_not_a_chain_uses_its_jacobians(rng):
    X, Y = data("gaussian", 15, 2, 2, rng)
    inputs = tf_keras.Input((2,), dtype="float64")
    hidden = tf_keras.layers.Dense(5, activation="tanh", dtype="float64")(inputs)
    outputs = tf_keras.layers.Dense(2, dtype="float64")(tf_keras.layers.Concatenate()([hidden, inputs]))
    model = tf_keras.Model(inputs, outputs)
    la = LinearisedLaplace(model, "gaussian", noise_variance=0.5, prior_precision=1.3, method="diagonal", verbose=0).fit(X, Y)
    assert la._layerwise is None
    J, _ = autodiff_jacobians(model, X)
    X_test = rng.normal(size=(4, 2))
    J_test, _ = autodiff_jacobians(model, X_test)
    expected = np.einsum("ncp,p,ndp->ncd", J_test, 1 / (np.einsum("ncp,ncp->p", J, J) / 0.5 + 1.3), J_test)
    np.testing.assert_allclose(la.predict_f(X_test, full_output_cov=True)[1].numpy(), expected, rtol=1e-8)


class DenseNTKEigenpairs:
    """The top-k eigenpairs of the empirical NTK's integral operator over the N C training pairs (x_n, c),
    from the eigendecomposition of the dense Gram J Jᵀ [N C, N C] (μ = λ / (N C), ψ = √(N C) U at the
    training pairs) with the Nyström extension ψ_j(x, c) = J_c(x) Jᵀ U_j √(N C) / λ_j elsewhere."""

    def __init__(self, model, X, k):
        self.model, self.D = model, X.shape[1]
        J, F = dense_jacobians(model, X)
        self.C = F.shape[1]
        self.J_train = J.reshape(-1, J.shape[2])
        values, vectors = np.linalg.eigh(self.J_train @ self.J_train.T)
        order = np.argsort(values)[::-1][:k]
        n = self.J_train.shape[0]
        self.eigenvalues = values[order] / n
        self.coefficients = vectors[:, order] * np.sqrt(n) / values[order]

    def __call__(self, inputs):
        inputs = np.asarray(inputs)
        J, _ = dense_jacobians(self.model, inputs[:, : self.D])
        c = np.argmax(inputs[:, self.D :], axis=1) if self.C > 1 else np.zeros(len(inputs), int)
        return J[np.arange(len(inputs)), c] @ self.J_train.T @ self.coefficients


def eq22_dense(eigen, model, X, X_test, Lambda, delta):
    """σ₀² (Ψ̃* Ψ̃*ᵀ − Ψ̃* Ψ̃ᵀ [Λ⁻¹/σ₀² + Ψ̃ Ψ̃ᵀ]⁻¹ Ψ̃ Ψ̃*ᵀ), the N C × N C form before the last Woodbury
    step of Deng et al. App. A.3, per test point [M, C, C]."""
    C = eigen.C

    def features(Z):
        inputs = np.concatenate([np.repeat(Z, C, 0), np.tile(np.eye(C), (len(Z), 1))], 1) if C > 1 else Z
        return eigen(inputs) * np.sqrt(eigen.eigenvalues)

    Psi, Psi_test = features(X), features(X_test)
    Lambda_inverse = np.zeros((len(Psi), len(Psi)))
    for n, block in enumerate(Lambda):
        Lambda_inverse[n * C : (n + 1) * C, n * C : (n + 1) * C] = np.linalg.inv(block)
    middle = np.linalg.solve(Lambda_inverse * delta + Psi @ Psi.T, Psi @ Psi_test.T)
    full = (Psi_test @ Psi_test.T - Psi_test @ Psi.T @ middle) / delta
    return np.stack([full[m * C : (m + 1) * C, m * C : (m + 1) * C] for m in range(len(X_test))])


@pytest.mark.parametrize("likelihood, C, k", [("gaussian", 2, 6), ("bernoulli", 1, 4)])
def test_eq22_with_exact_eigenpairs_matches_dense_form(likelihood, C, k, rng):
    X, Y = data(likelihood, 20, 2, C, rng)
    X_test = rng.normal(size=(6, 2))
    model = mlp(2, C, seed=3)
    eigen = DenseNTKEigenpairs(model, X, k)
    delta, noise = 1.7, 0.2
    la = LinearisedLaplace(
        model, likelihood, noise_variance=noise, prior_precision=delta, method="eigenfunctions", eigenfunctions=eigen, verbose=0
    ).fit(X, Y)
    _, F = dense_jacobians(model, X)
    expected = eq22_dense(eigen, model, X, X_test, hessians(likelihood, F, noise), delta)
    covariance = la.predict_f(X_test, full_output_cov=True)[1].numpy()
    np.testing.assert_allclose(covariance, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())


def test_eq22_with_all_eigenpairs_is_exact_lla_at_the_training_inputs(rng):
    """With every non-zero NTK eigenpair (k = N C ≤ P) Mercer's expansion is exact on the training pairs,
    so eq. 22 there equals eq. 21 (the exact GGN of the test)."""
    X, Y = data("gaussian", 10, 2, 2, rng)
    model = mlp(2, 2, seed=4)  # P = 2·8 + 8 + 8·2 + 2 = 42 ≥ N C = 20
    eigen = DenseNTKEigenpairs(model, X, 20)
    la = LinearisedLaplace(model, noise_variance=0.5, prior_precision=3.0, method="eigenfunctions", eigenfunctions=eigen, verbose=0).fit(X, Y)
    J, _ = dense_jacobians(model, X)
    precision = np.einsum("ncp,ncq->pq", J, J) / 0.5 + 3.0 * np.eye(J.shape[2])
    expected = np.einsum("ncp,pq,ndq->ncd", J, np.linalg.inv(precision), J)
    np.testing.assert_allclose(la.predict_f(X, full_output_cov=True)[1].numpy(), expected, rtol=1e-6)


def test_neuralef_close_to_eq22_with_exact_eigenpairs(rng):
    """NeuralEF-learnt top-k NTK eigenpairs (exact Jacobian features) against the exact top-k eigenpairs
    in eq. 22: median relative error of the predictive variances over test points below 25 %."""
    X = rng.uniform(-2, 2, size=(64, 1))
    Y = np.sin(2 * X) + 0.1 * rng.normal(size=X.shape)
    model = mlp(1, 1, width=16, seed=5)
    model.compile(tf_keras.optimizers.Adam(0.02), "mse")
    model.fit(X, Y, epochs=100, verbose=0)
    X_test = np.linspace(-2.5, 2.5, 41)[:, None]
    k, delta, noise = 3, 1.0, 0.01
    exact = LinearisedLaplace(
        model, noise_variance=noise, prior_precision=delta, method="eigenfunctions", eigenfunctions=DenseNTKEigenpairs(model, X, k), verbose=0
    ).fit(X, Y)
    learnt = LinearisedLaplace(
        model,
        noise_variance=noise,
        prior_precision=delta,
        method="neuralef",
        num_eigenpairs=k,
        ntk_samples=None,
        neuralef_steps=600,
        neuralef_options={"learning_rate": 3e-3, "oversampling": 2},
        verbose=0,
    ).fit(X, Y)
    reference = exact.predict_f(X_test)[1].numpy().ravel()
    error = np.abs(learnt.predict_f(X_test)[1].numpy().ravel() - reference) / reference
    print("median relative error of NeuralEF eq. 22 variances:", np.median(error))
    assert np.median(error) < 0.25


def test_last_layer_is_bayesian_linear_regression(rng):
    X, Y = data("gaussian", 40, 2, 1, rng)
    model = mlp(2, 1, width=6, seed=6, hidden=2)
    noise, delta = 0.05, 0.8
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision=delta, method="last_layer", verbose=0).fit(X, Y)
    penultimate = tf_keras.Model(model.inputs, model.layers[-2].output)

    def features(Z):
        return np.concatenate([penultimate(Z).numpy(), np.ones((len(Z), 1))], axis=1)

    Phi, X_test = features(X), rng.normal(size=(9, 2))
    Sigma = np.linalg.inv(Phi.T @ Phi / noise + delta * np.eye(Phi.shape[1]))
    Phi_test = features(X_test)
    expected = np.einsum("np,pq,nq->n", Phi_test, Sigma, Phi_test)
    np.testing.assert_allclose(la.predict_f(X_test)[1].numpy()[:, 0], expected, rtol=1e-9)
    np.testing.assert_allclose(la.predict_y(X_test)[1].numpy()[:, 0], expected + noise, rtol=1e-9)


def blr_log_evidence(Phi, y, noise, alphas):
    """log N(y | 0, σ² I + Φ Φᵀ / α) for each α, from the eigendecomposition of Φ Φᵀ."""
    values, vectors = np.linalg.eigh(Phi @ Phi.T)
    projections = (vectors.T @ y) ** 2
    variances = noise + values[None, :] / alphas[:, None]
    return -0.5 * np.sum(np.log(2 * np.pi * variances) + projections[None, :] / variances, axis=1)


def test_marginal_likelihood_matches_bayesian_linear_regression_evidence(rng):
    """At θ_last = the BLR posterior mean m(α*) for the grid maximiser α* of the closed-form evidence, the
    Laplace evidence (exact for a linear-Gaussian model at its mode) has its maximum at α* too (both
    derivatives in α are −‖m‖²/2 + P/(2α) − tr((H + αI)⁻¹)/2 there) and the same value."""
    X, Y = data("gaussian", 40, 2, 1, rng)
    model = mlp(2, 1, width=6, seed=7)
    noise = 0.04
    penultimate = tf_keras.Model(model.inputs, model.layers[-2].output)
    H = penultimate(X).numpy()
    Phi = np.concatenate([H, np.ones((len(X), 1))], axis=1)
    grid = np.logspace(-3, 3, 6001)
    evidence = blr_log_evidence(Phi, Y[:, 0], noise, grid)
    best = int(np.argmax(evidence))
    assert 0 < best < len(grid) - 1
    alpha = grid[best]
    mean = np.linalg.solve(Phi.T @ Phi / noise + alpha * np.eye(Phi.shape[1]), Phi.T @ Y[:, 0] / noise)
    model.layers[-1].set_weights([mean[:-1, None], mean[-1:]])
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision="marginal_likelihood", method="last_layer", verbose=0).fit(X, Y)
    spacing = np.log(grid[1] / grid[0])
    assert abs(np.log(la.prior_precision) - np.log(alpha)) < 2 * spacing
    np.testing.assert_allclose(la.log_evidence, evidence[best], rtol=1e-8)


def _blr_validation_nll(model, X, X_val, Y_val, noise, grid) -> list:
    """The last-layer LLA's validation NLL at each δ of ``grid``, by dense Bayesian linear regression on the
    penultimate features [φ(x), 1]: variance φᵀ (Φᵀ Φ / σ² + δ I)⁻¹ φ + σ², mean the network's output."""
    penultimate = tf_keras.Model(model.inputs, model.layers[-2].output)
    Phi = np.concatenate([penultimate(X).numpy(), np.ones((len(X), 1))], axis=1)
    Phi_val = np.concatenate([penultimate(X_val).numpy(), np.ones((len(X_val), 1))], axis=1)
    mean = model(X_val).numpy()[:, 0]
    nll = []
    for delta in grid:
        variance = np.einsum("np,pq,nq->n", Phi_val, np.linalg.inv(Phi.T @ Phi / noise + delta * np.eye(Phi.shape[1])), Phi_val) + noise
        nll.append(np.mean(0.5 * np.log(2 * np.pi * variance) + 0.5 * (Y_val[:, 0] - mean) ** 2 / variance))
    return nll


def test_validation_prior_precision_minimises_blr_validation_nll(rng):
    X, Y = data("gaussian", 40, 2, 1, rng)
    X_val, Y_val = data("gaussian", 30, 2, 1, rng)
    model = mlp(2, 1, width=6, seed=8)
    noise, grid = 0.02, np.logspace(-3, 3, 25)
    la = LinearisedLaplace(model, noise_variance=noise, prior_precision="validation", method="last_layer", prior_precision_grid=grid, verbose=0)
    la.fit(X, Y, validation_data=(X_val, Y_val))
    nll = _blr_validation_nll(model, X, X_val, Y_val, noise, grid)
    np.testing.assert_allclose(la.validation_nll, nll, rtol=1e-9)
    assert la.prior_precision == grid[int(np.argmin(nll))]


def test_a_validation_optimum_at_the_grids_edge_says_whether_a_wider_grid_would_matter(rng, capsys):
    """Last-layer LLA, validation NLL by dense Bayesian linear regression in the test. Where δ is negligible against
    Φᵀ Φ / σ² (δ = 1e-12, 1e-11) the NLL is flat, and the fit says a wider grid would not change it. On a grid of
    large δ (too little variance) the dense NLL still falls at the lower edge, and the fit says to widen the grid."""
    X, Y = data("gaussian", 40, 2, 1, rng)
    X_val, Y_val = data("gaussian", 30, 2, 1, rng)
    model = mlp(2, 1, width=6, seed=8)
    noise = 0.02
    for grid, flat in (([1e-12, 1e-11], True), ([1e6, 1e7, 1e8], False)):
        nll = _blr_validation_nll(model, X, X_val, Y_val, noise, grid)
        assert (abs(nll[1] - nll[0]) < 1e-9) == flat and (flat or np.all(np.diff(nll) > 1e-6))  # the dense truth
        capsys.readouterr()
        la = LinearisedLaplace(model, noise_variance=noise, prior_precision="validation", method="last_layer",
                               prior_precision_grid=np.array(grid), verbose=1)
        la.fit(X, Y, validation_data=(X_val, Y_val))
        np.testing.assert_allclose(la.validation_nll, nll, rtol=1e-9)
        message = capsys.readouterr().out
        assert ("a wider grid would not change it" in message) == flat and ("widen the grid" in message) == (not flat), message


def test_bernoulli_predictive_against_quadrature(rng):
    X, Y = data("bernoulli", 30, 2, 1, rng)
    model = mlp(2, 1, seed=9)
    model.layers[-1].set_weights([3 * w for w in model.layers[-1].get_weights()])  # logits of a few units
    X_test = 2 * rng.normal(size=(10, 2))
    probit = LinearisedLaplace(model, "bernoulli", prior_precision=0.05, verbose=0).fit(X, Y)
    mc = LinearisedLaplace(model, "bernoulli", prior_precision=0.05, predictive="mc", num_samples=40000, verbose=0).fit(X, Y)
    mean, variance = (t.numpy()[:, 0] for t in probit.predict_f(X_test))
    assert np.median(variance) > 0.5  # the test exercises a wide latent
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    truth = np.array([np.sum(weights * expit(m + np.sqrt(v) * nodes)) / np.sqrt(2 * np.pi) for m, v in zip(mean, variance)])
    np.testing.assert_allclose(mc.predict_y(X_test)[0].numpy()[:, 0], truth, atol=0.01)
    np.testing.assert_allclose(probit.predict_y(X_test)[0].numpy()[:, 0], truth, atol=0.02)  # MacKay's approximation
    p = probit.predict_y(X_test)[0].numpy()[:, 0]
    log_density = probit.predict_log_density(X_test, (mean[:, None] > 0).astype(float)).numpy()
    np.testing.assert_allclose(log_density, np.log(np.where(mean > 0, p, 1 - p)), rtol=1e-12)


def test_softmax_predictive_against_monte_carlo(rng):
    X, Y = data("softmax", 30, 2, 3, rng)
    model = mlp(2, 3, seed=10)
    X_test = rng.normal(size=(8, 2))
    la = LinearisedLaplace(model, "softmax", prior_precision=0.1, num_samples=20000, seed=3, verbose=0).fit(X, Y)
    mean, covariance = (t.numpy() for t in la.predict_f(X_test))
    assert covariance.shape == (8, 3, 3)
    generator = np.random.default_rng(12345)
    truth = []
    for m, S in zip(mean, covariance):
        samples = generator.multivariate_normal(m, S, size=200000, method="eigh")
        truth.append(softmax(samples, axis=1).mean(axis=0))
    p, variance = (t.numpy() for t in la.predict_y(X_test))
    np.testing.assert_allclose(p, np.array(truth), atol=0.01)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(variance, p * (1 - p), rtol=1e-12)


def test_save_load_in_a_fresh_process(tmp_path, rng, fresh_process):
    X, Y = data("softmax", 30, 2, 3, rng)
    X_test = rng.normal(size=(5, 2))
    np.save(tmp_path / "X_test.npy", X_test), np.save(tmp_path / "X.npy", X), np.save(tmp_path / "Y.npy", Y)
    model = mlp(2, 3, seed=11)
    training = str(tmp_path / "neuralef_training")  # NeuralEF's checkpoints: a fit started again resumes from them
    model.save(tmp_path / "model.keras")
    expected = {}
    neuralef = {"num_eigenpairs": 3, "neuralef_steps": 30, "ntk_samples": 50, "neuralef_options": {"width": 8}}
    for method, options in [("exact", {}), ("lowrank", {"num_eigenpairs": 4}), ("neuralef", neuralef)]:
        fit = {"checkpoint_dir": training} if method == "neuralef" else {}
        la = LinearisedLaplace(model, "softmax", prior_precision=0.5, method=method, verbose=0, **options).fit(X, Y, **fit)
        la.save(str(tmp_path / method))
        expected[method] = [t.numpy() for t in (*la.predict_f(X_test), *la.predict_y(X_test))]
    script = textwrap.dedent(
        f"""
        import sys, json, numpy as np, gpflow, tf_keras
        gpflow.config.set_default_float(np.float64)
        from activated_dgp.eigen import LinearisedLaplace
        model = tf_keras.models.load_model({str(tmp_path / "model.keras")!r})
        X_test = np.load({str(tmp_path / "X_test.npy")!r})
        out = {{}}
        for method in ("exact", "lowrank", "neuralef"):
            la = LinearisedLaplace.load({str(tmp_path)!r} + "/" + method, model)
            for i, t in enumerate((*la.predict_f(X_test), *la.predict_y(X_test))):
                out[f"{{method}}_{{i}}"] = t.numpy()
        # a NeuralEF LLA fitted again with the first fit's checkpoint directory: no step is trained again
        la = LinearisedLaplace(model, "softmax", prior_precision=0.5, method="neuralef", verbose=0, **{neuralef!r})
        la.fit(np.load({str(tmp_path / "X.npy")!r}), np.load({str(tmp_path / "Y.npy")!r}), checkpoint_dir={training!r})
        assert la.eigenfunctions.steps == 30, la.eigenfunctions.steps
        for i, t in enumerate((*la.predict_f(X_test), *la.predict_y(X_test))):
            out[f"resumed_{{i}}"] = t.numpy()
        np.savez({str(tmp_path / "loaded.npz")!r}, **out)
        """
    )
    fresh_process.run(script)
    loaded = np.load(tmp_path / "loaded.npz")
    for method, arrays in expected.items():
        for i, array in enumerate(arrays):
            np.testing.assert_array_equal(loaded[f"{method}_{i}"], array)
    for i, array in enumerate(expected["neuralef"]):
        np.testing.assert_allclose(loaded[f"resumed_{i}"], array, rtol=1e-10, atol=1e-12)
    assert saving.saved_header(tmp_path / "exact")["root"]["config"]["prior_precision"] == 0.5


def test_bad_input(rng):
    X, Y = data("gaussian", 20, 2, 1, rng)
    model = mlp(2, 1, seed=12)
    with pytest.raises(ValueError, match="unknown method"):
        LinearisedLaplace(model, method="kfac")
    with pytest.raises(ValueError, match="unknown likelihood"):
        LinearisedLaplace(model, likelihood="poisson")
    with pytest.raises(ValueError, match="prior_precision"):
        LinearisedLaplace(model, prior_precision=-1.0)
    with pytest.raises(ValueError, match="prior_precision"):
        LinearisedLaplace(model, prior_precision="evidence")
    with pytest.raises(ValueError, match="max_parameters"):
        LinearisedLaplace(model, method="exact", max_parameters=10)
    with pytest.raises(ValueError, match="jacobian_cache_bytes"):
        LinearisedLaplace(model, method="neuralef", jacobian_cache_bytes=-1)
    with pytest.raises(ValueError, match="eigenfunctions"):
        LinearisedLaplace(model, method="eigenfunctions")
    with pytest.raises(ValueError, match="not fitted"):
        LinearisedLaplace(model, verbose=0).predict_f(X)
    la = LinearisedLaplace(model, verbose=0)
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        la.fit(X_nan, Y)
    with pytest.raises(ValueError, match="rows"):
        la.fit(X, Y[:-1])
    with pytest.raises(ValueError, match="columns"):
        la.fit(X, np.concatenate([Y, Y], axis=1))
    with pytest.raises(ValueError, match="validation_data"):
        LinearisedLaplace(model, prior_precision="validation", verbose=0).fit(X, Y)
    with pytest.raises(ValueError, match="0 or 1"):
        LinearisedLaplace(model, "bernoulli", verbose=0).fit(X, Y)
    with pytest.raises(ValueError, match="out of range"):
        LinearisedLaplace(mlp(2, 3, seed=13), "softmax", verbose=0).fit(X, np.full((20, 1), 3.0))
    with pytest.raises(ValueError, match="one output"):
        LinearisedLaplace(mlp(2, 2, seed=13), "bernoulli", verbose=0).fit(X, (Y > 0).astype(float))
    with pytest.raises(ValueError, match="checkpoint_dir checkpoints NeuralEF's training"):
        la.fit(X, Y, checkpoint_dir="unused")
    la.fit(X, Y)
    with pytest.raises(ValueError, match="columns"):
        la.predict_f(np.ones((3, 5)))
    with pytest.raises(ValueError, match="prior_precision must be positive"):
        la.log_marginal_likelihood(-1.0)


def test_load_rejects_other_weights(tmp_path, rng):
    X, Y = data("gaussian", 20, 2, 1, rng)
    model = mlp(2, 1, seed=14)
    LinearisedLaplace(model, verbose=0).fit(X, Y).save(str(tmp_path))
    with pytest.raises(ValueError, match="θ_MAP differs"):
        LinearisedLaplace.load(str(tmp_path), mlp(2, 1, seed=15))
    with pytest.raises(ValueError, match="does not exist"):
        LinearisedLaplace.load(str(tmp_path / "nothing"), model)


def test_progress_is_printed_and_silenced(capsys, rng):
    X, Y = data("gaussian", 20, 2, 1, rng)
    model = mlp(2, 1, seed=16)
    LinearisedLaplace(model, prior_precision="marginal_likelihood", batch_size=5).fit(X, Y)
    printed = capsys.readouterr().out
    assert "GGN" in printed and "batch 4/4" in printed and "marginal likelihood" in printed
    LinearisedLaplace(model, prior_precision="marginal_likelihood", batch_size=5, verbose=0).fit(X, Y)
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_neuralef_multi_output_close_to_eq22_with_exact_eigenpairs(rng):
    """The matrix-valued NTK of two outputs as a scalar kernel on pairs (x, c) (NeuralEF §3.2): NeuralEF's
    eq. 22 variances of both outputs within a median 25 % of eq. 22 with the exact top-k pairs."""
    X = rng.uniform(-2, 2, size=(48, 1))
    Y = np.concatenate([np.sin(2 * X), np.cos(X)], axis=1) + 0.1 * rng.normal(size=(48, 2))
    model = mlp(1, 2, width=12, seed=17)
    model.compile(tf_keras.optimizers.Adam(0.02), "mse")
    model.fit(X, Y, epochs=100, verbose=0)
    X_test = np.linspace(-2.5, 2.5, 21)[:, None]
    common = dict(noise_variance=0.01, prior_precision=1.0, verbose=0)
    exact = LinearisedLaplace(model, method="eigenfunctions", eigenfunctions=DenseNTKEigenpairs(model, X, 4), **common).fit(X, Y)
    learnt = LinearisedLaplace(
        model, method="neuralef", num_eigenpairs=4, neuralef_steps=800, neuralef_options={"learning_rate": 3e-3, "oversampling": 2}, **common
    ).fit(X, Y)
    reference = exact.predict_f(X_test)[1].numpy()
    error = np.abs(learnt.predict_f(X_test)[1].numpy() - reference) / reference
    print("median relative error of two-output NeuralEF eq. 22 variances:", np.median(error))
    assert np.median(error) < 0.25


@pytest.mark.parametrize("likelihood, C, width, cached_as", [("gaussian", 1, 40, "gram"), ("softmax", 2, 8, "features")])
def test_neuralef_on_cached_jacobians_matches_per_step_jacobians(likelihood, C, width, cached_as, rng):
    """The training Jacobians computed once (as the Gram matrix J Jᵀ when N C ≤ P, else as features) give the
    same NeuralEF eigenpairs and eq. 22 predictive as recomputing the batch's Jacobians every step, with the same
    seed: both paths form the same κ Ψ on the same minibatches, differing only in floating-point summation order
    (relative 1e-15 per product), which 150 Adam steps and the Ritz step carry forward without amplifying it
    anywhere near the 1e-6 tolerance (the measured differences are printed)."""
    X, Y = data(likelihood, 64, 1, C, rng)
    model = mlp(1, C, width=width, seed=3)
    settings = dict(likelihood=likelihood, noise_variance=0.1, prior_precision=1.0, method="neuralef", num_eigenpairs=3,
                    neuralef_steps=150, neuralef_options={"learning_rate": 3e-3, "oversampling": 1}, seed=4, verbose=0)
    cached = LinearisedLaplace(model, **settings).fit(X, Y)
    recomputed = LinearisedLaplace(model, jacobian_cache_bytes=0, **settings).fit(X, Y)
    assert cached.ntk_source == cached_as and recomputed.ntk_source == "jacobians"
    X_test = np.linspace(-3, 3, 17)[:, None]
    values = [la.eigenfunctions.eigenvalues.numpy() for la in (cached, recomputed)]
    variances = [la.predict_f(X_test, full_output_cov=True)[1].numpy() for la in (cached, recomputed)]
    print("eigenvalue, variance differences:", np.max(np.abs(values[0] / values[1] - 1)), np.max(np.abs(variances[0] - variances[1])))
    np.testing.assert_allclose(values[0], values[1], rtol=1e-6)
    np.testing.assert_allclose(variances[0], variances[1], rtol=1e-6, atol=1e-9 * np.abs(variances[1]).max())
