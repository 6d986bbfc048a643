"""The approved definitions of pinned tools, kept beside the pins so that a question about a
changed tool can say what changed, after a restart too (``pins.mode: confirm``).

The pins file keeps only hashes. Beside it, ``<pins path>.definitions.json`` keeps, per pin key,
the pinned fields (``title``, ``description``, ``inputSchema``, ``outputSchema``,
``annotations``) of the definition last seen matching its pin, with that hash::

    {"version": 1, "definitions": {"github/create_issue": {"hash": "sha256:…", "fields": {…}}}}

A stored definition is used only while its hash is the pin's (:meth:`Definitions.approved`):
after ``manifold pins accept`` the old text is no longer the approved one, and the next listing
stores the new. Bounded: at most :data:`MAX_DEFINITIONS` tools, each at most
:data:`MAX_DEFINITION_BYTES` of JSON, :data:`MAX_TOTAL_BYTES` in all; past a bound a definition is
not kept (its question then says the approved text is not known). The file is a cache: one that
cannot be read is logged and started afresh, never a reason to refuse to start.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from typing import Any, Final

import orjson

from proxy.core.errors import ConfigError
from proxy.core.files import read_bytes, write_atomically
from proxy.policy.pins import PINNED_FIELDS

__all__ = [
    "MAX_DEFINITIONS",
    "MAX_DEFINITION_BYTES",
    "MAX_TOTAL_BYTES",
    "Definitions",
    "definitions_path",
    "fields_hash",
    "save_definitions",
]

logger = logging.getLogger("proxy.enforce.pin_definitions")

MAX_DEFINITIONS: Final = 4096
MAX_DEFINITION_BYTES: Final = 64 * 1024
MAX_TOTAL_BYTES: Final = 16 * 1024 * 1024
_VERSION: Final = 1


def definitions_path(pins_path: str | os.PathLike[str]) -> str:
    return os.fspath(pins_path) + ".definitions.json"


def fields_hash(fields: Mapping[str, Any], original_name: str) -> str:
    """The pin of a tool with these pinned fields (as :func:`proxy.policy.pins.tool_hash`)."""
    pinned = {field: fields[field] for field in PINNED_FIELDS if field in fields}
    pinned["name"] = original_name
    return "sha256:" + hashlib.sha256(orjson.dumps(pinned, option=orjson.OPT_SORT_KEYS)).hexdigest()


def save_definitions(path: str, stored: Mapping[str, str]) -> None:
    """Write the stored definitions (each already encoded JSON) atomically.

    Raises:
        OSError: the file cannot be written; it is then unchanged.
    """
    body = b'{"version":1,"definitions":{' + b",".join(
        orjson.dumps(key) + b":" + value.encode() for key, value in sorted(stored.items())
    )
    write_atomically(path, body + b"}}\n")


class Definitions:
    """The stored definitions, by pin key, each as its encoded JSON (``{"hash", "fields"}``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stored: dict[str, str] = {}
        self._size = 0

    def load(self) -> None:
        """Read the file (a missing one is empty; a bad one is logged and ignored)."""
        try:
            raw = read_bytes(self.path, what="the pinned definitions")
            data = orjson.loads(raw) if raw is not None else {"version": _VERSION, "definitions": {}}
        except (ConfigError, orjson.JSONDecodeError) as exc:
            logger.warning("pinned definitions not read, starting afresh: %s", exc)
            return
        found = data.get("definitions") if isinstance(data, dict) else None
        if not isinstance(found, dict) or data.get("version") != _VERSION:
            logger.warning("pinned definitions not read, starting afresh: %s is not such a file", self.path)
            return
        self.stored, self._size = {}, 0
        for key, record in found.items():
            if isinstance(key, str) and isinstance(record, dict):
                self._put(key, orjson.dumps(record).decode())

    def approved(self, key: str, pinned: str, original_name: str) -> dict[str, Any] | None:
        """The pinned fields stored for ``key`` if they are the ones pinned (hash ``pinned``)."""
        encoded = self.stored.get(key)
        if encoded is None:
            return None
        record = orjson.loads(encoded)
        fields = record.get("fields")
        if record.get("hash") != pinned or not isinstance(fields, dict):
            return None
        return fields if fields_hash(fields, original_name) == pinned else None

    def keep(self, key: str, pinned: str, fields: Mapping[str, Any]) -> bool:
        """Store ``fields`` (hash ``pinned``) for ``key``; True when that changed what is stored."""
        encoded = orjson.dumps({"hash": pinned, "fields": dict(fields)}, option=orjson.OPT_SORT_KEYS).decode()
        if self.stored.get(key) == encoded:
            return False
        return self._put(key, encoded)

    def _put(self, key: str, encoded: str) -> bool:
        old = self.stored.get(key)
        size = self._size - (len(old) if old is not None else 0) + len(encoded)
        fits = len(encoded) <= MAX_DEFINITION_BYTES and size <= MAX_TOTAL_BYTES
        if not fits or (old is None and len(self.stored) >= MAX_DEFINITIONS):
            return False
        self.stored[key], self._size = encoded, size
        return True
