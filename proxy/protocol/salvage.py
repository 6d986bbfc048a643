"""Which request a broken answer was for, read from its first and last bytes.

A server's line that cannot be decoded (past the size limit, not UTF-8, not JSON) still fails
the request it answers at once, if its id can be read. The line itself is never held whole: only
a bounded head and tail of it, so reading the id costs at most a few KiB however big the line.

SDKs put the id at either end: the Python SDK writes ``{"jsonrpc":"2.0","id":7,"result":…}``, the
TypeScript SDK ``{"result":…,"jsonrpc":"2.0","id":7}``. So the head is walked member by member
at the top level (strings and nested values skipped, escapes honoured) and the tail is read
backwards from its final ``}``. A head whose top level shows a ``"method"`` is a request or
notification, not an answer, and names no request of ours.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from proxy.protocol.jsonrpc import RequestId

__all__ = ["KEEP", "answer_id", "is_request"]

KEEP: Final = 4096  # bytes of a broken line's head, and of its tail, that are read for its id

_WS: Final = b" \t\r\n"
_ID_TOKEN: Final = rb'(-?(?:0|[1-9][0-9]{0,17})|"(?:[^"\\\x00-\x1f]|\\.){0,512}")'
_LAST_MEMBER_ID: Final = re.compile(
    rb'[{,][ \t\r\n]*"id"[ \t\r\n]*:[ \t\r\n]*' + _ID_TOKEN + rb"[ \t\r\n]*\}[ \t\r\n]*\Z"
)
_FIRST_TOKEN: Final = re.compile(_ID_TOKEN)


def answer_id(head: bytes, tail: bytes) -> RequestId | None:
    """The id of the answer whose line starts with ``head`` and ends with ``tail``; None where
    they do not tell, or where the line is a request or notification."""
    found, is_request = _from_head(head)
    if is_request:
        return None
    if found is not None:
        return found
    last = _LAST_MEMBER_ID.search(tail[-KEEP:])
    return _decoded(last.group(1)) if last else None


def is_request(head: bytes) -> bool:
    """Whether a line starting with ``head`` shows a top-level ``method``: a request or a
    notification of the server's own, which no request of ours waits for."""
    return _from_head(head)[1]


def _decoded(token: bytes) -> RequestId | None:
    try:
        value = orjson.loads(token)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _from_head(head: bytes) -> tuple[RequestId | None, bool]:
    """The top-level ``id`` among the members ``head`` holds whole, and whether one of them is a
    ``method``. Stops where the head ends, or at anything that is not JSON."""
    found: RequestId | None = None
    data = head[:KEEP]
    at = _skip_ws(data, 0)
    if data[at : at + 1] != b"{":
        return None, False
    at += 1
    while True:
        at = _skip_ws(data, at)
        key_end = _string_end(data, at)
        if key_end is None:
            return found, False
        key = data[at + 1 : key_end - 1]
        at = _skip_ws(data, key_end)
        if data[at : at + 1] != b":":
            return found, False
        at = _skip_ws(data, at + 1)
        if key == b"method":
            return None, True
        if key == b"id":
            token = _FIRST_TOKEN.match(data, at)
            if token is None:
                return found, False
            found = _decoded(token.group(1))
        value_end = _value_end(data, at)
        if value_end is None:
            return found, False
        at = _skip_ws(data, value_end)
        if data[at : at + 1] != b",":
            return found, False
        at += 1


def _skip_ws(data: bytes, at: int) -> int:
    while at < len(data) and data[at] in _WS:
        at += 1
    return at


def _string_end(data: bytes, at: int) -> int | None:
    """Just past the string starting at ``at``; None if none starts there or it runs off."""
    if data[at : at + 1] != b'"':
        return None
    at += 1
    while at < len(data):
        byte = data[at]
        if byte == 0x5C:  # a backslash: the next byte is escaped, whatever it is
            at += 2
        elif byte == 0x22:
            return at + 1
        else:
            at += 1
    return None


def _value_end(data: bytes, at: int) -> int | None:
    """Just past the JSON value starting at ``at``; None if it runs off the end of ``data``."""
    if data[at : at + 1] == b'"':
        return _string_end(data, at)
    depth = 0
    while at < len(data):
        byte = data[at]
        if byte == 0x22:
            end = _string_end(data, at)
            if end is None:
                return None
            at = end
            continue
        if byte in b"{[":
            depth += 1
        elif byte in b"}]":
            if depth == 0:
                return at  # the end of the object that holds a scalar
            depth -= 1
            if depth == 0:
                return at + 1
        elif byte == 0x2C and depth == 0:  # a comma after a scalar
            return at
        at += 1
    return None
