"""The client sessions of one gateway: the only code that opens, takes over, ends and expires
them, and mints their ids.

A handshake-era session is opened by ``initialize`` (HTTP: its id is a signed token, so any
replica can take it over: :mod:`proxy.clients.session_ids`) or by a stdio client's first request.
It ends on DELETE, when stdin closes, after ``idle_timeout`` without a request, or when its id
reaches its expiry (``sessions.max_lifetime`` after ``initialize``, signed into the id). Ending one
runs the hooks the composition root registered (stop its ``per_client`` connections, release
its resource subscriptions), shielded and bounded: often it ends because the client went away.

At most ``limits.max_sessions`` HTTP sessions live at once, and ``max_sessions_per_identity`` of
one identity, counted by its key (source, issuer, subject), not its name (anonymous clients share
one). A new one past either makes room by ending the
longest-idle session of that identity (or of all, for the total) that has no request in flight,
through the same end as expiry. When none is idle, the new ``initialize`` is refused with a
``LimitExceeded`` naming the limit: a client that keeps all its sessions busy is told so, and
other identities are not evicted for it. Taking a session over from its signed id is refused
(404, initialize again) while the registry is full, so that a takeover never ends another session.

A session ended on purpose (DELETE, eviction) is revoked: its id is remembered as ended until it
expires, here and, with Redis, on every replica (:mod:`proxy.clients.revocations`): no replica takes it
over again, and one holding it live ends it when told. A session forgotten for idleness is not
revoked: its client may come back to any replica. Only a take-over asks the revocation store; a
request on a session held here asks nothing.

A 2026-07-28 request has no session: it is a :class:`~proxy.clients.session.ClientSession`
built from its envelope that lives as long as the request, and is never registered here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Final

import anyio
import anyio.abc

from proxy.clients.revocations import Revocations
from proxy.clients.session import LOG_LEVELS, ClientSession, new_session_id
from proxy.clients.session_ids import SessionTokens, nonce_of
from proxy.clients.streams import REPLAY_BYTES
from proxy.core.errors import LimitExceeded
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity, IdentityKey
from proxy.protocol.jsonrpc import Message

__all__ = ["Sessions"]

logger = logging.getLogger("proxy.clients.sessions")

_END_WITHIN: Final = 10.0  # seconds the end hooks of one session may take together

EndHook = Callable[[ClientSession], Awaitable[None]]


class Sessions:
    def __init__(
        self,
        tokens: SessionTokens,
        metrics: Metrics,
        *,
        idle_timeout: float,
        max_sessions: int = 10_000,
        max_per_identity: int = 100,
        replay_bytes: int = REPLAY_BYTES,
        revocations: Revocations | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tokens = tokens
        self._revocations = revocations if revocations is not None else Revocations()
        self._metrics = metrics
        self._idle_timeout = idle_timeout
        self._replay_bytes = replay_bytes
        self._clock = clock
        self._max = max_sessions
        self._max_per_identity = max_per_identity
        self._live: dict[str, ClientSession] = {}
        # HTTP sessions only, by identity key: one principal's sessions whatever its name or roles.
        self._by_identity: dict[IdentityKey, dict[str, ClientSession]] = {}
        self._expires: dict[str, int] = {}  # HTTP sessions: when each one's id expires (Unix s)
        self._by_nonce: dict[str, str] = {}  # HTTP sessions: nonce -> id, for revocations heard
        self._on_end: list[EndHook] = []

    def __iter__(self) -> Iterator[ClientSession]:
        return iter(list(self._live.values()))

    def __len__(self) -> int:
        return len(self._live)

    def live(self, session_id: str) -> ClientSession | None:
        """The session ``session_id`` names if it is live on this replica (no take-over)."""
        return self._live.get(session_id)

    def on_end(self, hook: EndHook) -> None:
        """Run ``hook`` for every session that ends, in registration order."""
        self._on_end.append(hook)

    # ---- opening ------------------------------------------------------------------------

    def fresh(self, transport: str, identity: Identity) -> ClientSession:
        """A session not yet registered: HTTP's ``initialize`` registers it with :meth:`admit`
        once the handshake succeeded."""
        return ClientSession(
            id="",
            transport=transport,
            identity=identity,
            last_seen=self._clock(),
            replay_bytes=self._replay_bytes,
        )

    async def admit(self, session: ClientSession) -> str:
        """Register a session whose ``initialize`` succeeded, under a signed id it can be taken
        over with; the id. Past a limit, the longest-idle session of its identity (or of all) is
        ended to make room.

        Raises:
            LimitExceeded: full, and no session that could make room is idle
                (``limits.max_sessions_per_identity`` or ``limits.max_sessions``).
        """
        assert session.protocol_version is not None, "only an initialized session is admitted"
        key = session.identity.key
        while len(self._by_identity.get(key, ())) >= self._max_per_identity:
            await self._evict(self._by_identity[key].values(), "max_sessions_per_identity")
        while len(self._live) >= self._max:
            await self._evict(self._live.values(), "max_sessions")
        session.id, expires = self._tokens.issue(
            session.protocol_version, session.capabilities, session.identity, session.endpoint
        )
        self._expires[session.id] = expires
        self._by_nonce[nonce_of(session.id)] = session.id
        self._register(session)
        return session.id

    async def _evict(self, candidates: Iterable[ClientSession], limit: str) -> None:
        """End the longest-idle HTTP session among ``candidates`` with nothing in flight.

        Raises:
            LimitExceeded: none is idle.
        """
        maximum = self._max if limit == "max_sessions" else self._max_per_identity
        idle = [s for s in candidates if s.transport == "http" and not s.in_flight]
        if not idle:
            raise LimitExceeded(
                "too many sessions, and none idle to make room for another", limit=limit, maximum=maximum
            )
        victim = min(idle, key=lambda s: s.last_seen)
        self._metrics.limit_refused(limit)  # a limit acted: counted as its refusals are
        logger.warning(
            "session %s ended to make room for a new one (limits.%s is %d)", victim.id[:8], limit, maximum
        )
        await self.end(victim)

    def open(self, transport: str, identity: Identity) -> ClientSession:
        """Register a session with a random id at once (stdio: the connection is the session)."""
        session = ClientSession(
            id=new_session_id(), transport=transport, identity=identity, replay_bytes=self._replay_bytes
        )
        self._register(session)
        return session

    async def find(self, session_id: str, identity: Identity) -> ClientSession | None:
        """The live session ``session_id`` names, or one another replica (or an earlier run of
        this one) opened, taken over from its signed id; None when unknown, ended, expired or
        forged. The caller still checks the session's identity against the request's.

        A live session costs two dict lookups and a clock read; only a take-over asks the
        revocation store (with Redis, a round trip bounded by its timeout)."""
        session = self._live.get(session_id)
        if session is not None:
            expires = self._expires.get(session_id)
            if expires is not None and self._tokens.expired(expires):
                logger.info("session %s ended: its id reached sessions.max_lifetime", session_id[:8])
                await self.end(session, revoke=False)  # its own expiry refuses the id everywhere
                return None
            session.last_seen = self._clock()
            return session
        if len(self._live) >= self._max:
            return None
        claims = self._tokens.restore(session_id, identity)
        if claims is None or await self._revocations.ended(nonce_of(session_id), claims.expires):
            return None
        if (session := self._live.get(session_id)) is not None:
            return session  # taken over by a concurrent request while the store was asked
        if len(self._live) >= self._max:
            return None
        session = ClientSession(
            id=session_id,
            transport="http",
            protocol_version=claims.protocol_version,
            capabilities=claims.capabilities,
            initialized=True,
            last_seen=self._clock(),
            identity=identity,
            replay_bytes=self._replay_bytes,
            endpoint=claims.endpoint,
        )
        if len(self._by_identity.get(identity.key, ())) >= self._max_per_identity:
            return None  # a takeover never ends another session: initialize again
        self._expires[session_id] = claims.expires
        self._by_nonce[nonce_of(session_id)] = session_id
        self._register(session)
        logger.info("session %s taken over from its signed id", session_id[:8])
        return session

    def _register(self, session: ClientSession) -> None:
        self._live[session.id] = session
        if session.transport == "http":
            self._by_identity.setdefault(session.identity.key, {})[session.id] = session
        self._metrics.session_opened(session.transport)

    # ---- ending -------------------------------------------------------------------------

    async def end(self, session: ClientSession, *, revoke: bool = True) -> None:
        """Forget a session (DELETE, eviction, expiry, stdin closed), cancel its requests and run
        the end hooks. Shielded and bounded: often run because the client went away.

        ``revoke``: an HTTP session's id is remembered as ended until it expires, here and in
        the shared store, before this returns (so a DELETE answered is a DELETE every replica
        knows of); idle and lifetime expiry pass False."""
        expires = self._expires.pop(session.id, None)
        self._by_nonce.pop(nonce_of(session.id), None)
        if self._live.pop(session.id, None) is not None:
            self._metrics.session_closed(session.transport)
            mine = self._by_identity.get(session.identity.key)
            if mine is not None:
                mine.pop(session.id, None)
                if not mine:
                    del self._by_identity[session.identity.key]
        for scope in list(session.in_flight.values()):
            scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_END_WITHIN):
            if revoke and expires is not None:
                await self._revocations.revoke(nonce_of(session.id), expires)
            for hook in self._on_end:
                try:
                    await hook(session)
                except Exception:  # one hook's failure must not keep the others from running
                    logger.exception("session %s: a cleanup step failed", session.id[:8])

    async def follow_revocations(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled: end each session held here as soon as another replica ends it
        on purpose (with Redis; without, return at once)."""
        await self._revocations.follow(self._revoked_elsewhere, self._check_held, task_status=task_status)

    async def _revoked_elsewhere(self, nonce: str) -> None:
        session_id = self._by_nonce.get(nonce)
        session = self._live.get(session_id) if session_id is not None else None
        if session is None or session_id is None:
            return
        self._revocations.remember(nonce, self._expires[session_id])
        logger.info("session %s ended on another replica", session_id[:8])
        await self.end(session, revoke=False)  # the store has it already

    async def _check_held(self) -> None:
        """After a gap in hearing revocations: end every session held here that was revoked."""
        held = {nonce_of(sid): expires for sid, expires in self._expires.items()}
        for nonce in await self._revocations.ended_among(held.items()):
            await self._revoked_elsewhere(nonce)

    async def expire(self) -> None:
        """Run until cancelled: end HTTP sessions idle longer than ``idle_timeout``."""
        while True:
            await anyio.sleep(min(60.0, self._idle_timeout / 2))
            await self.expire_idle()

    async def expire_idle(self) -> int:
        """End every HTTP session idle past ``idle_timeout`` with nothing in flight, and every
        one whose id reached its expiry; how many. Neither is revoked: an idle one may be taken
        over again, an expired id is refused by its own expiry."""
        deadline = self._clock() - self._idle_timeout
        idle = [
            s
            for s in self._live.values()
            if s.transport == "http" and s.last_seen < deadline and not s.in_flight
        ]
        ending = {s.id for s in idle}
        expired = [
            s
            for s in self._live.values()
            if s.id not in ending and (e := self._expires.get(s.id)) is not None and self._tokens.expired(e)
        ]
        for session in idle:
            await self.end(session, revoke=False)
            logger.info("session %s expired after %gs idle", session.id[:8], self._idle_timeout)
        for session in expired:
            await self.end(session, revoke=False)
            logger.info("session %s ended: its id reached sessions.max_lifetime", session.id[:8])
        return len(idle) + len(expired)

    # ---- telling every session -----------------------------------------------------------

    def broadcast(self, message: Message, endpoint: str | None = None) -> None:
        """Queue ``message`` (a list change) for every initialized session (of ``endpoint``)."""
        for session in self._live.values():
            if session.initialized and (endpoint is None or session.endpoint == endpoint):
                session.notify(message)

    def log_floor(self, counts: Callable[[ClientSession], bool] | None = None) -> str | None:
        """The most verbose log level any session (that ``counts``) asked for: what a shared
        connection logs at."""
        wanted = min(
            (
                LOG_LEVELS.index(s.log_level)
                for s in self._live.values()
                if s.log_level and (counts is None or counts(s))
            ),
            default=None,
        )
        return LOG_LEVELS[wanted] if wanted is not None else None
