"""stdio, inbound: a desktop client spawns ``manifold stdio`` and speaks NDJSON to it.

Each request is answered in a task of its own, so a slow tool never holds up the next
request; writes to stdout are serialised. Logs go to stderr only: stdout is the protocol.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable

import anyio

from proxy.app import Gateway
from proxy.errors import ProtocolError
from proxy.inbound.session import ClientSession, new_session_id
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, MessageKind

__all__ = ["serve_stdio"]

logger = logging.getLogger("proxy.inbound.stdio")

Write = Callable[[bytes], Awaitable[None]]


async def serve_stdio(gateway: Gateway, lines: AsyncIterable[bytes], write: Write) -> None:
    """Serve one client session until ``lines`` ends (the client closed our stdin)."""
    session = ClientSession(id=new_session_id(), transport="stdio", identity=gateway.auth.stdio_identity)
    gateway.sessions[session.id] = session
    gateway.metrics.session_opened("stdio")
    lock = anyio.Lock()

    async def emit(message: Message) -> None:
        data = jsonrpc.encode(message) + b"\n"
        gateway.metrics.bytes_out("stdio", len(data))
        async with lock:
            await write(data)

    async def answer(message: Message) -> None:
        response = await gateway.handle(session, message)
        if response is not None:
            await emit(response)

    async def pump_notifications() -> None:
        # Everything but responses (notifications, our requests to the client) is queued on
        # the session's standalone stream; on stdio that is simply more lines on stdout.
        async def write_event(_: str, data: bytes) -> None:
            gateway.metrics.bytes_out("stdio", len(data) + 1)
            async with lock:
                await write(data + b"\n")

        await session.standalone.follow(0, write_event)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_notifications)
            async for line in lines:
                gateway.metrics.bytes_in("stdio", len(line))
                if not line.strip():
                    continue
                try:
                    message = jsonrpc.parse(line)
                except ProtocolError as exc:
                    await emit(jsonrpc.error_response(None, exc.code, exc.message))
                    continue
                if jsonrpc.kind_of(message) is MessageKind.REQUEST:
                    tg.start_soon(answer, message)
                else:
                    await gateway.handle(session, message)
            logger.info("stdin closed; the client is gone")
            tg.cancel_scope.cancel()
    finally:
        gateway.end_session(session)
