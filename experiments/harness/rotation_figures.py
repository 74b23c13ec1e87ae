"""What the rotated-MNIST studies share in their pages: the configuration of a run on rotation angles read from its
parsed options, and the per-angle curves of a metric, mean ± standard error over seeds."""

from __future__ import annotations

from typing import Sequence, Type

import numpy as np


def angles_config(config_class: Type, options):
    """``config_class`` (a dataclass with an ``angles`` tuple) from the parsed options of the same names; a
    ValueError for fewer than two angles."""
    if len(options.angles) < 2:
        raise ValueError("give at least two --angles")
    fields = {name: getattr(options, name) for name in config_class.__dataclass_fields__ if name != "angles"}
    return config_class(angles=tuple(options.angles), **fields)


def plot_seed_mean(axis, angles: Sequence[float], values: np.ndarray, label: str, style: str = "-") -> None:
    """One metric's curve over the angles: the mean over seeds of ``values`` [seeds, angles], with a band of ± one
    standard error (sample standard deviation / √seeds) when there are several seeds."""
    mean = values.mean(0)
    axis.plot(angles, mean, style, marker="o", markersize=3, label=label)
    if len(values) > 1:
        se = values.std(0, ddof=1) / np.sqrt(len(values))
        axis.fill_between(angles, mean - se, mean + se, alpha=0.15)


def style_rotation_axis(axis, title: str) -> None:
    """The rotation axis (0°–180°, ticks every 30°), the panel's title and a light grid."""
    axis.set_xlabel("rotation (degrees)")
    axis.set_title(title, fontsize=10)
    axis.set_xticks(list(range(0, 181, 30)))
    axis.grid(alpha=0.3)
