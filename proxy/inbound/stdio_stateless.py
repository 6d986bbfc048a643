"""stdio, inbound, revision 2026-07-28: the requests of a connection whose first request was stateless.

stdio has no per-request stream: a request's progress and the log lines it opted into are
lines on stdout like everything else, written before its response, and the client cancels a
request with ``notifications/cancelled {requestId}`` (the HTTP binding closes the stream
instead). ``subscriptions/listen`` is answered with its stream (``proxy.clients.listen_streams``) as
more lines, until the client cancels it the same way. ``proxy.inbound.stdio`` decides the era
and hands each validated request here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import anyio

from proxy.clients.contract import Inbound
from proxy.clients.listen_streams import pump
from proxy.clients.session import StatelessCaller, cancel_named
from proxy.core.errors import LimitExceeded, ProtocolError, UnsupportedVersion
from proxy.inbound.exchange import Exchange, caller_of
from proxy.inbound.refusals import Refused, answer_of
from proxy.protocol import versions
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.stateless import Envelope
from proxy.protocol.subscriptions import LISTEN, Filter

__all__ = ["StatelessRequests", "initialize_refused"]

logger = logging.getLogger("proxy.inbound.stdio")

Send = Callable[[Message], Awaitable[None]]


class StatelessRequests:
    """The stateless requests in flight on one stdio connection, by the client's id."""

    def __init__(self, inbound: Inbound, send: Send) -> None:
        self._inbound = inbound
        self._send = send
        self._in_flight: dict[RequestId, anyio.CancelScope] = {}
        self._max_in_flight = inbound.config.limits.max_in_flight_per_session

    async def answer(self, message: Message, envelope: Envelope) -> None:
        """Run one request and write what it has to say, then its response (a listen request:
        its stream); nothing of it is written once the client has cancelled it."""
        request_id: RequestId = message["id"]
        if len(self._in_flight) >= self._max_in_flight:  # answered at once, never queued
            refusal = LimitExceeded(
                "too many requests in flight on this connection",
                limit="max_in_flight_per_session",
                maximum=self._max_in_flight,
            )
            self._inbound.boundary.refused(refusal)
            return await self._send(answer_of(Refused(refusal, None, request_id, stateless=True)))
        caller = caller_of(envelope, self._inbound.auth.stdio_identity, "stdio")
        # The client's cancel cancels this scope: the work, and every write still to come for it.
        with anyio.CancelScope() as scope:
            self._in_flight[request_id] = scope
            try:
                if message["method"] == LISTEN:
                    await self._listen(caller, message)
                else:
                    await self._exchange(caller, message)
            finally:
                if self._in_flight.get(request_id) is scope:
                    del self._in_flight[request_id]

    async def _exchange(self, caller: StatelessCaller, message: Message) -> None:
        exchange = Exchange(self._inbound.endpoint, caller, message)
        async with exchange.notes, anyio.create_task_group() as tg:
            tg.start_soon(exchange.run)
            async for note in exchange.notes:
                await self._send(note)
        assert exchange.answer is not None
        await self._send(exchange.answer)

    async def _listen(self, caller: StatelessCaller, message: Message) -> None:
        """``subscriptions/listen``: the acknowledgement, then the notifications it asked for,
        each tagged with its id, until the client cancels it (or the server ends it: then its
        response)."""
        async with AsyncExitStack() as stack:
            try:
                requested = Filter.parse(message["params"])
                listen = self._inbound.endpoint.listen(caller, message["id"], requested)
                subscription = await stack.enter_async_context(listen)
            except ProtocolError as exc:  # a bad filter; too many streams open (LimitExceeded)
                return await self._send(answer_of(Refused(exc, None, message["id"], stateless=True)))
            await pump(subscription, self._send)
        return None

    def cancel(self, notification: Message) -> None:
        """Act on the client's ``notifications/cancelled``: an unknown or finished id is no-op."""
        if cancel_named(self._in_flight, notification):
            logger.debug(
                "request %r cancelled by the client", (notification.get("params") or {}).get("requestId")
            )


def initialize_refused(message: Message) -> UnsupportedVersion:
    """-32022 for ``initialize`` on a stateless connection. Only the stateless revisions are named: the
    handshake ones are not served on this connection (a new process would serve them)."""
    requested = (message.get("params") or {}).get("protocolVersion")
    refusal = UnsupportedVersion(requested if isinstance(requested, str) else "", versions.STATELESS)
    # What a handshake-era client may show its user (it has no way forward): say why.
    refusal.message = (
        f"this connection serves protocol revision {', '.join(versions.STATELESS)}, chosen by its first "
        "request; the initialize handshake is not accepted on it"
    )
    return refusal
