"""Revision 2026-07-28 on the wire, pure: the request envelope, its validation, the status table.

A stateless request carries all there is to know about its caller in ``params._meta`` (revision,
capabilities, client info, log level). On Streamable HTTP parts of the body are mirrored into
headers (``proxy.protocol.headers``), and a server must refuse a request whose headers and body
disagree. :func:`classify` runs that validation ladder (the spec's "Server Validation", in the
official SDK's order; the first failure wins) and returns the :class:`Envelope` or raises the
error the client is owed; ``headers.check_param_headers`` is its last rung, which needs the
called tool's ``inputSchema``.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from proxy.core.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_VERSION,
    HeaderMismatch,
    InvalidParams,
    UnsupportedVersion,
)
from proxy.protocol import versions
from proxy.protocol.headers import (
    METHOD_HEADER,
    NAME_HEADER,
    ROUTING_HEADERS,
    VERSION_HEADER,
    Headers,
    decode_header_value,
)
from proxy.protocol.jsonrpc import Message

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "HTTP_STATUS",
    "LOG_LEVELS",
    "LOG_LEVEL_KEY",
    "NAME_PARAMS",
    "PROTOCOL_VERSION_KEY",
    "REMOVED_METHODS",
    "SERVER_INFO_KEY",
    "Envelope",
    "classify",
    "has_envelope",
    "http_status",
    "strip_envelope",
    "unsupported",
]

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"  # a server's stamp in every result

# The body field Mcp-Name mirrors, by method (the tasks extension's methods: their task's id).
NAME_PARAMS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "tools/call": "name",
        "prompts/get": "name",
        "resources/read": "uri",
        **dict.fromkeys(("tasks/get", "tasks/update", "tasks/cancel"), "taskId"),
    }
)
# Handshake-era requests 2026-07-28 removed: unknown methods to a stateless caller (-32601, HTTP 404).
REMOVED_METHODS: Final = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
# RFC 5424 severities, as MCP's logging uses them, least severe first.
LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

# The HTTP status of a JSON-RPC error, for classifier and handler errors alike; any other code
# (-32603, a server's own) goes out with 200, as the spec assigns it none.
HTTP_STATUS: Final[Mapping[int, int]] = MappingProxyType(
    {
        PARSE_ERROR: 400,
        INVALID_REQUEST: 400,
        INVALID_PARAMS: 400,
        HEADER_MISMATCH: 400,
        MISSING_CAPABILITY: 400,
        UNSUPPORTED_VERSION: 400,
        METHOD_NOT_FOUND: 404,
    }
)


def http_status(message: Message) -> int:
    """The HTTP status a response goes out with: the table's for an error, else 200."""
    error = message.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return HTTP_STATUS.get(code, 200) if isinstance(code, int) else 200


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a stateless request says about its caller, for this request only."""

    protocol_version: str
    capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None  # log lines are sent only at or above it, and only if it is set


def has_envelope(message: Message) -> bool:
    """Whether a request carries a stateless ``_meta`` (a protocol revision in it)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


_ENVELOPE_KEYS: Final = frozenset(
    {PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, LOG_LEVEL_KEY}
)


def strip_envelope(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without the caller's envelope: what it says is about the caller and this hop, so
    it is never forwarded as is (a handshake-era server refuses it; a stateless one gets the
    envelope of whoever sends the request). The rest of ``_meta`` (progressToken, trace
    context) stays."""
    stripped = dict(params)
    meta = params.get("_meta")
    if isinstance(meta, Mapping):
        rest = {k: v for k, v in meta.items() if k not in _ENVELOPE_KEYS}
        if rest:
            stripped["_meta"] = rest
        else:
            del stripped["_meta"]
    return stripped


def unsupported(requested: str) -> UnsupportedVersion:
    """The error for a revision Manifold does not serve per request."""
    return UnsupportedVersion(requested, versions.ADVERTISED)


def classify(message: Message, headers: Headers | None) -> Envelope:
    """Validate a stateless request's envelope, and its headers against its body (``headers`` is
    ``None`` on transports without them, stdio). Rungs, the first failure wins:

    1. ``MCP-Protocol-Version``, ``Mcp-Method`` or ``Mcp-Name`` sent twice → -32020;
    2. ``params._meta`` not an object, or without ``protocolVersion`` / ``clientCapabilities``
       → -32602;
    3. a header absent or unlike the body (version, method, and the name or URI of
       ``tools/call``, ``prompts/get``, ``resources/read``) → -32020: before the version check,
       so a client that disagrees with itself is told that;
    4. the version not a string → -32602; not served → -32022 naming those that are;
    5. ``clientCapabilities`` not an object, or an unknown ``logLevel`` → -32602.

    Raises:
        HeaderMismatch, InvalidParams, UnsupportedVersion: as above.
    """
    if headers is not None:
        for name in ROUTING_HEADERS:
            if name in headers.repeated:
                raise HeaderMismatch(f"the {name} header appears more than once")
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        raise InvalidParams(
            f"params._meta must be an object carrying {PROTOCOL_VERSION_KEY} and {CLIENT_CAPABILITIES_KEY}"
        )
    missing = [key for key in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if key not in meta]
    if missing:
        raise InvalidParams(f"params._meta is missing the required envelope key(s): {', '.join(missing)}")
    version = meta[PROTOCOL_VERSION_KEY]
    if headers is not None:
        _check_routing_headers(message, version, headers)
    if not isinstance(version, str):
        raise InvalidParams(f"{PROTOCOL_VERSION_KEY} must be a string")
    if version not in versions.STATELESS:
        raise unsupported(version)
    capabilities = meta[CLIENT_CAPABILITIES_KEY]
    if not isinstance(capabilities, dict):
        raise InvalidParams(f"{CLIENT_CAPABILITIES_KEY} must be an object")
    level = meta.get(LOG_LEVEL_KEY)
    if level is not None and level not in LOG_LEVELS:
        raise InvalidParams(f"unknown {LOG_LEVEL_KEY} {level!r}; one of: {', '.join(LOG_LEVELS)}")
    info = meta.get(CLIENT_INFO_KEY)  # a SHOULD for clients: never required
    return Envelope(version, capabilities, info if isinstance(info, dict) else None, level)


def _check_routing_headers(message: Message, version: object, headers: Headers) -> None:
    header = headers.get(VERSION_HEADER)
    if header is None:
        raise HeaderMismatch("the MCP-Protocol-Version header is missing")
    if header != version:
        raise HeaderMismatch(
            "the MCP-Protocol-Version header does not match the request's "
            f"{PROTOCOL_VERSION_KEY} ({header!r} vs {version!r})"
        )
    method = message["method"]
    header = headers.get(METHOD_HEADER)
    if header is None:
        raise HeaderMismatch("the Mcp-Method header is missing")
    if header != method:
        raise HeaderMismatch(
            f"the Mcp-Method header does not match the request's method ({header!r} vs {method!r})"
        )
    key = NAME_PARAMS.get(method)
    body = message["params"].get(key) if key is not None else None
    if body is not None and decode_header_value(headers.get(NAME_HEADER)) != body:
        raise HeaderMismatch(
            "the Mcp-Name header is missing"
            if headers.get(NAME_HEADER) is None
            else f"the Mcp-Name header does not match the request's {key!r}"
        )
