"""One cache for trained artifacts (networks, DGPs, fitted weights) shared by the studies, and for what a run's
cells share in memory (:meth:`ArtifactCache.in_memory`: data read once per run; studies keep no module-level caches).

Studies receive an :class:`ArtifactCache` through their run context (never a module global). Every write goes to
a temporary name in the target's folder and is moved into place with :func:`os.replace`, so an interrupted save
never leaves a half-written artifact that a resumed run would load.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from activated_dgp import saving


def atomic_write(path, write: Callable[[Path], None]) -> Path:
    """Call ``write(temporary)`` and move the temporary file onto ``path`` (atomically on one filesystem).

    The temporary name keeps ``path``'s full name as a suffix (``.tmp-<pid>.<name>``) so writers that look at the
    extension (``.weights.h5``, ``.npz``) see the one they expect."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".tmp-{os.getpid()}.{path.name}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text))


def restore_saved_weights(model, directory, legacy_weights=None) -> bool:
    """Set ``model``'s weights from the network saved in ``directory`` by :func:`activated_dgp.save` (or, failing
    that, from a ``legacy_weights`` file written by Keras' ``save_weights`` before the studies saved the library's
    way); False when neither exists. For models whose layers other objects share (a classifier's extractor and
    head), which :func:`activated_dgp.load` would return as a new object."""
    if saving.is_saved_directory(directory):
        loaded = saving.load(directory, kind="network")
        if not model.built:  # a Sequential without an Input layer builds on its first input
            model.build(loaded.input_shape)
        model.set_weights(loaded.get_weights())
        return True
    if legacy_weights is not None and Path(legacy_weights).is_file():
        model.load_weights(legacy_weights)
        return True
    return False


class ArtifactCache:
    """Artifacts under ``root``, one file per (kind, key). ``root=None`` disables the cache (nothing is saved,
    every :meth:`get_or_build` builds); ``saved_only=True`` refuses to build (a report run that must not train).
    ``name(kind, key, suffix) -> str`` replaces the default file name (:meth:`default_name`), for a study whose
    artifacts already exist under names of its own."""

    def __init__(self, root=None, saved_only: bool = False, name: Optional[Callable[[str, object, str], str]] = None):
        self.root = None if root is None else Path(root)
        self.saved_only = saved_only
        self.name = name or self.default_name
        self._memory: Dict[Tuple[str, str], Tuple[object, object]] = {}  # (kind, key digest) -> (group, value)
        self._group = None

    @staticmethod
    def default_name(kind: str, key, suffix: str) -> str:
        """Readable kind prefix plus a hash of the whole key (any JSON-serialisable value)."""
        digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return f"{kind}-{digest}{suffix}"

    def path(self, kind: str, key, suffix: str) -> Optional[Path]:
        """The file for ``key`` under ``root`` (None without a root)."""
        if self.root is None:
            return None
        return self.root / self.name(kind, key, suffix)

    def checkpoint_dir(self, kind: str, key) -> Optional[str]:
        """The folder of a resumable training's checkpoints for ``key`` (e.g. ``NeuralEF.fit(checkpoint_dir=)``),
        as a string; None without a root (nothing is saved, the training is not resumable)."""
        folder = self.path(kind, key, "")
        return None if folder is None else str(folder)

    def in_memory(self, kind: str, key, build: Callable[[], object], group=None):
        """``build()``'s value for (``kind``, ``key``), built once and then held in memory, never saved: what the
        cells of one run share (a data set read once, the networks of the current seed). Without ``group`` it stays
        for the cache's life; with one (e.g. the seed), a call naming another group first drops every value held
        under a group, so only the current group's values stay in memory. Keys are JSON-serialisable values."""
        slot = (kind, json.dumps(key, sort_keys=True, default=str))
        if group is not None and group != self._group:
            self._memory = {held: entry for held, entry in self._memory.items() if entry[0] is None}
            self._group = group
        if slot not in self._memory:
            self._memory[slot] = (group, build())
        return self._memory[slot][1]

    def get_or_build(self, kind: str, key, suffix: str, build: Callable[[], object],
                     save: Callable[[object, Path], None], load: Callable[[Path], object]):
        """The artifact for ``key``: loaded when saved, else built, saved atomically and returned."""
        target = self.path(kind, key, suffix)
        if target is not None and target.exists():
            return load(target)
        if self.saved_only:
            raise ArtifactMissing(f"no saved {kind} for {key!r} under {self.root}")
        artifact = build()
        if target is not None:
            atomic_write(target, lambda temporary: save(artifact, temporary))
        return artifact

    def get_or_build_saved(self, kind: str, key, build: Callable[[], object], legacy: Optional[Callable[[], object]] = None):
        """The artifact for ``key``, saved the library's one way (:func:`activated_dgp.save`, a checkpoint directory
        ``<kind>-<digest>``): loaded when saved, else built and saved. ``legacy()`` may return an artifact cached
        under an older file layout (or None), which is then saved the new way instead of being rebuilt."""
        target = self.path(kind, key, "")
        if target is not None and saving.is_saved_directory(target):
            return saving.load(target)
        artifact = legacy() if legacy is not None else None
        if artifact is None:
            if self.saved_only:
                raise ArtifactMissing(f"no saved {kind} for {key!r} under {self.root}")
            artifact = build()
        if target is not None:
            saving.save(artifact, target)  # a new checkpoint, then the pointer: an interrupted save is never loaded
        return artifact


def default_root(options) -> Path:
    """A study's artifact folder: ``--artifacts``, else ``.cache/experiments/<the name of --out>``."""
    artifacts = getattr(options, "artifacts", None)
    return Path(artifacts) if artifacts else Path(".cache") / "experiments" / Path(options.out).name


class ArtifactMissing(LookupError):
    """A saved artifact was required (``saved_only``) but none exists."""
