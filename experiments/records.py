"""Kept for the studies not yet on the harness: the record store lives in :mod:`experiments.harness.store`."""

from experiments.harness.store import ResultStore, pending, portable_command, portable_path  # noqa: F401
