"""An in-memory transport: the "server" is a coroutine per request, for connection unit tests."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from proxy.core.errors import ServerUnavailable
from proxy.outbound.transport import Failed, Received
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message

# A handler gets each message the client sent and a `reply` function; it may reply any number
# of times (a response, notifications, nothing, or the Failed outcome a transport would hand out)
# and may block.
Handler = Callable[[Message, Callable[[Message | Failed], Awaitable[None]]], Coroutine[Any, Any, None]]


class MemoryLink:
    def __init__(
        self,
        to_server: MemoryObjectSendStream[Message],
        from_server: MemoryObjectReceiveStream[Message | Failed],
    ):
        self._to_server = to_server
        self._from_server = from_server
        self.sent: list[Message] = []
        self.sent_headers: list[Mapping[str, str] | None] = []  # each message's headers, as in ``sent``

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        self.sent.append(message)
        self.sent_headers.append(headers)
        try:
            await self._to_server.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise ServerUnavailable("mem", "link closed") from None

    async def receive(self) -> Received:
        try:
            return await self._from_server.receive(), None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ServerUnavailable("mem", "the server hung up") from None


class MemoryTransport:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.links: list[MemoryLink] = []
        self.hang_up = anyio.Event()

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MemoryLink]:
        to_server_send, to_server_receive = anyio.create_memory_object_stream[Message](math.inf)
        from_server_send, from_server_receive = anyio.create_memory_object_stream[Message | Failed](math.inf)
        link = MemoryLink(to_server_send, from_server_receive)
        self.links.append(link)
        self.hang_up = anyio.Event()

        async def serve() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_hang_up, tg.cancel_scope)
                async for message in to_server_receive:
                    tg.start_soon(self.handler, message, from_server_send.send)

        async def watch_hang_up(scope: anyio.CancelScope) -> None:
            await self.hang_up.wait()
            await from_server_send.aclose()
            scope.cancel()

        async with (
            to_server_send,
            to_server_receive,
            from_server_send,
            from_server_receive,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(serve)
            try:
                yield link
            finally:
                tg.cancel_scope.cancel()


def initialize_result(version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "mem", "version": "0"},
    }


def answer(message: Message, result: Any) -> Message:
    return jsonrpc.result_response(message["id"], result)
