"""IKA against Nyström on image patches, IKA's §4 at CPU scale (Ronchetti, "IKA: Independent Kernel Approximator").

    nice -n 10 python -m experiments ika_patches --data-dir ../shared/data   # the cells without a record, then the page
    python -m experiments ika_patches --report-only                           # the page and figure from the records

The paper approximates the Gaussian kernel κ(x, y) = exp(−‖x − y‖² / (2σ²)) on whitened unit-length 7×7 patches of
STL-10 images with n = 128 filters and measures the mean absolute error |κ(x, y) − φ(x)·φ(y)| over pairs of held-out
patches. Here MNIST test images stand in for STL-10 (the preprocessing, σ² and the error: patches.py), and the cells
(cells.py) are one per (filters, S, trial):

* §4.2, the sample size: S ∈ ``--samples`` (1,000, 5,000, 15,000) with random filters;
* §4.3.1 / §4.3.2, random against k-means filters at the largest S, IKA against Nyström with the same filters;
* §4.3.3, m eigenfunctions out of n: every cell scores each m of ``--ranks`` (8 … 128).

The page docs/results/ika_patches.md (generated block ``ika_patches``: table, verdicts, notes; report.py) and its
figure docs/results/ika_patches.png.
"""

from __future__ import annotations

import sys

# The study's interface for the harness (experiments/harness/study.py).
from experiments.harness import cli
from experiments.ika_patches.cells import KEY, PROTOCOL, Draw, add_options, cells, draw_trial, run_cell, upgrade
from experiments.ika_patches.patches import PatchData, patch_data, preprocess
from experiments.ika_patches.report import markdown, report, verdicts


def main(argv=None) -> list:
    """``python -m experiments.ika_patches …``: the same as ``python -m experiments ika_patches …``."""
    return cli.main("ika_patches", sys.modules[__name__], argv)


__all__ = ["Draw", "KEY", "PROTOCOL", "PatchData", "add_options", "cells", "draw_trial", "main", "markdown", "patch_data",
           "preprocess", "report", "run_cell", "upgrade", "verdicts"]
