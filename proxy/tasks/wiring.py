"""The task relay as a config asks for it: its store (memory, or Redis shared by replicas), keys
derived from the shared session secret (so any replica opens any replica's task ids)."""

from __future__ import annotations

from proxy.catalog.cursors import CursorCodec
from proxy.config.model import Config
from proxy.core.keys import derive_key
from proxy.observe.metrics import Metrics
from proxy.pipeline.bridge.parking import ParkedCalls
from proxy.pipeline.stages.authorize import AuditLog
from proxy.tasks.held import HeldTasks
from proxy.tasks.ids import TaskIds
from proxy.tasks.inputs import TaskQuestions
from proxy.tasks.relay import Owners, Reach
from proxy.tasks.store import MemoryTasks, TaskStore

__all__ = ["make_tasks"]


def make_tasks(
    config: Config,
    secret: bytes,
    connections: Reach,
    sessions: Owners,
    metrics: Metrics,
    audit: AuditLog | None,
    parked: ParkedCalls | None = None,
) -> HeldTasks:
    """No I/O: a Redis store connects on first use; the caller closes :attr:`Tasks.store`.
    ``parked``: where a task's questions for a 2026-07-28 owner are held (:mod:`proxy.tasks.inputs`)."""
    limits = config.limits
    store: TaskStore
    mode = config.sessions.tasks
    if mode == "auto":
        mode = "redis" if config.rate_limits.backend == "redis" else "memory"
    if mode == "redis":
        from proxy.tasks.redis_store import RedisTasks  # imported only when used

        url = config.sessions.redis_url or config.rate_limits.redis_url
        store = RedisTasks(str(url), per_identity=limits.max_tasks_per_identity, total=limits.max_tasks)
    else:
        store = MemoryTasks(per_identity=limits.max_tasks_per_identity, total=limits.max_tasks)
    ids = TaskIds(derive_key(secret, "task-id"))
    cursors = CursorCodec(derive_key(secret, "task-list"))
    write = None if audit is None else audit.write
    held = {s.id: s for s in config.enabled_servers()}
    return HeldTasks(
        ids,
        store,
        connections,
        sessions,
        limits,
        metrics,
        cursors=cursors,
        audit=write,
        held=held,
        questions=TaskQuestions(parked),
    )
