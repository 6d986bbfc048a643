"""The one contract every outbound transport meets.

A transport is a thin shell: it moves whole JSON-RPC messages (already-decoded dicts)
between Manifold and one MCP server. It knows nothing of ids, timeouts or MCP methods,
except where its wire format forces it to (the Streamable HTTP session, the headers a
2026-07-28 request mirrors from its body, and cancelling such a request by closing its POST).

    async with transport.connect() as link:
        await link.send(message)
        message, related = await link.receive()

Foreign exceptions are converted at this edge: a transport raises only
:class:`proxy.errors.ServerUnavailable` (server gone, refused, closed), never OSError,
aiohttp or anyio stream errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["Link", "Received", "Transport"]

Received = tuple[Message, RequestId | None]


class Link(Protocol):
    """An open message channel to one server."""

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Hand one message to the server. Returns once it is on its way (not answered).

        ``headers`` are HTTP headers for this one message's POST (the ``Mcp-Param-*`` of a
        2026-07-28 ``tools/call``, which only the caller can derive, from the tool's schema).
        Transports without HTTP requests of their own per message ignore them.

        Raises:
            ServerUnavailable: the link is closed or the server cannot be reached.
        """
        ...

    async def receive(self) -> Received:
        """The next message from the server (responses, requests and notifications alike).

        With it comes the id of the request whose response stream carried it, where the
        transport knows (Streamable HTTP), else None: that is how a server's request during a
        tool call finds the client that made the call.

        Raises:
            ServerUnavailable: the server went away; the reason says how (exit code, EOF …).
        """
        ...


class Transport(Protocol):
    """Opens links to one configured server."""

    def connect(self) -> AbstractAsyncContextManager[Link]:
        """Start the server (stdio) or open the session (HTTP), and close it all on exit.

        Raises:
            ServerUnavailable: the server could not be started or reached.
        """
        ...
