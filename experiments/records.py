"""Resumable result records for the experiment runners: one JSON line per finished cell.

A *cell* is one unit of work identified by a key (e.g. dataset, method, split). A record is appended to a
JSON-lines file only once the cell has finished, with a single ``write`` of one line followed by
``flush``/``fsync``, so an interrupted run leaves either the whole record or nothing. A torn last line (the
process killed mid-write) is ignored on reading and overwritten cleanly on the next append. Runners ask
:meth:`ResultStore.done` before starting a cell, so a resumed run neither repeats nor duplicates finished cells.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple


class ResultStore:
    """:param upgrade: applied to every record read, e.g. to carry a record of an older protocol version
    over to the current one where its method did not change (the file itself is never rewritten)."""

    def __init__(self, path, key_fields: Sequence[str], upgrade: Optional[Callable[[Dict], Dict]] = None):
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self.upgrade = upgrade
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def key(self, record: Dict) -> Tuple:
        missing = [field for field in self.key_fields if field not in record]
        if missing:
            raise ValueError(f"record lacks key fields {missing}: {record!r}")
        return tuple(record[field] for field in self.key_fields)

    def records(self) -> List[Dict]:
        """All complete records, the first one per key (duplicates cannot arise through :meth:`append`)."""
        if not self.path.exists():
            return []
        seen, records = set(), []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from an interrupted write
            if self.upgrade is not None:
                record = self.upgrade(record)
            key = self.key(record)
            if key not in seen:
                seen.add(key)
                records.append(record)
        return records

    def done(self, **key) -> bool:
        wanted = tuple(key[field] for field in self.key_fields)
        return any(self.key(record) == wanted for record in self.records())

    def append(self, record: Dict) -> None:
        """Append one finished cell's record atomically (one line, flushed and fsynced)."""
        key = self.key(record)
        if any(self.key(existing) == key for existing in self.records()):
            raise ValueError(f"a record for {key} already exists in {self.path}")
        line = json.dumps(record, sort_keys=True) + "\n"
        self._drop_torn_tail()
        with open(self.path, "a") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def _drop_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(cut)


def pending(store: ResultStore, cells: Iterable[Dict]) -> List[Dict]:
    """The cells (dicts holding the key fields) that have no record yet, in order."""
    finished = {store.key(record) for record in store.records()}
    return [cell for cell in cells if store.key(cell) not in finished]


def portable_command(module: str, argv: Sequence[str]) -> str:
    """The command line to store in a record, without the paths of the machine that ran it: an absolute path
    argument (or ``--opt=/abs/path``) becomes ``DIR/<its last component>``, so records and the reports made from
    them name no machine's directories (rerun with your own ``DIR``)."""
    import shlex

    def strip(arg: str) -> str:
        option, equals, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if os.path.isabs(value):
            value = "DIR/" + Path(value).name
        return f"{option}{equals}{value}"

    return f"python -m {module} " + " ".join(shlex.quote(strip(a)) for a in argv)


def portable_path(path: str, data_dir: Optional[str]) -> str:
    """``path`` with the data directory's absolute prefix written as ``$ADGP_DATA_DIR``."""
    if data_dir:
        root = str(Path(data_dir).resolve())
        path = str(path).replace(root, "$ADGP_DATA_DIR")
    return str(path)
