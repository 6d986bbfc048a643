"""JSON-RPC 2.0 messages as MCP uses them, kept as plain dicts.

Messages stay opaque ``dict`` objects on the hot path: Manifold decodes each message once
(orjson), looks at a few keys, and re-encodes once. Nothing here does I/O.

Every message from a peer is decoded here, and here its nesting is bounded: orjson decodes 1024
levels but encodes only 254, so a message it decoded could otherwise fail to go out again, far
from the peer that sent it. The bound costs one C-speed pass over the bytes per message (about a
third of orjson's own time): a message with no more ``{`` and ``[`` than the limit cannot be
nested deeper, and only others are walked, a level at a time.

The same count bounds how many objects and arrays a client's message may hold (``max_containers``:
4 MiB of ``{},`` decodes to ~130 MB of Python objects). It is exact unless strings hold braces, so
only a message whose count exceeds the limit is looked at again, before anything is decoded: its
strings are cut out (one linear regular-expression pass, a few ms for 4 MiB) and the braces left
are counted exactly. Nothing over the limit is ever built.
"""

from __future__ import annotations

import enum
import re
from typing import Any, Final

import orjson

from proxy.core.errors import InvalidRequest, LimitExceeded, MessageTooDeep, ParseError, Unencodable

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_CEILING",
    "Message",
    "MessageKind",
    "RequestId",
    "decode",
    "encode",
    "error_response",
    "kind_of",
    "notification",
    "parse",
    "request",
    "result_response",
    "validate",
]

Message = dict[str, Any]
RequestId = int | str

_VERSION: Final = "2.0"

DEFAULT_MAX_DEPTH: Final = 64
# The most a configured limit may be: orjson encodes at most 254 levels, and Manifold wraps a
# peer's values a few levels deeper (a result in a response, a response in a batch).
MAX_DEPTH_CEILING: Final = 200
_CONTAINERS: Final = (dict, list)
# A JSON string, or an unterminated one up to the end: every quote starts a match, so a scan
# never fails and restarts (which would make it quadratic on ``"\\"\\"...``).
_STRING_BYTES: Final = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_STRING_TEXT: Final = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)


class MessageKind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


def decode(
    data: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH, max_containers: int | None = None
) -> Any:
    """Decode JSON text nested at most ``max_depth`` objects and arrays deep, holding at most
    ``max_containers`` of them (None: any number; servers' messages are bounded by size only).

    Raises:
        ParseError: ``data`` is not valid JSON (or not UTF-8).
        MessageTooDeep: nested deeper than ``max_depth``; it names the limit and, where the
            message could be decoded at all, its id and method.
        LimitExceeded: more than ``max_containers`` objects and arrays (``limits.max_containers``),
            refused before decoding.
    """
    opens = _opens(data)
    if max_containers is not None and opens > max_containers and _containers(data) > max_containers:
        raise LimitExceeded(
            "message holds too many objects and arrays", limit="max_containers", maximum=max_containers
        )
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        # orjson's own limit (1024) is far above any allowed one: that is too deep for us as well.
        if opens > max_depth and "depth" in str(exc):
            raise MessageTooDeep(max_depth) from None
        raise ParseError(f"invalid JSON: {exc}") from None
    if opens > max_depth and _deeper_than(value, max_depth):
        raise _too_deep(value, max_depth)
    return value


def _opens(data: bytes | str) -> int:
    """How many ``{`` and ``[`` ``data`` holds: an upper bound of its objects and arrays."""
    if isinstance(data, str):
        return data.count("{") + data.count("[")
    return len(data) - len(data.translate(None, b"{["))  # one pass, where two counts would take two


def _containers(data: bytes | str) -> int:
    """How many objects and arrays ``data`` holds, exactly if it is JSON: braces outside strings."""
    if isinstance(data, str):
        return _opens(_STRING_TEXT.sub("", data))
    return _opens(_STRING_BYTES.sub(b"", data))


def encode(message: Message | list[Message]) -> bytes:
    """Raises: Unencodable: ``message`` holds what JSON cannot say, or is nested too deep."""
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        raise Unencodable(f"cannot encode the message as JSON: {exc}") from None


def parse(data: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Message:
    """Decode and validate one JSON-RPC message.

    Raises:
        ParseError: not JSON.
        MessageTooDeep: nested deeper than ``max_depth``.
        InvalidRequest: JSON, but not one JSON-RPC 2.0 message.
    """
    return validate(decode(data, max_depth=max_depth))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` objects and arrays; a level at a time, so a
    deep message is refused after ``limit`` levels, without a recursion of its depth."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for container in level
            for child in (container.values() if type(container) is dict else container)
            if type(child) in _CONTAINERS
        ]
    return False


def _too_deep(value: Any, limit: int) -> MessageTooDeep:
    if not isinstance(value, dict):
        return MessageTooDeep(limit)
    request_id, method = value.get("id"), value.get("method")
    return MessageTooDeep(
        limit,
        request_id=request_id if _valid_id(request_id) else None,
        method=method if isinstance(method, str) else None,
    )


def _valid_id(value: Any) -> bool:
    # MCP forbids null ids; bool is an int subclass in Python but not a JSON-RPC id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def validate(obj: Any, *, max_depth: int | None = None) -> Message:
    """Check that ``obj`` is one JSON-RPC 2.0 request, notification or response.

    ``max_depth`` bounds its nesting as :func:`decode` does; leave it out for what :func:`decode`
    returned, which is bounded already.

    Raises:
        InvalidRequest: naming what is wrong.
        MessageTooDeep: nested deeper than ``max_depth``.
    """
    if max_depth is not None and _deeper_than(obj, max_depth):
        raise _too_deep(obj, max_depth)
    if not isinstance(obj, dict):
        raise InvalidRequest(f"a JSON-RPC message must be an object, got {type(obj).__name__}")
    if obj.get("jsonrpc") != _VERSION:
        raise InvalidRequest('"jsonrpc" must be exactly "2.0"')
    if "method" in obj:
        if not isinstance(obj["method"], str) or not obj["method"]:
            raise InvalidRequest('"method" must be a non-empty string')
        params = obj.get("params")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest('"params" must be an object in MCP')
        if "id" in obj and not _valid_id(obj["id"]):
            raise InvalidRequest('"id" must be a string or an integer')
        return obj
    # An error response may carry id null when the request could not be read at all.
    unreadable_request = "error" in obj and obj.get("id", 0) is None
    if not unreadable_request and not _valid_id(obj.get("id")):
        raise InvalidRequest('a response needs an "id" that is a string or an integer')
    has_result, has_error = "result" in obj, "error" in obj
    if has_result == has_error:
        raise InvalidRequest('a response needs exactly one of "result" and "error"')
    if has_error:
        err = obj["error"]
        if (
            not isinstance(err, dict)
            or not isinstance(err.get("code"), int)
            or not isinstance(err.get("message"), str)
        ):
            raise InvalidRequest('"error" must be an object with an integer "code" and a string "message"')
    return obj


def kind_of(message: Message) -> MessageKind:
    """Classify a message that :func:`validate` accepted."""
    if "method" in message:
        return MessageKind.REQUEST if "id" in message else MessageKind.NOTIFICATION
    return MessageKind.RESPONSE


def request(request_id: RequestId, method: str, params: dict[str, Any] | None = None) -> Message:
    message: Message = {"jsonrpc": _VERSION, "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> Message:
    message: Message = {"jsonrpc": _VERSION, "method": method}
    if params is not None:
        message["params"] = params
    return message


def result_response(request_id: RequestId, result: Any) -> Message:
    return {"jsonrpc": _VERSION, "id": request_id, "result": result}


def error_response(request_id: RequestId | None, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": _VERSION, "id": request_id, "error": error}
