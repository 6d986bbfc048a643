"""Where task records live: what outlives the session that created a task.

A :class:`TaskRecord` is what Manifold knows of one task a client created through it: whose it is
(the owner's fingerprint and the endpoint), which server runs it under which id of the server's,
the session that created it (its status notifications go there while it lives), when it ends
(its ttl, bounded by ``limits.max_task_ttl``), the task as the server last described it, and,
once read, its final outcome (kept for another session or replica to read, at most
``limits.max_task_result_bytes``).

Two stores keep them: :class:`MemoryTasks` (this replica) and
:class:`~proxy.tasks.redis_store.RedisTasks` (every replica). Both bound the records per identity
and in all (``limits.max_tasks_per_identity``, ``limits.max_tasks``) and forget a record when its
ttl ends, with its result.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import anyio
import orjson

from proxy.core.errors import LimitExceeded

__all__ = ["MemoryTasks", "TaskRecord", "TaskStore", "TaskStoreError", "over_limit"]


@dataclass(frozen=True, slots=True)
class TaskRecord:
    key: str  # the store key the client's task id opens to (proxy.tasks.ids)
    owner: str  # fingerprint of the identity that created it
    endpoint: str  # the endpoint it was created on ("": /mcp)
    server_id: str
    server_task: str  # the server's own task id: never shown to a client
    session_id: str  # the session that created it: where its status notifications go
    created: float  # wall clock, seconds
    expires: float  # wall clock, seconds
    task: Mapping[str, Any] = field(default_factory=dict)  # as the server last said (its id inside)
    outcome: bytes | None = None  # the final {"result": …} or {"error": …}, encoded, once read

    def updated(self, task: Mapping[str, Any]) -> TaskRecord:
        return replace(self, task=dict(task))

    def encode(self) -> bytes:
        row = asdict(self)
        row["outcome"] = None if self.outcome is None else self.outcome.decode()
        return orjson.dumps(row)

    @classmethod
    def decode(cls, raw: bytes | str) -> TaskRecord | None:
        """A record from :meth:`encode`; None when it is not one (a malformed entry is not served)."""
        try:
            row = orjson.loads(raw)
            outcome = row.pop("outcome")
            record = cls(**row, outcome=None if outcome is None else outcome.encode())
        except (orjson.JSONDecodeError, TypeError, AttributeError, KeyError):
            return None
        return record


class TaskStoreError(Exception):
    """The shared store cannot be asked (Redis down or slow): the request fails, logged as ours."""


def over_limit(what: str, limit: str, maximum: int) -> LimitExceeded:
    return LimitExceeded(
        f"{what} already has {maximum} tasks Manifold keeps; wait for one to end (its ttl) first",
        limit=limit,
        maximum=maximum,
        said=True,
    )


class TaskStore(Protocol):
    async def add(self, record: TaskRecord) -> None:
        """Keep a new record.

        Raises:
            LimitExceeded: its owner has ``max_tasks_per_identity`` records, or the store ``max_tasks``.
        """
        ...

    async def room(self, owner: str) -> None:
        """Check, before a task is asked for, that ``owner`` may have one more.

        Raises:
            LimitExceeded: as :meth:`add` would.
        """
        ...

    async def get(self, key: str) -> TaskRecord | None:
        """The record under ``key``; None when unknown or past its ttl."""
        ...

    async def put(self, record: TaskRecord) -> None:
        """Replace a record kept before (a new status, its outcome); one gone meanwhile stays gone."""
        ...

    async def owned(self, owner: str, endpoint: str) -> list[TaskRecord]:
        """Every live record of ``owner`` on ``endpoint``, oldest first."""
        ...

    async def find(self, server_id: str, server_task: str) -> TaskRecord | None:
        """The record of a server's task id, if Manifold created one for it."""
        ...

    async def cancelled(self, key: str) -> None:
        """Tell every replica that the task under ``key`` was cancelled (the one running its
        held call stops it: :mod:`proxy.tasks.held`)."""
        ...

    def cancels(self) -> AsyncGenerator[str, None]:
        """The keys of tasks cancelled on any replica, as they are told; ``""`` each time the
        listening (re)starts (a cancel told meanwhile was missed: look at the records)."""
        ...

    async def aclose(self) -> None: ...


class MemoryTasks:
    """Records in this process: served by this replica only."""

    def __init__(self, *, per_identity: int, total: int, clock: Callable[[], float] = time.time) -> None:
        self._per_identity = per_identity
        self._total = total
        self._clock = clock
        self._records: dict[str, TaskRecord] = {}  # insertion order: oldest first
        self._by_owner: dict[str, dict[str, None]] = {}
        self._by_server: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._records)

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, r in self._records.items() if r.expires <= now]:
            self._drop(key)

    def _drop(self, key: str) -> None:
        record = self._records.pop(key, None)
        if record is None:
            return
        owned = self._by_owner.get(record.owner, {})
        owned.pop(key, None)
        if not owned:
            self._by_owner.pop(record.owner, None)
        self._by_server.pop((record.server_id, record.server_task), None)

    async def room(self, owner: str) -> None:
        if len(self._by_owner.get(owner, ())) >= self._per_identity or len(self) >= self._total:
            self._expire()  # only when it could matter: a full store looks at every record
        if len(self._by_owner.get(owner, ())) >= self._per_identity:
            raise over_limit("this identity", "max_tasks_per_identity", self._per_identity)
        if len(self) >= self._total:
            raise over_limit("Manifold", "max_tasks", self._total)

    async def add(self, record: TaskRecord) -> None:
        await self.room(record.owner)
        self._records[record.key] = record
        self._by_owner.setdefault(record.owner, {})[record.key] = None
        self._by_server[(record.server_id, record.server_task)] = record.key

    async def get(self, key: str) -> TaskRecord | None:
        record = self._records.get(key)
        if record is not None and record.expires <= self._clock():
            self._drop(key)
            return None
        return record

    async def put(self, record: TaskRecord) -> None:
        if record.key in self._records:
            self._records[record.key] = record

    async def owned(self, owner: str, endpoint: str) -> list[TaskRecord]:
        now = self._clock()
        records = [self._records[k] for k in list(self._by_owner.get(owner, ()))]
        for gone in [r for r in records if r.expires <= now]:
            self._drop(gone.key)
        live = [r for r in records if r.expires > now and r.endpoint == endpoint]
        return sorted(live, key=lambda r: r.created)

    async def find(self, server_id: str, server_task: str) -> TaskRecord | None:
        key = self._by_server.get((server_id, server_task))
        return None if key is None else await self.get(key)

    async def cancelled(self, key: str) -> None:
        return None  # one replica: the call runs here, and is cancelled here

    async def cancels(self) -> AsyncGenerator[str, None]:
        await anyio.sleep_forever()
        yield ""  # never reached: an async generator that tells nothing

    async def aclose(self) -> None:
        return None
