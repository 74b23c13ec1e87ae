"""The kernel of an SGD trajectory on rotated MNIST (NeuralEF paper, Deng et al. 2022, appendix C.3, at CPU scale):
MAP, SWA, SWAG, a deep ensemble and SWA + NeuralEF on κ_SGD, scored per rotation angle.

    python -m experiments sgd_trajectory --data-dir ../shared/data

(``python -m experiments.sgd_trajectory …`` is the same command.) Per seed: 5,000 training digits (the whole
embedded set when the data folder has no training split), the official test set rotated 0°…180° every 15°, and a
small CNN without batch norm (conv 8 and 16 channels, 5×5, max-pooled, one Dense layer).

* ``map``: the CNN trained by SGD with momentum 0.9 (learning rate 0.05, a tenth of it for the last third of the
  epochs, weight decay 5e-4, batch 128).
* ``swa``, ``swag``: SGD continued from MAP at a constant learning rate; :class:`activated_dgp.training.SWAG`
  collects one snapshot per epoch (K = 20 deviation columns); SWA predicts with the mean weights, SWAG averages the
  softmax over 30 samples of scale 0.5 (Maddox et al., 2019).
* ``neuralef``: on the same continuation, the logits on every training digit every ``--function-every`` steps give
  κ_SGD per class (:func:`activated_dgp.eigen.sgd_trajectory_kernel`); NeuralEF learns its top-10 eigenfunctions per
  class, and the predictive averages 256 function samples around the SWA network
  (:func:`activated_dgp.eigen.function_space_probabilities`).
* ``ensemble``: 5 MAP networks from independent seeds (member 0 is ``map``'s).

The rotated-MNIST study's NN, deep ensemble and ADGP (its larger CNN) are read from its records (``--reference``) and
shown for reference. Records: ``<out>/records.jsonl``, one per (method, seed), under the protocol of its
configuration (:data:`PROTOCOL`); trained networks and the trajectory (SWAG state and function values) are artifacts under ``--artifacts``.
The configuration and cells: cells.py; what is fitted: models.py; the page and figure: report.py.
"""

from __future__ import annotations

import sys

from experiments.harness import cli
from experiments.sgd_trajectory.cells import (
    ANGLES, KEY, LABELS, METHODS, PROTOCOL, Config, add_options, cells, config_from, run_cell, upgrade,
)
from experiments.sgd_trajectory.report import RULE, markdown, report, verdicts


def main(argv=None) -> list:
    """``python -m experiments.sgd_trajectory …``: the same as ``python -m experiments sgd_trajectory …``."""
    return cli.main("sgd_trajectory", sys.modules[__name__], argv)


__all__ = [
    "ANGLES", "Config", "KEY", "LABELS", "METHODS", "PROTOCOL", "RULE", "add_options", "cells",
    "config_from", "main", "markdown", "report", "run_cell", "upgrade", "verdicts",
]
