"""What Manifold records of the tasks it holds for servers (client-side tasks): metrics and audit.

A handshake-era server's task-augmented ``sampling/createMessage`` or ``elicitation/create`` is
held by Manifold as a task of its own (:mod:`proxy.outbound.client_tasks`). Each creation and each
end (once) is counted in ``manifold_client_tasks_*`` and, with an audit log, written as an
``event: task`` record with ``direction: client`` (a client's task through Manifold has none).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from proxy.observe.metrics import Metrics

__all__ = ["ClientTaskRecords"]


class ClientTaskRecords:
    """A :class:`proxy.outbound.client_tasks.ClientTaskWatch` counting into ``metrics``."""

    def __init__(self, metrics: Metrics, audit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._metrics = metrics
        self._audit = audit

    def created(self, server: str, method: str, task_id: str) -> None:
        self._metrics.client_task(server, method)
        self._write(server, method, task_id, outcome="created")

    def ended(self, server: str, method: str, task_id: str, status: str, seconds: float) -> None:
        self._metrics.client_task(server, method, status)
        self._write(server, method, task_id, outcome=status, duration_ms=round(seconds * 1000, 3))

    def _write(self, server: str, method: str, task_id: str, **what: Any) -> None:
        if self._audit is not None:
            ts = datetime.now(UTC).isoformat(timespec="milliseconds")
            record = {"event": "task", "direction": "client", "server": server, "method": method}
            self._audit({"ts": ts, **record, "task": task_id, **what})
