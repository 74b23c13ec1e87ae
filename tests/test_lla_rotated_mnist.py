"""The rotated-MNIST LLA study through its cells, run_cell and report on the smallest settings, on the synthetic
MNIST-shaped data folder of the SGD-trajectory study's test: a record per method, the MAP record's per-angle NLL
against the softmax of the saved network computed here, resume, and the page and figure."""

from __future__ import annotations

import os
import sys

import numpy as np
from scipy.special import log_softmax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sgd_trajectory import data_dir  # noqa: E402,F401  (the module's synthetic data folder, a fixture)

from activated_dgp.data import load_mnist, rotated_test_sets  # noqa: E402
from experiments import lla_rotated_mnist  # noqa: E402
from experiments.harness import cli  # noqa: E402
from experiments.harness.blocks import read_block  # noqa: E402
from experiments.harness.study import run_study  # noqa: E402
from experiments.harness.setups import rotated_mnist_cnn  # noqa: E402

SMALL = ["--seeds", "0", "--train-size", "40", "--test-size", "6", "--angles", "0", "90", "--num-units", "3", "--width", "2",
         "--truncation-level", "3", "--epochs", "1", "--batch-size", "20", "--lla-batch-size", "16", "--predictive-samples", "20",
         "--neuralef-steps", "3", "--methods", "map", "last_layer", "kron", "diagonal", "neuralef_10"]


def test_study_end_to_end(data_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ADGP_CACHE_DIR", str(tmp_path / "cache"))
    out, artifacts = tmp_path / "out", tmp_path / "artifacts"
    argv = ["--data-dir", str(data_dir), "--out", str(out), "--artifacts", str(artifacts), *SMALL]
    options = cli.parse("lla_rotated_mnist", lla_rotated_mnist, argv)
    assert len(lla_rotated_mnist.cells(options)) == 5
    records = run_study(lla_rotated_mnist, options)
    assert sorted(r["method"] for r in records) == sorted(["map", "last_layer", "kron", "diagonal", "neuralef_10"])
    for record in records:
        assert len(record["ece"]) == len(record["log_likelihood"]) == 2
        assert all(0 <= e <= 1 for e in record["ece"]) and all(ll <= 0 for ll in record["log_likelihood"])
        assert record["method"] == "map" or record["prior_precision"] > 0
    assert list(artifacts.glob("neuralef-*"))  # NeuralEF's training checkpoints, which a rerun resumes from
    # the MAP record against the saved network's softmax, computed here on the rotated test digits
    model, _, _ = rotated_mnist_cnn(0, 3, 3, 2)
    model(np.zeros((1, 784), np.float32))
    with np.load(next(artifacts.glob("network-*.npz"))) as saved:
        model.set_weights([saved[f"w{i}"] for i in range(len(saved.files))])
    data = load_mnist(data_dir)
    rotated = rotated_test_sets(data.x_test[:6], [0, 90], cache_dir=False)
    labels = data.y_test[:6].astype(int)
    expected = [np.mean(log_softmax(model(r.reshape(6, -1).astype(np.float32) / 255.0).numpy().astype(np.float64), axis=1)[np.arange(6), labels])
                for r in rotated]
    np.testing.assert_allclose(next(r for r in records if r["method"] == "map")["log_likelihood"], expected, rtol=1e-5)
    # resume: nothing left to run, the same records
    again = run_study(lla_rotated_mnist, cli.parse("lla_rotated_mnist", lla_rotated_mnist, argv))
    assert len(again) == len(records)
    block = read_block(tmp_path / "out.md", "lla_rotated_mnist")
    assert "NeuralEF LLA (k = 10)" in block and "KFAC LLA" in block and (tmp_path / "out.png").stat().st_size > 0


def _record(method, seed, nll, ece):
    angles = [0, 90, 180]
    return {"method": method, "seed": seed, "angles": angles, "log_likelihood": [-v for v in nll], "ece": list(ece)}


def test_the_verdict_waits_for_every_seed_and_counts_seeds_against_the_last_layer_lla():
    """No verdict on the paper's claim until the NeuralEF LLA has every seed the baselines have; the issue's per-seed
    comparison with the last-layer LLA (mean NLL over the angles) is counted with numpy from the same numbers."""
    from experiments.lla_rotated_mnist.report import table_of, verdicts

    rng = np.random.default_rng(0)
    base = {m: {s: (rng.uniform(1, 3, 3), rng.uniform(0.2, 0.4, 3)) for s in range(3)} for m in ("map", "last_layer", "kron", "diagonal")}
    records = [_record(m, s, *v) for m, seeds in base.items() for s, v in seeds.items()]
    better = {s: (np.full(3, 0.5), np.full(3, 0.01)) for s in range(3)}  # below every baseline in NLL and ECE
    one = verdicts(table_of(records + [_record("neuralef_10", 0, *better[0])]))[0]
    assert one.startswith("- **NeuralEF LLA (k = 10)**: no verdict yet: seeds [0] recorded, [1, 2] missing;")
    assert f"seed 0: 0.500 against {base['last_layer'][0][0].mean():.3f}" in one and "in 1 of 1 seeds" in one
    worse_seed = {**better, 2: (np.full(3, 9.0), np.full(3, 0.01))}
    lines = verdicts(table_of(records + [_record("neuralef_10", s, *v) for s, v in worse_seed.items()]))
    below = sum(worse_seed[s][0].mean() < base["last_layer"][s][0].mean() for s in range(3))
    assert f"in {below} of 3 seeds" in lines[0] and below == 2
    lines = verdicts(table_of(records + [_record("neuralef_10", s, *v) for s, v in better.items()]))
    assert lines[0].startswith("- **NeuralEF LLA (k = 10)**: **reproduced** at this scale; ") and "in 3 of 3 seeds" in lines[0]
    assert lines[1] == "- **NeuralEF LLA (k = 20)**: records missing."
