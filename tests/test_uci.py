"""UCI regression benchmark: data layer and its errors, scores, the runner end to end, resume."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from activated_dgp.data import (
    UCI_DATASETS,
    Standardizer,
    load_boston_embedded,
    load_uci,
    load_uci_folder,
    random_splits,
)
from activated_dgp.metrics import gaussian_mixture_log_density, regression_metrics

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_folder(path: Path, rows, features="0 1", target="2", splits=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "data.txt").write_text("\n".join(rows) + "\n")
    if features is not None:
        (path / "index_features.txt").write_text(features + "\n")
    if target is not None:
        (path / "index_target.txt").write_text(target + "\n")
    for k, (train, test) in enumerate(splits or []):
        (path / f"index_train_{k}.txt").write_text("\n".join(map(str, train)))
        (path / f"index_test_{k}.txt").write_text("\n".join(map(str, test)))
    if splits:
        (path / "n_splits.txt").write_text(f"{len(splits)}\n")
    return path


def good_rows(n=30):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(n, 3)).round(4)
    return table, [" ".join(f"{v:g}" for v in row) for row in table]


def test_folder_loads_columns_and_splits(tmp_path):
    table, rows = good_rows()
    folder = write_folder(tmp_path / "toy", rows, features="2 0", target="1", splits=[(range(0, 27), range(27, 30))])
    data = load_uci_folder(folder)
    np.testing.assert_allclose(data.X, table[:, [2, 0]], atol=1e-12)
    np.testing.assert_allclose(data.y[:, 0], table[:, 1], atol=1e-12)
    assert len(data.splits) == 1 and data.splits[0].test.tolist() == [27, 28, 29]


@pytest.mark.parametrize(
    "change, error, words",
    [
        (lambda rows: rows, None, None),
        (lambda rows: rows[:2] + ["1.0 abc 3.0"] + rows[3:], ValueError, "row 3"),
        (lambda rows: rows[:1] + ["1.0 nan 3.0"] + rows[2:], ValueError, "row 2"),
        (lambda rows: rows[:4] + ["1.0 2.0"] + rows[5:], ValueError, "row 5"),
        (lambda rows: rows[:12], ValueError, "at least 20"),
    ],
)
def test_bad_rows_are_named(tmp_path, change, error, words):
    _, rows = good_rows()
    folder = write_folder(tmp_path / "toy", change(rows))
    if error is None:
        assert load_uci_folder(folder).X.shape == (30, 2)
        return
    with pytest.raises(error, match=words):
        load_uci_folder(folder)


def test_missing_files_and_bad_indices(tmp_path):
    _, rows = good_rows()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_uci_folder(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="index_features.txt"):
        load_uci_folder(write_folder(tmp_path / "a", rows, features=None))
    with pytest.raises(FileNotFoundError, match="index_target.txt"):
        load_uci_folder(write_folder(tmp_path / "b", rows, target=None))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "index_features.txt").write_text("0\n")
    with pytest.raises(FileNotFoundError, match="data.txt"):
        load_uci_folder(tmp_path / "c")
    with pytest.raises(ValueError, match="out of range"):
        load_uci_folder(write_folder(tmp_path / "d", rows, features="0 3"))
    with pytest.raises(ValueError, match="also listed as a feature"):
        load_uci_folder(write_folder(tmp_path / "e", rows, features="0 2"))
    with pytest.raises(ValueError, match="non-negative integer"):
        load_uci_folder(write_folder(tmp_path / "f", rows, features="0 1.5"))
    with pytest.raises(ValueError, match="exceed"):
        load_uci_folder(write_folder(tmp_path / "g", rows, splits=[(range(0, 25), [25, 40])]))
    with pytest.raises(ValueError, match="overlap"):
        load_uci_folder(write_folder(tmp_path / "h", rows, splits=[(range(0, 28), [27, 28, 29])]))
    with pytest.raises(ValueError, match="unknown UCI dataset"):
        load_uci("not-a-set", tmp_path)


def test_random_splits_are_90_10_disjoint_and_seeded():
    splits = random_splits(308, 5, 0.1, seed=3)
    for split in splits:
        assert len(split.test) == 31 and len(split.train) == 277
        assert np.union1d(split.train, split.test).tolist() == list(range(308))
    assert splits[0].test.tolist() != splits[1].test.tolist()
    assert [s.test.tolist() for s in random_splits(308, 5, 0.1, seed=3)] == [s.test.tolist() for s in splits]
    with pytest.raises(ValueError, match="too few"):
        random_splits(8, 1)


def test_standardizer_constant_column_and_inverse(rng):
    values = np.c_[rng.normal(3.0, 2.0, size=50), np.full(50, 7.0)]
    scaler = Standardizer.fit(values)
    z = scaler.transform(values)
    np.testing.assert_allclose(z[:, 0].mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(z[:, 0].std(), 1.0, atol=1e-12)
    np.testing.assert_allclose(z[:, 1], 0.0)
    np.testing.assert_allclose(scaler.inverse(z), values, atol=1e-12)


def test_mixture_scores_against_scipy(rng):
    y = rng.normal(size=40)
    means, variances = rng.normal(size=(3, 40)), rng.uniform(0.1, 2.0, size=(3, 40))
    expected = np.log(np.mean(norm.pdf(y[None], means, np.sqrt(variances)), axis=0))
    np.testing.assert_allclose(gaussian_mixture_log_density(y, means, variances), expected, rtol=1e-10)
    scale = 4.0  # y_orig = 4 y + c: RMSE × 4, density ÷ 4
    scores = regression_metrics(y, means, variances, scale)
    np.testing.assert_allclose(scores["rmse_original"], np.sqrt(np.mean((scale * (y - means.mean(0))) ** 2)))
    pdf_orig = np.mean(norm.pdf(scale * y[None], scale * means, scale * np.sqrt(variances)), axis=0)
    np.testing.assert_allclose(scores["nlpd_original"], -np.mean(np.log(pdf_orig)), rtol=1e-10)
    with pytest.raises(ValueError, match="positive"):
        regression_metrics(y, means, -variances)


def test_calibration_of_a_predictive_against_its_own_draws_and_scipy(rng):
    """PIT = the mixture CDF at y (scipy's norm.cdf); targets drawn from the predictive itself are calibrated
    (PIT uniform: 90 % coverage, a small CDF gap), while a predictive with a third of the true spread covers far
    less: the metrics can fail."""
    from activated_dgp.metrics import probability_integral_transform, regression_calibration

    S, N = 4, 20000
    means, variances = rng.normal(size=(S, N)), rng.uniform(0.2, 2.0, size=(S, N))
    component = rng.integers(S, size=N)
    y = rng.normal(means[component, np.arange(N)], np.sqrt(variances[component, np.arange(N)]))
    expected = np.mean(norm.cdf(y[None], means, np.sqrt(variances)), axis=0)
    np.testing.assert_allclose(probability_integral_transform(y, means, variances), expected, rtol=1e-12, atol=1e-15)
    calibrated = regression_calibration(y, means, variances)
    assert abs(calibrated["coverage_90"] - 0.90) < 0.01 and calibrated["calibration_error"] < 0.01  # binomial sd 0.002–0.0035
    overconfident = regression_calibration(y, means, variances / 9.0)
    assert overconfident["coverage_90"] < 0.75 and overconfident["calibration_error"] > 0.05
    one = regression_calibration([1.0], [0.0], 1.0, levels=[0.5, 0.95])  # u = Φ(1) = 0.84: inside, above 0.5
    assert one == {"coverage_90": 1.0, "calibration_error": pytest.approx(0.5 * (0.5 + 0.05))}
    assert regression_calibration([2.0], [0.0], 1.0)["coverage_90"] == 0.0  # Φ(2) = 0.977 > 0.95


def test_embedded_boston():
    data = load_boston_embedded()
    assert data.X.shape == (506, 13) and data.y.shape == (506, 1)
    assert np.all(np.isfinite(data.X)) and 5.0 <= data.y.min() and data.y.max() <= 50.0  # MEDV in $1000s


@pytest.mark.skipif(not (SHARED / "uci").is_dir(), reason=f"shared UCI data not found at {SHARED / 'uci'}")
def test_shared_uci_sets_load():
    expected = {"yacht": (308, 6, 20), "bostonHousing": (506, 13, 20), "protein-tertiary-structure": (45730, 9, 5)}
    for name in UCI_DATASETS:
        data = load_uci(name, SHARED)
        assert np.all(np.isfinite(data.X)) and len(data.splits) >= 5
        if name in expected:
            assert (data.num_data, data.input_dim, len(data.splits)) == expected[name]
    boston = load_uci("boston", SHARED)
    np.testing.assert_allclose(np.sort(boston.y[:, 0]), np.sort(load_boston_embedded().y[:, 0]))


def _run(out, *extra):
    from experiments import uci

    return uci.main(["--dataset", "boston-embedded", "--budget", "tiny", "--out", str(out), "--quiet", *extra])


#: the methods of the shared converged-tiny run. plain→ADGP and the ELBO-v and v-floor recipes take ADGP's path with
#: another network or stage-2 recipe (the recipes themselves: tests/test_stage2_recipes.py); they join the run in the
#: slow test below
SHARED_METHODS = ("nn", "dropout", "ensemble", "nn_ts", "dgp", "adgp", "plain", "adgp_paper")
DEFAULT_METHODS = ("nn", "dropout", "ensemble", "nn_ts", "dgp", "adgp", "plain", "plain_adgp")


#: the end-to-end runs' networks at a test's size: the benchmark's twin, plain and ReLU networks with TEST_UNITS units
#: a layer (NUM_UNITS = 128 in the benchmark; the twin's width is also the ADGP's number of inducing features) and a
#: network ensemble of TEST_ENSEMBLE members (ENSEMBLE_SIZE = 5): the same code paths at a fraction of the cost
TEST_UNITS, TEST_ENSEMBLE = 32, 2


def _test_sized(patch):
    """Shrink the methods' networks and ensemble to TEST_UNITS and TEST_ENSEMBLE through ``patch`` (a MonkeyPatch): a
    run that reads another's saved networks must be shrunk the same way."""
    from experiments.methods import networks, nn

    patch.setattr(networks, "NUM_UNITS", TEST_UNITS)
    patch.setattr(networks, "RELU_WIDTH", TEST_UNITS)
    patch.setattr(nn, "ENSEMBLE_SIZE", TEST_ENSEMBLE)


@pytest.fixture(scope="module")
def converged_tiny_run(tmp_path_factory):
    """One run of SHARED_METHODS on one split at the converged-tiny budget (early stopping on a validation part, the
    benchmark's protocol at a test's size, networks of :func:`_test_sized`), shared by the tests that read its records
    and networks."""
    out = tmp_path_factory.mktemp("uci_converged_tiny")
    with pytest.MonkeyPatch.context() as patch:
        _test_sized(patch)
        _run(out, "--method", ",".join(SHARED_METHODS), "--splits", "1", "--budget", "converged-tiny")
    return out


def _records(folder):
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def _check_end_to_end(folder, methods):
    records = [r for r in _records(folder) if r["method"] in methods]
    assert sorted(r["method"] for r in records) == sorted(methods)
    for r in records:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["num_test"] == 51 and r["num_train"] == 455
        assert 0.0 <= r["coverage_90"] <= 1.0 and 0.0 <= r["calibration_error"] <= 1.0
        # original units: RMSE scales by s_y and NLPD shifts by log s_y, the same s_y for every method
        assert r["rmse_original"] / r["rmse"] == pytest.approx(records[0]["rmse_original"] / records[0]["rmse"])
    by_method = {r["method"]: r for r in records}
    # ADGP starts from exactly the NN baseline's network (same seed and schedule)
    assert by_method["adgp"]["extra"]["init_rmse"] == pytest.approx(by_method["nn"]["rmse"], rel=1e-4)
    assert by_method["adgp"]["extra"]["conversion_mismatch"] < 1e-6
    for name in ("table.md", "summary.csv", "uci.png"):
        assert (folder / name).stat().st_size > 0
    assert "ADGP" in (folder / "table.md").read_text() and "**Calibration**" in (folder / "table.md").read_text()


def test_every_shared_method_end_to_end(converged_tiny_run):
    _check_end_to_end(converged_tiny_run, [m for m in DEFAULT_METHODS if m in SHARED_METHODS])


def test_the_relu_methods_end_to_end(tmp_path, monkeypatch):
    """The network most users have (a ReLU MLP): as is, temperature-scaled, fine-tuned and temperature-scaled, and made
    convertible then converted, from one cached network."""
    _test_sized(monkeypatch)
    methods = ("relu", "relu_ts", "relu_tuned_ts", "relu_adgp")
    _run(tmp_path, "--method", ",".join(methods), "--splits", "1", "--budget", "converged-tiny")
    records = {r["method"]: r for r in _records(tmp_path)}
    assert sorted(records) == sorted(methods)
    for r in records.values():
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["num_test"] == 51
    assert records["relu_ts"]["rmse"] == pytest.approx(records["relu"]["rmse"], rel=1e-12)  # the same network's mean
    assert records["relu_adgp"]["extra"]["init_rmse"] == pytest.approx(records["relu"]["rmse"], rel=1e-9)  # from that network
    swapped = records["relu_adgp"]["extra"]["swapped"]
    assert swapped["final_loss"] <= swapped["refit_loss"] + 1e-12  # make_convertible never hands back a worse network
    assert records["relu_adgp"]["extra"]["conversion_mismatch"] < 1e-6  # the swapped network converts exactly


def _check_recipe(records, method):
    """A recipe method's record (the UCI recipes, which experiments/recipes/ screens) in a converged run."""
    r, nn_ts = records[method], records["nn_ts"]
    assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"])
    assert r["extra"]["init_rmse"] == pytest.approx(nn_ts["rmse"], rel=1e-9)  # stage 1 is the NN's own network
    off = r["extra"]["far_field_off"]
    assert np.isfinite(off["rmse"]) and np.isfinite(off["nlpd"])


def test_the_paper_recipe_runs_from_the_nns_network_and_scores_the_fit_without_the_far_field(tmp_path, converged_tiny_run):
    from experiments.methods import BUDGETS

    records = {r["method"]: r for r in _records(converged_tiny_run)}
    _check_recipe(records, "adgp_paper")
    # the paper's recipe: v = 1 in every layer, noise = the network's validation MSE (NN+TS measured it on the same
    # rows; train_two_stage floors the noise at 1e-4), and every ELBO step of the budget: no early stopping
    nn_ts, paper = records["nn_ts"], records["adgp_paper"]["extra"]
    assert paper["kernel_variances"] == [1.0, 1.0, 1.0] and paper["stage2_early_stopping"] is False
    assert paper["initial_noise_variance"] == pytest.approx(max(nn_ts["extra"]["validation_mse"], 1e-4), rel=1e-9)
    num_fit = records["adgp_paper"]["num_train"] - round(0.1 * records["adgp_paper"]["num_train"])
    per_epoch = math.ceil(num_fit / 128)
    dgp_steps = BUDGETS["converged-tiny"].dgp_steps
    assert paper["dgp"]["steps_run"] == math.ceil(dgp_steps / per_epoch) * per_epoch
    # a recipe needs the validation part of a converged budget: a clear error before anything trains
    with pytest.raises(ValueError, match="converged budget"):
        _run(tmp_path / "fixed", "--method", "adgp_floor")  # _run's budget is the fixed "tiny"


@pytest.mark.slow  # three more ADGP fits: every default method and the recipes in one converged-tiny run
def test_every_method_and_recipe_end_to_end(tmp_path, converged_tiny_run, monkeypatch):
    import shutil

    from experiments.uci import RECIPE_METHODS
    from experiments.methods import RECIPE_FLOOR

    _test_sized(monkeypatch)  # the shared run's networks

    shutil.copytree(converged_tiny_run, tmp_path, dirs_exist_ok=True)  # the shared cells and networks: only the others run
    _run(tmp_path, "--method", ",".join(DEFAULT_METHODS + RECIPE_METHODS), "--splits", "1", "--budget", "converged-tiny")
    _check_end_to_end(tmp_path, DEFAULT_METHODS)
    records = {r["method"]: r for r in _records(tmp_path)}
    for method in RECIPE_METHODS:
        _check_recipe(records, method)
    # the ELBO-chosen and the floored candidates stop early, as adgp does; the floor bounds every layer's v
    assert records["adgp_elbo"]["extra"]["options"] == {"kernel_variance": "elbo", "noise_variance": "selected"}
    floor = records["adgp_floor"]["extra"]
    assert min(floor["kernel_variances"]) >= RECIPE_FLOOR * (1 - 1e-12) and floor["options"]["kernel_variance_floor"] == str(RECIPE_FLOOR)
    assert records["adgp_elbo"]["extra"]["stage2_early_stopping"] is True and floor["stage2_early_stopping"] is True


def test_rescore_adds_calibration_from_the_saved_networks_only(tmp_path, converged_tiny_run, monkeypatch):
    """--rescore recomputes the calibration of nn / nn_ts / plain from the saved networks without training: the
    amended records equal the ones the run wrote (the independent truth: the original run's own metrics), and a
    record whose network is gone is left as it was."""
    import shutil

    from experiments import uci

    _test_sized(monkeypatch)  # the shared run's networks
    shutil.copytree(converged_tiny_run / "networks", tmp_path / "networks")  # a copy: the shared run stays as it was
    path = tmp_path / "records.jsonl"
    lines = (converged_tiny_run / "records.jsonl").read_text().splitlines()
    original = [r for r in map(json.loads, lines) if r["method"] in ("nn", "nn_ts", "plain")]
    stripped = [{k: v for k, v in r.items() if k not in uci.CALIBRATION_METRICS} for r in original]
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in stripped))
    next((tmp_path / "networks").glob("plain-seed0-*.json")).unlink()  # that cell's network is gone: it must not be retrained
    _run(tmp_path, "--rescore", "--budget", "converged-tiny")
    rescored = {(r["method"], r["split"]): r for r in map(json.loads, path.read_text().splitlines())}
    assert len(rescored) == 3
    for r in original:
        if r["method"] == "plain":
            assert "coverage_90" not in rescored[("plain", 0)]
        else:
            assert rescored[(r["method"], r["split"])] == r


def test_resume_after_interruption(tmp_path, monkeypatch):
    import experiments.methods as methods

    _test_sized(monkeypatch)
    real, calls = methods.run_method, []

    def failing(method, *args):
        calls.append(method)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interruption")
        return real(method, *args)

    monkeypatch.setattr(methods, "run_method", failing)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "--method", "nn", "--splits", "2")
    first = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(first) == 1
    monkeypatch.setattr(methods, "run_method", real)
    _run(tmp_path, "--method", "nn", "--splits", "2")
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert lines[0] == first[0] and len(lines) == 2
    keys = [(r["dataset"], r["method"], r["split"]) for r in map(json.loads, lines)]
    assert sorted(keys) == [("boston-embedded", "nn", 0), ("boston-embedded", "nn", 1)]
    calls.clear()
    monkeypatch.setattr(methods, "run_method", failing)
    _run(tmp_path, "--method", "nn", "--splits", "2")  # nothing left to do: no cell runs
    assert calls == [] and (tmp_path / "records.jsonl").read_text().splitlines() == lines


def test_first_split_runs_only_the_later_splits_and_a_bad_one_is_named(tmp_path, monkeypatch):
    import experiments.methods as methods

    _test_sized(monkeypatch)
    ran = []
    real = methods.run_method

    def recording(method, *args):
        ran.append(method)
        return real(method, *args)

    monkeypatch.setattr(methods, "run_method", recording)
    _run(tmp_path, "--method", "nn", "--splits", "3", "--first-split", "2")
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["split"] for r in records] == [2] and ran == ["nn"]
    for bad in ("3", "-1"):
        with pytest.raises(ValueError, match=f"--first-split {bad} is outside the splits 0..2"):
            _run(tmp_path, "--method", "nn", "--splits", "3", "--first-split", bad)


def test_adgp_interrupted_after_stage_1_resumes_from_the_saved_network(tmp_path, monkeypatch, converged_tiny_run):
    """Interrupt an ADGP cell after stage 1, resume in a clean state (no in-process cache): the network is
    loaded from its checkpoint, not trained again, and the record equals that of an uninterrupted run (the shared
    converged-tiny run's, whose ADGP took the NN's network from memory)."""
    from experiments.methods import adgp as adgp_module, networks as networks_module

    _test_sized(monkeypatch)  # as the shared run
    real_two_stage, real_train_network, trained = adgp_module.train_two_stage, networks_module.train_network, []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("simulated interruption after stage 1")

    def counting(*args, **kwargs):
        trained.append(1)
        return real_train_network(*args, **kwargs)

    monkeypatch.setattr(networks_module, "train_network", counting)
    monkeypatch.setattr(adgp_module, "train_two_stage", interrupted)
    converged = ("--method", "adgp", "--splits", "1", "--budget", "converged-tiny")
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "resumed", *converged)
    assert trained == [1] and len(list((tmp_path / "resumed" / "networks").glob("*.json"))) == 1
    assert not (tmp_path / "resumed" / "records.jsonl").exists() or not (tmp_path / "resumed" / "records.jsonl").read_text()
    monkeypatch.setattr(adgp_module, "train_two_stage", real_two_stage)
    _run(tmp_path / "resumed", *converged)  # a new run holds no network in memory
    assert trained == [1]  # stage 1 came from the checkpoint
    resumed = json.loads((tmp_path / "resumed" / "records.jsonl").read_text())
    straight = next(r for r in _records(converged_tiny_run) if r["method"] == "adgp")
    for name in ("rmse", "nlpd"):
        assert resumed[name] == pytest.approx(straight[name], rel=1e-12)
    assert resumed["extra"]["init_rmse"] == straight["extra"]["init_rmse"]  # the identical network


def test_converged_protocol_records_steps_and_shares_the_network(converged_tiny_run):
    from experiments.methods import BUDGETS, budget_protocol

    tmp_path = converged_tiny_run
    records = {r["method"]: r for r in map(json.loads, (tmp_path / "records.jsonl").read_text().splitlines())}
    protocol = budget_protocol(BUDGETS["converged-tiny"])
    assert all(r["protocol"] == protocol.key for r in records.values())
    assert all(r["protocol_settings"]["shared"]["early_stopping"]["patience_steps"] == 500 for r in records.values())
    for method in ("nn", "nn_ts", "dropout", "adgp"):
        network = records[method]["extra"]["network"]
        assert 0 <= network["best_step"] <= network["steps_run"] <= 40 + 4  # capped (an epoch is 4 steps)
    assert records["adgp"]["extra"]["dgp"]["steps_run"] <= 16 + 4 and records["dgp"]["extra"]["dgp"]["best_step"] is not None
    # ADGP's stage 1 is the NN's network: same test predictions, hence the same RMSE
    assert records["adgp"]["extra"]["init_rmse"] == pytest.approx(records["nn"]["rmse"], rel=1e-9)
    assert records["nn_ts"]["rmse"] == pytest.approx(records["nn"]["rmse"], rel=1e-9)
    assert records["adgp"]["extra"]["options"] == {"kernel_variance": "validation", "noise_variance": "selected"}
    assert records["dropout"]["extra"]["tau"] > 0
    # MC dropout's rate: Gal & Ghahramani's grid, the one whose network scores best on the validation part
    scores = records["dropout"]["extra"]["validation_log_likelihood"]
    assert sorted(map(float, scores)) == [0.005, 0.01, 0.05, 0.1]
    assert records["dropout"]["extra"]["dropout_rate"] == float(max(scores, key=scores.get))
    # one saved network per dropout rate (the rate's dot must not end the file name: "dropout0.005-…")
    saved = sorted(path.name for path in (tmp_path / "networks").glob("dropout*.json"))
    assert [name.split("-seed")[0] for name in saved] == ["dropout0.005", "dropout0.01", "dropout0.05", "dropout0.1"]


def test_dropout_precision_maximises_the_validation_likelihood():
    from experiments.methods import mixture_noise_variance

    rng = np.random.default_rng(3)
    y = rng.normal(size=50)
    means = y[None] + rng.normal(scale=0.3, size=(8, 50)) + 0.2
    noise = mixture_noise_variance(means, y)
    grid = np.exp(np.linspace(np.log(1e-3), np.log(10), 4001))
    # brute force with scipy's normal density: mean over points of log (1/T) Σ_t N(y; μ_t, σ²)
    scores = [np.mean(np.log(np.mean(norm.pdf(y[None], means, np.sqrt(g)), axis=0))) for g in grid]
    assert noise == pytest.approx(grid[int(np.argmax(scores))], rel=5e-3)


def test_records_of_an_older_version_count_only_for_methods_it_did_not_change(tmp_path, monkeypatch):
    """After a new version that changes NN+TS alone (a 7 in its METHOD_VERSIONS entry), the records made before it
    are reused except NN+TS's: rerunning a resumable benchmark after a version bump reruns exactly the changed
    methods' cells, and the file is appended to, never rewritten."""
    import experiments.methods as methods
    from experiments.methods import versions

    _test_sized(monkeypatch)
    _run(tmp_path, "--method", "nn,nn_ts", "--splits", "1")
    path = tmp_path / "records.jsonl"
    before = path.read_text().splitlines()
    newest = versions.current_version() + 1
    monkeypatch.setitem(versions.METHOD_VERSIONS, "nn_ts", versions.METHOD_VERSIONS["nn_ts"] + (newest,))
    real, calls = methods.run_method, []
    monkeypatch.setattr(methods, "run_method", lambda method, *args: calls.append(method) or real(method, *args))
    _run(tmp_path, "--method", "nn,nn_ts", "--splits", "1")
    assert calls == ["nn_ts"]  # nn's older record still counts; nn_ts changed, so it reran
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and lines[:2] == before
    # the records as made: NN's only record is of its own, older version, shown and named as such
    _run(tmp_path, "--report-only", "--as-recorded")
    assert f"NN (v{newest - 1}): every set" in (tmp_path / "table.md").read_text()
    _run(tmp_path, "--report-only")  # carried over: NN's record counts under the newest version, nothing is stale
    carried = (tmp_path / "table.md").read_text()
    assert f":v{newest}." in carried and "Not yet rerun" not in carried


def test_the_carry_over_rule_counts_a_record_until_its_methods_next_change():
    """For every method and every pair of versions N ≤ M: the record made under version N (its protocol line, as
    written before the study declared a Protocol) counts under version M's protocol exactly when no version in
    (N, M] changed its method (METHOD_VERSIONS), and the report shows it under the last such M; a record of a method
    made before the method existed, or of a version not yet made, is never stamped."""
    from experiments.harness.protocol import PROTOCOL_FIELD
    from experiments.methods import BUDGETS, METHODS, versions

    assert set(METHODS) | {"network"} == set(versions.METHOD_VERSIONS)
    current = versions.current_version()
    line = "converged-long:nn30000:dgp10000:mc32:early-stopping(val 0.1, check 50, patience 2000)"
    settings = versions.budget_settings(BUDGETS["converged-long"])
    for method, changes in versions.METHOD_VERSIONS.items():
        if method == "network":
            continue
        assert list(changes) == sorted(set(changes)) and changes[0] >= 2
        for made in range(2, current + 1):
            record = versions.relabel_record({"method": method, PROTOCOL_FIELD: f"{line}:v{made}"})
            if made < changes[0]:
                assert "protocol_settings" not in record
                continue
            counted = [later for later in range(made, current + 1) if not any(made < v <= later for v in changes)]
            assert [later for later in range(made, current + 1)
                    if versions.settings_protocol(settings, later).carries(record)] == counted
            assert versions.counted_version(record) == max(counted)
            assert versions.protocol_label(record) == f"{line}:v{max(counted)}"
    assert "protocol_settings" not in versions.relabel_record({"method": "nn", PROTOCOL_FIELD: f"{line}:v{current + 1}"})


def test_saved_networks_keep_the_cache_keys_they_were_saved_under():
    """The stage-1 networks are cached under the budget's protocol line and the version that last changed stage 1,
    in the form the records' protocol had before the study declared a Protocol, so the networks saved by runs of
    that time (v6) are found again."""
    from experiments.methods import BUDGETS
    from experiments.methods.versions import network_key

    assert network_key(BUDGETS["converged"]) == "converged:nn10000:dgp3000:mc32:early-stopping(val 0.1, check 50, patience 500):v6"
    assert network_key(BUDGETS["converged-long"]).endswith("early-stopping(val 0.1, check 50, patience 2000):v6")
    assert network_key(BUDGETS["tiny"]) == "tiny:nn20:dgp8:mc4:fixed-steps:v6"


def test_claims_compare_methods_over_the_splits_they_share():
    """ADGP has split 0 only; the network has splits 0 and 1, and split 1 is far worse. Over the shared split the
    ADGP loses (0.5 > 0.4); against the network's mean over both splits (0.9) it would wrongly win."""
    from experiments.uci.verdicts import claims

    def record(method, split, value):
        return {"dataset": "yacht", "method": method, "split": split, "rmse": value, "nlpd": value, "num_train": 9,
                "num_test": 1, "input_dim": 6, "seconds": 1.0, "budget": {"name": "t"}, "rmse_original": value, "nlpd_original": value}

    records = [record("adgp", 0, 0.5), record("nn", 0, 0.4), record("nn", 1, 1.4)]
    lines = claims(records)
    nlpd = next(line for line in lines if line.startswith("- ADGP NLPD < NN:"))
    assert "0 of 1 datasets (not on: yacht)" in nlpd and "shared splits: yacht 1" in nlpd
    # the same pairing for the plain network and its conversion: over split 0 the conversion wins (0.3 < 0.4);
    # against the plain network's mean over both splits (0.25) it would wrongly lose
    lines = claims(records + [record("plain_adgp", 0, 0.3), record("plain", 0, 0.4), record("plain", 1, 0.1)])
    plain = next(line for line in lines if line.startswith("- plain→ADGP NLPD < the plain network's"))
    assert "1 of 1 datasets;" in plain and "shared splits: yacht 1" in plain


def test_nlpd_gap_splits_accuracy_from_the_variance_against_scipy(rng):
    """½ log(2πe·MSE) is scipy's NLPD of N(μ_i, σ²) at σ² = MSE, and no constant σ² does better. A homoscedastic
    prediction at its own MSE sits exactly on that reference, so against it the whole NLPD difference of a second
    prediction with input-dependent variances is log(RMSE ratio) + that one's excess."""
    from scipy.optimize import minimize_scalar

    from activated_dgp.metrics import homoscedastic_gaussian_nlpd
    from experiments.uci.verdicts import nlpd_gap

    y = rng.normal(size=200)
    mean_a, mean_b = y + 0.3 * rng.normal(size=200), y + 0.5 * rng.normal(size=200)
    mse_a = np.mean((y - mean_a) ** 2)
    nlpd_a = -np.mean(norm.logpdf(y, mean_a, np.sqrt(mse_a)))
    np.testing.assert_allclose(homoscedastic_gaussian_nlpd(np.sqrt(mse_a)), nlpd_a, rtol=1e-12)
    best = minimize_scalar(lambda s: -np.mean(norm.logpdf(y, mean_a, s)), bounds=(0.01, 3.0), method="bounded")
    assert best.fun >= nlpd_a - 1e-9 and abs(best.x - np.sqrt(mse_a)) < 1e-4
    variances_b = rng.uniform(0.1, 0.5, size=200)
    b = regression_metrics(y, mean_b, variances_b)
    records = [
        {"dataset": "yacht", "method": "adgp", "split": 0, "rmse": float(np.sqrt(mse_a)), "nlpd": float(nlpd_a)},
        {"dataset": "yacht", "method": "dgp", "split": 0, "rmse": b["rmse"], "nlpd": b["nlpd"]},
        {"dataset": "yacht", "method": "dgp", "split": 1, "rmse": 9.0, "nlpd": 9.0},  # not shared: left out
    ]
    (row,) = nlpd_gap(records)
    assert row["splits"] == 1
    np.testing.assert_allclose(row["gap"], nlpd_a - b["nlpd"], rtol=1e-12)
    np.testing.assert_allclose(row["accuracy"], np.log(np.sqrt(mse_a) / b["rmse"]), rtol=1e-12)
    np.testing.assert_allclose(row["excess"][0], 0.0, atol=1e-12)
    np.testing.assert_allclose(row["gap"] - row["accuracy"], -row["excess"][1], atol=1e-12)
    with pytest.raises(ValueError, match="rmse must be positive"):
        homoscedastic_gaussian_nlpd(0.0)


def test_published_dropout_table_pairs_splits_and_turns_nlpd_into_log_likelihood():
    """Only the splits with a record are averaged on the published side; the test log-likelihood is −NLPD."""
    from experiments.uci.sections import PUBLISHED_MC_DROPOUT, published_dropout_markdown

    rmse, ll = PUBLISHED_MC_DROPOUT["energy"]
    records = [
        {"dataset": "energy", "method": "dropout", "split": k, "rmse_original": 0.5 + k, "nlpd_original": 1.0 + k, "extra": {"dropout_rate": 0.01}}
        for k in (0, 3)
    ] + [{"dataset": "energy", "method": "nn", "split": 1, "rmse_original": 9.0, "nlpd_original": 9.0, "extra": {}}]
    row = next(line for line in published_dropout_markdown(records) if line.startswith("| energy |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2"
    assert float(cells[2]) == pytest.approx(2.0, rel=1e-3) and float(cells[3]) == pytest.approx((rmse[0] + rmse[3]) / 2, rel=1e-3)
    assert float(cells[5]) == pytest.approx(-2.5, abs=1e-3) and float(cells[6]) == pytest.approx((ll[0] + ll[3]) / 2, abs=1e-3)
    assert published_dropout_markdown([r for r in records if r["method"] == "nn"]) == []


def test_calibration_claim_pairs_only_splits_where_both_have_the_metric():
    from experiments.uci.verdicts import claims

    def record(method, split, error):
        r = {"dataset": "yacht", "method": method, "split": split, "rmse": 1.0, "nlpd": 1.0, "num_train": 9, "num_test": 1,
             "input_dim": 6, "seconds": 1.0, "budget": {"name": "t"}, "rmse_original": 1.0, "nlpd_original": 1.0}
        return r if error is None else dict(r, calibration_error=error, coverage_90=0.9)

    # split 1's DGP record predates the metric: only split 0 is compared (0.05 < 0.08), not 0.05 against the mean
    records = [record("adgp", 0, 0.05), record("adgp", 1, 0.30), record("dgp", 0, 0.08), record("dgp", 1, None)]
    line = next(l for l in claims(records) if l.startswith("- ADGP calibration error (PIT) < DGP"))
    assert "1 of 1 datasets" in line and "yacht 0.050 vs 0.080 (1)" in line


def test_best_step_claim_names_the_plain_networks_best_steps_on_the_same_splits():
    """The twin's late best step (naval: 28,000 of 30,000 > 80 %) is set beside the plain network's on the shared
    splits only (split 2 has no plain record): the plain network stopped later on split 0 (29,900 > 28,000) and
    earlier on split 1 (100 < 20,000); its largest best step over the shared splits is 29,900."""
    from experiments.uci.verdicts import claims

    def record(method, split, best):
        return {"dataset": "naval-propulsion-plant", "method": method, "split": split, "rmse": 0.1, "nlpd": 0.1,
                "num_train": 9, "num_test": 1, "input_dim": 16, "seconds": 1.0, "rmse_original": 0.1, "nlpd_original": 0.1,
                "budget": {"name": "t", "nn_steps": 30000}, "extra": {"network": {"best_step": best}}}

    records = [record("nn", 0, 28000), record("nn", 1, 20000), record("nn", 2, 5000),
               record("plain", 0, 29900), record("plain", 1, 100)]
    line = next(line for line in claims(records) if line.startswith("- The twin's best step"))
    assert "0 of 1 datasets" in line and "naval-propulsion-plant 28,000 of 30,000" in line
    assert "largest best step 29,900, later than the twin's on 1 of 2 splits" in line


def test_stage2_effect_groups_splits_by_the_restored_step():
    from experiments.uci.sections import stage2_effect_markdown

    def record(method, split, rmse, nlpd, best=None):
        extra = {"dgp": {"best_step": best}} if best is not None else {}
        return {"dataset": "energy", "method": method, "split": split, "rmse": rmse, "nlpd": nlpd, "extra": extra}

    records = [
        record("adgp", 0, 0.10, 0.0, best=0), record("nn", 0, 0.10, 0.5), record("nn_ts", 0, 0.10, 0.1),
        record("adgp", 1, 0.05, -1.0, best=300), record("nn", 1, 0.09, 0.5), record("nn_ts", 1, 0.09, -0.2),
        record("adgp", 2, 0.01, -9.0, best=300), record("nn", 2, 0.09, 0.5),  # no NN+TS record: left out
    ]
    row = next(line for line in stage2_effect_markdown(records) if line.startswith("| energy |"))
    assert row == "| energy | 1: +0.0000 / -0.100 | 1: -0.0400 / -0.800 |"


def test_report_takes_each_methods_newest_version_and_carries_records_only_up_to_their_next_change(monkeypatch):
    """Versions: "a" changed in v5, "b" in v6. A v4 record of "b" counts under v5 (b changed only in v6), not v6; "a"
    keeps its v6 records; "b" has no v6 record on yacht, so its v5 ones are shown and named as older."""
    import experiments.methods as methods
    from experiments.methods import versions
    from experiments.uci.summary import older_versions, select_records, view

    monkeypatch.setattr(versions, "METHOD_VERSIONS", {"a": (2, 5), "b": (2, 6)})
    monkeypatch.setitem(methods.LABELS, "a", "A")
    monkeypatch.setitem(methods.LABELS, "b", "B")
    line = "h:nn1:dgp1:mc1:fixed-steps"
    rows = [("a", 4, 0), ("a", 6, 0), ("b", 4, 0), ("b", 4, 1)]
    made = [methods.relabel_record({"dataset": "yacht", "method": m, "split": s, "protocol": f"{line}:v{v}"}) for m, v, s in rows]
    records = select_records(view(made))
    assert sorted((r["method"], r["shown_protocol"], r["split"]) for r in records) == [
        ("a", f"{line}:v6", 0), ("b", f"{line}:v5", 0), ("b", f"{line}:v5", 1)]
    assert older_versions(records) == ["B (v5): every set"]


def test_lla_rows_run_on_the_nns_network_and_the_exact_one_only_where_the_ggn_fits(tmp_path):
    """The twin's P counted by hand: per layer M (D_in + 1) directions and M · D_out linear weights. Boston (D = 13)
    has P = 3·128·14 + 128·13·2 + 128 = 8,832 > 5,000, so no exact-LLA cell; the last-layer LLA shares the NN's
    network (same test mean) and its noise is the NN's training MSE."""
    from experiments import methods

    D = 13
    assert methods.twin_parameter_count(D) == 3 * 128 * (D + 1) + 128 * D * 2 + 128
    assert not methods.applicable("lla_exact", D) and methods.applicable("lla_exact", 4)
    _run(tmp_path, "--method", "nn,lla_last_layer,lla_exact", "--splits", "1")
    records = {r["method"]: r for r in map(json.loads, (tmp_path / "records.jsonl").read_text().splitlines())}
    assert sorted(records) == ["lla_last_layer", "nn"]
    lla, nn = records["lla_last_layer"], records["nn"]
    assert lla["rmse"] == pytest.approx(nn["rmse"], rel=1e-9)  # the linearised mean is the network's
    assert lla["extra"]["noise_variance"] == pytest.approx(nn["extra"]["train_mse"], rel=1e-12)
    assert lla["extra"]["num_parameters"] == 128 and lla["extra"]["prior_precision"] > 0


def test_far_field_table_pairs_each_split_with_its_own_fit_without_the_residual():
    """Differences +0.1, +0.3 (mean 0.2, SE 0.1): "with" is worse by more than one SE on yacht; on energy the pair
    is identical. Mean and SE computed here with numpy on the same numbers."""
    from experiments.uci.sections import far_field_markdown

    def record(d, split, on, off):
        return {"dataset": d, "method": "adgp", "split": split, "nlpd": on, "rmse": 0.5,
                "extra": {"far_field_off": {"nlpd": off, "rmse": 0.5}}}

    lines = far_field_markdown([record("yacht", 0, 1.1, 1.0), record("yacht", 1, 1.3, 1.0), record("energy", 0, 0.7, 0.7)])
    yacht = next(line for line in lines if line.startswith("| yacht"))
    diff = np.array([0.1, 0.3])
    assert f"{diff.mean():+.2e} ± {diff.std(ddof=1) / np.sqrt(2):.1e}" in yacht and yacht.endswith("| no |")
    assert next(line for line in lines if line.startswith("| energy")).endswith("| yes |")
    assert "1 of 2 datasets (identical to 1e-12 on every split of 1" in lines[-2]
    rounding = far_field_markdown([record("power-plant", 0, 0.1 + 2e-16, 0.1), record("power-plant", 1, 0.2 + 3e-16, 0.2)])
    assert next(line for line in rounding if line.startswith("| power-plant")).endswith("| yes |")  # rounding is no cost


def _adgp_ensemble(monkeypatch, members=2):
    """predict_adgp_ensemble on a small problem at the tiny budget, with each member's own fit recorded as the
    ensemble made it: (data, budget, networks, (means, variances, info), [(seed, means, variances)])."""
    import experiments.methods as um
    from experiments.methods import adgp as adgp_module

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(60, 1))
    data = um.SplitData(X[:50], y[:50], X[50:], y[50:], 1.0, seed=7)
    budget, networks = um.BUDGETS["tiny"], um.NetworkCache()
    fitted, real = [], adgp_module._adgp
    _test_sized(monkeypatch)

    def recorded(*args, **kwargs):  # each member's own fit, as the ensemble made it
        result = real(*args, **kwargs)
        fitted.append((kwargs["seed"], result[0], result[1]))
        return result

    with monkeypatch.context() as patch:
        patch.setattr(adgp_module, "_adgp", recorded)
        prediction = adgp_module.predict_adgp_ensemble(data, budget, networks, members=members)
    return data, budget, networks, prediction, fitted


def test_adgp_ensemble_is_the_uniform_mixture_of_its_members_adgps(monkeypatch):
    """adgp_ensemble against a direct computation: each member is an ADGP fit of the member's seed (split
    seed + 1000·m, the same network), and the ensemble's NLPD is log (1/M) Σ_m p_m(y) with p_m the member's sample
    mixture, by scipy. Also: the far-field-off score is the same stack with every residual switched off."""
    members = 2  # the method's ENSEMBLE_SIZE = 5 in the benchmark; two members test the same stacking
    data, budget, _, (means, variances, info), fitted = _adgp_ensemble(monkeypatch, members)
    assert info["members"] == members and means.shape == (members * budget.mc_samples, 10)
    assert [seed for seed, _, _ in fitted] == [data.seed + 1000 * m for m in range(members)]
    member_density = [np.mean(norm.pdf(data.y_test[:, 0][None], m, np.sqrt(v)), axis=0) for _, m, v in fitted]
    expected_nlpd = -np.mean(np.log(np.mean(member_density, axis=0)))
    scores = regression_metrics(data.y_test, means, variances)
    np.testing.assert_allclose(scores["nlpd"], expected_nlpd, rtol=1e-6)
    off = [extra["far_field_off"]["nlpd"] for extra in info["member_extras"]]
    assert np.isfinite(info["far_field_off"]["nlpd"]) and len(off) == members


@pytest.mark.slow  # a third ADGP fit
def test_an_adgp_ensembles_member_is_the_adgp_of_its_seed(monkeypatch):
    """The second member refitted on its own as an ``adgp`` of its seed gives the same predictive."""
    from dataclasses import replace

    import experiments.methods as um

    data, budget, networks, _, fitted = _adgp_ensemble(monkeypatch)
    mm, vv, _ = um.METHODS["adgp"](replace(data, seed=data.seed + 1000), budget, networks)
    np.testing.assert_allclose(mm, fitted[1][1], rtol=1e-9), np.testing.assert_allclose(vv, fitted[1][2], rtol=1e-9)


def test_the_adgp_ensembles_members_are_trained_with_the_librarys_default_regression_recipe():
    """The ensemble of the default's ADGPs: adgp_ensemble's recipe is the one the library's
    default recipe resolves to for a Gaussian likelihood."""
    from activated_dgp.training.recipes import DEFAULT_RECIPE, stage2_recipe
    from experiments.methods import adgp as um

    from dataclasses import replace

    default = stage2_recipe(DEFAULT_RECIPE).resolve(gaussian=True)
    ensemble = um.LIBRARY_RECIPES[um.STAGE2_RECIPES[um.ADGP_ENSEMBLE_RECIPE]].resolve(gaussian=True)
    assert replace(ensemble, recipe=default.recipe) == default


def test_the_neuralef_lla_cell_resumes_its_training_from_a_checkpoint_keyed_by_its_network(tmp_path, monkeypatch):
    """lla_neuralef checkpoints NeuralEF next to the run's networks: a cell run again (an interrupted run resumed)
    restores the finished training, takes no step and predicts exactly what the first run predicted; the
    directory is keyed by θ_MAP, so another split's network never resumes it."""
    from activated_dgp.eigen.neuralef import training as neuralef_module
    import experiments.methods as methods
    from experiments.methods import lla as um

    steps = 10  # a few steps: the test is about the checkpoint, not the eigenfunctions
    _test_sized(monkeypatch)  # a smaller twin: fewer parameters in the NTK's Jacobians
    monkeypatch.setattr(um, "LLA_NEURALEF_STEPS", steps)
    monkeypatch.setattr(um, "LLA_EIGENPAIRS", 3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(60, 1))
    data = um.SplitData(X[:50], y[:50], X[50:], y[50:], 1.0, seed=3)
    budget = methods.BUDGETS["tiny"]
    first = um.predict_lla_neuralef(data, budget, um.NetworkCache(tmp_path))
    directories = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lla-neuralef"))
    assert len(directories) == 1 and any((tmp_path / directories[0]).iterdir())

    starts, draw = [], neuralef_module._minibatches
    monkeypatch.setattr(neuralef_module, "_minibatches", lambda seed, N, batch, start: starts.append(start) or draw(seed, N, batch, start))
    again = um.predict_lla_neuralef(data, budget, um.NetworkCache(tmp_path))  # a fresh cache: the network from disk
    assert starts == [steps]  # restored at its last step: no step taken
    np.testing.assert_array_equal(first[0], again[0]), np.testing.assert_array_equal(first[1], again[1])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lla-neuralef")) == directories

    a, b = um.build_twin_network(2, 0), um.build_twin_network(2, 1)  # another split's θ_MAP: another directory
    a(X[:1]), b(X[:1])
    cache = um.NetworkCache(tmp_path)
    assert um._neuralef_checkpoints(cache, a, 3) != um._neuralef_checkpoints(cache, b, 3)
    b.set_weights(a.get_weights())
    assert um._neuralef_checkpoints(cache, a, 3) == um._neuralef_checkpoints(cache, b, 3)
    assert um._neuralef_checkpoints(um.NetworkCache(), a, 3) is None  # nothing saved without a folder


def test_the_lla_prior_precision_edge_claim_counts_cells_at_each_end_of_the_grid():
    """The claim counts validation-chosen δ equal to 1e-4 and to 1e4 (LinearisedLaplace's default grid ends) among
    lla_neuralef cells, ignoring other methods and δ chosen otherwise."""
    from activated_dgp.eigen import LinearisedLaplace
    from experiments.uci.verdicts import _prior_precision_edge_claim

    from experiments.methods import build_twin_network

    grid = LinearisedLaplace(build_twin_network(2, 0), prior_precision="validation").prior_precision_grid
    assert grid.min() == pytest.approx(1e-4) and grid.max() == pytest.approx(1e4)

    def cell(method, delta, by="validation", dataset="yacht"):
        return {"method": method, "dataset": dataset, "extra": {"prior_precision": delta, "prior_precision_by": by}}

    records = [cell("lla_neuralef", 1e-4), cell("lla_neuralef", 1e-4 * (1 + 1e-12), dataset="energy"), cell("lla_neuralef", 0.3),
               cell("lla_neuralef", 1e4), cell("lla_last_layer", 1e-4), cell("lla_neuralef", 1e-4, by="1.0")]
    assert _prior_precision_edge_claim(records).endswith(
        "on 2 (energy 1, yacht 1) of 4 cells and at the upper edge (10^4) on 1 (yacht 1)")
    assert _prior_precision_edge_claim([cell("lla_neuralef", 0.3)]).endswith("on 0 of 1 cells and at the upper edge (10^4) on 0")
    assert _prior_precision_edge_claim([cell("lla_last_layer", 1e-4)]) is None
    # the evidence's δ: the edges of its search range [1e-8, 1e8], within 1 %
    evidence = [cell("lla_neuralef_evidence", 1.005e-8, by="marginal_likelihood"), cell("lla_neuralef_evidence", 2e-8, by="marginal_likelihood"),
                cell("lla_neuralef_evidence", 1e8, by="marginal_likelihood", dataset="energy"), cell("lla_neuralef_evidence", 1e-4)]
    assert _prior_precision_edge_claim(evidence, "lla_neuralef_evidence") == (
        "- LLA NeuralEF (δ by evidence): the evidence-chosen prior precision δ is at the lower edge of its search range (10^−8) "
        "on 1 (yacht 1) of 3 cells and at the upper edge (10^8) on 1 (energy 1)")


def test_the_lla_gain_claim_is_the_difference_of_split_means_over_shared_splits():
    """NN's mean NLPD minus LLA NeuralEF's over the splits both have: NN's split 1 (no LLA record) is left out."""
    from experiments.uci.verdicts import claims

    def record(method, split, nlpd, dataset="yacht"):
        return {"dataset": dataset, "method": method, "split": split, "rmse": 0.1, "nlpd": nlpd, "num_train": 9,
                "num_test": 1, "input_dim": 6, "seconds": 1.0, "budget": {"name": "t"}, "rmse_original": 0.1, "nlpd_original": nlpd,
                "extra": {}}

    records = [record("nn", 0, 0.5), record("nn", 1, 9.0), record("nn", 2, 0.3), record("lla_neuralef", 0, 0.4),
               record("lla_neuralef", 2, 0.35), record("nn", 0, 1.0, "energy"), record("lla_neuralef", 0, 1.25, "energy")]
    line = next(l for l in claims(records) if l.startswith("- LLA NeuralEF's NLPD gain over NN"))
    # yacht: (0.5 + 0.3)/2 − (0.4 + 0.35)/2 = 0.025 over 2 shared splits; energy: 1.0 − 1.25 = −0.25 over 1
    assert line.endswith("yacht +0.02500 (2), energy -0.25000 (1)")


def test_the_adgp_ensemble_difference_claim_is_the_paired_mean_and_se_over_shared_splits():
    """Paired differences per split, their mean and sd/√k computed here with the statistics module; a split only one
    method has is left out, and each dataset is sorted by where its mean lies against one paired SE."""
    import statistics

    from experiments.uci.verdicts import claims

    def record(method, split, nlpd, dataset):
        return {"dataset": dataset, "method": method, "split": split, "rmse": 0.1, "nlpd": nlpd, "num_train": 9,
                "num_test": 1, "input_dim": 6, "seconds": 1.0, "budget": {"name": "t"}, "rmse_original": 0.1,
                "nlpd_original": nlpd, "extra": {}}

    values = {  # dataset: (ADGP ensemble per split, network ensemble per split)
        "yacht": ([0.1, 0.3, 0.2], [0.5, 0.6, 0.9]),  # clearly below
        "energy": ([1.0, 2.0, 1.5], [0.9, 2.2, 1.3]),  # within one SE
        "concrete": ([0.9, 0.8], [0.1, 0.2]),  # clearly above
    }
    records = [record(m, s, v, d) for d, (a, e) in values.items() for m, vs in (("adgp_ensemble", a), ("ensemble", e))
               for s, v in enumerate(vs)]
    records += [record("ensemble", 7, -50.0, "yacht"), record("adgp_ensemble", 0, 3.0, "wine-quality-red"),
                record("ensemble", 0, 2.5, "wine-quality-red")]
    line = next(l for l in claims(records) if l.startswith("- ADGP ensemble NLPD − the network ensemble's"))
    for d, (a, e) in values.items():
        deltas = [x - y for x, y in zip(a, e)]
        mean, se = statistics.fmean(deltas), statistics.stdev(deltas) / len(deltas) ** 0.5
        assert f"{d} {mean:+.4f} ± {se:.4f} ({len(deltas)})" in line
    assert "wine-quality-red +0.5000 (1 split, no SE)" in line
    assert line.endswith("more than one paired SE below: yacht; more than one paired SE above: concrete; within one SE: energy")


def test_a_page_part_is_the_tables_or_the_claims_and_after():
    """--part splits one report between two pages at the claims' heading: the parts are the report's text before and
    from that heading, so together they are the whole report; an unknown part is refused."""
    from experiments.uci.report import CLAIMS_HEADING, page_part

    text = f"**RMSE**\n\n| a |\n\n{CLAIMS_HEADING} (means)\n\n- claim\n\n**Steps used**\n"
    tables, analysis = page_part(text, "tables"), page_part(text, "analysis")
    assert tables == "**RMSE**\n\n| a |\n" and analysis.startswith(CLAIMS_HEADING) and analysis.endswith("**Steps used**\n")
    assert tables.rstrip() + "\n\n" + analysis == text and page_part(text, "all") == text
    assert "No claims yet" in page_part("**RMSE**\n", "analysis")
    with pytest.raises(ValueError, match="unknown --part"):
        page_part(text, "claims")
