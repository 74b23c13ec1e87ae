"""Input checks that turn bad input into a clear error instead of a silent NaN.

Shapes are checked at trace time (``ValueError``). Values (NaN/inf, zero norms) are checked with
NumPy when TensorFlow runs eagerly (``ValueError`` naming the offending rows); inside a
``tf.function`` the same checks are graph assertions that raise ``tf.errors.InvalidArgumentError``
with the same message.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def check_width(X: tf.Tensor, expected: int, what: str) -> None:
    """Raise ValueError unless ``X`` is a matrix [N, expected]."""
    shape = X.shape
    if shape.rank is not None and shape.rank != 2:
        raise ValueError(f"{what} must be a matrix [N, {expected}], got shape {shape}")
    width = shape[-1] if shape.rank is not None else None
    if width is not None and width != expected:
        raise ValueError(f"{what} must have {expected} columns, got shape {shape}")


def _rows(mask: np.ndarray, limit: int = 5) -> str:
    rows = np.flatnonzero(mask)
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" … ({rows.size} rows)" if rows.size > limit else "")


def check_finite(X: tf.Tensor, what: str) -> tf.Tensor:
    """Raise on NaN or inf entries of ``X`` (a matrix); returns X (with a graph dependency)."""
    message = f"{what} contains NaN or inf"
    if tf.executing_eagerly():
        values = np.asarray(X)
        bad = ~np.all(np.isfinite(values), axis=-1)
        if np.any(bad):
            raise ValueError(f"{message} in rows {_rows(bad)}")
        return X
    return tf.debugging.assert_all_finite(X, message)


def check_nonzero_rows(norms: tf.Tensor, what: str) -> tf.Tensor:
    """Raise if any row norm is zero (its direction, and so the cosine, is undefined)."""
    message = f"{what} has rows of zero norm; their direction is undefined"
    if tf.executing_eagerly():
        bad = np.asarray(norms) == 0.0
        if np.any(bad):
            raise ValueError(f"{message}: rows {_rows(bad)}")
        return norms
    with tf.control_dependencies([tf.debugging.assert_positive(norms, message=message)]):
        return tf.identity(norms)
