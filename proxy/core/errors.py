"""Manifold's one exception hierarchy.

Every error Manifold raises on purpose derives from :class:`ManifoldError`. The tree is
split by *who is at fault*, because that decides what a client is told and what an
operator is paged for::

    ManifoldError
    ├── ConfigError                 the operator's config or policy file is wrong
    ├── ProtocolError               a client broke JSON-RPC / MCP (carries a JSON-RPC code)
    │   ├── ParseError              -32700: bytes that are not JSON
    │   ├── InvalidRequest          -32600: JSON that is not a valid JSON-RPC message
    │   │   └── LimitExceeded       -32600: past a configured limit; ``limit`` names it
    │   │       ├── MessageTooDeep  -32600: nested deeper than the depth limit
    │   │       └── MessageTooLarge -32600: a line, event or body past its size limit
    │   ├── MethodNotFound          -32601
    │   ├── NoClientToAsk           -32603: a server's request (sampling …) no one client can be named for
    │   ├── InvalidParams           -32602: unknown tool, bad cursor, missing name …
    │   │   ├── HiddenByPolicy      -32602: as unknown, to the client; "denied" to metrics
    │   │   └── InvalidRequestState -32602: a retry's requestState is forged, stale or not its own
    │   ├── ResourceNotFound        -32002: no server serves that URI (-32602 to 2026-07-28 callers)
    │   ├── RateLimited             -32029: a rate limit denied a request that is not a tool call
    │   ├── GuardrailDenied         -32030: a guardrail rule refused a prompt, resource or server request
    │   ├── HeaderMismatch          -32020: HTTP headers disagree with the body (2026-07-28)
    │   ├── MissingCapability       -32021: needs a client capability the request did not declare
    │   └── UnsupportedVersion      -32022: a 2026-07-28-style request at a revision not served
    ├── Unencodable                 a message Manifold built cannot be written as JSON (our bug)
    ├── RemoteError                 a server answered a request with a JSON-RPC error
    └── ServerUnavailable           a server cannot answer (not started, crashed, gone)
        ├── SignInNeeded            -32000: the caller has no credentials to this server yet
        ├── ServerTimeout           a server did not answer in time
        └── ServerProtocolError     -32603: a server sent what JSON-RPC / MCP does not allow
                                    (undecodable, past a limit, not an answer)

``ProtocolError`` names a client's own mistake: its code says which. The pure decoders in
``proxy.protocol`` raise it for any peer's bytes, since they cannot know whose they are; the
outbound transports, which do, turn it into ``ServerProtocolError`` at their edge, so that a
server's bad message fails the request it was for (or is dropped) and is never the client's fault.

Foreign exceptions (OSError, the HTTP clients', anyio's stream errors, orjson's) are converted into these
at the edge only. Exactly one place turns these into wire errors: ``proxy.observe.boundary.wire_error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.core.redaction import redact_text

__all__ = [
    "CONNECTION_CLOSED",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "MISSING_CAPABILITY",
    "PARSE_ERROR",
    "REQUEST_TIMEOUT",
    "ConfigError",
    "GuardrailDenied",
    "HeaderMismatch",
    "HiddenByPolicy",
    "InvalidParams",
    "InvalidRequest",
    "InvalidRequestState",
    "LimitExceeded",
    "ManifoldError",
    "MessageTooDeep",
    "MessageTooLarge",
    "MethodNotFound",
    "MissingCapability",
    "NoClientToAsk",
    "ParseError",
    "ProtocolError",
    "RATE_LIMITED",
    "GUARDRAIL_DENIED",
    "RESOURCE_NOT_FOUND",
    "RateLimited",
    "RemoteError",
    "ResourceNotFound",
    "ServerProtocolError",
    "ServerTimeout",
    "ServerUnavailable",
    "SignInNeeded",
    "UNSUPPORTED_VERSION",
    "Unencodable",
    "UnsupportedVersion",
    "request_id_of",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# MCP's implementation-defined codes, as the official SDKs use them.
CONNECTION_CLOSED: Final = -32000
REQUEST_TIMEOUT: Final = -32001
RESOURCE_NOT_FOUND: Final = -32002
RATE_LIMITED: Final = -32029  # Manifold's own: "429" in JSON-RPC's implementation-defined range
GUARDRAIL_DENIED: Final = -32030  # Manifold's own: a guardrail rule refused the content
# Revision 2026-07-28's own, from the range the spec reserves (-32020 … -32099): never invent one there.
HEADER_MISMATCH: Final = -32020
MISSING_CAPABILITY: Final = -32021
UNSUPPORTED_VERSION: Final = -32022


class ManifoldError(Exception):
    """Root of every error Manifold raises on purpose."""


class ConfigError(ManifoldError):
    """The operator's configuration is invalid; the message names file, field and value."""


class ProtocolError(ManifoldError):
    """A peer sent something JSON-RPC or MCP does not allow."""

    code: int = INVALID_REQUEST

    def __init__(self, message: str, *, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ParseError(ProtocolError):
    code = PARSE_ERROR


class InvalidRequest(ProtocolError):
    code = INVALID_REQUEST


class LimitExceeded(InvalidRequest):
    """A peer asked for more than a configured limit allows (``limits.<limit>`` in the config).

    The message says what was refused and names the limit with its value; ``data`` carries both
    (``{"limit": "max_batch", "max": 100}``) so that a client can tell limits apart, and the
    boundary counts it in ``manifold_limit_refusals_total{limit}``.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        maximum: float,
        data: dict[str, Any] | None = None,
        said: bool = False,
    ) -> None:
        shown = f"{maximum:g}" if isinstance(maximum, float) else str(maximum)
        # ``said``: the message already gives the value; it only needs the limit's name.
        suffix = f"(limits.{limit})" if said else f"(limits.{limit} is {shown})"
        super().__init__(f"{message} {suffix}", data={"limit": limit, "max": maximum, **(data or {})})
        self.limit = limit
        self.maximum = maximum


class MessageTooDeep(LimitExceeded):
    """A message nested deeper than the depth limit (every level an object or an array).

    ``request_id`` and ``method`` are the message's own, read from its top level where it could
    be decoded at all, so that the refusal can still go to the request it was (or answered).
    """

    def __init__(
        self, max_depth: int, *, request_id: int | str | None = None, method: str | None = None
    ) -> None:
        super().__init__(
            f"message nested deeper than {max_depth} levels",
            limit="max_depth",
            maximum=max_depth,
            data={"maxDepth": max_depth},
            said=True,
        )
        self.max_depth = max_depth
        self.request_id = request_id
        self.method = method


def request_id_of(exc: ProtocolError) -> int | str | None:
    """The id to answer a refused message under: a too-deep request's own, read from its top
    level; None otherwise (a response or notification is not answered, a broken one cannot be)."""
    if isinstance(exc, MessageTooDeep) and exc.method is not None:
        return exc.request_id
    return None


class MessageTooLarge(LimitExceeded):
    """A line, SSE event or body grew past its size limit; the message names the limit."""

    def __init__(self, what: str, *, limit: str, maximum: int) -> None:
        super().__init__(f"{what} exceeded {maximum} bytes", limit=limit, maximum=maximum, said=True)


class MethodNotFound(ProtocolError):
    code = METHOD_NOT_FOUND


class NoClientToAsk(ProtocolError):
    """A server asked a client something (sampling, elicitation, roots) on a connection that does
    not say which client request it is about, while no one client session can be named: none has
    a request in flight there, or several do. Told to the server (and through it, to the client
    whose call it was running): the method exists and nothing was malformed, so not -32601 or
    -32602, but -32603: Manifold could not deliver it. ``data`` says why, and the fix."""

    code = INTERNAL_ERROR


class InvalidParams(ProtocolError):
    code = INVALID_PARAMS


class HiddenByPolicy(InvalidParams):
    """The policy hides the subject: the client hears "unknown", exactly as for a missing one."""


class InvalidRequestState(InvalidParams):
    """A retry (2026-07-28 multi round-trip) carries a ``requestState`` Manifold did not issue, for
    another request or caller, or past its lifetime. Which of these it was is not said."""

    def __init__(self) -> None:
        super().__init__("Invalid or expired requestState", data={"reason": "invalid_request_state"})


class ResourceNotFound(ProtocolError):
    code = RESOURCE_NOT_FOUND

    @classmethod
    def of(cls, uri: str) -> ResourceNotFound:
        """The one answer for a URI no server has and for one the policy hides: alike, so that
        a caller cannot tell them apart."""
        return cls(f"resource not found: {uri}", data={"uri": uri})


class RateLimited(ProtocolError):
    code = RATE_LIMITED


class GuardrailDenied(ProtocolError):
    """A guardrail rule refused what was asked or answered (not a tool call: those get an
    ``isError`` result). The message names the rules and detectors, never a matched value."""

    code = GUARDRAIL_DENIED


class HeaderMismatch(ProtocolError):
    """An HTTP header (MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-*) is missing,
    repeated, malformed or disagrees with the request body."""

    code = HEADER_MISMATCH


class MissingCapability(ProtocolError):
    """Serving the request needs a client capability its ``_meta`` did not declare."""

    code = MISSING_CAPABILITY

    def __init__(self, message: str, *, required: Mapping[str, Any]) -> None:
        # A ClientCapabilities object ({"sampling": {}}), not a list of names: the schema says so.
        super().__init__(message, data={"requiredCapabilities": dict(required)})


class UnsupportedVersion(ProtocolError):
    """A request names a protocol revision Manifold does not serve; ``data`` lists those it does."""

    code = UNSUPPORTED_VERSION

    def __init__(self, requested: str, supported: Sequence[str]) -> None:
        super().__init__(
            "Unsupported protocol version", data={"supported": list(supported), "requested": requested}
        )


class Unencodable(ManifoldError):
    """A message Manifold was to send cannot be written as JSON (nested past what the encoder
    takes, or holding a value that is not JSON data). Everything Manifold decoded encodes again, so
    this is Manifold's own fault: nothing was sent, and the request it was for fails."""


class RemoteError(ManifoldError):
    """A server answered with a JSON-RPC error object; relayed to the client as is."""

    def __init__(self, server_id: str, error: dict[str, Any]) -> None:
        super().__init__(
            f"server {server_id!r} answered with error {error.get('code')}: {error.get('message')}"
        )
        self.server_id = server_id
        self.error = error


class ServerUnavailable(ManifoldError):
    """A configured server cannot take requests right now.

    ``reason`` is redacted here (:func:`proxy.core.redaction.redact_text`): it travels to clients, to
    ``/healthz``, to ``manifold tools`` and to the log, and is often built from a URL or a
    foreign exception's text that quotes one.
    """

    code: int = CONNECTION_CLOSED

    def __init__(self, server_id: str, reason: str) -> None:
        reason = redact_text(reason)
        super().__init__(f"server {server_id!r} is unavailable: {reason}")
        self.server_id = server_id
        self.reason = reason


class SignInNeeded(ServerUnavailable):
    """The caller has no credentials of its own to a server whose ``credentials.mode`` needs
    them (no secret stored for it, no token yet, or they were revoked). Not the server's fault
    and not a malformed request: the user must act. ``message`` says what to do; ``url`` is
    where to sign in, when Manifold has such a page."""

    code = CONNECTION_CLOSED

    def __init__(self, server_id: str, url: str | None, message: str) -> None:
        message = redact_text(message)
        ManifoldError.__init__(self, f"server {server_id!r} needs your own credentials: {message}")
        self.server_id = server_id
        self.url = url
        self.reason = message


class ServerTimeout(ServerUnavailable):
    """A server did not answer one request within its timeout."""

    code = REQUEST_TIMEOUT

    def __init__(self, server_id: str, method: str, seconds: float) -> None:
        ManifoldError.__init__(
            self, f"server {server_id!r} did not answer {method} within {seconds:g}s (request timeout)"
        )
        self.server_id = server_id
        self.reason = "timeout"


class ServerProtocolError(ServerUnavailable):
    """A server sent something JSON-RPC or MCP does not allow: bytes that are not JSON, a message
    past a size or depth limit, an HTTP answer that holds no response. The request it was for
    fails with this; the connection lives on."""

    code = INTERNAL_ERROR

    def __init__(self, server_id: str, reason: str) -> None:
        reason = redact_text(reason)
        ManifoldError.__init__(self, f"server {server_id!r} broke the protocol: {reason}")
        self.server_id = server_id
        self.reason = reason
