"""Revision 2026-07-28 over Streamable HTTP, client side: every request one self-contained POST.

A request whose ``params._meta`` carries the revision (``proxy.protocol.stateless.has_envelope``)
is stateless on the wire: no ``Mcp-Session-Id``, no GET stream, no ``Last-Event-ID``, no session
renewal. Its body is mirrored into headers (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``; the caller adds the ``Mcp-Param-*`` it derives from the tool's schema), and its
answer is a JSON body or an SSE stream of related notifications ending with the response. A
``subscriptions/listen`` answer is such a stream that lasts until the server ends it.

Cancelling is closing the response: the spec makes a server treat the disconnect as the cancel,
so ``notifications/cancelled`` for one of these requests aborts its POST instead of being sent.

Any HTTP error becomes the request's outcome (the server's own JSON-RPC error where the body holds
one, else a :class:`~proxy.outbound.transport.Failed`), never a dead link: that is how a caller
learns a server is handshake-era and falls back to ``initialize`` on the same link.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import anyio
import anyio.abc

from proxy.core.errors import HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION, MessageTooLarge
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import (
    ACCEPT_BOTH,
    JSON,
    SSE,
    STREAM_END_WAIT,
    TRANSPORT_ERRORS,
    EventReader,
    Inbox,
    Probe,
    Verdict,
    broken,
    describe,
    error_body,
    failure,
    messages_in,
    read_body,
    with_extra,
)
from proxy.outbound.over_http.post_tasks import PostTasks
from proxy.outbound.transport import Failed
from proxy.protocol import jsonrpc
from proxy.protocol.headers import encode_header_value
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.stateless import NAME_PARAMS, PROTOCOL_VERSION_KEY, has_envelope

__all__ = [
    "STATELESS_ERRORS",
    "StatelessExchanges",
    "is_stateless_request",
    "stateless_http_failure",
    "request_headers",
]

# Errors only a 2026-07-28 server gives: one of them in a 4xx says "stateless server, fix the
# request", where anything else in a 4xx may be a handshake-era server refusing the revision.
STATELESS_ERRORS: Final = frozenset({HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION})
_EXCERPT: Final = 200  # characters of a non-JSON-RPC error body worth quoting


def is_stateless_request(message: Message) -> bool:
    """A request (not a notification or response) that carries the 2026-07-28 envelope."""
    return "method" in message and "id" in message and has_envelope(message)


def request_headers(message: Message, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers of a stateless request's POST: those mirrored from the body, and ``extra`` (the
    caller's ``Mcp-Param-*``) except where it names one of those (names are case-insensitive)."""
    params = message["params"]
    method = message["method"]
    mirrored = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": JSON,
        "MCP-Protocol-Version": str(params["_meta"][PROTOCOL_VERSION_KEY]),
        "Mcp-Method": method,
    }
    key = NAME_PARAMS.get(method)
    name = params.get(key) if key is not None else None
    if isinstance(name, str):
        mirrored["Mcp-Name"] = encode_header_value(name)
    return with_extra(mirrored, extra)


async def stateless_http_failure(
    server_id: str, request_id: RequestId, response: h1.Response
) -> tuple[Message | Failed, bool]:
    """The outcome of a stateless request whose POST got an HTTP error status, and whether it is an
    answer only a 2026-07-28 server gives (:data:`STATELESS_ERRORS`).

    A JSON-RPC error in the body is the server's own answer and is passed on with the request's
    id (servers send ``id: null`` there); otherwise the request fails, naming the status and the
    start of the body.
    """
    error, body = await error_body(response)
    if error is not None:
        answer = jsonrpc.error_response(request_id, error["code"], error["message"], error.get("data"))
        return answer, error["code"] in STATELESS_ERRORS
    status = f"HTTP {response.status} {response.reason or ''}".rstrip()
    excerpt = body.decode(errors="replace").strip()[:_EXCERPT]
    return failure(server_id, request_id, status + (f": {excerpt}" if excerpt else "")), False


class StatelessExchanges:
    """One link's stateless requests in flight: each POSTed from a task of its own, each abortable."""

    def __init__(
        self,
        server_id: str,
        url: str,
        http: h1.Client,
        posts: PostTasks,
        inbox: Inbox,
        log: logging.LoggerAdapter[logging.Logger],
        *,
        max_depth: int,
        max_bytes: int,
    ) -> None:
        """``max_bytes`` bounds each JSON body and SSE event (``limits.max_server_message_bytes``)."""
        self._server_id = server_id
        self._url = url
        self._http = http
        self._posts = posts
        self._inbox = inbox
        self._log = log
        self._max_depth = max_depth
        self._max_bytes = max_bytes
        self._inflight: dict[RequestId, anyio.CancelScope] = {}

    def start(
        self, message: Message, headers: Mapping[str, str] | None = None, probe: Probe | None = None
    ) -> None:
        """POST ``message`` (a stateless request) in the background; its answer goes to the inbox.

        Raises:
            Unencodable: ``message`` cannot be written as JSON; nothing was started.
        """
        data = jsonrpc.encode(message)
        # The scope exists before the task runs, so a cancel that overtakes the task still counts.
        scope = anyio.CancelScope()
        self._inflight[message["id"]] = scope
        self._posts.start_soon(self._exchange, message, data, headers, scope, probe)

    def cancel(self, request_id: object) -> bool:
        """Abort the POST of stateless request ``request_id``, closing its response; nothing more is
        delivered for it. False when no such request is in flight."""
        scope = self._inflight.pop(request_id, None) if isinstance(request_id, int | str) else None
        if scope is None:
            return False
        scope.cancel()
        return True

    async def _exchange(
        self,
        message: Message,
        data: bytes,
        headers: Mapping[str, str] | None,
        scope: anyio.CancelScope,
        probe: Probe | None,
    ) -> None:
        request_id: RequestId = message["id"]
        try:
            with scope:
                # Leaving this block before the body's end (a cancel) closes the connection: the
                # response is unfinished, so the client will not return it to the pool.
                async with self._http.request(
                    "POST", self._url, body=data, headers=request_headers(message, headers)
                ) as response:
                    await self._answer(response, request_id, probe)
        except TRANSPORT_ERRORS as exc:
            self._fail(request_id, f"POST {self._url} failed: {describe(exc)}")
        except MessageTooLarge as exc:
            self._inbox.put(broken(self._server_id, request_id, exc.message, exc), request_id)
        finally:
            if self._inflight.get(request_id) is scope:
                del self._inflight[request_id]
            if probe is not None:
                probe.settle(Verdict.FAILED)  # only if nothing better was said already
        if scope.cancelled_caught:
            self._log.debug(
                "server %r: request %r cancelled: its POST was closed", self._server_id, request_id
            )

    async def _answer(self, response: h1.Response, request_id: RequestId, probe: Probe | None) -> None:
        status, content_type = response.status, response.content_type
        if not 200 <= status < 300:
            answer, stateless = await stateless_http_failure(self._server_id, request_id, response)
            if probe is not None:
                probe.settle(Verdict.SPEAKS if stateless else Verdict.FAILED)
            self._inbox.put(answer, request_id)
        elif content_type == SSE:
            if probe is not None:
                probe.settle(Verdict.SPEAKS)
            error = await self._read_stream(EventReader(response, limit=self._max_bytes), request_id)
            if error is not None:
                self._fail(request_id, f"the SSE stream ended before the response ({error})")
            else:  # delivered already: wait for the end of the stream, bounded
                await response.drain(STREAM_END_WAIT)
        elif content_type == JSON:
            body = await read_body(response, self._max_bytes)
            decoded = messages_in(body, self._server_id, self._log, max_depth=self._max_depth)
            answered = any(_answers(m, request_id) for m in decoded.items)
            if probe is not None:
                probe.settle(Verdict.SPEAKS if answered else Verdict.FAILED)
            self._route(decoded.items, request_id)
            if not answered:
                why = f" ({decoded.problem})" if decoded.problem else ""
                self._inbox.put(
                    broken(
                        self._server_id, request_id, f"the JSON body held no response to the request{why}"
                    ),
                    request_id,
                )
        else:
            if probe is not None:
                probe.settle(Verdict.FAILED)
            # 202 included: there is no other stream a stateless answer could come on.
            reason = f"HTTP {status} with Content-Type {content_type!r} and no response"
            self._inbox.put(broken(self._server_id, request_id, reason), request_id)

    async def _read_stream(self, reader: EventReader, request_id: RequestId) -> str | None:
        """Deliver every message on the stream until the response; None once it came, else why not.

        Raises:
            MessageTooLarge: an event grew past its limit.
        """
        try:
            while (event := await reader.next()) is not None:
                if event.event != "message" or not event.data:
                    continue  # an event type MCP does not use
                decoded = messages_in(event.data, self._server_id, self._log, max_depth=self._max_depth)
                if self._route(decoded.items, request_id):
                    return None
        except TRANSPORT_ERRORS as exc:
            return describe(exc)
        return "closed"

    def _route(self, messages: list[Message | Failed], request_id: RequestId) -> bool:
        """Queue ``messages`` as carried for ``request_id``; True if its response was among them."""
        for message in messages:
            self._inbox.put(message, request_id)
        return any(_answers(m, request_id) for m in messages)

    def _fail(self, request_id: RequestId, reason: str) -> None:
        self._inbox.put(failure(self._server_id, request_id, reason), request_id)


def _answers(message: Message | Failed, request_id: RequestId) -> bool:
    if isinstance(message, Failed):
        return message.request_id == request_id
    return "method" not in message and message.get("id") == request_id
