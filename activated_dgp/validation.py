"""Input checks that turn bad input into a clear error instead of a silent NaN.

Two kinds, kept apart so that training stays fast:

* **Shape checks** (:func:`check_width`) run where the shapes are used (kernels, Kuf) and cost
  nothing at run time: they look at static shapes, once per trace.
* **Value checks** (NaN/inf, zero norms, empty arrays: :func:`check_inputs`, :func:`check_matrix`,
  :func:`check_targets`, and :func:`activated_dgp.deep.sampling.check_dgp`) run once on NumPy values at the public
  entry points — construction, ``fit`` (:func:`activated_dgp.train_network`, :func:`activated_dgp.train_dgp`),
  prediction and conversion. They raise ``ValueError`` naming the offending rows. The one check inside the
  per-minibatch evaluations is the activated Kuf's finiteness assertion on its inputs (O(N·D) against the series'
  O(M·N·Ñ); within noise of Kuf's forward-and-gradient time at M = 128, N = 1,024, D = 8), which names a NaN input on
  paths that bypass the entry points, such as gpflux's own ``as_training_model().fit``.
"""

from __future__ import annotations

import gpflow
import numpy as np
import tensorflow as tf

__all__ = ["check_width", "as_float_array", "check_matrix", "check_inputs", "check_dgp", "dgp_input_width"]


def check_width(X: tf.Tensor, expected: int, what: str) -> None:
    """Raise ValueError unless the static shape of ``X`` is [batch..., N, expected] (rank ≥ 2)."""
    shape = X.shape
    if shape.rank is not None and shape.rank < 2:
        raise ValueError(f"{what} must be [..., N, {expected}] (at least a matrix), got shape {shape}")
    width = shape[-1] if shape.rank is not None else None
    if width is not None and width != expected:
        raise ValueError(f"{what} must have {expected} columns, got shape {shape}")


def _rows(mask: np.ndarray, limit: int = 5) -> str:
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" … ({rows.size} rows)" if rows.size > limit else "")


def as_float_array(values, what: str) -> np.ndarray:
    """``values`` (array, nested list, tensor or variable) as a NumPy array of ``gpflow.default_float()``;
    a ValueError naming ``what`` for a non-numeric dtype (strings, objects, complex)."""
    try:
        array = values.numpy() if hasattr(values, "numpy") else np.asarray(values)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{what} is not a rectangular array: {error}") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be numeric, got dtype {array.dtype}")
    return array.astype(gpflow.default_float(), copy=False)


def check_matrix(values, what: str, width: int = None, nonzero_rows: bool = False) -> np.ndarray:
    """``values`` as a finite matrix [N, width] of the default float with N ≥ 1 (and, with
    ``nonzero_rows``, no row of zero norm); a ValueError naming ``what`` and the offending rows."""
    array = as_float_array(values, what)
    if array.ndim != 2:
        raise ValueError(f"{what} must be a matrix [N, {width if width is not None else 'D'}], got shape {array.shape}")
    if array.shape[0] == 0:
        raise ValueError(f"{what} is empty (shape {array.shape}): at least one row is needed")
    if width is not None and array.shape[1] != width:
        raise ValueError(f"{what} must have {width} columns, got shape {array.shape}")
    bad = ~np.all(np.isfinite(array), axis=1)
    if np.any(bad):
        raise ValueError(f"{what} contains NaN or inf in rows {_rows(bad)}")
    if nonzero_rows:
        zero = np.linalg.norm(array, axis=1) == 0.0
        if np.any(zero):
            raise ValueError(f"{what} has rows of zero norm; their direction is undefined: rows {_rows(zero)}")
    return array


def check_positive_int(value, what: str) -> int:
    """``value`` as an int ≥ 1 (a bool, a non-integral or an array value is refused); a ValueError naming ``what``."""
    if isinstance(value, bool) or np.ndim(value) != 0 or int(value) != value or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def check_targets(values, what: str = "Y", width: int = None) -> np.ndarray:
    """Targets as a finite matrix [N, P] (:func:`check_matrix`), with one rule for a vector: a 1-D ``values`` of N
    entries is one target column, [N, 1], as in tf-keras' ``fit`` and the regressors of :mod:`activated_dgp.eigen`."""
    array = as_float_array(values, what)
    return check_matrix(array[:, None] if array.ndim == 1 else array, what, width)


def check_inputs(X, width: int, what: str = "X") -> np.ndarray:
    """Inputs X as a finite matrix [N, width], N ≥ 1 (:func:`check_matrix`)."""
    return check_matrix(X, what, width)


def dgp_input_width(dgp) -> int:
    """D, the input width of a DeepGP's first layer when its kernel records one (else None)."""
    kernel = dgp.f_layers[0].kernel
    kernel = getattr(kernel, "kernel", kernel)
    width = getattr(kernel, "input_dim", None)
    return None if width is None else int(width)
