"""The SGD-trajectory study through its cells, run_cell and report on the smallest settings, on a synthetic MNIST-shaped
data folder: every method's record, the spectrum it records against numpy's eigh of the dense κ_SGD built here from
the saved function values, the iterate count, resume, and the page and figure."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from experiments import sgd_trajectory
from experiments.harness import cli
from experiments.harness.blocks import read_block
from experiments.harness.study import run_study


def _write_idx(path, array):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", s) for s in array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """60 training and 12 test 'digits': a bright bar whose row is the label, plus noise."""
    root = tmp_path_factory.mktemp("mnist_data")
    (root / "mnist").mkdir()
    rng = np.random.default_rng(0)

    def digits(n):
        labels = np.arange(n) % 10
        images = rng.integers(0, 60, size=(n, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 + 2 * label : 4 + 2 * label, 4:24] = 250
        return images, labels

    for prefix, n in (("train", 60), ("t10k", 12)):
        images, labels = digits(n)
        _write_idx(root / "mnist" / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(root / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return root


SMALL = ["--seeds", "0", "--train-size", "60", "--angles", "0", "90", "--epochs", "3", "--swag-epochs", "3", "--batch-size", "20",
         "--function-every", "1", "--max-rank", "2", "--swag-samples", "2", "--eigenpairs", "2", "--neuralef-steps", "5",
         "--mc-samples", "4", "--ensemble-size", "2", "--neuralef-width", "4"]


def test_study_end_to_end(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ADGP_CACHE_DIR", str(tmp_path / "cache"))
    out, artifacts = tmp_path / "out", tmp_path / "artifacts"
    argv = ["--data-dir", str(data_dir), "--out", str(out), "--artifacts", str(artifacts), "--reference", str(tmp_path / "none"), *SMALL]
    options = cli.parse("sgd_trajectory", sgd_trajectory, argv)
    assert len(sgd_trajectory.cells(options)) == len(sgd_trajectory.METHODS)
    records = run_study(sgd_trajectory, options)
    assert sorted(r["method"] for r in records) == sorted(sgd_trajectory.METHODS)
    for record in records:
        assert len(record["accuracy"]) == len(record["log_likelihood"]) == len(record["ece"]) == 2
        assert all(0 <= a <= 1 for a in record["accuracy"]) and all(ll <= 0 for ll in record["log_likelihood"])
    neuralef = next(r for r in records if r["method"] == "neuralef")
    assert neuralef["iterates"] == 3 * 3 and neuralef["snapshots"] == 3  # 3 epochs of 3 steps, every step
    # the recorded spectrum of κ_SGD against eigh of the dense kernel built from the saved function values
    values = np.load(next(artifacts.glob("trajectory-*/function_values.npy"))).astype(np.float64)
    for c in range(10):
        K = np.cov(values[:, :, c].T, bias=True)
        reference = np.linalg.eigvalsh(K / K.shape[0])[::-1][:2]
        np.testing.assert_allclose(neuralef["exact_eigenvalues"][c], reference, rtol=1e-6, atol=1e-12)
        assert all(0 <= lam <= 1.02 * ref + 1e-12 for lam, ref in zip(neuralef["eigenvalues"][c], reference))  # Ritz values: lower bounds
    # resume: nothing left to run, the same records
    again = run_study(sgd_trajectory, cli.parse("sgd_trajectory", sgd_trajectory, argv))
    assert len(again) == len(records)
    block = read_block(tmp_path / "out.md", "sgd_trajectory")
    assert "Claim 1" in block and "Claim 2" in block and (tmp_path / "out.png").stat().st_size > 0
