"""Server log lines and log levels, by policy: who hears a server's lines, who changes its level.

**Who hears a line.** A log line a server sends about no request (a stdio or legacy SSE server
sends every line so: those transports cannot tie a line to a request; a Streamable HTTP server,
those on its standalone stream) goes to the sessions that reach the server on that connection,
at or above the level each asked for, and only to those whose identity *may see the server*:
the policy allows that identity at least one of the server's tools, prompts, resources or
resource templates, as the merged catalogs list them now (a tool a pin withholds does not
count). A server that lists nothing is then seen by nobody while a policy is in force. Without
a policy, or in a dry run, every identity sees every server. A line tied to a request (on that
request's own stream) goes to that request's client alone, and a ``per_client`` connection's
lines to its own session. ``subscriptions/listen`` streams never carry log lines: the
2026-07-28 spec makes them request-scoped.

Deciding it costs a set lookup per session and line: the servers an identity may see are
worked out once per identity, catalog generation and policy version, and kept.

**Who changes a shared server's level.** ``logging/setLevel`` always sets the session's own level:
what it receives is filtered by it, and the request succeeds. It changes the level a shared
connection logs at only when the policy allows the identity that server's ``log_level``
(``log_levels`` in a rule; only an allow rule naming it allows one, and without a policy
everyone may); the connection then logs at the most verbose level any session so allowed asked
for. Anyone else's level leaves the server as it is, so nobody makes a shared server log
(and themselves hear) what others' requests cause at ``debug``. A ``per_client`` connection is
the session's own: it logs at the session's level, whoever the session is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Final

import anyio
from cachetools import LRUCache

from proxy.clients.session import ClientSession
from proxy.clients.sessions import Sessions
from proxy.config.model import EndpointConfig
from proxy.enforce.access import Access
from proxy.outbound.levels import takes_levels, tell_level
from proxy.policy import Identity, Subject
from proxy.protocol.jsonrpc import Message
from proxy.servers.connections import Connections
from proxy.views.catalogs import Catalogs

__all__ = ["ServerLogs"]

logger = logging.getLogger("proxy.notify.server_logs")

_IDENTITIES_KEPT: Final = 4096  # identities whose seen servers are kept (per catalog generation)


class ServerLogs:
    def __init__(
        self,
        sessions: Sessions,
        catalogs: Catalogs,
        access: Access,
        connections: Connections,
        endpoints: Mapping[str, EndpointConfig] | None = None,
    ) -> None:
        self.endpoints_changed(endpoints or {})
        self._sessions = sessions
        self._catalogs = catalogs
        self._access = access
        self._connections = connections
        self._seen: LRUCache[tuple[object, ...], frozenset[str]] = LRUCache(maxsize=_IDENTITIES_KEPT)

    def endpoints_changed(self, endpoints: Mapping[str, EndpointConfig]) -> None:
        """The endpoints are these (at start, and after a config reload)."""
        # A session on a named endpoint hears only the servers that endpoint selects.
        self._endpoint_servers = {
            name: frozenset(e.servers) for name, e in endpoints.items() if e.servers is not None
        }

    # ---- who hears a line ----------------------------------------------------------------

    def line(self, server_id: str, message: Message) -> None:
        """A log line ``server_id``'s shared connection sent about no request: to each session
        that reaches the server there, asked for its level, and whose identity may see it."""
        seen_by: dict[Identity, frozenset[str] | None] = {}  # each identity decided once a line
        for session in self._sessions:
            if not session.wants_notification(message) or not self._connections.shares(session, server_id):
                continue
            selected = self._endpoint_servers.get(session.endpoint)
            if selected is not None and server_id not in selected:
                continue
            identity = session.identity
            if identity in seen_by:
                seen = seen_by[identity]
            else:
                seen = seen_by[identity] = self.servers_seen(identity)
            if seen is None or server_id in seen:
                session.notify(message)

    def servers_seen(self, identity: Identity) -> frozenset[str] | None:
        """The servers ``identity`` may see: the policy allows it one of their tools, prompts,
        resources or resource templates. None (every server) without a policy, or in a dry run."""
        access = self._access
        if access.engine is None or access.settings.dry_run:
            return None
        catalogs = self._catalogs
        served, prompts, index = catalogs.served, catalogs.prompts, catalogs.resources
        key = (
            access.version,
            served.catalog.generation,
            frozenset(served.blocked),
            prompts.generation,
            index.generation,
            index.templates_generation,
            identity,
        )
        seen = self._seen.get(key)
        if seen is None:
            subjects: list[Iterable[Subject]] = [
                (served.subject(e.name) for e in served.catalog.entries if e.name not in served.blocked),
                (Subject.prompt(e) for e in prompts.entries),
                (Subject.resource(r["uri"], index.by_uri[r["uri"]]) for r in index.resources),
                (
                    Subject.resource(t["uriTemplate"], index.by_template[t["uriTemplate"]])
                    for t in index.templates
                ),
            ]
            found: set[str] = set()
            for kind in subjects:
                for subject in kind:
                    if subject.server_id not in found and access.decide(identity, subject).allowed:
                        found.add(subject.server_id)
            seen = self._seen[key] = frozenset(found)
        return seen

    # ---- who changes a level -------------------------------------------------------------

    def may_set_level(self, identity: Identity, server_id: str) -> bool:
        """Whether the policy lets ``identity`` change the level ``server_id``'s shared
        connection logs at (a dry run lets it, and says it would not)."""
        decision = self._access.decide(identity, Subject.log_level(server_id))
        if decision.allowed:
            return True
        if self._access.settings.dry_run:
            logger.info("dry run: would not change server %s's log level: %s", server_id, decision.reason)
            return True
        return False

    async def set_level(self, session: ClientSession, level: str) -> None:
        """``session`` asked for log lines at ``level`` and above (``logging/setLevel``).

        Its own filtering always changes; its ``per_client`` connections log at its level; each
        shared connection the policy lets its identity change logs at the most verbose level
        of the sessions whose identity it lets. Never raises: a server that refuses is logged.
        """
        session.log_level = level
        told = [(c, level) for c in self._connections.own(session) if takes_levels(c)]
        for server_id, connection in self._connections.shared.items():
            if not self._connections.shares(session, server_id) or not takes_levels(connection):
                continue
            if not self.may_set_level(session.identity, server_id):
                logger.debug(
                    "session %s: its log level %s filters what it receives; server %s's is unchanged",
                    session.id[:8],
                    level,
                    server_id,
                )
                continue
            told.append((connection, self._floor(server_id) or level))
        async with anyio.create_task_group() as tg:
            for connection, effective in told:
                tg.start_soon(tell_level, connection, effective)

    def _floor(self, server_id: str) -> str | None:
        """The most verbose level asked for by a session that reaches ``server_id``'s shared
        connection and whose identity may change its level (a dry run's "would not" aside)."""
        access, connections = self._access, self._connections
        subject = Subject.log_level(server_id)

        def counts(session: ClientSession) -> bool:
            return connections.shares(session, server_id) and (
                access.settings.dry_run or access.decide(session.identity, subject).allowed
            )

        return self._sessions.log_floor(counts)
