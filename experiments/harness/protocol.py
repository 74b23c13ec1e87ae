"""A study's protocol: what defines the computation of its cells, and the one rule that carries records over.

A :class:`Protocol` is a ``version`` (changed whenever the code of a cell's computation changes in a way no option
shows) and ``settings``, every option a cell's numbers depend on (JSON values). Its :attr:`~Protocol.key`,
``<version>:<digest>``, is stamped into every record by the store (:class:`experiments.harness.store.ResultStore`),
with the settings the record depends on (``protocol_settings``), so that a record says under what it was made. The
digest is the first 12 hex digits of the SHA-256 of the sorted JSON of ``{"settings": …, "version": …}``: the same
protocol gives the same key whatever the order its settings were written in, on every machine and Python version.

A study whose cells are methods fitted under one protocol (a study keyed by ``method``) may give each method its own
settings, ``methods={name: settings}`` (the method's own version among them when its code changes). The digest covers
them all; a record depends only on the shared settings and its own method's. **The carry-over rule**: a record made
under another key counts under this protocol (:meth:`Protocol.carry`, applied by the store on reading) when it was
made under the same version with the same settings for its own method: a change to one method's settings reruns
that method's cells only. Every other record is kept in the file, apart, never mixed into a table.

Records made before a study declared its protocol this way carry a protocol string of their own (or none); the
study's ``upgrade`` names the :class:`Protocol` they were made under with :func:`relabel` (:func:`from_legacy`
reads the common ``v<version>:<prefix><value>:…`` form).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

PROTOCOL_FIELD = "protocol"
SETTINGS_FIELD = "protocol_settings"
CARRIED_FIELD = "carried_from"
#: The fields the store adds to a record about its protocol (left out where a record's own numbers are shown).
PROTOCOL_FIELDS = (PROTOCOL_FIELD, SETTINGS_FIELD, CARRIED_FIELD)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Protocol:
    """:param version: the version of the cells' computation (a short string, e.g. ``"2"``; no ``:``).
    :param settings: every option the numbers of every cell depend on, as JSON values (``{"num_points": 500}``).
    :param methods: optionally, each method's own settings (``{"nn": {"steps": 2000}}``), read from a record's
        ``method_field``; a record of a method not listed depends on the shared settings alone."""

    version: str
    settings: Mapping = field(default_factory=dict)
    methods: Mapping = field(default_factory=dict)
    method_field: str = "method"

    def __post_init__(self):
        if not isinstance(self.version, str) or not self.version or ":" in self.version:
            raise ValueError(f"a protocol version is a non-empty string without ':', not {self.version!r}")
        for name, value in (("settings", self.settings), ("methods", self.methods)):
            if not isinstance(value, Mapping):
                raise ValueError(f"a protocol's {name} is a dict, not {type(value).__name__}")
            try:
                json.dumps(value, sort_keys=True)
            except (TypeError, ValueError) as error:
                raise ValueError(f"a protocol's {name} must be JSON values: {error}") from None

    @property
    def digest(self) -> str:
        """The first 12 hex digits of the SHA-256 of the sorted JSON of the version and settings (and the methods'
        settings, when given)."""
        payload = {"settings": self.settings, "version": self.version}
        if self.methods:
            payload["methods"] = self.methods
        return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:12]

    @property
    def key(self) -> str:
        """The value of a record's ``protocol`` field: ``<version>:<digest>``."""
        return f"{self.version}:{self.digest}"

    def record_settings(self, record: Mapping) -> Dict:
        """The settings ``record``'s numbers depend on: the shared settings, and (with ``methods``) its own method's
        under ``"method"``."""
        if not self.methods:
            return dict(self.settings)
        return {"shared": dict(self.settings), "method": self.methods.get(record.get(self.method_field))}

    def stamp(self, record: Mapping) -> Dict:
        """``record`` marked as made under this protocol (its key and the settings it depends on)."""
        return {**record, PROTOCOL_FIELD: self.key, SETTINGS_FIELD: self.record_settings(record)}

    def carries(self, record: Mapping) -> bool:
        """Whether ``record`` counts under this protocol: made under it, or under the same version with the same
        settings for its own method (the carry-over rule)."""
        key = record.get(PROTOCOL_FIELD)
        if key == self.key:
            return True
        if not isinstance(key, str) or SETTINGS_FIELD not in record:
            return False
        version = key.rpartition(":")[0]
        return version == self.version and _canonical(record[SETTINGS_FIELD]) == _canonical(self.record_settings(record))

    def carry(self, record: Mapping) -> Dict:
        """``record`` under this protocol's key when :meth:`carries` holds for another key (``carried_from`` names
        the key it was made under); else unchanged."""
        key = record.get(PROTOCOL_FIELD)
        if key == self.key or not self.carries(record):
            return dict(record)
        return {**record, PROTOCOL_FIELD: self.key, CARRIED_FIELD: key}


def relabel(record: Mapping, made_under: Optional[Protocol]) -> Dict:
    """``record`` stamped with ``made_under``, the :class:`Protocol` a study's ``upgrade`` found it was made under
    (from the protocol string, or the lack of one, of a record made before the study declared a
    :class:`Protocol`); unchanged when ``made_under`` is None or the record is stamped already."""
    if made_under is None or SETTINGS_FIELD in record:
        return dict(record)
    return made_under.stamp(record)


def from_legacy(text, fields: Sequence[Tuple[str, str, Callable[[str], object]]]) -> Optional[Protocol]:
    """The :class:`Protocol` named by an older protocol string ``v<version>:<prefix><value>:…``, ``fields`` giving
    each setting's (name, prefix, parse) in the string's order, e.g. ``("num_points", "n", int)`` for ``n500``;
    None for anything of another form."""
    if not isinstance(text, str):
        return None
    version, *parts = text.split(":")
    if (not version.startswith("v") or len(version) < 2 or len(parts) != len(fields)
            or not all(part.startswith(prefix) for part, (_, prefix, _) in zip(parts, fields))):
        return None
    try:
        settings = {name: parse(part[len(prefix):]) for part, (name, prefix, parse) in zip(parts, fields)}
    except ValueError:
        return None
    return Protocol(version[1:], settings)


def integers(text: str) -> list:
    """``"8-16-32"`` → [8, 16, 32]: a list setting in an older protocol string."""
    return [int(value) for value in text.split("-")]


def key_of(protocol) -> Optional[str]:
    """The protocol string of ``protocol``: a :class:`Protocol`'s key, or a string (or None) as it is."""
    return protocol.key if isinstance(protocol, Protocol) else protocol


def config_digest(config: Mapping) -> str:
    """The first 12 hex digits of the SHA-1 of a configuration's sorted JSON: the ``v1:<digest>`` protocol strings of
    studies that stamped their configuration's digest before they declared a :class:`Protocol`."""
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def relabel_config_digest(record: Mapping) -> Dict:
    """``record`` relabelled as made under ``Protocol("1", its configuration)`` when it carries ``v1:<the digest of
    its stored configuration>`` (:func:`config_digest`); unchanged otherwise."""
    config = record.get("config")
    made_under = isinstance(config, dict) and record.get("protocol") == f"v1:{config_digest(config)}"
    return relabel(record, Protocol("1", config) if made_under else None)
