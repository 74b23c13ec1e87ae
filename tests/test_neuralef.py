"""NeuralEF against independent truths.

* The operator's eigenpairs by quadrature (the reference, NeuralEF §4.1): the polynomial kernel (x·x' + 1.5)^4
  with x ~ U[−1, 1] and the RBF kernel exp(−|x − x'|²/2) with x ~ U[−2, 2], k = 10 MLPs of width 32,
  300 steps and the Rayleigh–Ritz step. Only the top 3 pairs are compared in the fast tests (tolerances
  below; eigenfunctions up to sign, RMS over held-out points); all 10 pairs against the quadrature
  truth with oversampling and 4,000 steps in the slow test at the end.
* The Rayleigh–Ritz step: exact eigenpairs when the span contains them; the minibatch estimators'
  expectations against closed forms; the CNN-GP Monte Carlo kernel against an independent NumPy one.
* Funk–Hecke: uniform data on S² with the zonal arc-cosine kernel (unit-norm inputs, no bias) has
  operator eigenvalues λ_0 (multiplicity 1) and λ_1 (multiplicity 3) at the top.
* A FeatureKernel (NN-GP kernel by Monte Carlo, eq. 19) trains without any Gram matrix.
* Orthonormality in L²(data) on held-out points; checkpoint round trip; clear errors for bad input.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import activated_dgp as adgp
from activated_dgp.eigen import FeatureKernel, NeuralEF, Nystrom, neural_eigenfunction, nngp_kernel

NUM_TRAIN, NUM_TEST, NUM_STEPS = 2000, 1000, 300
TOP = 3  # eigenpairs compared with Nyström
EIGENVALUE_RTOL = 0.1  # relative error of μ_1..μ_3
EIGENFUNCTION_RMS = 0.1  # RMS over held-out points of ψ_j − (±ψ_j^Nyström), j ≤ 3 (ψ has unit RMS)
ORTHONORMALITY_ATOL = 0.1  # |Ψᵀ Ψ / M − I| on held-out points, top 3 block


def _problem(name):
    rng = np.random.default_rng(0)
    if name == "polynomial":
        kernel, half_width = gpflow.kernels.Polynomial(degree=4.0, variance=1.0, offset=1.5), 1.0
    else:
        kernel, half_width = gpflow.kernels.SquaredExponential(lengthscales=1.0, variance=1.0), 2.0
    X = rng.uniform(-half_width, half_width, (NUM_TRAIN, 1))
    X_test = rng.uniform(-half_width, half_width, (NUM_TEST, 1))
    return kernel, X, X_test


class _QuadratureTruth:
    """The operator's eigenpairs by Gauss–Legendre quadrature (benchmarks/neuralef_vs_nystrom.py), with
    the interface of a fitted approximation: ``eigenvalues`` [10] and ψ(X) [N, 10]."""

    def __init__(self, kernel, half_width):
        from benchmarks.neuralef_vs_nystrom import quadrature_truth

        mu, self._eigenfunctions = quadrature_truth(kernel, half_width)
        self.eigenvalues = tf.constant(mu)

    def __call__(self, X):
        return tf.constant(self._eigenfunctions(np.asarray(X)))


@pytest.fixture(scope="module", params=["polynomial", "rbf"])
def fitted(request):
    gpflow.config.set_default_float(np.float64)
    kernel, X, X_test = _problem(request.param)
    truth = _QuadratureTruth(kernel, 1.0 if request.param == "polynomial" else 2.0)
    neuralef = NeuralEF(10, kernel=kernel, input_dim=1, width=32, seed=0).fit(X, num_steps=NUM_STEPS, schedule="cosine")
    return request.param, kernel, X_test, truth, neuralef


def test_eigenvalues_match_the_truth(fitted):
    name, _, _, truth, neuralef = fitted
    mu = neuralef.eigenvalues.numpy()
    reference = truth.eigenvalues.numpy()
    assert mu.shape == (10,)
    assert np.all(np.diff(mu) <= 0) and np.all(mu >= 0)
    np.testing.assert_allclose(mu[:TOP], reference[:TOP], rtol=EIGENVALUE_RTOL, err_msg=name)
    # Algorithm 1's estimate (EMA of R̃_jj, a diagnostic now) is right for the first pair, which converges
    # first; after 300 steps later networks still mix in earlier eigenfunctions (R̃_33 of the polynomial
    # kernel measured 2.7× μ_3), which the Ritz step removes from the reported eigenvalues
    np.testing.assert_allclose(neuralef.rayleigh_quotients.numpy()[0], reference[0], rtol=EIGENVALUE_RTOL)


def test_eigenfunctions_match_the_truth_up_to_sign(fitted):
    name, _, X_test, truth, neuralef = fitted
    psi, reference = neuralef(X_test).numpy(), truth(X_test).numpy()
    assert psi.shape == (NUM_TEST, 10)
    for j in range(TOP):
        error = min(np.sqrt(np.mean((psi[:, j] - s * reference[:, j]) ** 2)) for s in (1.0, -1.0))
        assert error < EIGENFUNCTION_RMS, (name, j, error)


def test_orthonormal_on_held_out_data(fitted):
    _, kernel, X_test, _, neuralef = fitted
    psi = neuralef(X_test).numpy()[:, :TOP]
    np.testing.assert_allclose(psi.T @ psi / len(X_test), np.eye(TOP), atol=ORTHONORMALITY_ATOL)
    # Mercer: the top-3 features reproduce the kernel's top-3 part, ψᵀ K ψ / M² ≈ diag(μ)
    K = kernel(tf.constant(X_test)).numpy()
    R = psi.T @ K @ psi / len(X_test) ** 2
    mu = neuralef.eigenvalues.numpy()[:TOP]
    np.testing.assert_allclose(np.diag(R), mu, rtol=2 * EIGENVALUE_RTOL)
    assert np.abs(R - np.diag(np.diag(R))).max() < 0.1 * mu[0]


def test_sphere_funk_hecke():
    """Uniform x on S², zonal arc-cosine kernel (no bias, unit lengthscale): the top eigenvalue is λ_0,
    the next three are λ_1 (Funk–Hecke, multiplicity N_1^3 = 3); level 2 (λ_2, 5-fold) is next."""
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    kernel = adgp.ZonalArcCosine(input_dim=3, truncation_level=10, bias=False, lengthscales=1.0)
    lam = adgp.zonal.arc_cosine_coefficients(3, 10)
    assert [int(adgp.zonal.num_harmonics(n, 3)) for n in range(2)] == [1, 3]
    neuralef = NeuralEF(4, kernel=kernel, input_dim=3, seed=0).fit(X, num_steps=300, schedule="cosine")
    mu = neuralef.eigenvalues.numpy()
    assert abs(mu[0] / lam[0] - 1) < 0.05, (mu, lam[:3])
    assert abs(np.mean(mu[1:4]) / lam[1] - 1) < 0.1, (mu, lam[:3])
    assert np.all(mu[1:4] > lam[2])  # all three above level 2


class _NoGram(FeatureKernel):
    """A FeatureKernel that refuses to form a Gram matrix and records the largest feature batch."""

    largest = 0

    def __init__(self, source):
        super().__init__(self._record(source.feature_map), source.num_samples)

    def _record(self, feature_map):
        def wrapped(X):
            _NoGram.largest = max(_NoGram.largest, int(X.shape[0]))
            return feature_map(X)

        return wrapped

    def gram(self, A, B=None):
        raise AssertionError("NeuralEF asked for a Gram matrix")


def test_feature_kernel_without_gram_matrix():
    """NN-GP kernel of a 1-hidden-layer ReLU network (eq. 19, S = 100 random networks) on 2-D data."""
    gpflow.config.set_default_float(np.float64)

    def build(seed):
        init = tf_keras.initializers.RandomNormal(stddev=1.0, seed=seed)
        network = tf_keras.Sequential(
            [tf_keras.Input((2,), dtype=tf.float64), tf_keras.layers.Dense(64, "relu", kernel_initializer=init, bias_initializer=init, dtype=tf.float64), tf_keras.layers.Dense(1, kernel_initializer=tf_keras.initializers.RandomNormal(stddev=1 / 8, seed=seed + 10_000), dtype=tf.float64)]
        )
        return network

    source = nngp_kernel(build, num_samples=100, seed=0)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1000, 2)) * np.array([1.0, 0.5])
    _NoGram.largest = 0
    neuralef = NeuralEF(3, kernel=_NoGram(source), input_dim=2, batch_size=256, oversampling=3, seed=1)
    neuralef.fit(X, num_steps=150, schedule="cosine", ritz_block_size=300)
    assert 0 < _NoGram.largest <= 300  # batches of 256 in training, blocks of 300 in the Rayleigh–Ritz step
    reference = Nystrom(3).fit(X, source).eigenvalues.numpy()  # forms the 1000 × 1000 Gram matrix
    np.testing.assert_allclose(neuralef.eigenvalues.numpy()[:2], reference[:2], rtol=EIGENVALUE_RTOL)


def test_checkpoint_round_trip(tmp_path):
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(4)
    X, X_new = rng.uniform(-1, 1, (300, 2)), rng.uniform(-1, 1, (9, 2))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.8)
    model = NeuralEF(3, kernel=kernel, input_dim=2, width=16).fit(X, num_steps=30)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "neuralef"))
    restored = NeuralEF(3, kernel=gpflow.kernels.SquaredExponential(), input_dim=2, width=16, seed=99)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored(X_new).numpy(), model(X_new).numpy())
    np.testing.assert_array_equal(restored.eigenvalues.numpy(), model.eigenvalues.numpy())
    np.testing.assert_array_equal(restored.features(X_new).numpy(), model.features(X_new).numpy())
    assert restored.steps == 30
    # training continues from the restored state exactly as from the original
    model.fit(X, num_steps=5, seed=7)
    restored.fit(X, num_steps=5, seed=7)
    np.testing.assert_allclose(restored(X_new).numpy(), model(X_new).numpy(), rtol=1e-12, atol=1e-12)

    # user-supplied tf-keras networks
    networks = [neural_eigenfunction(2, width=8, seed=10 * j) for j in range(2)]
    user = NeuralEF(2, kernel=kernel, networks=networks, input_dim=2).fit(X, num_steps=20)
    path = tf.train.Checkpoint(model=user).write(str(tmp_path / "user"))
    again = NeuralEF(2, kernel=gpflow.kernels.SquaredExponential(), networks=[neural_eigenfunction(2, width=8) for _ in range(2)], input_dim=2)
    tf.train.Checkpoint(model=again).read(path).assert_consumed()
    np.testing.assert_array_equal(again(X_new).numpy(), user(X_new).numpy())


def test_an_interrupted_fit_resumes_from_its_checkpoint_to_the_uninterrupted_networks(tmp_path, monkeypatch):
    """A fit with ``checkpoint_dir`` killed mid-way (after step 23 of 40, checkpoints every 10 steps) and started
    again on a fresh object takes steps 20…39 only, and ends with the networks, σ̄ and eigenvalues of the same fit
    run straight through without a checkpoint (several passes over the data: N = 300, B = 64, cosine schedule)."""
    gpflow.config.set_default_float(np.float64)
    rng = np.random.default_rng(5)
    X, X_new = rng.uniform(-1, 1, (300, 2)), rng.uniform(-1, 1, (9, 2))

    def neuralef():
        return NeuralEF(3, kernel=gpflow.kernels.SquaredExponential(lengthscales=0.8), input_dim=2, width=16, batch_size=64, seed=3)

    options = dict(num_steps=40, schedule="cosine", print_every=0)
    straight = neuralef().fit(X, **options)
    directory = str(tmp_path / "fit")
    real_make_step, taken, interrupted = NeuralEF._make_step, [], []

    def interrupting_make_step(self, *args):
        step = real_make_step(self, *args)

        def counted(rows, rate):
            if len(taken) == 23 and not interrupted:  # once, before the first fit's step 23
                interrupted.append(True)
                raise KeyboardInterrupt("simulated interruption")
            taken.append(rows.numpy())
            return step(rows, rate)

        return counted

    monkeypatch.setattr(NeuralEF, "_make_step", interrupting_make_step)
    with pytest.raises(KeyboardInterrupt):
        neuralef().fit(X, checkpoint_dir=directory, checkpoint_every=10, **options)
    first = list(taken)
    resumed = neuralef()
    resumed.fit(X, checkpoint_dir=directory, checkpoint_every=10, **options)
    assert len(taken) == 23 + 20 and resumed.steps == 40  # restored at step 20, took 20…39
    np.testing.assert_array_equal(taken[23], first[20])  # step 20's minibatch drawn again, from the seed and t alone
    np.testing.assert_allclose(resumed(X_new).numpy(), straight(X_new).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(resumed.eigenvalues.numpy(), straight.eigenvalues.numpy(), rtol=1e-12)
    # a finished fit's checkpoint: started again, nothing is trained
    again = neuralef().fit(X, checkpoint_dir=directory, **options)
    assert len(taken) == 43 and again.steps == 40
    np.testing.assert_allclose(again(X_new).numpy(), straight(X_new).numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="belongs to a fit of 40 steps, not 50"):
        neuralef().fit(X, checkpoint_dir=directory, num_steps=50)
    with pytest.raises(ValueError, match="does not match this NeuralEF"):
        NeuralEF(3, kernel=gpflow.kernels.SquaredExponential(), input_dim=2, width=8).fit(X, checkpoint_dir=directory, num_steps=40)
    with pytest.raises(ValueError, match="checkpoint_every must be a positive integer"):
        neuralef().fit(X, checkpoint_dir=str(tmp_path / "other"), checkpoint_every=0, num_steps=40)


def test_bad_input_raises():
    kernel = gpflow.kernels.SquaredExponential()
    X = np.random.default_rng(5).normal(size=(50, 2))
    X_nan = X.copy()
    X_nan[7, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NeuralEF(2, kernel=kernel).fit(X_nan, num_steps=2)
    with pytest.raises(ValueError, match=r"matrix \[N, D\]"):
        NeuralEF(2, kernel=kernel).fit(X[:, 0], num_steps=2)
    with pytest.raises(ValueError, match="width 2, the networks expect 3"):
        NeuralEF(2, kernel=kernel, input_dim=3).fit(X, num_steps=2)
    for k in (0, -1, 1.5):
        with pytest.raises(ValueError, match="num_eigenpairs"):
            NeuralEF(k, kernel=kernel)
    with pytest.raises(ValueError, match="unknown estimator"):
        NeuralEF(2, kernel=kernel, estimator="biased")
    with pytest.raises(ValueError, match="unknown schedule"):
        NeuralEF(2, kernel=kernel).fit(X, num_steps=2, schedule="linear")
    with pytest.raises(ValueError, match="unknown activation"):
        NeuralEF(2, activation="swish-ish")
    with pytest.raises(ValueError, match="no kernel"):
        NeuralEF(2).fit(X, num_steps=2)
    with pytest.raises(ValueError, match="not fitted"):
        NeuralEF(2, kernel=kernel, input_dim=2)(X)
    with pytest.raises(ValueError, match="3 networks given"):
        NeuralEF(2, networks=[neural_eigenfunction(2) for _ in range(3)], oversampling=0)
    assert NeuralEF(2, networks=[neural_eigenfunction(2) for _ in range(3)]).num_networks == 3  # oversampling from the networks
    assert NeuralEF(10).num_networks == 20 and NeuralEF(200).num_networks == 256  # k extra, as many as the batch allows
    with pytest.raises(ValueError, match="Gram matrix is 40"):
        G = kernel(tf.constant(X[:40])).numpy()
        NeuralEF(2, kernel=G).fit(np.arange(50.0)[:, None], num_steps=2)
    fitted = NeuralEF(2, kernel=kernel).fit(X, num_steps=3)
    with pytest.raises(ValueError, match="NaN"):
        fitted(X_nan)
    with pytest.raises(ValueError, match="width 3"):
        fitted(np.zeros((4, 3)))


# -- the Rayleigh–Ritz step and the minibatch estimators ---------------------------------------


class _LinearOnMonomials(tf.Module):
    """x ↦ [1, x, x², x³, x⁴] · w: a 'network' whose span over j is the polynomials of degree ≤ 4."""

    def __init__(self, seed):
        super().__init__()
        self.w = tf.Variable(np.random.default_rng(seed).normal(size=(5, 1)), dtype=tf.float64)

    def __call__(self, X):
        X = tf.convert_to_tensor(X, dtype=tf.float64)
        return tf.matmul(tf.concat([X**n for n in range(5)], axis=1), self.w)


def test_rayleigh_ritz_recovers_exact_eigenpairs_in_the_span():
    """(x x' + 1.5)^4 in 1-D has rank 5 and polynomial eigenfunctions of degree ≤ 4: five random
    combinations of the monomials span them, so Rayleigh–Ritz must return the empirical operator's
    eigenpairs exactly, i.e. Nyström's on the same points (an eigendecomposition of the Gram matrix)."""
    rng = np.random.default_rng(6)
    X, X_test = rng.uniform(-1, 1, (400, 1)), rng.uniform(-1, 1, (50, 1))
    kernel = gpflow.kernels.Polynomial(degree=4.0, variance=1.0, offset=1.5)
    networks = [_LinearOnMonomials(seed) for seed in range(5)]
    model = NeuralEF(5, kernel=kernel, networks=networks, input_dim=1, learning_rate=1e-9, batch_size=64)
    model.fit(X, num_steps=1, ritz_block_size=97)  # blocks that do not divide N
    assert model.ritz_done
    nystrom = Nystrom(5).fit(X, kernel)
    np.testing.assert_allclose(model.eigenvalues.numpy(), nystrom.eigenvalues.numpy(), rtol=1e-7)
    psi, reference = model(X_test).numpy(), nystrom(X_test).numpy()
    signs = np.sign(np.sum(psi * reference, axis=0))
    np.testing.assert_allclose(psi, reference * signs, atol=1e-6 * np.abs(reference).max())
    # orthonormal on the training points
    train = model(X).numpy()
    np.testing.assert_allclose(train.T @ train / len(X), np.eye(5), atol=1e-8)
    # without the step: the outputs are the raw (mixed) networks, not eigenfunctions
    model.fit(X, num_steps=1, rayleigh_ritz=False)
    assert not model.ritz_done
    raw = model(X_test).numpy()
    assert np.max(np.abs(np.abs(np.sum(raw * reference, 0)) / np.linalg.norm(raw, axis=0) / np.linalg.norm(reference, axis=0) - 1)) > 1e-3


def test_rayleigh_ritz_with_a_feature_kernel_and_a_singular_span():
    """Feature path (Φᵀ H, no Gram block) against a dense computation; a duplicated network makes
    M singular, which drops one direction instead of failing."""
    from activated_dgp.eigen.rayleigh_ritz import generalised_eigh, span_products

    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 2))
    W = rng.normal(size=(2, 40))
    source = FeatureKernel(lambda Z: tf.cos(tf.matmul(Z, W)), 40)
    H = np.concatenate([np.sin(X @ rng.normal(size=(2, 4))), X], axis=1)
    H = np.concatenate([H, H[:, :1]], axis=1)  # a duplicate column: M is singular
    rows = {tuple(x): n for n, x in enumerate(X)}
    A, M = span_products(source, X, lambda Z: H[[rows[tuple(z)] for z in np.asarray(Z)]], 64)
    Phi = np.cos(X @ W)
    np.testing.assert_allclose(A, H.T @ (Phi @ Phi.T / 40) @ H / 300**2, rtol=1e-10)
    np.testing.assert_allclose(M, H.T @ H / 300, rtol=1e-12)
    values, C = generalised_eigh(A, M)
    assert C.shape == (7, 6)  # one direction of the duplicate dropped
    np.testing.assert_allclose(C.T @ M @ C, np.eye(6), atol=1e-8)
    np.testing.assert_allclose(C.T @ A @ C, np.diag(values), atol=1e-10 * values[0])


@pytest.mark.parametrize("estimator", ["paper", "unbiased"])
def test_minibatch_estimators_expectation_closed_form(estimator):
    """E over all C(N, B) batches drawn without replacement of R̃ against the closed forms
    (hypergeometric inclusion probabilities: a pair n ≠ m is in the batch with probability
    B(B−1)/(N(N−1)), a point with probability B/N)."""
    from itertools import combinations

    from activated_dgp.eigen.neuralef import minibatch_rayleigh

    rng = np.random.default_rng(8)
    N, B, p = 7, 3, 2
    F = rng.normal(size=(N, N))
    K = F @ F.T
    Psi = rng.normal(size=(N, p))
    total = np.zeros((p, p))
    batches = list(combinations(range(N), B))
    for batch in batches:
        b = list(batch)
        R, _, _ = minibatch_rayleigh(tf.constant(Psi[b]), tf.constant(K[np.ix_(b, b)] @ Psi[b]), tf.constant(np.diag(K)[b]), estimator)
        total += R.numpy()
    expectation = total / len(batches)
    off = K - np.diag(np.diag(K))
    cross = Psi.T @ off @ Psi  # Σ_(n≠m) ψ_i(n) κ_nm ψ_j(m)
    on = Psi.T @ (np.diag(K)[:, None] * Psi)  # Σ_n κ_nn ψ_i(n) ψ_j(n)
    if estimator == "paper":
        closed = (B - 1) / (B * (N - 1)) * cross / N + on / (B * N)
    else:
        closed = cross / (N * (N - 1))
    np.testing.assert_allclose(expectation, closed, rtol=1e-12)


def test_bad_input_batch_and_kernel_source_shape():
    X = np.random.default_rng(9).normal(size=(50, 2))
    kernel = gpflow.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="exceed the batch size 4"):
        NeuralEF(5, kernel=kernel, batch_size=4)
    with pytest.raises(ValueError, match="exceeds the batch of 3 points"):
        NeuralEF(4, kernel=kernel, input_dim=2).fit(X[:3], num_steps=2)
    with pytest.raises(ValueError, match="oversampling"):
        NeuralEF(2, oversampling=-1)

    class WrongGram(adgp.eigen.KernelSource):
        def gram(self, A, B=None):
            A = tf.convert_to_tensor(A)
            return tf.ones([tf.shape(A)[0], tf.shape(A)[0] + 1], tf.float64)

    with pytest.raises(ValueError, match="wrong|expected"):
        NeuralEF(2, kernel=WrongGram(), input_dim=2).fit(X, num_steps=2)
    wrong_rows = FeatureKernel(lambda Z: tf.ones([3, 10], tf.float64), 10)  # ignores the batch size
    with pytest.raises(ValueError, match="expected"):
        NeuralEF(2, kernel=wrong_rows, input_dim=2).fit(X, num_steps=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["polynomial", "rbf"])
def test_all_ten_pairs_with_oversampling_and_rayleigh_ritz(name):
    """The benchmark's goal on the paper's set-up (N = 2,000): every eigenvalue with a non-zero true value
    within 10 % of the truth (Gauss–Legendre quadrature of the operator) and every overlap
    |⟨ψ̂_j, ψ_j⟩| ≥ 0.95, with 10 extra networks, 4,000 steps and the Rayleigh–Ritz step."""
    from benchmarks.neuralef_vs_nystrom import quadrature_truth

    kernel, X, _ = _problem(name)
    half_width = 1.0 if name == "polynomial" else 2.0
    mu, eigenfunctions = quadrature_truth(kernel, half_width)
    model = NeuralEF(10, kernel=kernel, input_dim=1, oversampling=10, seed=0).fit(X, num_steps=4000, schedule="cosine")
    grid = np.linspace(-half_width, half_width, 4001)[:, None]
    psi, truth = model(grid).numpy(), eigenfunctions(grid)
    meaningful = mu > 1e-8 * mu[0]
    overlaps = np.abs(np.mean(psi * truth, 0)) / np.sqrt(np.mean(psi**2, 0) * np.mean(truth**2, 0) + 1e-300)
    relative = np.abs(model.eigenvalues.numpy() - mu) / mu
    assert np.all(relative[meaningful] < 0.1), relative
    assert np.all(overlaps[meaningful] >= 0.95), overlaps


# -- the CNN-GP kernel by Monte Carlo (eq. 19) --------------------------------------------------

_SMALL_CNN = dict(channels=(2, 3), hidden=4, kernel_size=3, image_shape=(8, 8))


def _numpy_cnn(images, weights):
    """Independent NumPy forward pass, vectorised over S weight draws: images [n, 8, 8], weights with a
    leading sample axis → g [S, n]. 'same' 3 × 3 convolutions by explicit patches, 2 × 2 max-pooling."""
    W1, b1, W2, b2, W3, b3, W4, b4 = weights

    def conv(h, W, b):  # h [S, n, H, W, c], W [S, 3, 3, c, c'] → [S, n, H, W, c']
        H, Wd = h.shape[2], h.shape[3]
        padded = np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
        out = sum(np.einsum("snhwc,scd->snhwd", padded[:, :, i : i + H, j : j + Wd], W[:, i, j]) for i in range(3) for j in range(3))
        return out + b[:, None, None, None, :]

    def pool(h):
        S, n, H, Wd, c = h.shape
        return h.reshape(S, n, H // 2, 2, Wd // 2, 2, c).max(axis=(3, 5))

    S = W1.shape[0]
    h = np.broadcast_to(images[None, ..., None], (S,) + images.shape + (1,))
    h = pool(np.maximum(conv(h, W1, b1), 0))
    h = pool(np.maximum(conv(h, W2, b2), 0)).reshape(S, images.shape[0], -1)
    h = np.maximum(np.einsum("snf,sfh->snh", h, W3) + b3[:, None, :], 0)
    return (np.einsum("snh,sho->sno", h, W4) + b4[:, None, :])[..., 0]


def _numpy_weights(rng, S):
    """S independent draws of the small CNN's weights, N(0, 2/fan_in) and N(0, 0.01), stacked."""
    shapes = [(3, 3, 1, 2), (3, 3, 2, 3), (3 * 2 * 2, 4), (4, 1)]
    weights = []
    for shape in shapes:
        weights.append(rng.normal(0, np.sqrt(2.0 / np.prod(shape[:-1])), (S,) + shape))
        weights.append(rng.normal(0, 0.1, (S, shape[-1])))
    return weights


def test_cnn_gp_forward_matches_numpy():
    from activated_dgp.eigen.cnn_gp import cnn_forward, sample_cnn_weights

    images = np.random.default_rng(10).uniform(-1, 1, (3, 8, 8))
    weights = sample_cnn_weights(np.random.default_rng(0), **_SMALL_CNN)
    ours = cnn_forward(tf.constant(images, tf.float32), weights).numpy()
    reference = _numpy_cnn(images, [w[None] for w in weights])[0]
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5)


def test_cnn_gp_monte_carlo_kernel_converges():
    """κ_S on 3 images against a dense reference (NumPy, 40,000 independent draws): every entry within
    4 Monte Carlo standard errors sd(g(x) g(x'))/√S (sd from the reference draws), at S = 25 and 250,
    and the error shrinks with S."""
    from activated_dgp.eigen.cnn_gp import cnn_gp_features

    images = np.random.default_rng(11).uniform(-1, 1, (3, 8, 8))
    g = _numpy_cnn(images, _numpy_weights(np.random.default_rng(12), 40_000))  # [S_ref, 3]
    products = g[:, :, None] * g[:, None, :]
    reference, spread = products.mean(0), products.std(0)
    errors = {}
    for S in (25, 250):
        Phi = cnn_gp_features(images, S, seed=3, **_SMALL_CNN)
        deviation = np.abs(Phi @ Phi.T / S - reference)
        assert np.all(deviation < 4 * spread / np.sqrt(S) + 4 * spread / np.sqrt(g.shape[0])), (S, deviation, spread)
        errors[S] = np.sqrt(np.mean(deviation**2))
    assert errors[250] < errors[25], errors
    with pytest.raises(ValueError, match="square"):
        cnn_gp_features(np.zeros((3, 8)), 2)
    with pytest.raises(ValueError, match="NaN"):
        cnn_gp_features(np.full((2, 8, 8), np.nan), 2)


def test_quiet_check_block_is_a_function_of_its_record(tmp_path):
    """benchmarks.neuralef_vs_nystrom --quiet-check: the block is rebuilt from the rows of its record alone; each time
    is divided by the Lanczos Nyström's of the same kernel (recomputed here), and with no record the block says so."""
    import json

    from benchmarks.neuralef_vs_nystrom import LANCZOS, QUIET_SIZE, _store, quiet_report

    cache = tmp_path / "quiet.jsonl"
    assert "No record yet" in quiet_report([], cache=cache)
    rows = [dict(kernel="rbf", N=QUIET_SIZE, method=LANCZOS, steps=0, seconds=20.0, relative_errors=[0.01, 0.2], overlaps=[0.99, 0.9]),
            dict(kernel="rbf", N=QUIET_SIZE, method="NeuralEF", steps=4000, seconds=50.0, training_seconds=30.0,
                 relative_errors=[0.01, 0.05], overlaps=[0.99, 0.97], load_average=0.7),
            dict(kernel="rbf", N=2000, method="NeuralEF", steps=4000, seconds=5.0, relative_errors=[0.0], overlaps=[1.0])]
    cache.write_text("".join(json.dumps(row) + "\n" for row in rows))
    text = quiet_report(_store(cache).records(), cache=cache)
    assert f"| rbf | NeuralEF, 4000 steps | 50.0 (Ritz 20.0) | 2/2 | 2/2 | {50.0 / 20.0:.2f} |" in text
    assert f"| rbf | {LANCZOS} | 20.0 | 1/2 | 1/2 | 1.00 |" in text
    assert text.count("| rbf |") == 2  # the N = 2,000 row is not part of the check
