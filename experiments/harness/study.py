"""The study shape and its runner: resume, progress and protocol versioning, done once for every study.

A study is a module with

* ``KEY`` — the record fields that identify a cell; optionally ``PROTOCOL`` (a
  :class:`~experiments.harness.protocol.Protocol`, or a function of the options returning one, that changes
  whenever the definition of a cell's computation changes: records of another protocol are never mixed in, those
  its carry-over rule accepts are carried over; a protocol string is still accepted) and ``upgrade`` (record ->
  record, applied to every record read, e.g. to name the protocol of a record made before the study declared one);
* ``cells(options) -> list[dict]`` — the cells to run, each holding the ``KEY`` fields;
* ``run_cell(cell, options, context) -> dict`` — run one cell and return its record (the cell's fields are added);
* ``report(records, options) -> None`` — write the study's pages from the records alone (no training);
* optionally ``add_options(parser)`` — the study's own command-line options;
* optionally ``OUT`` — the default ``--out`` folder when it is not ``docs/results/<study name>``;
* optionally ``artifact_cache(options) -> ArtifactCache`` — the study's own cache (its folder, file names or
  ``saved_only`` mode; default: ``--artifacts`` or ``.cache/experiments/<out name>``), handed to every cell in the
  run context;
* optionally ``prepare(options, context)`` — work on the existing records before the cells run (e.g. amending
  them from saved artifacts, training nothing).

:func:`run_study` asks the store which cells have no record, runs only those, appends each record the moment its
cell finishes (so an interrupted run loses no finished cell, and a rerun neither repeats nor duplicates one), and
then calls ``report`` with the store's records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
import sys
import time
from types import ModuleType
from typing import Callable, Dict, Optional, Union

from activated_dgp.data import resolve_data_dir
from experiments.harness import registry
from experiments.harness.artifacts import ArtifactCache, default_root
from experiments.harness.protocol import Protocol
from experiments.harness.store import PROTOCOL_FIELD, ResultStore, pending

REQUIRED = ("KEY", "cells", "run_cell", "report")


def check_study(study: ModuleType) -> ModuleType:
    missing = [name for name in REQUIRED if not hasattr(study, name)]
    if missing:
        raise ValueError(f"study {study.__name__} lacks {missing} (a study defines KEY, cells, run_cell, report)")
    return study


@dataclass
class Context:
    """What a cell may use besides its options: the artifact cache, the data directory and a progress printer."""

    artifacts: ArtifactCache
    data_dir: Optional[str] = None
    quiet: bool = False
    log: Callable[[str], None] = field(default=lambda message: print(message, file=sys.stderr, flush=True))

    def data(self, subdirectory: Optional[str] = None) -> Path:
        """The data directory (``--data-dir`` or ``$ADGP_DATA_DIR``) through the library's resolution."""
        return resolve_data_dir(self.data_dir, subdirectory)

    def progress(self, message: str) -> None:
        if not self.quiet:
            self.log(message)


def records_path(options) -> Path:
    return Path(options.out) / "records.jsonl"


def page_path(options) -> Path:
    """The study's results page: ``docs/results/<name>.md`` next to its folder ``docs/results/<name>/``."""
    out = Path(options.out)
    return out.parent / f"{out.name}.md"


def open_store(study: ModuleType, options) -> ResultStore:
    protocol = getattr(study, "PROTOCOL", None)
    if callable(protocol):  # a protocol that depends on the options (epochs, sizes, ...)
        protocol = protocol(options)
    return ResultStore(records_path(options), study.KEY, upgrade=getattr(study, "upgrade", None), protocol=protocol)


def load_records(study: str, records, protocol: Union[Protocol, str, None] = None, upgrade: bool = True) -> list:
    """The records of the registered study ``study`` in ``records`` (its ``records.jsonl`` or the folder holding it),
    read as that study reads them: one per cell of its ``KEY``, through its ``upgrade`` (unless ``upgrade=False``),
    only those of ``protocol`` when given. [] when there is no such file. This is how one study reads another's
    records, without importing the other's modules."""
    store = _study_store(study, records, protocol, upgrade)
    return store.records() if store is not None else []


def record_labels(study: str) -> Dict[str, str]:
    """The names the registered study ``study`` shows its records' kinds (models, methods) under, its ``LABELS``
    ({} when it declares none): how another study's page names that study's rows without importing its modules."""
    return dict(getattr(registry.study(study), "LABELS", {}))


def newest_protocol(study: str, records) -> Optional[str]:
    """The protocol of the last record in the registered study ``study``'s ``records`` (after its ``upgrade``): the
    newest run's, to read with :func:`load_records` when a page shows the latest run. None without records."""
    store = _study_store(study, records)
    every = store.all_records() if store is not None else []
    return every[-1].get(PROTOCOL_FIELD) if every else None


def _study_store(study: str, records, protocol: Union[Protocol, str, None] = None,
                 upgrade: bool = True) -> Optional[ResultStore]:
    """A store reading ``records`` (a ``records.jsonl`` or its folder) with ``study``'s key and upgrade; None when
    the file does not exist (nothing is created)."""
    owner = registry.study(study)
    path = Path(records)
    if path.is_dir() or path.suffix != ".jsonl":
        path = path / "records.jsonl"
    if not path.exists():
        return None
    return ResultStore(path, owner.KEY, upgrade=getattr(owner, "upgrade", None) if upgrade else None, protocol=protocol)


def make_context(options, study: Optional[ModuleType] = None) -> Context:
    if study is not None and hasattr(study, "artifact_cache"):
        cache = study.artifact_cache(options)
    else:
        cache = ArtifactCache(default_root(options))
    return Context(artifacts=cache, data_dir=options.data_dir, quiet=options.quiet)


def run_study(study: ModuleType, options, context: Optional[Context] = None) -> list:
    """Run the study's missing cells (none with ``options.report_only``), then write its report; returns the
    records the report was made from."""
    check_study(study)
    store = open_store(study, options)
    context = context or make_context(options, study)
    if not options.report_only:
        if hasattr(study, "prepare"):
            study.prepare(options, context)
        todo = pending(store, study.cells(options))
        context.progress(f"{study.__name__}: {len(todo)} cell(s) to run, records in {store.path}")
        for index, cell in enumerate(todo, 1):
            if index > 1 and store.done(**cell):  # finished meanwhile by another process appending to the same file
                continue
            start = time.perf_counter()
            record = {**study.run_cell(cell, options, context), **cell}
            store.append(record)
            context.progress(f"[{index}/{len(todo)}] {_describe(cell)} done in {time.perf_counter() - start:.1f} s")
    records = store.records()
    study.report(records, options)
    return records


def _describe(cell: dict) -> str:
    return " ".join(f"{name}={value}" for name, value in cell.items())
