"""Resumable, versioned result records: one JSON line per finished cell.

A *cell* is one unit of work identified by a key (e.g. dataset, method, split). A record is appended to a
JSON-lines file only once the cell has finished, with a single ``write`` of one line followed by
``flush``/``fsync``, so an interrupted run leaves either the whole record or nothing. A torn last line (the
process killed mid-write) is ignored on reading and overwritten cleanly on the next append.

Protocol versioning: a store opened with ``protocol=P`` (a :class:`experiments.harness.protocol.Protocol`, or a
string) stamps ``P`` on every record it appends (a :class:`~experiments.harness.protocol.Protocol`: its key and the
settings the record depends on) and sees only records of ``P`` (after ``upgrade`` and, for a
:class:`~experiments.harness.protocol.Protocol`, its carry-over rule), so records made under another protocol are
never mixed into a table, never count as done and are never overwritten — the file keeps them for the record.

Shards: a records file grows to at most ``shard_bytes`` (:data:`SHARD_BYTES`, below the repository's 1 MiB limit
on a tracked file); the record that would pass it starts the next shard, ``records.2.jsonl``, then
``records.3.jsonl`` and so on, next to ``records.jsonl``. Reading goes through every shard in order
(:func:`record_files`), so a store reads the same records however they are cut.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import shlex
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from experiments.harness.protocol import PROTOCOL_FIELD, Protocol, key_of

#: the size a records file grows to before the next record starts a new shard (module docstring)
SHARD_BYTES = 900 * 1024


def record_files(path) -> List[Path]:
    """The records file ``path`` (``<stem>.jsonl``) and its existing shards ``<stem>.2.jsonl``, ``<stem>.3.jsonl``, …
    in order (the shards' numbers follow each other from 2; a gap ends the list)."""
    path = Path(path)
    files = [path] if path.exists() else []
    number = 2
    while (shard := path.with_name(f"{path.stem}.{number}{path.suffix}")).exists():
        files.append(shard)
        number += 1
    return files


class ResultStore:
    """:param key_fields: the record fields that identify a cell.
    :param protocol: when given, the protocol stamped on appended records (a
        :class:`~experiments.harness.protocol.Protocol`, or a protocol string); records of other protocols are
        invisible to :meth:`records`, :meth:`done` and :func:`pending`. A
        :class:`~experiments.harness.protocol.Protocol` also carries records of another key over where its
        carry-over rule holds (:meth:`~experiments.harness.protocol.Protocol.carry`).
    :param upgrade: applied to every record read first, e.g. to name the protocol a record made before its study
        declared one was made under (the file itself is never rewritten).
    :param shard_bytes: the size a records file grows to before the next record starts a new shard."""

    def __init__(self, path, key_fields: Sequence[str], upgrade: Optional[Callable[[Dict], Dict]] = None,
                 protocol: Union[Protocol, str, None] = None, shard_bytes: int = SHARD_BYTES):
        self.path = Path(path)
        if shard_bytes <= 0:
            raise ValueError(f"shard_bytes must be positive, got {shard_bytes!r}")
        self.shard_bytes = shard_bytes
        self.key_fields = tuple(key_fields)
        if not self.key_fields:
            raise ValueError("a ResultStore needs at least one key field")
        self.upgrade = upgrade
        self.declared = protocol if isinstance(protocol, Protocol) else None
        self.protocol = key_of(protocol)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def key(self, record: Dict) -> Tuple:
        missing = [field for field in self.key_fields if field not in record]
        if missing:
            raise ValueError(f"record lacks key fields {missing}: {record!r}")
        return tuple(_hashable(record[field]) for field in self.key_fields)

    def all_records(self) -> List[Dict]:
        """Every complete record in the file and its shards, of any protocol (upgraded, first one per protocol and key)."""
        seen, records = set(), []
        for line in (line for file in record_files(self.path) for line in file.read_text().splitlines()):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from an interrupted write
            if self.upgrade is not None:
                record = self.upgrade(record)
            if self.declared is not None:
                record = self.declared.carry(record)
            identity = (record.get(PROTOCOL_FIELD), self.key(record))
            if identity not in seen:
                seen.add(identity)
                records.append(record)
        return records

    def records(self) -> List[Dict]:
        """The complete records of this store's protocol (all records when it has none), one per key."""
        if self.protocol is None:
            return _first_per_key(self, self.all_records())
        return [r for r in self.all_records() if r.get(PROTOCOL_FIELD) == self.protocol]

    def done(self, **key) -> bool:
        wanted = self.key(key)
        return any(self.key(record) == wanted for record in self.records())

    def append(self, record: Dict) -> Dict:
        """Append one finished cell's record atomically (one line, flushed and fsynced); returns it as stored."""
        if self.protocol is not None:
            stamped = record.get(PROTOCOL_FIELD, self.protocol)
            if stamped != self.protocol:
                raise ValueError(f"record of protocol {stamped!r} appended to a store of protocol {self.protocol!r}")
            record = self.declared.stamp(record) if self.declared is not None else {**record, PROTOCOL_FIELD: self.protocol}
        key = self.key(record)
        if any(self.key(existing) == key for existing in self.records()):
            raise ValueError(f"a record for {key} already exists in {self.path}")
        line = json.dumps(record, sort_keys=True) + "\n"
        target = self._drop_torn_tail()
        if target.exists() and target.stat().st_size > 0 and target.stat().st_size + len(line.encode()) > self.shard_bytes:
            number = len(record_files(self.path)) + 1
            target = self.path.with_name(f"{self.path.stem}.{number}{self.path.suffix}")
        with open(target, "a") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        return record

    def _drop_torn_tail(self) -> Path:
        """Cut a torn last line off the last shard; returns that shard (the records file when there is none)."""
        files = record_files(self.path)
        if not files:
            return self.path
        data = files[-1].read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with open(files[-1], "r+b") as handle:
                handle.truncate(cut)
        return files[-1]


def _hashable(value):
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _first_per_key(store: ResultStore, records: List[Dict]) -> List[Dict]:
    seen, kept = set(), []
    for record in records:
        key = store.key(record)
        if key not in seen:
            seen.add(key)
            kept.append(record)
    return kept


def pending(store: ResultStore, cells: Iterable[Dict]) -> List[Dict]:
    """The cells (dicts holding the key fields) that have no record of the store's protocol yet, in order."""
    finished = {store.key(record) for record in store.records()}
    return [cell for cell in cells if store.key(cell) not in finished]


def portable_command(module: str, argv: Sequence[str]) -> str:
    """The command line to store in a record, without the paths of the machine that ran it: an absolute path
    argument (or ``--opt=/abs/path``) becomes ``DIR/<its last component>``, so records and the reports made from
    them name no machine's directories (rerun with your own ``DIR``)."""

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
