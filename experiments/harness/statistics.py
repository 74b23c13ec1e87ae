"""Summary statistics the studies share over seeds or splits."""

import numpy as np


def standard_error(values, single: float = float("nan")) -> float:
    """The standard error of a mean over seeds or splits, sd/√n with ddof 1; ``single`` when there is only one
    value (NaN by default; a study whose rule treats one split as exact passes 0)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float(single)
