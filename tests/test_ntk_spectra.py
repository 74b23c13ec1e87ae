"""The NTK-spectra study (experiments/ntk_spectra.py) end to end on its --fast setting, checked against
computations written here: the exact NTK Gram from one tf.GradientTape.gradient per image of the saved classifier
(its eigenvalues by numpy), the test Gram likewise, the Eckart–Young error of the best rank-10 approximation from
numpy's SVD, and the theorem that no rank-10 kernel estimate beats it."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = pytest.mark.skipif(not (SHARED / "mnist").is_dir(),
                                reason="needs the official MNIST test images in ../shared/data/mnist (not in the repository)")


def tape_gram(model, X, X2=None):
    def jacobian(A):
        rows = []
        for x in A:
            with tf.GradientTape() as tape:
                output = tf.reduce_sum(model(tf.constant(x[None, :], tf.float32)))
            rows.append(np.concatenate([g.numpy().ravel() for g in tape.gradient(output, model.trainable_variables)]))
        return np.array(rows, dtype=np.float64)

    J = jacobian(X)
    return J @ (J if X2 is None else jacobian(X2)).T


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    from experiments import ntk_spectra

    root = tmp_path_factory.mktemp("ntk")
    argv = ["--fast", "--quiet", "--data-dir", str(SHARED), "--out", str(root / "ntk_spectra"), "--artifacts", str(root / "cache")]
    records = ntk_spectra.main(argv)
    return ntk_spectra, root, argv, records


def test_exact_spectrum_and_test_kernels_match_per_image_gradients(study_run):
    ntk_spectra, root, _, records = study_run
    assert len(records) == 1
    record = records[0]
    from activated_dgp import load

    (saved,) = (root / "cache").glob("ntk_classifier-*")  # the library's one way of saving (activated_dgp.save)
    model = load(saved)
    assert record["num_parameters"] == (1 * 25 * 8 + 8) + (8 * 25 * 16 + 16) + (4 * 4 * 16 * 16 + 16) + (16 + 1)
    assert 0.0 <= record["test_accuracy"] <= 1.0 and record["test_images"] > 1000

    X, _, X_test, y_test, _ = ntk_spectra.two_class_mnist(str(SHARED), (3, 5))
    X = X[: record["train_points"]]
    K = tape_gram(model, X)
    eigenvalues = np.linalg.eigvalsh(K)[::-1] / len(X)
    exact = np.asarray(record["exact_eigenvalues"])
    np.testing.assert_allclose(exact[:10], eigenvalues[:10], rtol=1e-3, atol=1e-5 * eigenvalues[0])
    assert np.all(exact >= -1e-6 * exact[0])
    assert record["exact_trace"] == pytest.approx(np.trace(K) / len(X), rel=1e-4)

    X_t, y_t = ntk_spectra.test_subset(X_test, y_test, len(record["test_labels"]), record["seed"])
    assert np.all(np.diff(y_t) >= 0) and y_t.astype(int).tolist() == record["test_labels"]
    K_t = tape_gram(model, X_t)
    kernels = np.load(root / "ntk_spectra" / record["kernels_file"])
    np.testing.assert_allclose(kernels["exact"], K_t, rtol=1e-3, atol=1e-4 * np.abs(K_t).max())

    singular = np.linalg.svd(K_t, compute_uv=False)
    eckart_young = np.sqrt(np.sum(singular[10:] ** 2) / np.sum(singular**2))
    errors = record["kernel_errors"]
    assert errors["eckart_young_top10"] == pytest.approx(eckart_young, rel=1e-3, abs=1e-6)
    for method in ("neuralef", "random_features", "exact_top10_nystrom"):  # all rank ≤ 10
        assert errors[method] >= eckart_young - 1e-6
    for method in ("neuralef", "random_features"):
        measured = np.linalg.norm(kernels[method] - K_t) / np.linalg.norm(K_t)
        assert errors[method] == pytest.approx(measured, rel=1e-3)
        assert np.linalg.matrix_rank(kernels[method].astype(np.float64), tol=1e-4 * np.abs(kernels[method]).max()) <= 10


def test_report_only_rewrites_the_same_page(study_run):
    ntk_spectra, root, argv, _ = study_run
    page = root / "ntk_spectra.md"
    text = page.read_text()
    assert "BEGIN GENERATED ntk_spectra" in text and "ntk_spectra.png" in text and str(root) not in text
    assert (root / "ntk_spectra.png").stat().st_size > 0
    ntk_spectra.main(argv + ["--report-only"])
    assert page.read_text() == text


def test_bad_classes_are_refused(study_run):
    ntk_spectra, root, argv, _ = study_run
    with pytest.raises(ValueError, match="two different digits"):
        ntk_spectra.main(argv + ["--classes", "3", "3"])
