"""The call path's stages, and the one place where exceptions become wire errors.

A ``tools/call`` runs through middleware, outermost first::

    errors → (metrics → audit → authorize → ratelimit: later stages) → router

Each stage is ``async (ctx, call_next) -> result``; :func:`compose` builds the chain once.
:func:`wire_error` is the errors stage: it is the only code that turns an exception into a
JSON-RPC error, and it wraps every inbound request, not only tool calls.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.catalog.merge import Entry
from proxy.errors import (
    INTERNAL_ERROR,
    ManifoldError,
    ProtocolError,
    RemoteError,
    ServerUnavailable,
)
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["CallContext", "Handler", "Middleware", "compose", "wire_error"]

logger = logging.getLogger("proxy.pipeline")


@dataclass(frozen=True, slots=True)
class CallContext:
    """One resolved ``tools/call``, immutable while it travels the pipeline."""

    session_id: str
    request_id: RequestId
    tool: Entry
    arguments: Mapping[str, Any]
    params: Mapping[str, Any]  # the client's params, as sent (name still namespaced)


Handler = Callable[[CallContext], Awaitable[Any]]
Middleware = Callable[[CallContext, Handler], Awaitable[Any]]


def compose(stages: Sequence[Middleware], endpoint: Handler) -> Handler:
    """Wrap ``endpoint`` in ``stages``; the first stage is the outermost."""
    handler = endpoint
    for stage in reversed(stages):
        handler = _bind(stage, handler)
    return handler


def _bind(stage: Middleware, call_next: Handler) -> Handler:
    async def run(ctx: CallContext) -> Any:
        return await stage(ctx, call_next)

    return run


def wire_error(exc: Exception, request_id: RequestId | None) -> Message:
    """The JSON-RPC error response for ``exc``. Cancellation never reaches here: it is re-raised.

    Who is at fault decides what the client learns: its own mistakes and a server's
    unavailability are explained; a server's JSON-RPC error is relayed as the server sent
    it; anything unexpected gets a generic message, with the details only in our log.
    """
    if isinstance(exc, ProtocolError):
        return jsonrpc.error_response(request_id, exc.code, exc.message, exc.data)
    if isinstance(exc, RemoteError):
        error = exc.error
        return jsonrpc.error_response(request_id, error["code"], error["message"], error.get("data"))
    if isinstance(exc, ServerUnavailable):
        return jsonrpc.error_response(request_id, exc.code, str(exc), {"server": exc.server_id})
    if isinstance(exc, ManifoldError):
        logger.error("request %r failed: %s", request_id, exc)
    else:
        logger.exception("request %r failed unexpectedly", request_id, exc_info=exc)
    return jsonrpc.error_response(request_id, INTERNAL_ERROR, "internal error in Manifold; see its log")
