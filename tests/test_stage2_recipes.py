"""``train_two_stage(recipe=…)``: the named stage-2 recipes (activated_dgp.training.recipes) resolve to the settings
their definitions state, explicit options override them, and bad names get clear errors. The end-to-end fit with a
recipe is tests/test_variance_floor.py's ``test_train_two_stage_passes_the_floor``."""

import numpy as np
import pytest

from activated_dgp.training import DEFAULT_RECIPE, STAGE2_RECIPES, TrainingSchedule, train_two_stage
from activated_dgp.training.recipes import DEFAULT_DGP_PATIENCE, DEFAULT_VALIDATION_FRACTION, stage2_recipe

# the recipes' definitions (the recipe screen's table), written out here
DEFINED = {
    "paper": dict(kernel_variance=1.0, kernel_variance_floor=None, noise_variance=None, early=False, validation=0.0),
    "validation": dict(kernel_variance="validation", kernel_variance_floor=None, noise_variance="selected", early=True, validation=0.1),
    "elbo": dict(kernel_variance="elbo", kernel_variance_floor=None, noise_variance="selected", early=True, validation=0.1),
    "floor": dict(kernel_variance="validation", kernel_variance_floor=1e-2, noise_variance="selected", early=True, validation=0.1),
    "slab": dict(kernel_variance="validation", kernel_variance_floor=None, noise_variance="selected", early=True, validation=0.1),
    "mixed": dict(kernel_variance="validation", kernel_variance_floor=None, noise_variance="selected", early=True, validation=0.1),
}
BY_LIKELIHOOD = {"gaussian": "validation", "classification": "paper"}  # the suggested candidate: which recipe each gets


@pytest.mark.parametrize("name", sorted(DEFINED))
def test_each_recipe_resolves_to_its_definition(name):
    want = DEFINED[name]
    settings = stage2_recipe(name).resolve(gaussian=True)
    assert settings.recipe == name and settings.kernel_variance == want["kernel_variance"]
    assert settings.kernel_variance_floor == want["kernel_variance_floor"] and settings.noise_variance == want["noise_variance"]
    assert (settings.dgp_schedule is not None and settings.dgp_schedule.patience == DEFAULT_DGP_PATIENCE) == want["early"]
    assert settings.validation_fraction == pytest.approx(want["validation"]) and DEFAULT_VALIDATION_FRACTION == 0.1
    # a classifier has no Gaussian noise to choose
    assert stage2_recipe(name).resolve(gaussian=False).noise_variance is None
    assert DEFAULT_RECIPE in set(DEFINED) | {"by_likelihood"} and set(STAGE2_RECIPES) == set(DEFINED) | {"by_likelihood"}
    assert stage2_recipe(name).validation_split == (name if name in ("slab", "mixed") else "random")


def test_by_likelihood_is_validation_for_regression_and_paper_for_classification():
    recipe = stage2_recipe("by_likelihood")
    for gaussian, name in ((True, BY_LIKELIHOOD["gaussian"]), (False, BY_LIKELIHOOD["classification"])):
        used = recipe.for_likelihood(gaussian)
        want = DEFINED[name]
        settings = used.resolve(gaussian=gaussian)
        assert used.name == ("by_likelihood" if gaussian else name) and settings.kernel_variance == want["kernel_variance"]
        assert settings.noise_variance == DEFINED[name]["noise_variance"] if gaussian else settings.noise_variance is None
        assert settings.kernel_variance_floor == want["kernel_variance_floor"]
        assert settings.validation_fraction == pytest.approx(want["validation"])
        assert (settings.dgp_schedule is not None) == want["early"]
    for name in DEFINED:  # the screened recipes are the same for every likelihood
        assert stage2_recipe(name).for_likelihood(False) is stage2_recipe(name)


def test_explicit_options_override_the_recipe():
    floor = stage2_recipe("floor")
    fixed = stage2_recipe("floor", kernel_variance=0.5).resolve(gaussian=True)  # a fixed v drops the floor and the chosen noise
    assert fixed.kernel_variance == 0.5 and fixed.kernel_variance_floor is None and fixed.noise_variance is None
    assert fixed.dgp_schedule.patience == DEFAULT_DGP_PATIENCE  # the recipe still stops early …
    assert fixed.validation_fraction == pytest.approx(0.1)  # … on its held-out part
    mine = TrainingSchedule(epochs=7, patience=3)
    own = stage2_recipe(floor, kernel_variance_floor=0.05, noise_variance=0.2, validation_fraction=0.25).resolve(
        gaussian=True, dgp_schedule=mine
    )
    assert own.kernel_variance == "validation" and own.kernel_variance_floor == 0.05 and own.noise_variance == 0.2
    assert own.dgp_schedule is mine and own.validation_fraction == 0.25
    assert stage2_recipe(floor) is floor and stage2_recipe("floor").name == "floor"
    # by_likelihood with an explicit choice of v holds that choice for a classifier too; with only general options
    # (warm-up, far field) a classifier still gets the paper recipe, carrying those options
    chosen = stage2_recipe("by_likelihood", kernel_variance=0.3).for_likelihood(False)
    assert chosen.kernel_variance == 0.3
    general = stage2_recipe("by_likelihood", warmup_steps=4, far_field=False).for_likelihood(False)
    assert general.name == "paper" and general.kernel_variance == 1.0 and general.warmup_steps == 4 and general.far_field is False
    with pytest.raises(ValueError, match="unknown stage-2 recipe option"):
        stage2_recipe("paper", kernel_varience=0.5)


def test_old_keywords_still_work_with_a_warning_naming_their_new_home():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    with pytest.warns(DeprecationWarning, match=r"train_two_stage\(num_layers=\) is deprecated; use activated_dgp\.deep\.ArchitectureConfig"):
        with pytest.raises(ValueError, match="num_layers"):  # the old keyword reaches the architecture's checks
            train_two_stage(X, Y, num_layers=0)
    with pytest.warns(DeprecationWarning, match=r"train_two_stage\(kernel_variance=\) is deprecated; use activated_dgp\.training\.stage2_recipe"):
        with pytest.raises(ValueError, match="kernel_variance"):
            train_two_stage(X, Y, kernel_variance="largest")
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_layer'"):
        train_two_stage(X, Y, num_layer=1)
    with pytest.raises(ValueError, match="architecture.input_dim is 3, but the inputs are 2 wide"):
        from activated_dgp.deep import ArchitectureConfig

        train_two_stage(X, Y, architecture=ArchitectureConfig(3))


def test_the_front_door_is_small():
    import inspect

    parameters = inspect.signature(train_two_stage).parameters
    named = [name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert len(named) <= 13, named  # data (2), network, its conversion (make_convertible), the rest


def test_bad_recipes_are_clear_errors():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    with pytest.raises(ValueError, match="unknown stage-2 recipe 'best'.*'paper', 'validation', 'elbo', 'floor'"):
        train_two_stage(X, Y, recipe="best")
    with pytest.raises(ValueError, match="needs validation_data or a validation_fraction"):
        train_two_stage(X, Y, recipe=stage2_recipe("validation", validation_fraction=0.0))
