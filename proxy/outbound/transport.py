"""The one contract every outbound transport meets.

A transport is a thin shell: it moves whole JSON-RPC messages (already-decoded dicts)
between Manifold and one MCP server. It knows nothing of ids, timeouts or MCP methods,
except where its wire format forces it to (the Streamable HTTP session, the headers a
2026-07-28 request mirrors from its body, and cancelling such a request by closing its POST).

    async with transport.connect() as link:
        await link.send(message)
        message, related = await link.receive()

Foreign exceptions are converted at this edge: a transport raises only our own errors, never
OSError, HTTP client, anyio stream or orjson errors. It makes up no answers either: where it knows
that one request of ours will never be answered (its POST failed, the server's reply to it was
unusable), ``receive`` hands out a :class:`Failed` for it, carrying the error to raise.

Every message a transport decodes is bounded: in size (per line, event or body) and in nesting
(``max_depth``, as configured). A server's message past them, or not JSON-RPC at all, fails the
request it answers where the transport can tell which one that is, and is logged and dropped
where it cannot (a stdio line too large to read an id from fails every request in flight on its
link instead: its framing is broken, so any of them may have been the one); it ends the link
only where the stream it came on cannot be read any further (the one SSE stream of the legacy
HTTP+SSE transport).

A transport may also tell what a server said besides its messages (:class:`Diagnostics`: a stdio
server's last stderr lines), for health reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from proxy.core.errors import MessageTooDeep, ProtocolError, ServerProtocolError, ServerUnavailable
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["Diagnostics", "Failed", "Link", "Received", "Transport", "unusable_answer"]


@dataclass(frozen=True, slots=True)
class Failed:
    """Request ``request_id`` will not be answered: ``error`` says why (the POST failed, the
    server's answer was unusable …). The caller raises it as that request's outcome.

    ``request_id`` None: an answer was unusable and which request it was for cannot be told (a
    stdio line past the size limit with no id to read): every request in flight fails with it."""

    request_id: RequestId | None
    error: ServerUnavailable


Received = tuple[Message | Failed, RequestId | None]


def unusable_answer(server_id: str, refused: ProtocolError) -> Failed | None:
    """The failure of the request that a server's unusable message answered, where the message
    says which (a response nested too deep still has its id at the top); None where it does not."""
    if isinstance(refused, MessageTooDeep) and refused.method is None and refused.request_id is not None:
        return Failed(
            refused.request_id, ServerProtocolError(server_id, f"its answer was a {refused.message}")
        )
    return None


class Link(Protocol):
    """An open message channel to one server."""

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Hand one message to the server. Returns once it is on its way (not answered).

        ``headers`` are HTTP headers for this one message's POST (the ``Mcp-Param-*`` of a
        2026-07-28 ``tools/call``, which only the caller can derive, from the tool's schema).
        Transports without HTTP requests of their own per message ignore them.

        Raises:
            ServerUnavailable: the link is closed or the server cannot be reached.
            Unencodable: ``message`` cannot be written as JSON; nothing was sent.
        """
        ...

    async def receive(self) -> Received:
        """The next message from the server (responses, requests and notifications alike), or
        the :class:`Failed` outcome of a request that will not be answered.

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


@runtime_checkable
class Diagnostics(Protocol):
    """A transport that keeps what its server wrote besides messages (a stdio server's stderr)."""

    def stderr_tail(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines (all it keeps, by default), oldest first."""
        ...
