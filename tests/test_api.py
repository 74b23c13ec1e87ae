"""The public API: a short top level, namespaces that say what they hold, and every old name still
resolving, for one release, to the same object as its new home with a DeprecationWarning that names that home.

The old top level is written out here (not read from the package), so a name dropped without an alias fails."""

import importlib
import re
import sys
import warnings

import pytest

import activated_dgp

#: the top level of release 0.1.0, as it was exported (``__all__`` of release 0.1.0)
OLD_TOP_LEVEL = """
ZonalArcCosine ZonalKernel ActivationFeature ActivatedLayer build_activated_nn build_activated_dgp activated_gp_layer
dgp_from_keras Conversion train_two_stage train_network train_dgp evaluate_elbo TrainingSchedule TwoStageResult
ArraySource BatchPredictor CsvSource propagate_means layer_moments predictive_log_density predict_y
predict_class_probabilities save_dgp load_dgp save_network load_network load_optimizer load_state DGPCheckpoint
ArchitectureConfig LIKELIHOODS register_activation basis_coefficients inducing_coefficients Activation ACTIVATIONS
activation_coefficients arc_cosine_coefficients arc_cosine_shape relu_coefficients zonal_matern52_shape
funk_hecke_coefficients gegenbauer_series num_harmonics set_xla eigen Nystrom NeuralEF LinearisedLaplace
EigenfunctionFeature IKA FeatureRidge kernel_machines EigenPro2 EigenPro3
""".split()

#: renamed names: old → new, written out independently of the package's DEPRECATED table
RENAMED = {
    "Conversion": "ConversionReport",
    "load_state": "load_training_state",
    "set_xla": "use_xla_for_gegenbauer",
    "LIKELIHOODS": "LIKELIHOOD_REGISTRY",
    "ACTIVATIONS": "ACTIVATION_REGISTRY",
    "Activation": "ZonalActivation",
}

#: renamed names in the modules that defined (or re-exported) them: (module, old, new)
MODULE_RENAMES = [
    ("activated_dgp.deep.conversion", "Conversion", "ConversionReport"),
    ("activated_dgp.deep.persistence", "load_state", "load_training_state"),
    ("activated_dgp.zonal.spherical", "set_xla", "use_xla_for_gegenbauer"),
    ("activated_dgp.deep.likelihoods", "LIKELIHOODS", "LIKELIHOOD_REGISTRY"),
    ("activated_dgp.deep.builders", "LIKELIHOODS", "LIKELIHOOD_REGISTRY"),
    ("activated_dgp.zonal.spectra", "ACTIVATIONS", "ACTIVATION_REGISTRY"),
    ("activated_dgp.zonal.spectra", "Activation", "ZonalActivation"),
]

NAMESPACES = ["zonal", "deep", "training", "eigen", "kernel_machines", "data"]


def _no_warnings(get):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return get()


def test_the_top_level_is_short_and_resolves_without_warnings():
    assert len(activated_dgp.__all__) == len(set(activated_dgp.__all__)) <= 30
    for name in activated_dgp.__all__:
        assert _no_warnings(lambda: getattr(activated_dgp, name)) is not None, name
    assert set(NAMESPACES) <= set(activated_dgp.__all__)
    assert not set(RENAMED) & set(activated_dgp.__all__)


def test_dir_shows_the_short_list():
    shown = {name for name in dir(activated_dgp) if not name.startswith("_")}
    assert shown == set(activated_dgp.__all__) | {"DEPRECATED", "MOVED_MODULES"}


def test_every_namespace_all_resolves_without_warnings():
    for namespace in NAMESPACES:
        module = importlib.import_module(f"activated_dgp.{namespace}")
        assert module.__all__, namespace
        for name in module.__all__:
            _no_warnings(lambda: getattr(module, name))


@pytest.mark.parametrize("old", OLD_TOP_LEVEL)
def test_every_old_name_resolves_to_its_new_home(old):
    new = RENAMED.get(old, old)
    if old in activated_dgp.__all__:  # kept at the top level, unchanged
        _no_warnings(lambda: getattr(activated_dgp, old))
        return
    homes = [ns for ns in NAMESPACES if new in getattr(activated_dgp, ns).__all__]
    assert len(homes) == 1, f"{new} should live in exactly one namespace, found {homes}"
    home = f"activated_dgp.{homes[0]}"
    with pytest.warns(DeprecationWarning, match=rf"activated_dgp\.{old} is deprecated; use {home}\.{new}$"):
        value = getattr(activated_dgp, old)
    assert value is getattr(importlib.import_module(home), new)


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning, match="use activated_dgp.zonal.use_xla_for_gegenbauer"):
        from activated_dgp import set_xla
    assert set_xla is activated_dgp.zonal.use_xla_for_gegenbauer


@pytest.mark.parametrize("module_name, old, new", MODULE_RENAMES)
def test_renamed_names_keep_their_old_name_in_their_module(module_name, old, new):
    module = importlib.import_module(module_name)
    assert old not in module.__all__ and new in module.__all__
    with pytest.warns(DeprecationWarning, match=rf"{module_name}\.{old} is deprecated"):
        value = getattr(module, old)
    assert value is getattr(module, new)


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        activated_dgp.no_such_name
    with pytest.raises(AttributeError):
        activated_dgp.zonal.spectra.no_such_name
    with pytest.raises(ImportError):
        exec("from activated_dgp import no_such_name")


def test_a_renamed_registry_is_the_live_registry():
    """The old registry name is the same dict, so registering through the new name shows under the old one."""
    with pytest.warns(DeprecationWarning):
        old = activated_dgp.ACTIVATIONS
    assert old is activated_dgp.zonal.ACTIVATION_REGISTRY
    assert set(old) >= {"relu", "softplus", "swish"}


def test_importing_the_package_uses_no_deprecated_name(fresh_process):
    """The library itself imports only new names: a fresh interpreter importing everything records no warning of ours
    (the fresh process of tests/conftest.py does that first, recording every warning)."""
    assert fresh_process.import_warnings == []


def test_a_deprecated_name_used_in_the_suite_fails_loudly():
    """pyproject's filterwarnings makes our DeprecationWarning an error outside ``pytest.warns`` (the checks above),
    so no test, tutorial or study run by the suite can keep using an old name unnoticed."""
    with pytest.raises(DeprecationWarning, match=r"activated_dgp\.load_state is deprecated; use activated_dgp\.deep\.load_training_state"):
        activated_dgp.load_state
    with pytest.raises(DeprecationWarning, match=r"activated_dgp\.deep\.conversion\.Conversion is deprecated"):
        activated_dgp.deep.conversion.Conversion


@pytest.mark.parametrize("old", sorted(activated_dgp.MOVED_MODULES))
def test_an_old_module_path_imports_with_a_warning_naming_its_new_home(old):
    homes = activated_dgp.MOVED_MODULES[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} is deprecated; use {' and '.join(homes)}")):
        module = importlib.import_module(old)
    # every public name of every new home is reachable through the old path, as the very same object
    for home in homes:
        new = importlib.import_module(home)
        for name in getattr(new, "__all__", []):
            assert getattr(module, name) is getattr(new, name), (old, name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name
    # the import system's attributes stay the alias's own: the new homes keep their names, specs and loaders
    assert module.__spec__.name == old
    for home in homes:
        new = importlib.import_module(home)
        assert new.__spec__.name == home and new.__name__ == home and new.__loader__ is not module.__spec__.loader


def test_from_an_old_module_path_import_a_name_split_between_two_new_modules():
    sys.modules.pop("activated_dgp.spherical", None)
    with pytest.warns(DeprecationWarning):
        from activated_dgp.spherical import funk_hecke_coefficients, gegenbauer_series
    from activated_dgp.zonal import funk_hecke, spherical

    assert funk_hecke_coefficients is funk_hecke.funk_hecke_coefficients
    assert gegenbauer_series is spherical.gegenbauer_series


def test_setting_state_through_an_old_module_path_sets_it_in_the_new_module(monkeypatch):
    sys.modules.pop("activated_dgp.spherical", None)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("activated_dgp.spherical")
    from activated_dgp.zonal import spherical

    sentinel = {"enabled": False}
    monkeypatch.setattr(spherical, "_XLA", spherical._XLA)  # restored afterwards
    old._XLA = sentinel
    assert spherical._XLA is sentinel
