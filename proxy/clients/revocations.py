"""Ended session ids, remembered until they expire on their own, so that an ended session stays
ended on every replica.

A signed session id (:mod:`proxy.clients.session_ids`) lets any replica take its session over. A
session ended on purpose (DELETE, or evicted to make room under ``limits.max_sessions*``) is
therefore remembered wherever its id could be presented, for as long as the id would be accepted:

* in this process (:class:`EndedIds`), always: at most ``max_entries`` ids (:data:`MAX_ENTRIES`,
  about 3 MB), each kept until the id's own expiry. When full, the entry that expires soonest is
  dropped and a *floor* rises to its expiry (said in the log at most once a minute): every id
  expiring by then is refused a take-over here, so a dropped entry still cannot come back (the
  price: a session of another replica that expires that early cannot move here, and its client
  initializes again);
* in Redis too when configured (``sessions.revocations``), so every replica knows: one key per
  ended id, ``manifold:ended:<nonce>``, expiring with the id, and a message on the channel
  ``manifold:ended``, so that a replica holding the session live ends it at once
  (:meth:`Revocations.follow`). A replica that lost the channel for a while asks about every
  session it holds once it is back, so a message it missed still ends them.

A session forgotten for idleness is not revoked: taking it over again after idleness is what
signed ids are for. An id past its lifetime needs nothing remembered: its own expiry refuses it.

Only a take-over asks (:meth:`Revocations.ended`), and it is rare: a request on a session this
replica holds asks nothing. Redis failures never raise: a revocation that cannot be written is
logged and counted (the id stays ended here); a take-over that cannot be checked is refused
(``fail_closed``, the default: the client initializes again) or allowed (``fail_open``), and
logged and counted.
"""

from __future__ import annotations

import functools
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Final, Literal

import anyio
import anyio.abc

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from proxy.config.model import Config

__all__ = ["CHANNEL", "KEY_PREFIX", "EndedIds", "Operation", "Revocations", "revocations_for"]

logger = logging.getLogger("proxy.clients.revocations")

KEY_PREFIX: Final = "manifold:ended:"
CHANNEL: Final = "manifold:ended"
# Ended ids one process remembers: about 300 bytes each (the id's nonce, its expiry, a heap
# entry), so at most about 3 MB, however many sessions churn (measured: benchmarks/churn_memory.py).
# At a session a second that is close to three hours of ended sessions; past it the floor rises.
MAX_ENTRIES: Final = 10_000
_FULL_LOG_INTERVAL: Final = 60.0  # seconds between lines saying the table is full (it rises per id)
TIMEOUT: Final = 1.0  # seconds one Redis call may take; a take-over is rare and may wait this long
_LOG_INTERVAL: Final = 60.0  # at most one line per this many seconds about Redis failing
_RESUBSCRIBE: Final = (0.5, 30.0)  # seconds before following the channel again after a failure
_HEALTH_CHECK: Final = 15  # seconds: an idle channel connection is pinged, so a dead one is seen

Revoked = Callable[[str], Awaitable[None]]  # told the nonce of an id another replica ended
Held = Callable[[], Awaitable[None]]  # asked to check every session held, after a gap

Operation = Literal["revoke", "check", "follow"]


class EndedIds:
    """Ended ids in this process, each until its expiry; bounded (see the module docstring).
    The clock is the wall clock the ids' expiries are written in."""

    def __init__(self, max_entries: int = MAX_ENTRIES, *, clock: Callable[[], float] = time.time) -> None:
        self._max = max_entries
        self._clock = clock
        self._expiry: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []  # (expiry, nonce), soonest first
        self.floor = 0  # ids expiring at or before this are refused: entries dropped for room
        self._said_full: float | None = None  # when the table last said it was full

    def __len__(self) -> int:
        return len(self._expiry)

    def __contains__(self, nonce: object) -> bool:
        """Whether ``nonce`` itself was ended (the floor aside)."""
        self._purge()
        return nonce in self._expiry

    def add(self, nonce: str, expires: int) -> None:
        self._purge()
        if nonce in self._expiry or expires <= self._clock():
            return
        while len(self._expiry) >= self._max:
            dropped, gone = heapq.heappop(self._heap)
            del self._expiry[gone]
            if dropped > self.floor and self._time_to_say_full():
                # Under steady churn the floor rises with every id: one line per interval.
                logger.warning(
                    "more than %d ended sessions to remember; ids expiring before %d are refused "
                    "a take-over on this replica",
                    self._max,
                    dropped,
                )
            self.floor = max(self.floor, dropped)
        self._expiry[nonce] = expires
        heapq.heappush(self._heap, (expires, nonce))

    def _time_to_say_full(self) -> bool:
        now = self._clock()
        if self._said_full is not None and now - self._said_full < _FULL_LOG_INTERVAL:
            return False
        self._said_full = now
        return True

    def ended(self, nonce: str, expires: int) -> bool:
        """Whether the id ``nonce`` (expiring at ``expires``) must not be taken over here."""
        self._purge()
        return expires <= self.floor or nonce in self._expiry

    def _purge(self) -> None:
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            _, nonce = heapq.heappop(self._heap)
            del self._expiry[nonce]


class Revocations:
    """Where ended session ids are remembered: this process, and Redis when ``client`` is given.
    ``on_error`` is told of each failed Redis call (for a metric) and must not raise."""

    def __init__(
        self,
        ended: EndedIds | None = None,
        client: Redis | None = None,
        *,
        listener: Redis | None = None,
        failure_mode: Literal["fail_open", "fail_closed"] = "fail_closed",
        timeout: float = TIMEOUT,
        on_error: Callable[[Operation], None] | None = None,
        owns_client: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ended = ended if ended is not None else EndedIds(clock=clock)
        self._client = client
        self._listener = listener  # its own connection: the channel blocks it
        self._fail_open = failure_mode == "fail_open"
        self._timeout = timeout
        self._on_error = on_error
        self._owns_client = owns_client
        self._clock = clock
        self._last_report: float | None = None
        self._unreported = 0
        self._down = False

    @property
    def shared(self) -> bool:
        return self._client is not None

    async def revoke(self, nonce: str, expires: int) -> None:
        """Remember the id ``nonce`` as ended until ``expires``: here at once, then in Redis."""
        self._ended.add(nonce, expires)
        if self._client is None:
            return
        ttl = expires - int(self._clock())
        if ttl <= 0:
            return
        try:
            with anyio.fail_after(self._timeout):
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.set(KEY_PREFIX + nonce, b"1", ex=ttl)
                    pipe.publish(CHANNEL, nonce)
                    await pipe.execute()
        except _failures() as exc:  # the id stays ended here
            self._failed("revoke", exc)
            return
        self._recovered()

    async def ended(self, nonce: str, expires: int) -> bool:
        """Whether the id ``nonce`` was ended on purpose, here or (with Redis) on any replica.
        Redis unreachable: ``True`` with ``fail_closed``, ``False`` with ``fail_open``."""
        if self._ended.ended(nonce, expires):
            return True
        if self._client is None:
            return False
        try:
            with anyio.fail_after(self._timeout):
                found = await self._client.exists(KEY_PREFIX + nonce)
        except _failures() as exc:  # failure_mode decides
            self._failed("check", exc)
            return not self._fail_open
        self._recovered()
        if found:
            self._ended.add(nonce, expires)  # asked once: no round trip for it again here
        return bool(found)

    def remember(self, nonce: str, expires: int) -> None:
        """Remember here an id another replica ended (it is in Redis already)."""
        self._ended.add(nonce, expires)

    async def ended_among(self, held: Iterable[tuple[str, int]]) -> set[str]:
        """Which of the ids ``held`` (nonce, expiry) were ended anywhere: one round trip. On a
        Redis failure, those known here only (logged and counted)."""
        held = list(held)
        here = {nonce for nonce, _ in held if nonce in self._ended}  # by name: the floor is for take-overs
        if self._client is None or not held:
            return here
        try:
            with anyio.fail_after(self._timeout):
                found = await self._client.mget([KEY_PREFIX + nonce for nonce, _ in held])
        except _failures() as exc:
            self._failed("check", exc)
            return here
        return here | {nonce for (nonce, _), value in zip(held, found, strict=True) if value is not None}

    async def follow(
        self,
        revoked: Revoked,
        held: Held,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until cancelled: tell ``revoked`` of each id another replica ends; after every
        (re)subscription, ``held`` checks the sessions held here for messages missed meanwhile.
        Without Redis, returns at once."""
        task_status.started()
        if self._listener is None:
            return
        pause = _RESUBSCRIBE[0]
        while True:
            try:
                async with self._listener.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    await held()
                    pause = _RESUBSCRIBE[0]
                    async for message in pubsub.listen():
                        data = message.get("data")
                        if message.get("type") == "message" and isinstance(data, bytes):
                            await revoked(data.decode("ascii", "replace"))
            except _failures() as exc:
                self._failed("follow", exc)
            await anyio.sleep(pause)
            pause = min(pause * 2, _RESUBSCRIBE[1])

    async def aclose(self) -> None:
        if self._owns_client:
            for client in (self._client, self._listener):
                if client is not None:
                    await client.aclose()

    def _failed(self, operation: Operation, exc: BaseException) -> None:
        self._down = True
        self._unreported += 1
        if self._on_error is not None:
            self._on_error(operation)
        now = time.monotonic()
        if self._last_report is None or now - self._last_report >= _LOG_INTERVAL:
            logger.error(
                "Redis session revocation store failed %d time(s) since the last report (%s: %s); "
                "ended sessions are remembered on this replica only, and take-overs are %s",
                self._unreported,
                type(exc).__name__,
                exc,
                "allowed (fail_open)" if self._fail_open else "refused (fail_closed)",
            )
            self._last_report, self._unreported = now, 0

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            logger.info("Redis session revocation store is reachable again")


@functools.cache
def _failures() -> tuple[type[Exception], ...]:
    """What a round trip to Redis may raise. Named only in ``except`` clauses, which are evaluated
    only once something was raised: redis is loaded by then (there is a client), and never by a
    Manifold that keeps revocations in memory."""
    from redis.exceptions import RedisError

    return (RedisError, OSError, TimeoutError)


def revocations_for(config: Config, *, on_error: Callable[[Operation], None] | None = None) -> Revocations:
    """The revocation store ``config.sessions`` asks for; the caller closes it. No I/O here:
    the Redis client connects on first use."""
    settings = config.sessions
    mode = settings.revocations
    if mode == "auto":
        mode = "redis" if config.rate_limits.backend == "redis" else "memory"
    if mode == "memory":
        return Revocations()
    from redis.asyncio import Redis  # imported only when used
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    url = settings.redis_url or config.rate_limits.redis_url
    client = Redis.from_url(
        url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT, retry=Retry(NoBackoff(), 1)
    )
    listener = Redis.from_url(url, socket_connect_timeout=TIMEOUT, health_check_interval=_HEALTH_CHECK)
    return Revocations(
        client=client,
        listener=listener,
        failure_mode=settings.failure_mode,
        on_error=on_error,
        owns_client=True,
    )
