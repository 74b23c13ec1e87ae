"""The registered studies: name -> module, imported only when used. Add a study by adding one line."""

from __future__ import annotations

import importlib
from types import ModuleType

STUDIES = {
    "banana": "experiments.banana",
    "eigenpro_mnist": "experiments.eigenpro_mnist",
    "neuralef_mnist": "experiments.neuralef_mnist",
    "eigenfunction_features": "experiments.eigenfunction_features",
    "eigenpro_p_equals_n": "experiments.eigenpro_p_equals_n",
    "far_field": "experiments.far_field",
    "ika_patches": "experiments.ika_patches",
    "lla_rotated_mnist": "experiments.lla_rotated_mnist",
    "figures": "experiments.figures",
    "ntk_spectra": "experiments.ntk_spectra",
    "recipes": "experiments.recipes",
    "rotated_mnist": "experiments.rotated_mnist",
    "stage2_diagnosis": "experiments.stage2_diagnosis",
    "sgd_trajectory": "experiments.sgd_trajectory",
    "stage2_divergence": "experiments.stage2_divergence",
    "uci": "experiments.uci",
}


def study(name: str) -> ModuleType:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; known: {', '.join(sorted(STUDIES))}")
    return importlib.import_module(STUDIES[name])
