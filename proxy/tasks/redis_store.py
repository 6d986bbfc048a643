"""Task records in Redis, shared by every replica (:mod:`proxy.tasks.store`).

One string per record under ``<prefix>task:<key>`` with the record's ttl as the key's expiry, so
Redis drops a task with its result when its ttl ends. Each owner has a sorted set
``<prefix>owner:<fingerprint>`` of its keys scored by expiry (what ``tasks/list`` reads and the
per-identity bound counts, expired members trimmed first), and ``<prefix>all`` bounds the total
the same way. ``<prefix>server:<server>:<sha256 of its task id>`` names the record of a server's
task id. A task cancelled on one replica is published on ``<prefix>cancel`` (its key), which
every replica listens to (:meth:`RedisTasks.cancels`): the one running its held call stops it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from proxy.core.redaction import redact_url
from proxy.tasks.store import TaskRecord, TaskStoreError, over_limit

__all__ = ["RedisTasks"]

logger = logging.getLogger("proxy.tasks.redis_store")

_TIMEOUT = 2.0
_LISTEN_WAIT: Final = 1.0  # seconds one read of the cancel channel waits (then reads again)
_RELISTEN: Final = (0.5, 10.0)  # seconds before listening again after Redis failed: first, most
# Seconds between looks at the records of the calls running here (a ``""`` told): a cancel whose
# publishing failed (Redis restarting, say) is still seen, this late at most.
RECHECK: Final = 30.0


class RedisTasks:
    def __init__(
        self,
        url: str,
        *,
        per_identity: int,
        total: int,
        prefix: str = "manifold:tasks:",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._url = url
        self._client: Redis = Redis.from_url(url, socket_timeout=_TIMEOUT, socket_connect_timeout=_TIMEOUT)
        self._per_identity = per_identity
        self._total = total
        self._prefix = prefix
        self._clock = clock

    async def _ask(self, call: Any) -> Any:
        try:
            with anyio.fail_after(_TIMEOUT):
                return await call
        except (RedisError, OSError, TimeoutError) as exc:
            raise TaskStoreError(
                f"the task store at {redact_url(self._url)} cannot be reached: {type(exc).__name__}"
            ) from None

    def _record_key(self, key: str) -> str:
        return f"{self._prefix}task:{key}"

    def _server_key(self, server_id: str, server_task: str) -> str:
        digest = hashlib.sha256(f"{server_id}\0{server_task}".encode()).hexdigest()
        return f"{self._prefix}server:{digest}"

    async def room(self, owner: str) -> None:
        await self._counted(owner)

    async def _counted(self, owner_fingerprint: str) -> None:
        now = self._clock()
        owner, everyone = f"{self._prefix}owner:{owner_fingerprint}", f"{self._prefix}all"
        pipe = self._client.pipeline(transaction=True)
        pipe.zremrangebyscore(owner, "-inf", now)
        pipe.zremrangebyscore(everyone, "-inf", now)
        pipe.zcard(owner)
        pipe.zcard(everyone)
        _, _, mine, total = await self._ask(pipe.execute())
        if mine >= self._per_identity:
            raise over_limit("this identity", "max_tasks_per_identity", self._per_identity)
        if total >= self._total:
            raise over_limit("Manifold", "max_tasks", self._total)

    async def add(self, record: TaskRecord) -> None:
        await self._counted(record.owner)
        owner, everyone = f"{self._prefix}owner:{record.owner}", f"{self._prefix}all"
        ttl = max(math.ceil(record.expires - self._clock()), 1)
        pipe = self._client.pipeline(transaction=True)
        pipe.set(self._record_key(record.key), record.encode(), ex=ttl)
        pipe.set(self._server_key(record.server_id, record.server_task), record.key, ex=ttl)
        pipe.zadd(owner, {record.key: record.expires})
        pipe.zadd(everyone, {record.key: record.expires})
        pipe.expire(owner, ttl, gt=True)
        await self._ask(pipe.execute())

    async def get(self, key: str) -> TaskRecord | None:
        raw = await self._ask(self._client.get(self._record_key(key)))
        record = None if raw is None else TaskRecord.decode(raw)
        if record is None or record.key != key or record.expires <= self._clock():
            return None
        return record

    async def put(self, record: TaskRecord) -> None:
        ttl = math.ceil(record.expires - self._clock())
        if ttl > 0:  # xx: one gone meanwhile (its ttl) stays gone
            await self._ask(self._client.set(self._record_key(record.key), record.encode(), ex=ttl, xx=True))

    async def owned(self, owner: str, endpoint: str) -> list[TaskRecord]:
        keys = await self._ask(
            self._client.zrangebyscore(f"{self._prefix}owner:{owner}", self._clock(), "+inf")
        )
        if not keys:
            return []
        raws = await self._ask(self._client.mget([self._record_key(k.decode()) for k in keys]))
        records = [TaskRecord.decode(raw) for raw in raws if raw is not None]
        live = [r for r in records if r is not None and r.owner == owner and r.endpoint == endpoint]
        return sorted(live, key=lambda r: r.created)

    async def find(self, server_id: str, server_task: str) -> TaskRecord | None:
        key = await self._ask(self._client.get(self._server_key(server_id, server_task)))
        return None if key is None else await self.get(key.decode())

    async def cancelled(self, key: str) -> None:
        await self._ask(self._client.publish(f"{self._prefix}cancel", key))

    async def cancels(self) -> AsyncGenerator[str, None]:
        """Listen on the cancel channel for as long as the caller reads; a Redis failure is
        logged and listening starts again (backing off), announced by ``""``, as is every
        :data:`RECHECK` seconds of listening (a cancel that was not published is in the records)."""
        wait = _RELISTEN[0]
        while True:
            pubsub = self._client.pubsub()
            try:
                await self._ask(pubsub.subscribe(f"{self._prefix}cancel"))
                yield ""
                wait = _RELISTEN[0]
                recheck = anyio.current_time() + RECHECK
                while True:
                    if anyio.current_time() >= recheck:
                        yield ""
                        recheck = anyio.current_time() + RECHECK
                    message = await self._ask(
                        pubsub.get_message(ignore_subscribe_messages=True, timeout=_LISTEN_WAIT)
                    )
                    data = message.get("data") if isinstance(message, dict) else None
                    if isinstance(data, bytes) and message is not None and message.get("type") == "message":
                        yield data.decode(errors="replace")
            except TaskStoreError as exc:
                logger.warning("not hearing task cancels from other replicas for now: %s", exc)
            finally:
                with anyio.move_on_after(_TIMEOUT, shield=True):
                    with contextlib.suppress(RedisError, OSError):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
            await anyio.sleep(wait)
            wait = min(wait * 2, _RELISTEN[1])

    async def aclose(self) -> None:
        await self._client.aclose()
