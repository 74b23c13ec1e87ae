"""The rotated-MNIST study's plain-CNN methods (--plain-cnn) through the runner, on the smallest settings: every
record scored, the scores and the temperature checked against numpy computations from the saved network, the
convertible variant started from that network, and the page's verdicts written."""

import numpy as np
import pytest
from scipy.special import log_softmax

from tests.test_rotated_mnist import write_split


@pytest.fixture
def rng():
    return np.random.default_rng(3)


def test_plain_cnn_methods_are_scored_against_numpy_and_reported(tmp_path, rng):
    from activated_dgp.data import load_mnist
    from experiments import rotated_mnist
    from experiments.harness.store import ResultStore
    from experiments.rotated_mnist import plain
    from experiments.rotated_mnist.models import prepare_data

    data = tmp_path / "data"
    write_split(data, "t10k", rng.integers(0, 256, size=(12, 28, 28)), rng.integers(0, 10, 12), gz=True)
    out, doc, figure = tmp_path / "out", tmp_path / "doc.md", tmp_path / "fig.png"
    rotated_mnist.main([
        "--data-dir", str(data), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0", "--epochs", "1",
        "--train-size", "40", "--angles", "0", "90", "--dgp-samples", "2", "--convertible-steps", "3", "--models", *rotated_mnist.PLAIN_MODELS,
        "--doc", str(doc), "--figure", str(figure), "--quiet",
    ])
    records = {r["model"]: r for r in ResultStore(out / "records.jsonl", rotated_mnist.KEY_FIELDS).records()}
    assert sorted(records) == sorted(rotated_mnist.PLAIN_MODELS)
    for record in records.values():
        assert record["angles"] == [0, 90] and record["num_test"] == 12
        for metric in rotated_mnist.METRICS:
            assert len(record[metric]) == 2 and np.all(np.isfinite(record[metric]))

    # the saved plain CNN, its scores at 0° and its temperature computed here with numpy
    network = plain.build_plain_cnn(0)
    (weights,) = (tmp_path / "cache" / "rotated_mnist").glob("*_plain_cnn.weights.h5")
    network.load_weights(weights)
    test = load_mnist(data)
    probabilities = network.predict(test.x_test.astype(np.float32)[..., None] / 255.0, verbose=0).astype(np.float64)
    labels = test.y_test.astype(int)
    assert records["plain_cnn"]["accuracy"][0] == pytest.approx(np.mean(np.argmax(probabilities, 1) == labels), abs=1e-12)
    assert records["plain_cnn"]["log_likelihood"][0] == pytest.approx(np.mean(np.log(probabilities[np.arange(12), labels])), abs=1e-5)
    config = rotated_mnist.Config(epochs=1, train_size=40, angles=(0, 90), dgp_samples=2, convertible_steps=3)
    splits = prepare_data(config, data, 0, tmp_path / "cache" / "rotated")
    log_p = np.log(network.predict(plain.images(splits.x_val), verbose=0).astype(np.float64))  # logits up to a shift per row
    grid = np.exp(np.linspace(-5, 5, 20001))
    nll = [-np.mean(log_softmax(log_p / t, axis=1)[np.arange(len(log_p)), splits.y_val.ravel().astype(int)]) for t in grid]
    assert records["plain_cnn_ts"]["temperature"] == pytest.approx(grid[int(np.argmin(nll))], rel=2e-3)

    # make_convertible started from the trained plain CNN: its "original" loss is that network's training cross-entropy
    train_p = network.predict(plain.images(splits.x_train), verbose=0).astype(np.float64)
    cross_entropy = -np.mean(np.log(train_p[np.arange(len(train_p)), splits.y_train.ravel().astype(int)]))
    assert records["plain_cnn_convertible_adgp"]["convertible_losses"][0] == pytest.approx(cross_entropy, rel=1e-4)
    for model in ("plain_cnn_adgp", "plain_cnn_convertible_adgp"):
        assert records[model]["recipe"] and len(records[model]["elbo_loss"]) == 1  # the study's one stage-2 epoch

    text = doc.read_text()  # no comparable controls at these settings: the plain CNN + TS is the reference, said so
    assert "**Verdicts**" in text and "compared with the plain CNN + TS instead" in text and figure.is_file()
    for model in ("plain_cnn_adgp", "plain_cnn_convertible_adgp"):  # the verdicts' numbers from the records
        delta = 100 * (records[model]["accuracy"][0] - records["plain_cnn"]["accuracy"][0])
        assert f"(Δ {delta:+.2f} points): {'met' if abs(delta) <= 0.5 else 'refuted'}" in text
        wins = int(records[model]["log_likelihood"][1] > records["plain_cnn_ts"]["log_likelihood"][1])  # 90°: the one angle ≥ 45°
        assert f"at {wins} of 1 angles from 45°" in text
