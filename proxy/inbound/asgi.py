"""The few ASGI helpers both eras of the HTTP endpoint use: types, headers, bodies, responses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio

__all__ = [
    "JSON_HEADERS",
    "MAX_BODY",
    "ON_DISCONNECT",
    "Receive",
    "Scope",
    "Send",
    "cancel_on_disconnect",
    "header",
    "read_body",
    "respond",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

MAX_BODY: Final = 4 * 1024 * 1024  # the default of limits.max_request_bytes
# A scope key some servers fill (proxy.inbound.whole_post): a function that registers a callback
# to run once when the client goes, and returns the function that unregisters it. Where it is
# present, a request that must stop when its client goes needs no task waiting on ``receive``.
ON_DISCONNECT: Final = "manifold.on_disconnect"
JSON_HEADERS: Final = [(b"content-type", b"application/json")]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case, as ASGI gives names)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def respond(
    send: Send, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = [*(headers or []), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive, limit: int = MAX_BODY) -> bytes | None:
    """The whole request body (empty if the client went away); None when it exceeds ``limit``
    bytes (read no further: it is never held whole)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` when the client closes the connection (call after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
