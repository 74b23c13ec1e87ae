"""The linearised Laplace approximation of the rotated-MNIST CNN (NeuralEF paper, Deng et al. 2022, §4.3 and Table 2,
at CPU scale): MAP, last-layer, KFAC and diagonal LLA, and LLA with NeuralEF's top k ∈ {10, 20, 50} NTK eigenfunctions,
scored by test NLL and ECE at every rotation angle.

    python -m experiments lla_rotated_mnist --data-dir ../shared/data

(``python -m experiments.lla_rotated_mnist …`` is the same command.) Per seed: 2,000 training digits (drawn with the
seed), the official test set's first 500 digits rotated 0°…180° every 15°, and the rotated-MNIST CNN
(:func:`experiments.harness.setups.rotated_mnist_cnn`: two max-pooled 5×5 convolutions, the activated head at a small width)
trained by Adam on the cross-entropy: its weights are θ_MAP of every method.

* ``map``: the network's softmax.
* ``last_layer``, ``kron``, ``diagonal``: :class:`activated_dgp.eigen.LinearisedLaplace` over the last Dense layer,
  the Kronecker-factored GGN of every layer (KFC for the convolutions, the activated layers' diagonal blocks), and the
  diagonal GGN; the prior precision by the Laplace evidence; the Monte Carlo softmax predictive.
* ``neuralef_k``: LLA with NeuralEF's top-k eigenfunctions of the empirical NTK (eq. 22), the prior precision by its
  evidence.

Records: ``<out>/records.jsonl``, one per (method, seed), protocol ``v1:<configuration digest>``; the MAP networks
are artifacts under ``--artifacts``. The configuration and cells: cells.py; the page and figure: report.py.
"""

from __future__ import annotations

from experiments.harness import cli
import sys

from experiments.lla_rotated_mnist.cells import (
    ANGLES, KEY, LABELS, METHODS, PROTOCOL, Config, add_options, cells, config_from, run_cell, upgrade,
)
from experiments.lla_rotated_mnist.report import RULE, markdown, report, verdicts


def main(argv=None) -> list:
    """``python -m experiments.lla_rotated_mnist …``: the same as ``python -m experiments lla_rotated_mnist …``."""
    return cli.main("lla_rotated_mnist", sys.modules[__name__], argv)


__all__ = [
    "ANGLES", "Config", "KEY", "LABELS", "METHODS", "PROTOCOL", "RULE", "add_options", "cells",
    "config_from", "main", "markdown", "report", "run_cell", "upgrade", "verdicts",
]
