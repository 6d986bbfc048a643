"""Tasks the other way round (2025-11-25), pure: no I/O, time passed in.

A handshake-era server may augment its ``sampling/createMessage`` or ``elicitation/create`` with
a ``task`` when its client declared ``tasks.requests.*``: the client answers at once with a
``CreateTaskResult``, and the server polls it with ``tasks/get``, ``tasks/result``,
``tasks/list`` and ``tasks/cancel``. Manifold is that client to its servers: it declares what it
can hold (:func:`declared`), and holds each such request as a task of its own (a
:class:`ClientTask` in a server connection's :class:`ClientTaskTable`), under an id of its own,
while it asks the client plainly. This module keeps the records and answers the polls from them;
:mod:`proxy.outbound.client_tasks` does the asking.

The table is one server connection's: another server's ids, and ids never handed out, are
"task not found" (-32602), answered here and passed to nobody. It holds at most ``limit``
records (those whose ttl has not ended, or that ended in the last :data:`ENDED_KEPT` seconds),
each with a ttl of at most ``max_ttl_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from proxy.core.errors import InvalidParams, LimitExceeded

__all__ = [
    "ENDED_KEPT",
    "PAGE_SIZE",
    "POLLS",
    "TASK_REQUESTS",
    "TERMINAL",
    "WHILE_ASKED",
    "ClientTask",
    "ClientTaskTable",
    "declared",
    "requested_ttl",
    "without_task",
]

# A server's request Manifold may hold as a task -> where the spec declares it under tasks.requests.
TASK_REQUESTS: Final[Mapping[str, tuple[str, str]]] = {
    "sampling/createMessage": ("sampling", "createMessage"),
    "elicitation/create": ("elicitation", "create"),
}
# A server's requests about the tasks Manifold holds for it: answered by Manifold alone.
# A held task's status while its client is asked: an elicitation waits for a person's input
# (input_required, as server-everything's async tool expects), a sampling request is work.
WHILE_ASKED: Final[Mapping[str, str]] = {
    "elicitation/create": "input_required",
    "sampling/createMessage": "working",
}
POLLS: Final = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
POLL_INTERVAL_MS: Final = 1000
PAGE_SIZE: Final = 100  # tasks per tasks/list page
# An ended task is kept at least this long after it ended, even past its ttl: a task that failed
# at its ttl (its client never answered) is still seen as failed by the server's next poll.
ENDED_KEPT: Final = 10.0
_MAX_ID: Final = 128  # characters of a task id worth looking up (Manifold's are 22)


def declared(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """``capabilities`` with the ``tasks`` Manifold holds for a server: ``list``, ``cancel`` and
    ``requests.<capability>.<request>`` for each of sampling and elicitation declared (none of
    them: unchanged). What a client declared of ``tasks`` itself is not relayed."""
    requests: dict[str, Any] = {}
    for capability, request in TASK_REQUESTS.values():
        if capability in capabilities:
            requests[capability] = {request: {}}
    kept = {k: v for k, v in capabilities.items() if k != "tasks"}
    if requests:
        kept["tasks"] = {"list": {}, "cancel": {}, "requests": requests}
    return kept


def requested_ttl(method: str, params: Mapping[str, Any] | None) -> int | None:
    """The ttl (ms) a task-augmented request asks for; 0 when it names none; None when the
    request is not one Manifold holds as a task (not augmented, or not sampling/elicitation)."""
    task = params.get("task") if method in TASK_REQUESTS and params is not None else None
    if not isinstance(task, Mapping):
        return None
    ttl = task.get("ttl")
    return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else 0


def without_task(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A request's params without its ``task``: what the client is asked plainly."""
    return None if params is None else {k: v for k, v in params.items() if k != "task"}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class ClientTask:
    """One request a server asked as a task, held by Manifold. ``outcome`` is what its
    ``tasks/result`` answers once it ended: the client's result, or the exception the plain
    request would have been answered with."""

    task_id: str
    method: str
    created: float  # wall clock, seconds
    ttl_ms: int
    status: str = "working"
    message: str | None = None
    updated: float = 0.0
    result: Any = None
    error: Exception | None = None
    _order: int = field(default=0, repr=False)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    def expired(self, now: float) -> bool:
        """Whether it is forgotten: its ttl ended, and it ended :data:`ENDED_KEPT` seconds ago."""
        ends = self.created + self.ttl_ms / 1000
        return now >= (max(ends, self.updated + ENDED_KEPT) if self.ended else ends)

    def view(self) -> dict[str, Any]:
        """The spec's ``Task`` object."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated or self.created),
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        }
        if self.message is not None:
            task["statusMessage"] = self.message
        return task


def unknown_task() -> InvalidParams:
    """What a server polling an id Manifold never gave it (or gave another server) is told."""
    return InvalidParams("Failed to retrieve task: Task not found", data={"reason": "unknown_task"})


class ClientTaskTable:
    """One server connection's held tasks, by Manifold's id; forgotten when their ttl ends."""

    def __init__(self, *, limit: int, max_ttl_ms: int, server_id: str = "?") -> None:
        self._limit = limit
        self._max_ttl_ms = max_ttl_ms
        self._server_id = server_id
        self._tasks: dict[str, ClientTask] = {}
        self._made = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def create(self, task_id: str, method: str, ttl_ms: int, now: float) -> ClientTask:
        """A new ``working`` task; ``ttl_ms`` 0 (none asked) or past the cap is the cap.

        Raises:
            LimitExceeded: the server holds ``limit`` tasks already (-32600 naming the limit).
        """
        self.purge(now)
        if len(self._tasks) >= self._limit:
            raise LimitExceeded(
                f"server {self._server_id!r} has as many task-augmented requests held by Manifold "
                "as it may; this one is refused",
                limit="max_client_tasks_per_server",
                maximum=self._limit,
            )
        ttl = self._max_ttl_ms if ttl_ms <= 0 else min(ttl_ms, self._max_ttl_ms)
        self._made += 1
        task = ClientTask(task_id, method, now, ttl, updated=now, _order=self._made)
        self._tasks[task_id] = task
        return task

    def find(self, params: Mapping[str, Any] | None, now: float) -> ClientTask:
        """The task ``params.taskId`` names.

        Raises:
            InvalidParams: no such task of this server's (malformed, guessed, expired, another's).
        """
        self.purge(now)
        task_id = params.get("taskId") if isinstance(params, Mapping) else None
        task = self._tasks.get(task_id) if isinstance(task_id, str) and len(task_id) <= _MAX_ID else None
        if task is None:
            raise unknown_task()
        return task

    def settle(self, task: ClientTask, status: str, now: float, *, message: str | None = None) -> bool:
        """Move ``task`` to ``status``; a task that ended stays as it ended (False)."""
        if task.ended:
            return False
        task.status, task.updated = status, now
        task.message = message
        return True

    def cancel(self, params: Mapping[str, Any] | None, now: float) -> ClientTask:
        """``tasks/cancel``: the task, now ``cancelled``.

        Raises:
            InvalidParams: unknown, or it already ended (the spec's -32602 both).
        """
        task = self.find(params, now)
        if not self.settle(task, "cancelled", now, message="The task was cancelled by request."):
            raise InvalidParams(f"Cannot cancel task: it already ended ({task.status})")
        return task

    def page(self, params: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
        """``tasks/list``: this server's tasks, oldest first, :data:`PAGE_SIZE` a page.

        Raises:
            InvalidParams: a cursor Manifold did not give.
        """
        self.purge(now)
        cursor = params.get("cursor") if isinstance(params, Mapping) else None
        after = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not cursor.isdigit() or len(cursor) > 20:
                raise InvalidParams("Invalid cursor", data={"reason": "invalid_cursor"})
            after = int(cursor)
        tasks = sorted((t for t in self._tasks.values() if t._order > after), key=lambda t: t._order)
        shown = tasks[:PAGE_SIZE]
        listed: dict[str, Any] = {"tasks": [task.view() for task in shown]}
        if len(tasks) > PAGE_SIZE:
            listed["nextCursor"] = str(shown[-1]._order)
        return listed

    def purge(self, now: float) -> None:
        """Forget every task whose ttl ended."""
        for task_id in [tid for tid, task in self._tasks.items() if task.expired(now)]:
            del self._tasks[task_id]
