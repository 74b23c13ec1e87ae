"""The Kronecker-factored linearised Laplace approximation of convolutional networks (KFC, Grosse & Martens 2016) and of
networks with ActivatedLayers (``kron_fallback="diagonal"``), against dense computations written here: the exact GGN
block from autodiff Jacobians (one point, one output position, where KFC is exact), the factors by explicit loops over
input patches with signals from a hand-written forward pass, and the predictive from the dense block-diagonal
precision or, for the large rotated-MNIST CNN, from autodiff Jacobians and the factors' eigendecompositions."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from scipy.linalg import block_diag
from scipy.optimize import minimize_scalar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_laplace import autodiff_jacobians, data, hessians, twin  # noqa: E402

from activated_dgp.eigen import LinearisedLaplace  # noqa: E402
from experiments.harness.setups import rotated_mnist_cnn  # noqa: E402


def cnn(C, image=5, channels=2, kernel=2, strides=1, padding="valid", pool=False, seed=0):
    """Reshape → Conv2D(3, tanh) [→ MaxPool] → Flatten → Dense(C), float64, on flat inputs."""
    tf_keras.utils.set_random_seed(seed)
    layers = [tf_keras.Input((image * image * channels,), dtype="float64"), tf_keras.layers.Reshape((image, image, channels), dtype="float64"),
              tf_keras.layers.Conv2D(3, kernel, strides=strides, padding=padding, activation="tanh", dtype="float64")]
    if pool:
        layers += [tf_keras.layers.MaxPooling2D(2, padding="same", dtype="float64"), tf_keras.layers.Conv2D(2, 2, padding="same", dtype="float64")]
    layers += [tf_keras.layers.Flatten(dtype="float64"), tf_keras.layers.Dense(C, dtype="float64")]
    return tf_keras.Sequential(layers)


def patches(images, kernel, strides, padding):
    """The unfolded input patches [N, T, k k C_in] (kernel rows, columns, channels) by explicit loops, with
    TensorFlow's 'same' zero padding (total max((out − 1) s + k − in, 0), the smaller half before)."""
    N, size, _, channels = images.shape
    if padding == "same":
        out = -(-size // strides)
        total = max((out - 1) * strides + kernel - size, 0)
        images = np.pad(images, [(0, 0), (total // 2, total - total // 2), (total // 2, total - total // 2), (0, 0)])
    else:
        out = (size - kernel) // strides + 1
    rows = []
    for n in range(N):
        rows.append([images[n, i * strides : i * strides + kernel, j * strides : j * strides + kernel, :].ravel()
                     for i in range(out) for j in range(out)])
    return np.array(rows)


@pytest.mark.parametrize("likelihood, C", [("gaussian", 2), ("softmax", 3)])
def test_one_point_one_position_kron_blocks_are_the_exact_ggn_blocks(likelihood, C, rng):
    """A convolution whose output is one position (kernel = image) at N = 1: A ⊗ G is its GGN block exactly."""
    X, Y = data(likelihood, 1, 3 * 3 * 2, C, rng)
    model = cnn(C, image=3, kernel=3, seed=1)
    la = LinearisedLaplace(model, likelihood, noise_variance=0.3, method="kron", verbose=0).fit(X, Y)
    J, F = autodiff_jacobians(model, X)
    H = np.einsum("ncp,ncd,ndq->pq", J, hessians(likelihood, F, 0.3), J)
    sizes = [3 * 3 * 2 * 3 + 3, 3 * C + C]
    offsets = np.cumsum([0] + sizes)
    assert la.kron.kinds == ["conv", "dense"]
    for block, a, b in zip(la.kron.dense_blocks(), offsets[:-1], offsets[1:]):
        np.testing.assert_allclose(block, H[a:b, a:b], rtol=1e-10, atol=1e-12 * np.abs(H).max())


@pytest.mark.parametrize("strides, padding", [(1, "valid"), (2, "same")])
def test_conv_factors_match_sums_over_patches(strides, padding, rng):
    """A = Σ_nt ã ãᵀ / (N T) and G = Σ_nt E_ntᵀ Λ_n E_nt with patches by explicit loops and signals ∂g_c/∂z_nt from a
    hand-written forward pass (z = patches · K, tanh, flatten, dense) under tf.GradientTape."""
    N, C, kernel = 7, 3, 3
    X, Y = data("softmax", N, 6 * 6 * 2, C, rng)
    model = cnn(C, image=6, kernel=kernel, strides=strides, padding=padding, seed=2)
    la = LinearisedLaplace(model, "softmax", method="kron", batch_size=4, verbose=0).fit(X, Y)
    conv, dense = model.layers[1], model.layers[-1]
    P = patches(X.reshape(N, 6, 6, 2), kernel, strides, padding)  # [N, T, k k C_in]
    z = tf.constant(P @ conv.kernel.numpy().reshape(-1, 3) + conv.bias.numpy())  # [N, T, 3]
    with tf.GradientTape() as tape:
        tape.watch(z)
        outputs = tf.reshape(tf.tanh(z), [N, -1]) @ dense.kernel + dense.bias
    signals = tape.jacobian(outputs, z).numpy()  # [N, C, N, T, 3]
    E = np.stack([signals[n, :, n] for n in range(N)])  # [N, C, T, 3]
    Lambda = hessians("softmax", outputs.numpy())
    augmented = np.concatenate([P, np.ones(P.shape[:2] + (1,))], axis=2)
    A = sum(np.outer(a, a) for n in range(N) for a in augmented[n]) / (N * P.shape[1])
    G = sum(E[n, :, t].T @ Lambda[n] @ E[n, :, t] for n in range(N) for t in range(P.shape[1]))
    np.testing.assert_allclose(la.kron.A[0], A, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(la.kron.G[0], G, rtol=1e-10, atol=1e-14 * np.abs(G).max())


@pytest.mark.parametrize("likelihood, C", [("gaussian", 2), ("softmax", 3)])
def test_cnn_kron_predictive_and_evidence_match_the_dense_block_diagonal_posterior(likelihood, C, rng):
    """Two convolutions ('valid', then 'same' after max-pooling), per-layer prior precisions: the predictive
    J (blockdiag(A_l ⊗ G_l) + diag δ_l)⁻¹ Jᵀ with autodiff Jacobians, the evidence with the dense log-determinant."""
    X, Y = data(likelihood, 12, 6 * 6 * 2, C, rng)
    model = cnn(C, image=6, kernel=3, pool=True, seed=3)
    deltas = np.array([0.5, 2.0, 4.0])
    la = LinearisedLaplace(model, likelihood, noise_variance=0.2, method="kron", prior_structure="layerwise",
                           prior_precision=deltas, batch_size=5, verbose=0).fit(X, Y)
    assert la.kron.kinds == ["conv", "conv", "dense"]
    sizes = la.kron.layer_sizes()
    assert sizes == [3 * 3 * 2 * 3 + 3, 2 * 2 * 3 * 2 + 2, 2 * 2 * 2 * C + C]
    precision = block_diag(*[np.kron(A, G) for A, G in zip(la.kron.A, la.kron.G)]) + np.diag(np.repeat(deltas, sizes))
    X_test = rng.normal(size=(4, X.shape[1]))
    J_test, _ = autodiff_jacobians(model, X_test)
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, np.linalg.inv(precision), J_test)
    np.testing.assert_allclose(la.predict_f(X_test, full_output_cov=True)[1].numpy(), expected, rtol=1e-9, atol=1e-14)
    theta = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    per_parameter = np.repeat(deltas, sizes)
    dense = (la._log_likelihood - 0.5 * np.sum(per_parameter * theta**2) + 0.5 * np.sum(np.log(per_parameter))
             - 0.5 * np.linalg.slogdet(precision)[1])
    np.testing.assert_allclose(la.log_marginal_likelihood(), dense, rtol=1e-10)
    # weight samples: their covariance is the posterior's (R Rᵀ = Σ, checked on R applied to the identity)
    root = la.kron.root_times(np.eye(theta.size), deltas)
    np.testing.assert_allclose(root @ root.T, np.linalg.inv(precision), rtol=1e-8, atol=1e-12)


def test_kron_fallback_takes_the_activated_layers_diagonal_ggn_block(rng):
    """The twin (ActivatedLayer, Dense without bias, ×2) with kron_fallback='diagonal': the ActivatedLayers' blocks are
    the diagonals of their exact GGN blocks (autodiff Jacobians), the Dense blocks A ⊗ G with the Dense layers' inputs
    and signals from tf.GradientTape; the predictive is that of the dense block-diagonal posterior."""
    X, Y = data("softmax", 15, 3, 3, rng)
    model = twin(3, 3, seed=4)
    la = LinearisedLaplace(model, "softmax", prior_precision=0.4, method="kron", kron_fallback="diagonal", batch_size=6, verbose=0).fit(X, Y)
    assert la.kron.kinds == ["activated", "dense", "activated", "dense"]
    J, F = autodiff_jacobians(model, X)
    Lambda = hessians("softmax", F)
    H = np.einsum("ncp,ncd,ndq->pq", J, Lambda, J)
    activated_0, linear_0, activated_1, linear_1 = model.layers
    h0 = activated_0(X).numpy()
    z0 = tf.constant(h0 @ linear_0.kernel.numpy())
    with tf.GradientTape() as tape:
        tape.watch(z0)
        h2 = activated_1(z0)
        outputs = h2 @ linear_1.kernel
    signals = tape.jacobian(outputs, z0).numpy()  # [N, C, N, width]
    E0 = np.stack([signals[n, :, n] for n in range(len(X))])
    blocks, offsets = [], np.cumsum([0] + [int(np.prod(v.shape)) for v in model.trainable_variables])
    blocks.append(np.diag(np.diagonal(H[offsets[0] : offsets[1], offsets[0] : offsets[1]])))
    blocks.append(np.kron(h0.T @ h0 / len(X), sum(E0[n].T @ Lambda[n] @ E0[n] for n in range(len(X)))))
    blocks.append(np.diag(np.diagonal(H[offsets[2] : offsets[3], offsets[2] : offsets[3]])))
    h2 = h2.numpy()
    blocks.append(np.kron(h2.T @ h2 / len(X), Lambda.sum(0)))  # the last layer's signals are the identity
    for mine, truth in zip(la.kron.dense_blocks(), blocks):
        np.testing.assert_allclose(mine, truth, rtol=1e-9, atol=1e-12 * np.abs(truth).max())
    precision = block_diag(*blocks) + 0.4 * np.eye(J.shape[2])
    X_test = 2 * rng.normal(size=(5, 3))
    J_test, _ = autodiff_jacobians(model, X_test)
    expected = np.einsum("ncp,pq,ndq->ncd", J_test, np.linalg.inv(precision), J_test)
    np.testing.assert_allclose(la.predict_f(X_test, True)[1].numpy(), expected, rtol=1e-8, atol=1e-12 * np.abs(expected).max())


def test_kron_on_the_rotated_mnist_cnn_with_a_prior_precision_per_layer(tmp_path, rng):
    """The rotated-MNIST CNN (nested Sequential, float32 convolutions, the activated head): kron with the diagonal
    fallback and one δ_l per layer by the evidence. The δ_l maximise the evidence written here from the factors'
    eigenvalues (a scalar search per layer), and the latent covariance is Σ_l J_l Σ_l J_lᵀ with autodiff Jacobians J_l of each layer and
    Σ_l from the factors' eigendecompositions (or the diagonal block)."""
    model, _, _ = rotated_mnist_cnn(seed=0, truncation_level=3, num_units=5, width=3)
    X = rng.uniform(size=(6, 784))
    Y = rng.integers(0, 10, size=(6, 1)).astype(float)
    model(X[:1].astype(np.float32))  # build it
    la = LinearisedLaplace(model, "softmax", method="kron", kron_fallback="diagonal", prior_structure="layerwise",
                           prior_precision="marginal_likelihood", batch_size=4, verbose=0).fit(X, Y)
    assert la.kron.kinds == ["conv", "conv", "activated", "dense", "activated", "dense"]
    theta2 = np.array([sum(float(np.sum(np.asarray(w, np.float64) ** 2)) for w in layer.trainable_weights)
                       for layer in la._kron_chain.layers if layer.trainable_weights])
    eigen = [np.outer(e[0], e[2]).ravel() if len(e) == 4 else e[0] for e in la.kron.eigen]

    # the evidence separates over layers; each term's log δ-derivative −δθ²/2 + ½ Σ e/(e + δ) falls with δ: one maximum
    for delta, t, e in zip(la.prior_precision, theta2, eigen):
        term = lambda log_d: -(-0.5 * np.exp(log_d) * t + 0.5 * e.size * log_d - 0.5 * np.sum(np.log(e + np.exp(log_d))))  # noqa: E731
        best = minimize_scalar(term, bounds=(np.log(1e-8), np.log(1e8)), method="bounded", options={"xatol": 1e-10})
        assert abs(np.log(delta) - best.x) < 1e-4
    X_test = rng.uniform(size=(2, 784))
    layers = [layer for layer in la._kron_chain.layers if layer.trainable_weights]
    with tf.GradientTape(persistent=True) as tape:  # one backward pass per (x, c)
        outputs = tf.cast(model(tf.constant(X_test, tf.float32)), tf.float64)
        entries = [outputs[n, c] for n in range(2) for c in range(10)]
    rows = [np.concatenate([np.asarray(g, np.float64).ravel() for g in tape.gradient(entry, model.trainable_weights)]) for entry in entries]
    J_all = np.array(rows).reshape(2, 10, -1)  # [N, C, P], the layers' kernels and biases in order
    offsets = np.cumsum([0] + [sum(int(np.prod(w.shape)) for w in layer.trainable_weights) for layer in layers])
    expected = 0.0
    for index, (e, delta) in enumerate(zip(la.kron.eigen, la.prior_precision)):
        J = J_all[:, :, offsets[index] : offsets[index + 1]]
        if len(e) == 1:
            expected = expected + np.einsum("ncp,p,ndp->ncd", J, 1.0 / (e[0] + delta), J)
            continue
        a, QA, g, QG = e
        M = QA.T @ J.reshape(2, 10, a.size, g.size) @ QG  # Q_Aᵀ J_c Q_G, J_c [in + 1, out] row-major
        expected = expected + np.einsum("ncab,ndab->ncd", M / (np.outer(a, g) + delta), M)
    covariance = la.predict_f(X_test, full_output_cov=True)[1].numpy()
    np.testing.assert_allclose(covariance, expected, rtol=2e-4, atol=1e-6 * np.abs(expected).max())
    la.save(str(tmp_path))
    again = LinearisedLaplace.load(str(tmp_path))
    np.testing.assert_allclose(again.predict_f(X_test, full_output_cov=True)[1].numpy(), covariance, rtol=1e-10)


def test_kron_rejects_layers_it_cannot_factor(rng):
    with pytest.raises(ValueError, match="unknown kron_fallback"):
        LinearisedLaplace(cnn(2), method="kron", kron_fallback="full")
    with pytest.raises(ValueError, match="kron_fallback= is for method='kron'"):
        LinearisedLaplace(cnn(2), method="diagonal", kron_fallback="diagonal")
    model = tf_keras.Sequential([tf_keras.Input((4,), dtype="float64"), tf_keras.layers.Reshape((4, 1)),
                                 tf_keras.layers.Conv1D(2, 2, dtype="float64"), tf_keras.layers.Flatten(), tf_keras.layers.Dense(1, dtype="float64")])
    with pytest.raises(ValueError, match="'conv1d.*' is a Conv1D"):
        LinearisedLaplace(model, method="kron")
    conv = cnn(2)
    with pytest.raises(ValueError, match="all of layer .*weights"):
        LinearisedLaplace(conv, method="kron", variables=[conv.layers[1].kernel])
