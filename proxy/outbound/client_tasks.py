"""A server's task-augmented sampling and elicitation, held by Manifold as client-side tasks.

Manifold declares ``tasks.requests`` for sampling and elicitation to handshake-era servers
(:func:`proxy.protocol.client_tasks.declared`). A server's ``sampling/createMessage`` or
``elicitation/create`` with a ``task`` is answered at once with a ``CreateTaskResult`` under an id
of Manifold's; the client the request is for (found as for any server request: the
:class:`~proxy.outbound.relay.Relay` of the call it is about) is asked plainly, in the
background, through the same relay (so guardrails and policy apply as to a plain request), for
at most the task's ttl. The server's ``tasks/get``, ``tasks/result``, ``tasks/list`` and
``tasks/cancel`` are answered from the record, by Manifold alone: they reach no client.

One :class:`ClientTasks` per server connection: a server sees only the tasks it created.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.abc

from proxy.config.model import LimitsConfig
from proxy.core.errors import NoClientToAsk, ProtocolError
from proxy.outbound.relay import RELATED_TASK, Relay
from proxy.protocol.client_tasks import (
    WHILE_ASKED,
    ClientTask,
    ClientTaskTable,
    requested_ttl,
    without_task,
)

__all__ = ["ClientTasks"]

logger = logging.getLogger("proxy.outbound.client_tasks")

_ID_BYTES: Final = 16


class ClientTasks:
    """The tasks one server connection's server created at Manifold, and their asking."""

    def __init__(
        self,
        server_id: str,
        *,
        limit: int = 100,
        max_ttl: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._server_id = server_id
        self._table = ClientTaskTable(limit=limit, max_ttl_ms=int(max_ttl * 1000), server_id=server_id)
        self._clock = clock
        self._ends: dict[str, anyio.Event] = {}
        self._scopes: dict[str, anyio.CancelScope] = {}

    @classmethod
    def from_limits(cls, server_id: str, limits: LimitsConfig) -> ClientTasks:
        """As ``limits`` say: ``max_client_tasks_per_server`` tasks, each at most ``max_task_ttl``."""
        return cls(server_id, limit=limits.max_client_tasks_per_server, max_ttl=limits.max_task_ttl)

    @property
    def held(self) -> int:
        """Tasks kept (their ttl not ended), running or ended."""
        return len(self._table)

    async def ask(
        self, relay: Relay, method: str, params: dict[str, Any] | None, tg: anyio.abc.TaskGroup | None
    ) -> Any:
        """The answer to a server's request for ``relay``'s client: a ``CreateTaskResult`` for a
        task-augmented sampling or elicitation (the client asked in ``tg``), else the client's.

        Raises:
            LimitExceeded: the server holds ``limits.max_client_tasks_per_server`` tasks already.
        """
        ttl = requested_ttl(method, params)
        if ttl is None or tg is None:
            return await relay.request(method, params)
        task = self._table.create(secrets.token_urlsafe(_ID_BYTES), method, ttl, self._clock())
        self._ends[task.task_id] = anyio.Event()
        deadline = anyio.current_time() + task.ttl_ms / 1000
        scope = self._scopes[task.task_id] = anyio.CancelScope(deadline=deadline)
        tg.start_soon(self._run, task, relay, without_task(params), scope)
        return {"task": task.view()}

    async def poll(self, method: str, params: dict[str, Any] | None) -> Any:
        """Answer the server's ``tasks/*`` from its records.

        Raises:
            InvalidParams: an id this server was never given (or whose ttl ended), a task that
                ended already (``tasks/cancel``), a bad cursor.
            Exception: ``tasks/result`` of a task that failed: what the plain request would
                have been answered with.
        """
        now = self._clock()
        if method == "tasks/list":
            return self._table.page(params, now)
        if method == "tasks/cancel":
            task = self._table.cancel(params, now)
            task.error = _cancelled(task)
            self._ended(task)
            if (scope := self._scopes.get(task.task_id)) is not None:
                scope.cancel()
            return task.view()
        task = self._table.find(params, now)
        if method == "tasks/get":
            return task.view()
        end = self._ends.get(task.task_id)
        if end is not None:
            await end.wait()  # the task ends by its ttl at the latest
        if task.error is not None:
            raise task.error
        result = task.result if isinstance(task.result, dict) else {}
        meta = result.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        return {**result, "_meta": {**meta, RELATED_TASK: {"taskId": task.task_id}}}

    async def _run(
        self, task: ClientTask, relay: Relay, params: dict[str, Any] | None, scope: anyio.CancelScope
    ) -> None:
        """Ask the client plainly; keep its answer (or why there is none) in the task."""
        started = anyio.current_time()
        try:
            with scope:
                if (asked := WHILE_ASKED[task.method]) != task.status:
                    self._table.settle(task, asked, self._clock(), message="The client is asked.")
                try:
                    task.result = await relay.request(task.method, params)
                except Exception as exc:  # the error the plain request would have been answered with
                    task.error = exc
                    self._table.settle(task, "failed", self._clock(), message=_told(exc))
                else:
                    self._table.settle(task, "completed", self._clock())
            if scope.cancelled_caught and not task.ended:
                seconds = task.ttl_ms / 1000
                task.error = NoClientToAsk(
                    f"the client did not answer {task.method} from server {self._server_id!r} "
                    f"within the task's ttl ({seconds:g}s)",
                    data={"reason": "ttl_ended", "server": self._server_id},
                )
                late = "The client did not answer in time."
                self._table.settle(task, "failed", self._clock(), message=late)
        finally:
            if not task.ended:  # the server's connection ended under it
                self._table.settle(task, "failed", self._clock(), message="The server's connection ended.")
            self._scopes.pop(task.task_id, None)
            self._ended(task)
            seconds = anyio.current_time() - started
            logger.info(
                "server %s: held task %s (%s) %s after %.1fs",
                self._server_id,
                task.task_id[:8],
                task.method,
                task.status,
                seconds,
            )

    def _ended(self, task: ClientTask) -> None:
        if (end := self._ends.pop(task.task_id, None)) is not None:
            end.set()


def _told(exc: Exception) -> str:
    """A failed task's status message: Manifold's own refusal (a guardrail's, a missing capability)
    says why, as the plain request's error would; anything else only that it failed."""
    return exc.message[:500] if isinstance(exc, ProtocolError) else "The client's answer was an error."


def _cancelled(task: ClientTask) -> Exception:
    """What ``tasks/result`` of a task the server cancelled answers."""
    what = f"the task ({task.method}) was cancelled by the server"
    return NoClientToAsk(what, data={"reason": "cancelled"})
