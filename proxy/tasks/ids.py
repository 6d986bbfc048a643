"""Manifold's own task ids: what a client holds instead of a server's, pure.

A server's task id never reaches a client. The client is given an id Manifold issued, which names
a record in the task store (:mod:`proxy.tasks.store`: the server, the server's id, the owner) and
is sealed to whose it is, so that one that was guessed, altered, or replayed by another identity
or on another endpoint is refused here, before any store or server is asked.

Wire form: URL-safe base64 without padding of::

    version (1 byte) | key (16 random bytes) | scope tag (8 bytes) | MAC (16 bytes)

The scope tag is a keyed hash of the owner (its identity's fingerprint) and the endpoint, so the
scope is bound but not readable; the MAC is HMAC-SHA256 over everything before it, truncated.
Every refusal is the same :class:`~proxy.core.errors.InvalidParams` (``-32602``, "unknown
task"), whatever the reason: a client learns nothing from which check failed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Final

from proxy.core.errors import InvalidParams
from proxy.core.identity import Identity
from proxy.core.keys import fingerprint

__all__ = ["MAX_ID_CHARS", "TaskIds", "scope_of", "unknown_task"]

_VERSION: Final = 1
_KEY_BYTES: Final = 16
_TAG_BYTES: Final = 8
_MAC_BYTES: Final = 16
_RAW: Final = 1 + _KEY_BYTES + _TAG_BYTES + _MAC_BYTES
#: The length of every id Manifold issues; anything else is refused before decoding.
MAX_ID_CHARS: Final = (_RAW * 4 + 2) // 3


def unknown_task() -> InvalidParams:
    """The one answer to an id that is not a task of this caller's (spec: ``-32602``)."""
    return InvalidParams("Failed to retrieve task: Task not found", data={"reason": "unknown_task"})


def scope_of(identity: Identity, endpoint: str) -> str:
    """Whose a task is: the identity (by fingerprint) on one endpoint ("" for /mcp)."""
    return f"{fingerprint(identity)}\0{endpoint}"


class TaskIds:
    """Issues and opens task ids with one HMAC key (derived from the shared session secret, so
    every replica opens what any issued)."""

    __slots__ = ("_mac", "_scope")

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError(f"task id key must be at least 16 bytes, got {len(key)}")
        self._mac = hmac.new(key, b"manifold task mac\0", hashlib.sha256)
        self._scope = hmac.new(key, b"manifold task scope\0", hashlib.sha256)

    def _tag(self, scope: str) -> bytes:
        mac = self._scope.copy()
        mac.update(scope.encode("utf-8", "surrogatepass"))
        return mac.digest()[:_TAG_BYTES]

    def _sign(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(body)
        return mac.digest()[:_MAC_BYTES]

    def issue(self, scope: str, key: bytes | None = None) -> tuple[str, str]:
        """A fresh id for ``scope``: ``(id the client holds, store key)``. ``key``: 16 bytes to use
        instead of random ones (tests)."""
        key = secrets.token_bytes(_KEY_BYTES) if key is None else key
        if len(key) != _KEY_BYTES:
            raise ValueError(f"a task key is {_KEY_BYTES} bytes")
        body = bytes((_VERSION,)) + key + self._tag(scope)
        text = base64.urlsafe_b64encode(body + self._sign(body)).rstrip(b"=").decode("ascii")
        return text, key.hex()

    def open(self, task_id: object, scope: str) -> str:
        """The store key of ``task_id``, if this key issued it for ``scope``.

        Raises:
            InvalidParams: anything else (not a string, malformed, forged, another identity's or
                endpoint's): always :func:`unknown_task`.
        """
        if not isinstance(task_id, str) or len(task_id) != MAX_ID_CHARS or not task_id.isascii():
            raise unknown_task()
        try:
            raw = base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))
        except (binascii.Error, ValueError):
            raise unknown_task() from None
        # One id has one spelling: the decoder ignores the spare bits of the last character.
        if base64.urlsafe_b64encode(raw).rstrip(b"=") != task_id.encode("ascii"):
            raise unknown_task()
        if len(raw) != _RAW or raw[0] != _VERSION:
            raise unknown_task()
        body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._sign(body)):
            raise unknown_task()
        if not hmac.compare_digest(body[1 + _KEY_BYTES :], self._tag(scope)):
            raise unknown_task()
        return body[1 : 1 + _KEY_BYTES].hex()
