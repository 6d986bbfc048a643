"""Gateway-held tasks in memory: which calls are held (per server, per tool, and what the server
runs itself), and a held call stopped by a cancel another replica told (or that the records say,
when listening restarts). End to end: tests/interaction/test_tasks_held.py and, across two
replicas on a real Redis, tests/interaction/test_tasks_replicas.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.merge import Entry
from proxy.config.model import ServerConfig
from proxy.config.sections import LimitsConfig
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import CallContext
from proxy.tasks.held import HeldTasks
from proxy.tasks.ids import TaskIds
from proxy.tasks.store import MemoryTasks, TaskRecord, TaskStoreError
from tests.tasks.test_relay import ALICE, CAPABLE, Caller, Owners, Reach, Server

pytestmark = pytest.mark.anyio

TASKY = {"execution": {"taskSupport": "optional"}}


class ToldStore(MemoryTasks):
    """One replica's memory store, with the cancels other replicas tell scripted."""

    def __init__(self) -> None:
        super().__init__(per_identity=100, total=100)
        self.send, self.receive = anyio.create_memory_object_stream[str](10)
        self.published: list[str] = []
        self.ended = anyio.Event()  # a record was kept with its outcome

    async def put(self, record: TaskRecord) -> None:
        await super().put(record)
        if record.outcome is not None:
            self.ended.set()

    async def aclose(self) -> None:
        self.send.close()
        self.receive.close()

    async def cancelled(self, key: str) -> None:
        self.published.append(key)

    async def cancels(self) -> AsyncGenerator[str, None]:
        async for key in self.receive:
            yield key


def _server(**data: Any) -> ServerConfig:
    return ServerConfig.model_validate({"id": "srv", "command": "srv", **data})


def _held(server: Server, store: MemoryTasks, config: ServerConfig) -> HeldTasks:
    return HeldTasks(
        TaskIds(b"k" * 32),
        store,
        Reach(server),
        Owners(),
        LimitsConfig(),
        Metrics(process_metrics=False),
        cursors=CursorCodec(b"c" * 32),
        held={"srv": config},
    )


def _ctx(tool: str, definition: dict[str, Any] | None = None, **params: Any) -> CallContext:
    entry = Entry(f"srv.{tool}", "srv", tool, {"name": f"srv.{tool}", **(definition or {})})
    return CallContext(
        caller=Caller(ALICE),  # type: ignore[arg-type]
        request_id=1,
        method="tools/call",
        server_id="srv",
        name=entry.name,
        params={"name": tool, "arguments": {}, **params},
        entry=entry,
    )


@pytest.mark.parametrize(
    ("config", "tool", "definition", "capabilities", "held"),
    [
        ({"tasks": "held"}, "slow", None, {}, True),
        ({"tasks": "held", "tools": {"slow": {"tasks": "relay"}}}, "slow", None, {}, False),
        ({"tools": {"slow": {"tasks": "held"}}}, "slow", None, {}, True),
        ({"tools": {"slow": {"tasks": "held"}}}, "echo", None, {}, False),
        ({"tools": {"ghost": {"tasks": "held"}}}, "slow", None, {}, False),
        # The server runs this tool as a task itself: relayed.
        ({"tasks": "held"}, "slow", TASKY, CAPABLE, False),
        # It says it may, but its server runs no tasks; or the server runs tasks, not this tool.
        ({"tasks": "held"}, "slow", TASKY, {}, True),
        ({"tasks": "held"}, "slow", None, CAPABLE, True),
    ],
)
async def test_which_calls_are_held(
    config: dict[str, Any],
    tool: str,
    definition: dict[str, Any] | None,
    capabilities: dict[str, Any],
    held: bool,
) -> None:
    tasks = _held(Server(capabilities), MemoryTasks(per_identity=9, total=9), _server(**config))
    assert await tasks.holds(_ctx(tool, definition)) is held


async def test_a_reload_changes_which_tools_are_held() -> None:
    tasks = _held(Server({}), MemoryTasks(per_identity=9, total=9), _server())
    assert not await tasks.holds(_ctx("slow"))
    assert tasks.running_tasks() == set()
    tasks.servers_changed({"srv": _server(tools={"slow": {"tasks": "held"}})})
    assert await tasks.holds(_ctx("slow"))
    assert tasks.running_tasks() == {"srv"}


async def _start_held(tasks: HeldTasks, store: ToldStore) -> tuple[str, str]:
    """A held call of alice's that never ends, running (its pipeline entered): its task id and
    its record's key."""
    entered = anyio.Event()

    async def hang(ctx: CallContext) -> Any:
        entered.set()
        await anyio.sleep_forever()

    created = await tasks.creating(hang)(_ctx("slow", task={"ttl": 60_000}))
    with anyio.fail_after(5):
        await entered.wait()
    task_id: str = created["task"]["taskId"]
    [record] = await store.owned(next(iter(store._by_owner)), "")
    return task_id, record.key


@asynccontextmanager
async def running_held(store: ToldStore) -> AsyncIterator[tuple[HeldTasks, str, str]]:
    """One replica's held tasks running, with a held call of alice's that never ends started:
    the tasks, the call's task id and its record's key."""
    tasks = _held(Server({}), store, _server(tasks="held"))
    async with store.send, store.receive, anyio.create_task_group() as tg:
        await tg.start(tasks.run)
        task_id, key = await _start_held(tasks, store)
        yield tasks, task_id, key
        tg.cancel_scope.cancel()  # the held calls, and the listening, end with the block


async def _cancelled_elsewhere(store: ToldStore, key: str) -> None:
    record = await store.get(key)
    assert record is not None
    await store.put(record.updated({**record.task, "status": "cancelled"}))


async def _outcome(store: ToldStore, key: str) -> bytes | None:
    with anyio.fail_after(5):
        await store.ended.wait()
    record = await store.get(key)
    return None if record is None else record.outcome


async def test_a_held_call_stops_when_another_replica_tells_its_cancel() -> None:
    store = ToldStore()
    async with running_held(store) as (tasks, task_id, key):
        await store.send.send("f" * 32)  # a key of no call here: nothing happens
        await _cancelled_elsewhere(store, key)
        await store.send.send(key)
        assert b"the task was cancelled" in (await _outcome(store, key) or b"")
        got = await tasks.request(Caller(ALICE), "", "tasks/get", {"taskId": task_id})  # type: ignore[arg-type]
        assert got["status"] == "cancelled"


async def test_a_cancel_missed_while_not_listening_is_read_from_the_records() -> None:
    store = ToldStore()
    async with running_held(store) as (_, _, key):
        await _cancelled_elsewhere(store, key)
        await store.send.send("")  # listening (re)started: the records are looked at
        assert b"the task was cancelled" in (await _outcome(store, key) or b"")


async def test_a_cancel_here_of_a_call_running_here_is_not_told_and_one_running_elsewhere_is() -> None:
    store = ToldStore()
    async with running_held(store) as (tasks, task_id, key):
        with anyio.fail_after(5):
            await tasks.request(Caller(ALICE), "", "tasks/cancel", {"taskId": task_id})  # type: ignore[arg-type]
        assert store.published == []  # stopped here, at once
        assert b"the task was cancelled" in (await _outcome(store, key) or b"")
    # Another replica's view of a held task: no call of it runs here, so the cancel is told.
    there = _held(Server({}), store, _server(tasks="held"))
    record = await store.get(key)
    assert record is not None
    await store.put(replace(record, task={**record.task, "status": "working"}, outcome=None))
    await there.request(Caller(ALICE), "", "tasks/cancel", {"taskId": task_id})  # type: ignore[arg-type]
    assert store.published == [key]


async def test_a_cancel_that_cannot_be_told_is_still_answered_and_kept_in_the_record() -> None:
    class Unreachable(ToldStore):
        async def cancelled(self, key: str) -> None:
            raise TaskStoreError("Redis is away")

    store = Unreachable()
    async with running_held(store) as (_, task_id, key):
        there = _held(Server({}), store, _server(tasks="held"))  # no call of it runs there
        got = await there.request(Caller(ALICE), "", "tasks/cancel", {"taskId": task_id})  # type: ignore[arg-type]
        assert got["status"] == "cancelled"
        await store.send.send("")  # the running replica's next look at the records stops it
        assert b"the task was cancelled" in (await _outcome(store, key) or b"")


async def test_a_call_cancelled_elsewhere_before_it_ran_does_not_run() -> None:
    class CancelledFirst(ToldStore):
        async def find(self, server_id: str, server_task: str) -> TaskRecord | None:
            found = await super().find(server_id, server_task)
            if found is not None:  # another replica's tasks/cancel came first
                await _cancelled_elsewhere(self, found.key)
            return await super().find(server_id, server_task)

    ran: list[CallContext] = []

    async def recorded(ctx: CallContext) -> Any:
        ran.append(ctx)
        await anyio.sleep_forever()

    store = CancelledFirst()
    tasks = _held(Server({}), store, _server(tasks="held"))
    async with store.send, store.receive, anyio.create_task_group() as tg:
        await tg.start(tasks.run)
        created = await tasks.creating(recorded)(_ctx("slow", task={}))
        [record] = await store.owned(next(iter(store._by_owner)), "")
        assert b"the task was cancelled" in (await _outcome(store, record.key) or b"")
        assert created["task"]["status"] == "working"
        assert ran == []
        tg.cancel_scope.cancel()


async def test_a_surprise_while_listening_is_logged_and_listening_starts_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("proxy.tasks.held._RELISTEN", 0.01)

    class Surprising(ToldStore):
        def __init__(self) -> None:
            super().__init__()
            self.listened = 0

        async def cancels(self) -> AsyncGenerator[str, None]:
            self.listened += 1
            if self.listened == 1:
                raise RuntimeError("a bug of ours")
            async for key in super().cancels():
                yield key

    store = Surprising()
    async with running_held(store) as (_, _, key):
        await _cancelled_elsewhere(store, key)
        await store.send.send(key)  # heard by the second listening
        assert b"the task was cancelled" in (await _outcome(store, key) or b"")
    assert store.listened == 2
    assert "hearing task cancels from other replicas failed" in caplog.text
