"""Where a server's traffic about a request goes: back to the client request that caused it, pure.

Every request a :class:`~proxy.outbound.connection.ServerConnection` sends on a client's behalf
carries that client request as its :class:`Relay`. The server's progress, log lines and requests
(sampling, elicitation, roots) about it go back through it, to that one client session, never
to everyone. A server request that does not say which request it is about is attributed by
:func:`relay_for`, which only decides; the connection does the asking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from proxy.core.errors import NoClientToAsk
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["RELATED_TASK", "Relay", "related_task", "relay_for"]

RELATED_TASK = "io.modelcontextprotocol/related-task"


class Relay(Protocol):
    """The client request on whose behalf a request goes out; related traffic goes back to it."""

    @property
    def session_id(self) -> str: ...

    @property
    def capabilities(self) -> Mapping[str, Any]:
        """What that client declared it can be asked (sampling, elicitation, roots …)."""
        ...

    @property
    def log_level(self) -> str | None:
        """The least severe log level that client wants to hear, if it asked for log lines."""
        ...

    @property
    def asleep(self) -> bool:
        """A parked call whose server is waiting on answers its client has yet to bring: not the
        one asking, when a question does not say which call it is about."""
        ...

    def notify(self, message: Message) -> None:
        """Queue a notification for that client (in order; never blocks)."""
        ...

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        """Ask that client; returns its result.

        Raises:
            MethodNotFound: the client did not declare the capability.
            RemoteError: the client answered with an error.
        """
        ...


def relay_for(
    related: RequestId | None,
    in_flight: Mapping[int, Relay | None],
    default: Relay | None,
    *,
    method: str = "request",
    server_id: str = "?",
) -> Relay:
    """The client request a server request belongs to.

    ``related`` is the id of our request whose stream carried it: Streamable HTTP says so.
    Other transports do not, so it is attributable only while one client session alone has
    requests in flight (``in_flight``: the relay of each of our requests, oldest first; None for
    those on nobody's behalf), or one alone that is not asleep; else to ``default``, the one
    client session a per-client connection serves. ``method`` and ``server_id`` name the
    server's request in the error.

    Raises:
        NoClientToAsk: no client, or no single client, can be named (-32603, saying which).
    """
    if isinstance(related, int) and (relay := in_flight.get(related)):
        return relay
    relays = [relay for relay in in_flight.values() if relay is not None]
    sessions = {relay.session_id for relay in relays}
    if len(sessions) == 1:
        return relays[0]
    awake = [relay for relay in relays if not relay.asleep]
    if len({relay.session_id for relay in awake}) == 1:
        return awake[0]
    if default is not None:
        return default
    if not sessions:
        raise NoClientToAsk(
            f"Manifold cannot deliver {method} from server {server_id!r}: no client request is in "
            "flight on that server, and Manifold relays a server's requests only during one",
            data={"reason": "no_client_request", "server": server_id, "method": method},
        )
    raise NoClientToAsk(
        f"Manifold cannot tell which client {method} from server {server_id!r} is for: "
        f"{len(sessions)} client sessions have calls in flight on its shared connection, whose "
        f"wire does not say which call a request belongs to; configure session_mode: per_client "
        f"for {server_id!r} (one connection per client session) to let each ask its own client",
        data={
            "reason": "unattributable",
            "server": server_id,
            "method": method,
            "sessions": len(sessions),
            "fix": "session_mode: per_client",
        },
    )


def related_task(message: Message) -> object:
    """The task a server's message says it is related to (``_meta`` related-task ``taskId``), if any."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
    return related.get("taskId") if isinstance(related, dict) else None
