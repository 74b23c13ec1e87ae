"""The stage-2 recipe screen: the UCI recipe methods at the tiny budget, and the recipe choice reproduced
from records by the written rule (synthetic records whose winner is worked out by hand below)."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import recipes


# ---------------------------------------------------------------------------------------------- the UCI methods


def test_recipe_methods_are_listed_and_never_carry_older_records():
    from experiments import methods, uci

    assert set(uci.RECIPE_METHODS) == set(methods.RECIPE_METHODS) <= set(methods.METHODS) & set(uci.METHOD_ORDER)
    assert not set(uci.RECIPE_METHODS) & set(uci.DEFAULT_METHODS)  # run only when named
    current = methods.current_version()
    protocol = methods.budget_protocol(methods.BUDGETS["converged-long"])
    line = "converged-long:nn30000:dgp10000:mc32:early-stopping(val 0.1, check 50, patience 2000)"
    for method in uci.RECIPE_METHODS:
        assert method in methods.LABELS
        for made in range(2, current):  # an older record of a recipe method is never stamped, so it never counts
            record = methods.relabel_record({"method": method, "protocol": f"{line}:v{made}"})
            assert not protocol.carries(record) and "protocol_settings" not in record


# ---------------------------------------------------------------------------------------------- the rule


ANGLES = list(range(0, 181, 15))


def _uci_record(method, dataset, split, rmse, nlpd, off=None):
    from experiments.methods import BUDGETS, budget_protocol

    extra = {"far_field_off": {"rmse": rmse, "nlpd": off if off is not None else nlpd}} if method.startswith("adgp") else {}
    record = {"dataset": dataset, "method": method, "split": split, "rmse": rmse, "nlpd": nlpd, "extra": extra}
    return budget_protocol(BUDGETS["converged-long"]).stamp(record)


def _rotated_record(model, log_likelihood, accuracy_0, off=None, seed=0):
    def fields(ll, acc):
        return {"log_likelihood": [ll(a) for a in ANGLES], "accuracy": [acc if a == 0 else 0.5 for a in ANGLES]}

    record = {"dataset": "mnist", "model": model, "seed": seed, "protocol": "test", "angles": ANGLES, **fields(log_likelihood, accuracy_0)}
    if off is not None:
        record["far_field_off"] = fields(off, accuracy_0)
    return record


def _write(path: Path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _screen(root: Path, floor_rotated: bool):
    """Synthetic screen records. NN's RMSE is 1.0 / 1.2 on splits 0 / 1 (mean 1.1, SE 0.1: admissible up to 1.2),
    NN+TS's NLPD 1.0; the controls: NN's 0° accuracy 0.97 (admissible from 0.96), fine-tuned NN+TS −3 and fine-tuned
    dropout −2.5 at every angle (the bar: −2.5).

    By hand (score = UCI sets won / 5 + angles won / 10):
    - paper: RMSE 1.5 on all 5 sets → 5 misses → not admissible (although it wins everything else);
    - validation: NLPD 0.9 on 5 sets (5/5), log-likelihood −4 (0/10) → 1.0; ΔNLPD −0.1 (on), −0.05 (off, NLPD 0.95);
    - elbo: NLPD 0.9 on 3 sets, 1.1 on 2 (3/5); with the far field −2 at 45°…105° and −3 beyond (5/10) → 1.1;
      without it −2 everywhere (10/10) → 1.6; 0° accuracy 0.965 ≥ 0.96;
    - floor: NLPD 0.1 on 5 sets (5/5; ΔNLPD −0.9); with ``floor_rotated`` log-likelihood −4 (0/10) → 1.0, ahead of
      validation on the tie-break; without, its rotated cell is missing → incomplete, not ranked.
    Ranking: elbo/off 1.6, elbo/on 1.1, (floor/on, floor/off 1.0 at ΔNLPD −0.9), validation/on, validation/off;
    winner elbo/off; finalists paper, elbo and the next recipe (floor when complete, else validation)."""
    uci = []
    for dataset_index, dataset in enumerate(recipes.SCREEN_DATASETS):
        for split in (0, 1):
            uci += [_uci_record("nn", dataset, split, 1.0 + 0.2 * split, 2.0), _uci_record("nn_ts", dataset, split, 1.0 + 0.2 * split, 1.0),
                    _uci_record("adgp_paper", dataset, split, 1.5, 0.5),
                    _uci_record("adgp", dataset, split, 1.0, 0.9, off=0.95),
                    _uci_record("adgp_elbo", dataset, split, 1.15, 0.9 if dataset_index < 3 else 1.1),
                    _uci_record("adgp_floor", dataset, split, 1.0, 0.1)]
    uci.append(_uci_record("adgp", "kin8nm", 0, 9.0, 9.0))  # an unscreened set is not read
    _write(root / "uci" / "records.jsonl", uci)
    _write(root / "controls.jsonl", [_rotated_record("nn", lambda a: -5.0, 0.97), _rotated_record("nn_ts_ft", lambda a: -3.0, 0.97),
                                     _rotated_record("nn_dropout_ft", lambda a: -2.5, 0.97)])
    _write(root / "rotated" / "paper" / "records.jsonl", [_rotated_record("adgp_ft", lambda a: -1.0, 0.98, off=lambda a: -1.0)])
    _write(root / "rotated" / "validation" / "records.jsonl", [_rotated_record("adgp_ft", lambda a: -4.0, 0.97, off=lambda a: -4.0)])
    _write(root / "rotated" / "elbo" / "records.jsonl",
           [_rotated_record("adgp_ft", lambda a: -2.0 if a <= 105 else -3.0, 0.965, off=lambda a: -2.0)])
    if floor_rotated:
        _write(root / "rotated" / "floor" / "records.jsonl", [_rotated_record("adgp_ft", lambda a: -4.0, 0.97, off=lambda a: -4.0)])


def _argv(root: Path, *extra):
    return ["--report-only", "--quiet", "--out", str(root / "recipes"), "--uci-out", str(root / "uci"), "--rotated-root",
            str(root / "rotated"), "--controls", str(root / "controls.jsonl"), "--figure", str(root / "recipes.png"), *extra]


def _options(root: Path, *extra):
    from experiments.harness import cli

    return cli.parse("recipes", recipes, _argv(root, *extra))


def test_the_choice_is_reproduced_from_the_records_by_the_rule(tmp_path):
    _screen(tmp_path, floor_rotated=True)
    decision = recipes.decide(recipes.evaluate_all(_options(tmp_path)))
    scores = {e.candidate: e.score for e in decision.evaluations}
    assert scores["elbo/off"] == pytest.approx(1.6) and scores["elbo/on"] == pytest.approx(1.1)
    assert scores["validation/on"] == pytest.approx(1.0) and scores["floor/on"] == pytest.approx(1.0)
    assert decision.not_admissible == ["paper/on", "paper/off"] and decision.incomplete == []
    assert decision.ranking == ["elbo/off", "elbo/on", "floor/on", "floor/off", "validation/on", "validation/off"]
    assert decision.decidable and decision.winner == "elbo/off" and decision.finalists == ["paper", "elbo", "floor"]
    # the study end to end: the page's block and the figure
    from experiments.harness import cli

    cli.main("recipes", recipes, _argv(tmp_path))  # `python -m experiments recipes` with these folders
    page = (tmp_path / "recipes.md").read_text()
    assert "**Chosen recipe: elbo/off** (finalists for the full-size runs: paper, elbo, floor)" in page
    assert recipes.RULE in page and "written 2026-11-25 before any screen record existed" in page
    assert (tmp_path / "recipes.png").stat().st_size > 0


def test_an_incomplete_candidate_is_not_ranked_and_the_choice_waits_for_it(tmp_path):
    _screen(tmp_path, floor_rotated=False)
    decision = recipes.decide(recipes.evaluate_all(_options(tmp_path)))
    assert decision.incomplete == ["floor/on", "floor/off"] and "floor/on" not in decision.ranking
    assert decision.ranking == ["elbo/off", "elbo/on", "validation/on", "validation/off"]
    assert not decision.decidable and decision.winner is None and decision.missing_cells == 1  # floor's adgp_ft, seed 0
    assert "not yet decidable: 1 cells missing" in recipes.markdown(decision, "test")
    closed = recipes.decide(recipes.evaluate_all(_options(tmp_path, "--screen-closed")), closed=True)
    assert closed.winner == "elbo/off" and closed.finalists == ["paper", "elbo", "validation"]


def test_a_candidate_its_recorded_cells_already_rule_out_does_not_hold_up_the_choice(tmp_path):
    """The amendment: paper misses NN's RMSE by 0.3 on every set, so with two of its sets recorded (two misses) no
    missing cell can make it admissible; with one set recorded (one miss) it could still be, and the choice waits."""
    _screen(tmp_path, floor_rotated=True)
    path = tmp_path / "uci" / "records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    late = recipes.SCREEN_DATASETS[2:]
    _write(path, [r for r in lines if not (r["method"] == "adgp_paper" and r["dataset"] in late and r["split"] == 1)])
    decision = recipes.decide(recipes.evaluate_all(_options(tmp_path)))
    assert decision.not_admissible == ["paper/on", "paper/off"] and decision.incomplete == []
    assert decision.missing_cells == len(late) and decision.waiting_cells == 0
    assert decision.winner == "elbo/off" and decision.finalists == ["paper", "elbo", "floor"]
    page = recipes.markdown(decision, "test")
    assert "**Chosen recipe: elbo/off**" in page and recipes.AMENDMENT in page and f"**Missing cells** ({len(late)};" in page
    _write(path, [r for r in lines if not (r["method"] == "adgp_paper" and r["dataset"] in recipes.SCREEN_DATASETS[1:] and r["split"] == 1)])
    waiting = recipes.decide(recipes.evaluate_all(_options(tmp_path)))
    assert waiting.incomplete == ["paper/on", "paper/off"] and waiting.winner is None
    assert "not yet decidable: 4 cells missing, 4 of them" in recipes.markdown(waiting, "test")


def test_the_follow_up_waits_for_its_seeds_and_judges_the_paper_recipe_on_them_alone():
    """The follow-up reads only seeds 1 and 2: the paper recipe's ADGP at −1 against fine-tuned controls at −3 / −2.5
    wins every shifted angle (met); one angle at −2.6 in seed 2 (below dropout's −2.5) fails it, and so does a 0°
    accuracy 2 points below NN's; a missing control leaves it waiting. Seed 0's records are never read."""
    def controls(seeds, dropout=-2.5):
        return {(m, s): _rotated_record(m, ll, 0.97, seed=s) for s in seeds
                for m, ll in (("nn", lambda a: -5.0), ("nn_ts_ft", lambda a: -3.0), ("nn_dropout_ft", lambda a: dropout))}

    def paper(seeds, ll=lambda a: -1.0, accuracy=0.97):
        return {"paper": {("adgp_ft", s): _rotated_record("adgp_ft", ll, accuracy, seed=s) for s in seeds}}

    assert recipes.follow_up(paper([0, 1, 2]), controls([0, 1])).verdict == "waiting"
    met = recipes.follow_up(paper([1, 2]), controls([1, 2]))
    assert met.verdict == "met" and met.per_seed == {1: (10, True), 2: (10, True)}
    rotated = paper([1, 2])
    rotated["paper"][("adgp_ft", 2)] = _rotated_record("adgp_ft", lambda a: -2.6 if a == 180 else -1.0, 0.97, seed=2)
    missed = recipes.follow_up(rotated, controls([1, 2]))
    assert missed.verdict == "not met" and missed.per_seed[2] == (9, True)
    assert recipes.follow_up(paper([1, 2], accuracy=0.95), controls([1, 2])).verdict == "not met"
    # seed 0 alone, however bad, does not enter
    assert recipes.follow_up({**paper([1, 2]), "validation": {}}, {**controls([1, 2]), **controls([0], dropout=0.0)}).verdict == "met"
    assert "not yet decidable: records missing" in recipes.follow_up_markdown(recipes.follow_up({}, {}))


def test_a_far_field_off_score_a_record_lacks_is_missing_not_invented(tmp_path):
    _screen(tmp_path, floor_rotated=True)
    path = tmp_path / "uci" / "records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for r in lines:
        if r["method"] == "adgp" and r["dataset"] == "yacht" and r["split"] == 1:
            del r["extra"]["far_field_off"]
    _write(path, lines)
    evaluations = {e.candidate: e for e in recipes.evaluate_all(_options(tmp_path))}
    assert evaluations["validation/on"].complete
    assert evaluations["validation/off"].missing == ["UCI yacht split 1: adgp far_field_off"]
    assert "yacht" not in evaluations["validation/off"].uci


def test_the_page_renders_with_no_screen_record(tmp_path):
    options = _options(tmp_path / "nothing", "--doc", str(tmp_path / "page.md"))
    recipes.report([], options)
    page = (tmp_path / "page.md").read_text()
    expected = len(recipes.SCREEN_DATASETS) * len(recipes.SCREEN_SPLITS) * 6 + len(recipes.SCREEN_SEEDS) * (len(recipes.RECIPES) + 3)
    assert f"not yet decidable: {expected} cells missing" in page and page.count("| incomplete |") == len(recipes.CANDIDATES)


def test_train_two_stage_defaults_are_the_rules_choice_from_the_committed_records(monkeypatch):
    """The default recipe and far-field setting of ``train_two_stage`` are the winner the written rule picks from the
    committed screen records, or ``by_likelihood`` once the follow-up rule is met on the committed records (a record
    that changes the choice fails here until the default follows it)."""
    import inspect

    from activated_dgp import train_two_stage
    from activated_dgp.training import DEFAULT_RECIPE

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    decision = recipes.decide(recipes.evaluate_all(_options_at_defaults()))
    assert decision.decidable and decision.winner is not None
    recipe, far = decision.winner.split("/")
    root = Path(recipes.__file__).resolve().parents[2] / "docs" / "results"
    rotated = {r: recipes.load_rotated(root / "rotated_mnist_recipes" / r / "records.jsonl") for r in recipes.RECIPES}
    if recipes.follow_up(rotated, recipes.load_rotated(root / "rotated_mnist_controls" / "records.jsonl")).verdict == "met":
        recipe = "by_likelihood"
    defaults = inspect.signature(train_two_stage).parameters
    assert DEFAULT_RECIPE == recipe and defaults["recipe"].default == recipe
    from activated_dgp.training import Stage2Recipe

    assert Stage2Recipe.__dataclass_fields__["far_field"].default is (far == "on")  # every recipe's far field


def _options_at_defaults():
    from experiments.harness import cli

    return cli.parse("recipes", recipes, ["--report-only", "--quiet"])


# ---------------------------------------------------------------------------------------------- the full-size runs


def test_the_finalists_full_size_table_counts_only_complete_sets_and_pairs_splits(tmp_path):
    """Hand-made records: yacht has all five splits of the floor recipe (its NLPD 0.1 below NN+TS's on each, RMSE
    equal to NN's), energy only splits 0-1 (incomplete: shown in the cells, not counted), kin8nm five splits with
    NLPD 0.2 above NN+TS's and RMSE far above NN's; power-plant's one split lacks NN+TS. Rotated MNIST: fine-tuned
    seeds 0 and 2, frozen seed 1; the matched controls of seed 0 (with the extra epochs) lie at −3.5 except NN+TS at
    45°, −2.5, and those of seed 1 (without) at −5, so the frozen ADGP at −6 wins no angle."""
    uci = {}

    def add(dataset, split, rmse, nlpd, nn_rmse=1.0):
        uci[("adgp_floor", dataset, split)] = {"rmse": rmse, "nlpd": nlpd}
        uci[("nn", dataset, split)] = {"rmse": nn_rmse + 0.01 * split, "nlpd": 9.0}
        uci[("nn_ts", dataset, split)] = {"rmse": nn_rmse, "nlpd": 1.0 + split}

    for k in range(5):
        add("yacht", k, 1.0 + 0.01 * k, 0.9 + k)
        add("kin8nm", k, 2.0, 1.2 + k)
    for k in range(2):
        add("energy", k, 1.0, 1.0 + k)
    add("power-plant", 0, 1.0, 1.0)
    del uci[("nn_ts", "power-plant", 0)]  # a split without NN+TS is not paired: power-plant has no cell

    def rotated_record(value):
        return {"angles": ANGLES, "log_likelihood": [value if a >= 45 else 0.0 for a in ANGLES]}

    rotated = {("adgp_ft", 0): rotated_record(-3.0), ("adgp_ft", 2): rotated_record(-4.0), ("adgp", 1): rotated_record(-6.0)}
    controls = {("nn_ts_ft", 0): {"angles": ANGLES, "log_likelihood": [-2.5 if a == 45 else -3.5 for a in ANGLES]},
                ("nn_dropout_ft", 0): rotated_record(-3.5),
                ("nn_ts", 1): rotated_record(-5.0), ("nn_dropout", 1): rotated_record(-5.0),
                ("nn_ts_ft", 2): rotated_record(-1.0)}  # seed 2 lacks fine-tuned dropout: no count
    result = recipes.full_size("floor", uci, rotated, controls)
    assert result.uci_cells == 12 and result.complete_sets() == ["yacht", "kin8nm"] and "power-plant" not in result.uci
    assert result.uci["yacht"]["nlpd_gap"] == pytest.approx(-0.1) and result.uci["kin8nm"]["nlpd_gap"] == pytest.approx(0.2)
    assert result.uci["yacht"]["rmse_within"] and not result.uci["kin8nm"]["rmse_within"]
    assert result.rotated == {"adgp_ft": {0: -3.0, 2: -4.0}, "adgp": {1: -6.0}}
    assert result.shift_wins == {"adgp_ft": {0: 9}, "adgp": {1: 0}}
    row = next(line for line in recipes.full_size_markdown([result]).splitlines() if line.startswith("| floor"))
    assert row == "| floor | 12 of 43 | 2 of 9 | 1 of 2 | 1 of 2 | +0.050 | +0.050 | -3.000 (9), missing, -4.000 | missing, -6.000 (0), missing |"
    # beside a finalist complete on yacht alone, the like-for-like mean is yacht's gap only
    other = recipes.FullSize("paper", uci={"yacht": {"splits": list(range(5)), "nlpd_gap": 0.3, "rmse_within": True}})
    rows = recipes.full_size_markdown([result, other]).splitlines()
    assert "the same mean on the 1 set complete for every finalist" in rows[2]
    assert next(line for line in rows if line.startswith("| floor")).split(" | ")[6] == "-0.100"
    assert next(line for line in rows if line.startswith("| paper")).split(" | ")[6] == "+0.300"
    recipes.full_size_figure([result], tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
