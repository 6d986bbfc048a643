"""Client-side tasks (held by Manifold for a server) on /metrics and in the audit: each creation
counted once, each end once (a cancel then the question's own end is one end), by server, method
and status, and the in-flight gauge back to 0."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from proxy.config.observe import MetricsSettings
from proxy.core.errors import NoClientToAsk
from proxy.observe.client_tasks import ClientTaskRecords
from proxy.observe.metrics import Metrics
from proxy.outbound.client_tasks import ClientTasks
from tests.observe.test_metrics import value
from tests.outbound.test_client_tasks import ELICIT, Client

pytestmark = pytest.mark.anyio


async def test_a_held_task_is_counted_and_audited_once_as_it_is_created_and_as_it_ends() -> None:
    metrics = Metrics(MetricsSettings())
    audit: list[dict[str, Any]] = []
    tasks = ClientTasks("srv", watch=ClientTaskRecords(metrics, audit.append))
    answered, never = Client(), Client()
    answered.go.set()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            done = (await tasks.ask(answered, ELICIT, {"task": {}}, tg))["task"]["taskId"]
            dropped = (await tasks.ask(never, "sampling/createMessage", {"task": {}}, tg))["task"]["taskId"]
            assert value(metrics, "manifold_client_tasks_in_flight", server="srv") == 2
            await tasks.poll("tasks/result", {"taskId": done})
            await anyio.lowlevel.checkpoint()
            await tasks.poll("tasks/cancel", {"taskId": dropped})
            with pytest.raises(NoClientToAsk):
                await tasks.poll("tasks/result", {"taskId": dropped})
    created = "manifold_client_tasks_created_total"
    ended = "manifold_client_tasks_ended_total"
    assert value(metrics, created, server="srv", method=ELICIT) == 1
    assert value(metrics, created, server="srv", method="sampling/createMessage") == 1
    assert value(metrics, ended, server="srv", method=ELICIT, status="completed") == 1
    assert value(metrics, ended, server="srv", method="sampling/createMessage", status="cancelled") == 1
    assert value(metrics, "manifold_client_tasks_in_flight", server="srv") == 0
    assert value(metrics, "manifold_tasks_created_total", server="srv") is None  # its own series only
    seen = [(r["event"], r["direction"], r["server"], r["task"], r["outcome"]) for r in audit]
    assert sorted(seen) == sorted(
        [
            ("task", "client", "srv", done, "created"),
            ("task", "client", "srv", dropped, "created"),
            ("task", "client", "srv", done, "completed"),
            ("task", "client", "srv", dropped, "cancelled"),
        ]
    )
    assert all(r["duration_ms"] >= 0 for r in audit if r["outcome"] != "created")


async def test_without_an_audit_log_only_metrics_move() -> None:
    metrics = Metrics(MetricsSettings())
    records = ClientTaskRecords(metrics)
    records.created("srv", ELICIT, "t1")
    records.ended("srv", ELICIT, "t1", "failed", 0.5)
    assert (
        value(metrics, "manifold_client_tasks_ended_total", server="srv", method=ELICIT, status="failed") == 1
    )
    assert value(metrics, "manifold_client_tasks_in_flight", server="srv") == 0
