"""Who wants updates of which resource, and the one subscription per URI a server holds for them.

Holders are handshake-era sessions that sent ``resources/subscribe`` and open
``subscriptions/listen`` streams (:mod:`proxy.clients.listen_streams`). A server is asked once per URI on
its shared connection, however many holders want it: the first one subscribes it, the last one
gone (unsubscribe, stream closed, session ended) sends ``resources/unsubscribe``. A session on a
``per_client`` server reaches it on a connection of its own, so its subscriptions are its own:
never counted with anyone else's, and gone with the connection. A 2026-07-28 caller's listen
stream watches a ``per_client`` server's resources on its identity's own connection
(:class:`PerClientInterest`), counted with that identity's other streams only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol

import anyio

from proxy.clients.listen_streams import Listens, Subscription
from proxy.clients.session import ClientSession, InboundRequest
from proxy.pipeline.context import Caller
from proxy.servers.per_client import owner_of

__all__ = ["Interest", "PerClientInterest", "PerClientSubscribing", "Sharing", "Subscribable"]

logger = logging.getLogger("proxy.notify.subscriptions")

_RELEASE_WITHIN: Final = 5.0  # seconds for the unsubscribes of a holder that went away


class Subscribable(Protocol):
    """What :class:`Interest` needs of a server's shared connection."""

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...


class Sharing(Protocol):
    """Which connection a session reaches a server on (:class:`proxy.servers.connections.Connections`)."""

    def shares(self, caller: ClientSession, server_id: str) -> bool: ...


class Interest:
    """The holders of every resource subscription of this gateway, read from its live sessions
    and listen streams (nothing is counted twice: each holder carries its own URIs)."""

    def __init__(
        self,
        sessions: Iterable[ClientSession],
        listens: Listens,
        sharing: Sharing,
        connections: Mapping[str, Subscribable],
    ) -> None:
        self._sessions = sessions
        self._listens = listens
        self._sharing = sharing
        self._connections = connections

    def shares(self, session: ClientSession, server_id: str) -> bool:
        """Whether ``session`` reaches the server on its shared connection (else on its own)."""
        return self._sharing.shares(session, server_id)

    def must_tell(self, session: ClientSession, uri: str, server_id: str) -> bool:
        """Whether ``session`` (un)subscribing ``uri`` must reach the server: on its own
        connection always, on the shared one only when no other holder wants the URI."""
        return not self.shares(session, server_id) or not self.held(uri, server_id, besides=session)

    def held(self, uri: str, server_id: str, *, besides: ClientSession | Subscription) -> bool:
        """Whether a holder other than ``besides`` wants ``uri`` on the server's shared connection."""
        return any(
            uri in s.subscriptions and self.shares(s, server_id) for s in self._sessions if s is not besides
        ) or self._listens.watching(uri, besides=besides)

    async def release(self, session: ClientSession) -> None:
        """A session ended: unsubscribe, at each server, the URIs only it wanted on a shared
        connection. Shielded and bounded: often run because the client went away."""
        held, session.subscriptions = session.subscriptions, {}
        shared = {uri: server for uri, server in held.items() if self.shares(session, server)}
        await self._let_go(shared, session)

    async def watch(self, subscription: Subscription, watched: Mapping[str, str]) -> None:
        """Hold ``watched`` (URI: server) for a listen stream, registered already (a stream
        opening meanwhile sees its interest): the URIs no one held yet are subscribed, and those
        a server refused are dropped from the stream's filter."""
        fresh = {
            uri: server for uri, server in watched.items() if not self.held(uri, server, besides=subscription)
        }
        accepted = await self.tell("resources/subscribe", fresh)
        if len(accepted) < len(fresh):
            refused = fresh.keys() - accepted
            kept = (uri for uri in subscription.filter.uris if uri not in refused)
            subscription.filter = subscription.filter.only(kept)

    async def unwatch(self, subscription: Subscription, watched: Mapping[str, str]) -> None:
        """A listen stream closed: unsubscribe the URIs it held that no one else does. Shielded
        and bounded: often run because the client went away."""
        kept = {uri: server for uri, server in watched.items() if uri in subscription.filter.uris}
        await self._let_go(kept, subscription)

    async def _let_go(self, held: Mapping[str, str], holder: ClientSession | Subscription) -> None:
        """``holder`` let go of ``held`` (URI: server) on the shared connections: unsubscribe
        those no one else holds, shielded and bounded."""
        gone = {uri: server for uri, server in held.items() if not self.held(uri, server, besides=holder)}
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_WITHIN):
            await self.tell("resources/unsubscribe", gone)

    async def tell(self, method: str, uris: Mapping[str, str]) -> set[str]:
        """Send ``resources/subscribe`` or ``unsubscribe`` for each URI to its server's shared
        connection, all at once; the URIs whose server agreed. A refusal is logged, never
        raised: it only narrows a filter."""
        agreed: set[str] = set()

        async def tell(uri: str, server: str) -> None:
            try:
                await self._connections[server].request(method, {"uri": uri})
            except Exception as exc:  # one server's refusal must not fail the stream or the others
                logger.warning("server %s: %s %s failed: %s", server, method, uri, exc)
            else:
                agreed.add(uri)

        async with anyio.create_task_group() as tg:
            for uri, server in uris.items():
                tg.start_soon(tell, uri, server)
        return agreed


class PerClientSubscribing(Protocol):
    """What :class:`PerClientInterest` needs of :class:`proxy.servers.connections.Connections`."""

    async def for_call(self, caller: Caller, server_id: str) -> Subscribable: ...

    def per_client_running(self, caller: Caller, server_id: str) -> Subscribable | None: ...

    def hold(self, caller: Caller, server_id: str, count: int) -> None: ...


class PerClientInterest:
    """A 2026-07-28 caller's listen streams on ``per_client`` servers: their resources are
    subscribed on its identity's own connection (where its calls go, and whose updates only that
    identity's streams hear), once per identity, and the connection is not idle while held."""

    def __init__(self, listens: Listens, connections: PerClientSubscribing) -> None:
        self._listens = listens
        self._connections = connections

    async def watch(
        self, inbound: InboundRequest, subscription: Subscription, own: Mapping[str, str]
    ) -> None:
        """Subscribe ``own`` (URI: per_client server) on the caller's identity's own connections,
        once per identity; a URI its server refused leaves the stream's filter."""
        refused: set[str] = set()
        mine = owner_of(inbound.identity)
        for uri, server in own.items():
            try:
                if not self._listens.watching(
                    uri, besides=subscription, where=lambda s: owner_of(s.identity) == mine
                ):
                    connection = await self._connections.for_call(inbound, server)
                    await connection.request("resources/subscribe", {"uri": uri})
            except Exception as exc:  # one server's refusal must not fail the stream or the others
                logger.warning("server %s: resources/subscribe %s failed: %s", server, uri, exc)
                refused.add(uri)
            else:
                self._connections.hold(inbound, server, 1)
        if refused:
            kept = (uri for uri in subscription.filter.uris if uri not in refused)
            subscription.filter = subscription.filter.only(kept)

    async def unwatch(
        self, inbound: InboundRequest, subscription: Subscription, own: Mapping[str, str]
    ) -> None:
        """A listen stream closed: unsubscribe, on the identity's own connections, what no other
        stream of the identity watches. Shielded and bounded: often because the client left."""
        mine = owner_of(inbound.identity)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_WITHIN):
            for uri, server in own.items():
                if uri not in subscription.filter.uris:
                    continue  # refused when it opened
                self._connections.hold(inbound, server, -1)
                connection = self._connections.per_client_running(inbound, server)
                if connection is None or self._listens.watching(
                    uri, besides=subscription, where=lambda s: owner_of(s.identity) == mine
                ):
                    continue
                try:
                    await connection.request("resources/unsubscribe", {"uri": uri})
                except Exception as exc:
                    logger.warning("server %s: resources/unsubscribe %s failed: %s", server, uri, exc)
