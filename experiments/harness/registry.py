"""The registered studies (name -> module) and the benchmarks whose blocks are written from committed records
(module names), imported by name only when used: the harness imports no study and no benchmark. Add a study or
such a benchmark by adding one line."""

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


#: The benchmarks whose blocks are written from committed records. Each has ``report_from_records()`` (reads its
#: record and rewrites its blocks, timing and training nothing; a block whose record is not committed yet is left as
#: it is, ``benchmarks._report.report_block``) and ``REPORT_BLOCKS``, the (page, block name) pairs it writes;
#: ``python -m experiments report`` calls them all (:func:`report_benchmarks`).
BENCHMARKS = (
    "benchmarks.covariances",
    "benchmarks.dgp_epoch",
    "benchmarks.eigenpro",
    "benchmarks.laplace_far_field",
    "benchmarks.laplace_neuralef",
    "benchmarks.lla_rotated_mnist_cost",
    "benchmarks.neuralef_vs_nystrom",
    "benchmarks.prediction",
    "benchmarks.prediction_memory",
    "benchmarks.prediction_vs_keras",
    "benchmarks.prediction_cnn_vs_keras",
    "benchmarks.step_profile",
    "benchmarks.streaming",
    "benchmarks.tracing",
    "benchmarks.twin_training",
)


#: Diagnoses in a study's package that, like the benchmarks, write their blocks from one committed record
#: (``report_from_records()`` and ``REPORT_BLOCKS``); ``python -m experiments report`` calls them too.
DIAGNOSES = ("experiments.rotated_mnist.stage2_fit_isolation", "experiments.lla_rotated_mnist.variance_diagnosis")


def study(name: str) -> ModuleType:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; known: {', '.join(sorted(STUDIES))}")
    return importlib.import_module(STUDIES[name])


def benchmark(name: str) -> ModuleType:
    """The benchmark module ``name`` of :data:`BENCHMARKS`."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown reported benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return importlib.import_module(name)


def report_benchmarks() -> None:
    """Rewrite the blocks of every benchmark of :data:`BENCHMARKS` from its committed record."""
    for name in BENCHMARKS:
        benchmark(name).report_from_records()
    for name in DIAGNOSES:
        importlib.import_module(name).report_from_records()
