"""What clients hear unprompted: list changes, and what servers say about no request.

A change of a merged list goes to every initialized session and every ``subscriptions/listen``
stream that asked for it; a change of one client's own view (:mod:`proxy.views.per_client`) to that
session, or to the listen streams of that identity. A server's resource update goes to the
sessions that reach that server on the connection it came from (a ``per_client`` session hears
its own connection: :mod:`proxy.servers.per_client`) and subscribed to it, and to the listen streams
whose identity may still read the resource. A server's log line is :mod:`proxy.notify.server_logs`'s
business: the policy decides who hears it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from proxy.clients.listen_streams import Listens
from proxy.clients.sessions import Sessions
from proxy.enforce.access import Access
from proxy.outbound.lists import CHANGED
from proxy.policy import Subject
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from proxy.protocol.subscriptions import UPDATED
from proxy.servers.connections import Connections
from proxy.servers.per_client import Owner, owner_of

__all__ = ["Notices"]

# list kind -> the notification that tells of its change (the same table servers tell us by)
_CHANGED: Final = {kind: jsonrpc.notification(method) for method, kinds in CHANGED.items() for kind in kinds}


class Notices:
    def __init__(
        self, sessions: Sessions, listens: Listens, connections: Connections, access: Access
    ) -> None:
        self._sessions = sessions
        self._listens = listens
        self._connections = connections
        self._access = access
        self._held: dict[tuple[str, str], None] | None = None  # (kind, endpoint), in order

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold list changes (a config reload's, which changes many servers at once) and tell
        each (kind, endpoint) once, when done. Held already: held until the outer hold ends."""
        if self._held is not None:
            yield
            return
        held: dict[tuple[str, str], None] = {}
        self._held = held
        try:
            yield
        finally:
            self._held = None
            for kind, endpoint in held:
                self.list_changed(kind, endpoint)

    def list_changed(self, kind: str, endpoint: str = "") -> None:
        """The list ``kind`` of ``endpoint``'s view changed (or what someone may see of it): its
        clients re-list; those of other endpoints are not told."""
        if self._held is not None:
            self._held[(kind, endpoint)] = None
            return
        message = _CHANGED[kind]
        self._sessions.broadcast(message, endpoint)
        self._listens.publish(message, lambda listening: listening.endpoint == endpoint)

    def per_client_list_changed(self, owner: Owner, kind: str) -> None:
        """What ``owner`` (a session's id, or an identity's key) sees of list ``kind`` changed."""
        message = _CHANGED[kind]
        if isinstance(owner, str):
            for session in self._sessions:
                if session.id == owner and session.initialized:
                    session.notify(message)
            return
        self._listens.publish(message, lambda listening: owner_of(listening.identity) == owner)

    def per_client_notification(self, owner: Owner, server_id: str, message: Message) -> None:
        """What a 2026-07-28 identity's own connection says unprompted: a resource update, to
        that identity's listen streams that watch the URI, if it may still read it."""
        if message["method"] != UPDATED:
            return  # its log lines reach it only on the stream of the request that asked
        subject = Subject.resource(str((message.get("params") or {}).get("uri")), server_id)
        self._listens.publish(
            message,
            lambda listening: (
                owner_of(listening.identity) == owner and self._access.allows(listening.identity, subject)
            ),
        )

    def server_notification(self, server_id: str, message: Message) -> None:
        """What a server's shared connection says unprompted but log lines (resources/updated)."""
        for session in self._sessions:
            if session.wants_notification(message) and self._connections.shares(session, server_id):
                session.notify(message)
        if message["method"] == UPDATED:
            # Only streams whose identity may still read it (the policy may have changed).
            subject = Subject.resource(str((message.get("params") or {}).get("uri")), server_id)
            self._listens.publish(message, lambda listening: self._access.allows(listening.identity, subject))
