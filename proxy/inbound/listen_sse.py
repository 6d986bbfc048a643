"""``subscriptions/listen`` over Streamable HTTP: one open
:class:`~proxy.clients.listen_streams.Subscription` served as the SSE response of its POST."""

from __future__ import annotations

from typing import Final

import anyio

from proxy.clients.listen_streams import Ending, Subscription
from proxy.inbound.asgi import Receive, Send, cancel_on_disconnect
from proxy.protocol import jsonrpc
from proxy.protocol.sse import encode_event
from proxy.protocol.subscriptions import completion

__all__ = ["stream_sse"]

_KEEPALIVE: Final = 15.0  # seconds of silence before an SSE comment keeps the stream open
_FINAL_WRITE: Final = 1.0  # seconds the last write of a stream ended from outside may take
_PING: Final = b": ping\n\n"
_SSE: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


async def stream_sse(subscription: Subscription, receive: Receive, send: Send) -> None:
    """Serve ``subscription`` as the SSE response of its POST (status 200, always SSE), with a
    ``: ping`` comment every ``_KEEPALIVE`` seconds of silence, until the client disconnects,
    the stream is lost, or it ends (then the listen request's response is its last event).

    If the serving task is cancelled from outside (the HTTP server shutting down, after its
    grace period), the stream is ended gracefully before the cancellation goes on.
    """
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})

    async def abandon_when_lost(scope: anyio.CancelScope) -> None:
        await subscription.lost.wait()
        scope.cancel()

    finished = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_on_disconnect, receive, tg.cancel_scope)
            tg.start_soon(abandon_when_lost, tg.cancel_scope)
            while True:
                try:
                    message = await subscription.next(_KEEPALIVE)
                except anyio.EndOfStream:
                    break
                body = encode_event(jsonrpc.encode(message)) if message is not None else _PING
                await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            finished = True
            tg.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class():
        # Not the client (its disconnect is absorbed above): the server is going away.
        if not finished and not subscription.completed and subscription.ending is not Ending.OVERFLOW:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_FINAL_WRITE):
                final = encode_event(jsonrpc.encode(completion(subscription.id)))
                await send({"type": "http.response.body", "body": final, "more_body": False})
        raise
    if not finished and subscription.ending is Ending.OVERFLOW:
        # The writer was abandoned mid-stream: close the response if the client lets us.
        with anyio.move_on_after(_FINAL_WRITE):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
