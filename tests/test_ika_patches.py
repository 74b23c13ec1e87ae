"""The IKA-patches study (experiments/ika_patches): its preprocessing against numpy computations written here (GCN's
formula, patches cut by slicing, whitening as the Mahalanobis inner product, unit length), its error measure against
a sum of outer products, and the study end to end on its smallest settings through ``cells``/``run_cell``/``report``,
each record's errors against a dense numpy computation of both methods from the paper's definitions: Nyström from
the eigendecomposition of κ(W, W), IKA's Algorithm 1 through the Cholesky factor of P̃ and numpy's symmetric eigh
(the library solves M̃ f = λ P̃ f with scipy's generalised eigh)."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from experiments.ika_patches import patches as P

SHARED = Path(os.environ.get("ADGP_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
SMALL = ["--patches", "4000", "--samples", "150", "300", "--trials", "2", "--test", "120", "--num-filters", "16",
         "--ranks", "2", "4", "16", "--kmeans-iterations", "5", "--quiet"]


def test_global_contrast_normalisation_is_the_papers_formula():
    images = np.random.default_rng(0).integers(0, 256, size=(5, 6, 4)).astype(float)
    expected = np.stack([(im - im.sum() / im.size) / np.sqrt(((im - im.sum() / im.size) ** 2).sum() / im.size + 10.0)
                         for im in images])
    np.testing.assert_allclose(P.global_contrast_normalise(images), expected, rtol=1e-12)


def test_patches_are_the_slices_of_the_images():
    images = np.random.default_rng(1).normal(size=(3, 10, 9))
    which, rows, columns = P.patch_positions(np.random.default_rng(2), 3, 10, 9, 50, size=4)
    assert rows.max() <= 6 and columns.max() <= 5
    patches = P.extract_patches(images, which, rows, columns, size=4)
    for p, i, r, c in zip(patches, which, rows, columns):
        np.testing.assert_array_equal(p, images[i, r:r + 4, c:c + 4].ravel())


def test_whitening_gives_the_identity_covariance_and_the_mahalanobis_inner_product():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5)) @ rng.normal(size=(5, 5)) + rng.normal(size=5)
    covariance = np.cov(X.T, bias=True)
    Z = P.pca_whiten(X, epsilon=0.0)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.cov(Z.T, bias=True), np.eye(5), atol=1e-10)
    centred = X - X.mean(axis=0)
    np.testing.assert_allclose(Z @ Z.T, centred @ np.linalg.inv(covariance) @ centred.T, rtol=1e-8, atol=1e-8)
    # with ε the covariance is diag(λ / (λ + ε)) for the eigenvalues λ of the patches' covariance
    values = np.linalg.eigvalsh(covariance)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(np.cov(P.pca_whiten(X, 0.5).T, bias=True))), np.sort(values / (values + 0.5)), rtol=1e-9)
    U = P.unit_length(Z)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(U * np.linalg.norm(Z, axis=1, keepdims=True), Z, rtol=1e-12)


def test_the_error_is_the_mean_absolute_difference_with_the_leading_features():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(30, 30))
    K, Phi = A @ A.T, rng.normal(size=(30, 6))
    for m, error in zip((1, 3, 6), P.mean_absolute_errors(K, Phi, (1, 3, 6))):
        approximation = sum(np.outer(Phi[:, j], Phi[:, j]) for j in range(m))
        assert error == pytest.approx(np.abs(K - approximation).sum() / 900, rel=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: P.global_contrast_normalise(np.full((2, 3, 3), np.nan)), "NaN"),
    (lambda: P.global_contrast_normalise(np.zeros((3, 3))), "3 dimensions"),
    (lambda: P.unit_length(np.zeros((2, 4))), "zero"),
    (lambda: P.pca_whiten(np.ones((5, 3)), epsilon=0.0), "singular"),
    (lambda: P.patch_positions(np.random.default_rng(0), 2, 5, 5, 3, size=6), "does not fit"),
    (lambda: P.mean_absolute_errors(np.eye(3), np.ones((3, 2)), (3,)), "ranks"),
    (lambda: P.preprocess(np.zeros((2, 8, 8)), 5, 0), "at least 10"),
])
def test_bad_input_raises_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_inconsistent_options_are_refused():
    from experiments import ika_patches
    from experiments.harness import cli

    for change, message in ((["--samples", "8"], "at least n"), (["--ranks", "17"], "ranks"), (["--patches", "300"], "too few")):
        options = cli.parse("ika_patches", ika_patches, SMALL + change)
        with pytest.raises(ValueError, match=message):
            ika_patches.cells(options)


def _gauss(A, B, sigma2):
    squared = (A**2).sum(1)[:, None] + (B**2).sum(1)[None, :] - 2 * A @ B.T
    return np.exp(-np.maximum(squared, 0.0) / (2 * sigma2))


def _nystrom_errors(K, X, W, sigma2, ranks):
    values, vectors = np.linalg.eigh(_gauss(W, W, sigma2))
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    kept = values > 1e-10 * values[0]  # numerically zero eigenvalues carry no feature
    Phi = np.where(kept, _gauss(X, W, sigma2) @ vectors / np.sqrt(np.where(kept, values, 1.0)), 0.0)
    return [np.abs(K - Phi[:, :m] @ Phi[:, :m].T).mean() for m in ranks]


def _ika_errors(K, X, Y, W, sigma2, ranks):
    """Algorithm 1 with b_i(x) = exp(w_i · x / σ²): P̃ = BᵀB/S, M̃ = BᵀGB/S², with IKA's documented jitter
    1e-10 tr(P̃)/n on P̃'s diagonal where its condition number exceeds 1e10; M̃ f = λ P̃ f solved through P̃'s Cholesky
    factor L (numpy's symmetric eigh of L⁻¹ M̃ L⁻ᵀ); φ(x) = √λ B(x) f."""
    S, n = len(Y), len(W)
    B = np.exp(Y @ W.T / sigma2)
    P_, M_ = B.T @ B / S, B.T @ _gauss(Y, Y, sigma2) @ B / S**2
    spectrum = np.linalg.eigvalsh(P_)
    if spectrum[0] <= 0 or spectrum[-1] / spectrum[0] > 1e10:
        P_ = P_ + 1e-10 * np.trace(P_) / n * np.eye(n)
    L = np.linalg.cholesky(P_)
    values, vectors = np.linalg.eigh(scipy.linalg.solve_triangular(L, scipy.linalg.solve_triangular(L, M_, lower=True).T, lower=True))
    F = scipy.linalg.solve_triangular(L.T, vectors[:, ::-1], lower=False)
    Phi = np.exp(X @ W.T / sigma2) @ F * np.sqrt(np.maximum(values[::-1], 0.0))
    return [np.abs(K - Phi[:, :m] @ Phi[:, :m].T).mean() for m in ranks]


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    if not (SHARED / "mnist").is_dir():
        pytest.skip("needs the official MNIST test images in $ADGP_DATA_DIR/mnist or ../shared/data/mnist (data are never in the repository)")
    from experiments import ika_patches

    root = tmp_path_factory.mktemp("ika")
    out = root / "ika_patches"
    argv = SMALL + ["--data-dir", str(SHARED), "--out", str(out), "--artifacts", str(root / "cache")]
    records = ika_patches.main(argv)
    assert len(list((root / "cache").glob("patches-*.npz"))) == 1  # preprocessed once, shared by the cells
    return ika_patches, out, argv, records


@pytest.fixture(scope="module")
def data(study_run):
    return study_run[0].patch_data(SHARED, 4000, 0)


def test_every_cell_matches_a_dense_numpy_computation_of_both_methods(study_run, data):
    from sklearn.cluster import KMeans

    ika_patches, out, argv, records = study_run
    from experiments.harness import cli

    options = cli.parse("ika_patches", ika_patches, argv)
    assert sorted((r["filters"], r["samples"], r["trial"]) for r in records) == sorted(
        [("random", S, t) for S in (150, 300) for t in (0, 1)] + [("k-means", 300, t) for t in (0, 1)])
    assert len(data.train) == 3200 and len(data.test) == 800
    np.testing.assert_allclose(np.linalg.norm(data.train, axis=1), 1.0)
    for record in records:
        draw = ika_patches.draw_trial(data.train, len(data.test), options, record["trial"])
        Y, X = data.train[draw.sample_rows[: record["samples"]]], data.test[draw.test_rows]
        if record["filters"] == "random":
            W = draw.random_filters
            assert all(any(np.array_equal(w, y) for y in Y[:150]) for w in W)  # among the smallest S's samples
        else:
            W = KMeans(16, init="k-means++", n_init=1, max_iter=5, tol=0.0, random_state=record["trial"]).fit(Y).cluster_centers_
            W = W / np.linalg.norm(W, axis=1, keepdims=True)
        sigma2 = record["sigma2"]
        K = _gauss(X, X, sigma2)
        # the leading eigenpairs are far from round-off: both methods to 6 digits at m = 2, 4
        np.testing.assert_allclose(record["nystrom_error"][:2], _nystrom_errors(K, X, W, sigma2, (2, 4)), rtol=1e-6)
        np.testing.assert_allclose(record["ika_error"][:2], _ika_errors(K, X, Y, W, sigma2, (2, 4)), rtol=1e-5)
        assert record["ranks"] == [2, 4, 16] and record["num_test"] == 120


def test_sigma2_is_the_tenth_percentile_of_squared_distances(study_run, data):
    records = study_run[3]
    rng = np.random.default_rng(5)
    pairs = rng.integers(len(data.train), size=(2, 20_000))
    distances = ((data.train[pairs[0]] - data.train[pairs[1]]) ** 2).sum(1)
    estimate = np.percentile(distances[distances > 0], 10)
    assert records[0]["sigma2"] == pytest.approx(estimate, rel=0.05)  # another draw of pairs: a few per cent


def test_the_report_states_the_records_numbers_and_is_rewritten_unchanged(study_run):
    from experiments.harness.blocks import write_block

    ika_patches, out, argv, records = study_run
    page = out.parent / "ika_patches.md"
    text = page.read_text()
    assert (out.parent / "ika_patches.png").stat().st_size > 1000
    random = [r for r in records if r["filters"] == "random" and r["samples"] == 300]
    reduction = np.mean([1 - r["ika_error"][-1] / r["nystrom_error"][-1] for r in random])
    assert f"(S = 300, m = n = 16): **" in text and f"{100 * reduction:+.1f} %" in text
    drop = np.mean([1 - b["ika_error"][-1] / a["ika_error"][-1] for a in records for b in records
                    if a["filters"] == b["filters"] == "random" and a["trial"] == b["trial"] and (a["samples"], b["samples"]) == (150, 300)])
    assert f"E(S = 300) / E(S = 150) = {100 * drop:+.1f} %" in text
    assert text.count("**§4.") == 6 and "<!-- BEGIN GENERATED ika_patches: python -m experiments ika_patches --report-only" in text
    write_block(page, "ika_patches", "stale", "stale")
    ika_patches.main(argv + ["--report-only"])
    assert page.read_text() == text
