"""The fault boundary: the one place an exception becomes a JSON-RPC error, and where failures
nobody foresaw are caught, counted and logged once.

Who is at fault decides what the peer learns (:mod:`proxy.core.errors` draws the tree):

- the client broke it (:class:`~proxy.core.errors.ProtocolError`): its code and message, so it can
  mend the request;
- a server broke it or is gone (:class:`~proxy.core.errors.RemoteError` relayed as the server sent
  it, :class:`~proxy.core.errors.ServerUnavailable` explained with the server's id);
- we broke it (anything else): a generic message; the details, with the request's context, go
  to the log once and ``manifold_internal_errors_total{where}`` counts it.

Cancellation is never answered: it is re-raised by everything here. Each request is answered
inside its boundary, encoding included, so a result that cannot be encoded fails that request
only (:meth:`Boundary.respond`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import anyio
import orjson

from proxy.core.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    LimitExceeded,
    ManifoldError,
    ProtocolError,
    RemoteError,
    ServerUnavailable,
    SignInNeeded,
)
from proxy.observe.metrics import Where
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["Boundary", "Counts", "supervised", "wire_error"]

logger = logging.getLogger("proxy.observe.boundary")

_INTERNAL: Final = "internal error in Manifold; see its log"
_RESTART_AFTER: Final = 1.0  # seconds before a background task that failed runs again


class Counts(Protocol):
    def internal_error(self, where: Where) -> None: ...

    def limit_refused(self, limit: str) -> None: ...


class _Session(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def stateless(self) -> bool: ...


def wire_error(exc: Exception, request_id: RequestId | None, *, stateless: bool = False) -> Message:
    """The JSON-RPC error response for ``exc``, in the shape of the peer's era.

    ``stateless``: the peer speaks revision 2026-07-28, which says -32602 (not the handshake
    era's -32002) for an unknown resource, whoever noticed it, and leaves an unreadable id out
    rather than sending ``null``. An unexpected ``exc`` gets the generic message only; the
    caller logs it (:class:`Boundary` does).
    """
    if isinstance(exc, ProtocolError):
        response = jsonrpc.error_response(request_id, _era_code(exc.code, stateless), exc.message, exc.data)
    elif isinstance(exc, RemoteError):
        error = exc.error
        response = jsonrpc.error_response(
            request_id, _era_code(error["code"], stateless), error["message"], error.get("data")
        )
    elif isinstance(exc, SignInNeeded):
        data = {"server": exc.server_id, "reason": "sign_in_needed"}
        if exc.url is not None:
            data["url"] = exc.url
        response = jsonrpc.error_response(request_id, exc.code, str(exc), data)
    elif isinstance(exc, ServerUnavailable):
        response = jsonrpc.error_response(request_id, exc.code, str(exc), {"server": exc.server_id})
    else:
        response = jsonrpc.error_response(request_id, INTERNAL_ERROR, _INTERNAL)
    if stateless and request_id is None:
        del response["id"]
    return response


def _era_code(code: int, stateless: bool) -> int:
    return INVALID_PARAMS if stateless and code == RESOURCE_NOT_FOUND else code


def _ours(exc: Exception) -> bool:
    """Whether ``exc`` is a failure of Manifold's own (a bug, or an input nobody foresaw)."""
    return not isinstance(exc, ManifoldError)


class Boundary:
    """Answers each request, and is where its failures end (see the module docstring)."""

    def __init__(self, counts: Counts) -> None:
        self._counts = counts

    def respond(self, request_id: RequestId, result: Any, *, session: _Session) -> Message:
        """The response carrying ``result``, encoded now, so that a result that cannot be
        encoded is this request's failure, not the transport's.

        Raises:
            Exception: what encoding raised; :meth:`answer` turns it into the request's error.
        """
        encoded = result if isinstance(result, orjson.Fragment) else orjson.Fragment(orjson.dumps(result))
        return jsonrpc.result_response(request_id, encoded)

    def answer(
        self,
        exc: Exception,
        request_id: RequestId | None,
        *,
        method: str,
        session: _Session,
        where: Where = "request",
    ) -> Message:
        """The error response for ``exc``; a failure of our own is logged, with the request's
        context, and counted."""
        if _ours(exc):
            self.caught(exc, where, f"{method} (id {request_id!r}, session {session.id[:8]})")
        elif isinstance(exc, LimitExceeded):
            self._counts.limit_refused(exc.limit)
        elif not isinstance(exc, ProtocolError | RemoteError | ServerUnavailable):
            logger.error("%s (id %r) failed: %s", method, request_id, exc)
        return wire_error(exc, request_id, stateless=session.stateless)

    def refused(self, exc: LimitExceeded) -> None:
        """Count one refusal by a limit that a transport answered itself (an HTTP status, a
        stdio line it could not read), outside :meth:`answer`."""
        self._counts.limit_refused(exc.limit)

    def count(self, where: Where) -> None:
        """Count one failure a part caught, contained and logged itself."""
        self._counts.internal_error(where)

    def caught(self, exc: BaseException, where: Where, context: str) -> None:
        """Log and count one failure a supervisor caught and contained."""
        self._counts.internal_error(where)
        logger.error("%s: caught at the %s boundary and contained", context, where, exc_info=exc)


async def supervised(boundary: Boundary, name: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a background task (a watcher, an expiry loop) until it returns or is cancelled; a
    failure is caught, logged and counted, and the task runs again a moment later, so that it
    never reaches the task group every other part shares."""
    while True:
        try:
            await run()
            return
        except Exception as exc:
            boundary.caught(exc, "task", name)
        await anyio.sleep(_RESTART_AFTER)
