"""JSON-RPC 2.0 messages as MCP uses them, kept as plain dicts.

Messages stay opaque ``dict`` objects on the hot path: Manifold decodes each message once
(orjson), looks at a few keys, and re-encodes once. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import orjson

from proxy.errors import InvalidRequest, ParseError

__all__ = [
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


class MessageKind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


def decode(data: bytes | str) -> Any:
    """Decode JSON text.

    Raises:
        ParseError: ``data`` is not valid JSON (or not UTF-8).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc}") from None


def encode(message: Message | list[Message]) -> bytes:
    return orjson.dumps(message)


def parse(data: bytes | str) -> Message:
    """Decode and validate one JSON-RPC message.

    Raises:
        ParseError: not JSON.
        InvalidRequest: JSON, but not one JSON-RPC 2.0 message.
    """
    return validate(decode(data))


def _valid_id(value: Any) -> bool:
    # MCP forbids null ids; bool is an int subclass in Python but not a JSON-RPC id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def validate(obj: Any) -> Message:
    """Check that ``obj`` is one JSON-RPC 2.0 request, notification or response.

    Raises:
        InvalidRequest: naming what is wrong.
    """
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
