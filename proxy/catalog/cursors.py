"""Manifold's own opaque pagination cursors for ``tools/list`` and ``prompts/list``.

Manifold pages over its merged catalog itself (servers' cursors never reach a client). A
cursor says "continue at ``offset`` of catalog ``generation``, as seen through ``scope``", and
is signed so a client cannot forge one, and so replicas sharing the key accept each other's.

Wire form: URL-safe base64 without padding of::

    version (1 byte) | offset (4 bytes, big-endian) | scope tag (8 bytes)
    | generation length (1 byte) | generation (UTF-8) | MAC (16 bytes)

The scope tag is a keyed hash, so the scope (an identity's view) is bound but not readable.
The MAC is HMAC-SHA256 over everything before it, truncated to 16 bytes. Decoding checks, in
order: type, shape, canonical base64, MAC, scope, generation; each failure is an
:class:`~proxy.core.errors.InvalidParams` whose ``data["reason"]`` is one of ``"not_a_string"``,
``"malformed"``, ``"bad_mac"``, ``"stale"``, ``"wrong_scope"``, ``"past_end"``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import InvalidParams

__all__ = ["MIN_KEY_BYTES", "CursorCodec", "Page", "paginate"]

#: The shortest HMAC key accepted.
MIN_KEY_BYTES: Final = 16

_VERSION: Final = 1
_OFFSET_BYTES: Final = 4
_MAX_OFFSET: Final = 2 ** (8 * _OFFSET_BYTES) - 1
_SCOPE_TAG_BYTES: Final = 8
_MAC_BYTES: Final = 16
_MAX_GENERATION_BYTES: Final = 255
_HEADER_BYTES: Final = 1 + _OFFSET_BYTES + _SCOPE_TAG_BYTES + 1
_MIN_RAW: Final = _HEADER_BYTES + _MAC_BYTES
_MAX_RAW: Final = _MIN_RAW + _MAX_GENERATION_BYTES
# Longest base64 text a valid cursor can have; anything longer is rejected before decoding.
_MAX_TEXT: Final = (_MAX_RAW * 4 + 2) // 3

_RESTART: Final = "list again without a cursor to start from the beginning"


def _invalid(reason: str, message: str) -> InvalidParams:
    return InvalidParams(message, data={"reason": reason})


class CursorCodec:
    """Signs and checks pagination cursors with one HMAC key.

    Raises:
        ValueError: ``key`` is shorter than :data:`MIN_KEY_BYTES`.
    """

    __slots__ = ("_mac", "_scope_mac")

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"cursor key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}")
        # Keyed once; each use copies the prepared state (cheaper than re-keying per call).
        # Distinct prefixes keep the MAC and the scope tag from ever being interchangeable.
        self._mac = hmac.new(key, b"manifold cursor mac\0", hashlib.sha256)
        self._scope_mac = hmac.new(key, b"manifold cursor scope\0", hashlib.sha256)

    def _scope_tag(self, scope: str) -> bytes:
        mac = self._scope_mac.copy()
        mac.update(scope.encode("utf-8", "surrogatepass"))
        return mac.digest()[:_SCOPE_TAG_BYTES]

    def _sign(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(body)
        return mac.digest()[:_MAC_BYTES]

    def encode(self, generation: str, offset: int, scope: str = "") -> str:
        """A cursor for ``offset`` into catalog ``generation`` as seen through ``scope``.

        Raises:
            ValueError: ``offset`` is negative or above 2**32-1, or ``generation`` is longer
                than 255 bytes in UTF-8.
        """
        if not 0 <= offset <= _MAX_OFFSET:
            raise ValueError(f"cursor offset must be in 0..{_MAX_OFFSET}, got {offset}")
        gen = generation.encode("utf-8")
        if len(gen) > _MAX_GENERATION_BYTES:
            raise ValueError(f"generation must be at most {_MAX_GENERATION_BYTES} bytes, got {len(gen)}")
        body = b"".join(
            (
                bytes((_VERSION,)),
                offset.to_bytes(_OFFSET_BYTES, "big"),
                self._scope_tag(scope),
                bytes((len(gen),)),
                gen,
            )
        )
        return base64.urlsafe_b64encode(body + self._sign(body)).rstrip(b"=").decode("ascii")

    def decode(self, cursor: object, generation: str, scope: str = "") -> int:
        """The offset ``cursor`` points at, if it is genuine and still current.

        Whether the offset is inside the list is the caller's check (see :func:`paginate`).

        Raises:
            InvalidParams: the cursor is not a string, is malformed, fails verification
                (altered, or signed with another key), is stale (the catalog changed since it
                was issued: ``generation`` differs) or was issued for another ``scope``.
        """
        if not isinstance(cursor, str):
            raise _invalid("not_a_string", f"invalid cursor: expected a string, got {type(cursor).__name__}")
        raw = self._unwrap(cursor)
        body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._sign(body)):
            raise _invalid(
                "bad_mac",
                "invalid cursor: it fails verification (it was altered, or issued by a Manifold "
                f"with a different cursor key); {_RESTART}",
            )
        # The MAC vouches for the body, so its fields can be read without further checks.
        # Whose it is comes before how old it is: another endpoint's view (or another
        # identity's) has a generation of its own, and "the list changed" would be untrue.
        tag = body[1 + _OFFSET_BYTES : 1 + _OFFSET_BYTES + _SCOPE_TAG_BYTES]
        if not hmac.compare_digest(tag, self._scope_tag(scope)):
            raise _invalid(
                "wrong_scope",
                "invalid cursor: it belongs to another list: one of another endpoint, another "
                f"identity or another kind (a cursor is good only where it was issued); {_RESTART}",
            )
        gen_len = body[_HEADER_BYTES - 1]
        if body[_HEADER_BYTES : _HEADER_BYTES + gen_len] != generation.encode("utf-8"):
            raise _invalid(
                "stale", f"stale cursor: the list changed since this cursor was issued; {_RESTART}"
            )
        return int.from_bytes(body[1 : 1 + _OFFSET_BYTES], "big")

    @staticmethod
    def _unwrap(cursor: str) -> bytes:
        """The raw bytes of a cursor with a well-formed shape (MAC not yet checked)."""
        malformed = _invalid("malformed", f"invalid cursor: not a cursor this server issued; {_RESTART}")
        if not cursor or len(cursor) > _MAX_TEXT or not cursor.isascii():
            raise malformed
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raise malformed from None
        # The decoder skips stray characters and ignores the spare bits of the last one;
        # requiring the canonical spelling means one cursor has exactly one valid text.
        if base64.urlsafe_b64encode(raw).rstrip(b"=") != cursor.encode("ascii"):
            raise malformed
        if len(raw) < _MIN_RAW or raw[0] != _VERSION or len(raw) != _MIN_RAW + raw[_HEADER_BYTES - 1]:
            raise malformed
        return raw


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: the items, and the cursor for the next page (None on the last)."""

    items: tuple[Mapping[str, Any], ...]
    next_cursor: str | None


def paginate(
    catalog_items: Sequence[Mapping[str, Any]],
    *,
    cursor: object | None,
    page_size: int,
    codec: CursorCodec,
    generation: str,
    scope: str = "",
) -> Page:
    """The page of ``catalog_items`` that ``cursor`` asks for (the first page when None).

    A next cursor is issued only when items remain, so a client never sees an empty page
    followed by a cursor.

    Raises:
        InvalidParams: ``cursor`` is invalid (see :meth:`CursorCodec.decode`) or points past
            the end of ``catalog_items``.
        ValueError: ``page_size`` is below 1.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, got {page_size}")
    total = len(catalog_items)
    if cursor is None:
        offset = 0
    else:
        offset = codec.decode(cursor, generation, scope)
        # Issued cursors always point at a non-empty page, so offset == total is invalid too.
        if offset >= total:
            raise _invalid("past_end", f"invalid cursor: it points past the end of the list; {_RESTART}")
    end = offset + page_size
    next_cursor = codec.encode(generation, end, scope) if end < total else None
    return Page(items=tuple(catalog_items[offset:end]), next_cursor=next_cursor)
