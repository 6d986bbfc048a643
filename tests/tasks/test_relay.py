"""The task relay against a scripted server connection (in memory): ids rewritten both ways, the
owner enforced, results kept within their bound, and what a hostile server says contained.
End to end with a real server: tests/interaction/test_tasks.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest

from proxy.catalog.cursors import CursorCodec
from proxy.config.sections import LimitsConfig
from proxy.core.errors import InvalidParams, LimitExceeded, RemoteError, ServerProtocolError
from proxy.observe.metrics import Metrics
from proxy.policy import Identity
from proxy.protocol.jsonrpc import Message
from proxy.tasks.ids import TaskIds
from proxy.tasks.relay import RELATED_TASK, Tasks
from proxy.tasks.store import MemoryTasks

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset({"staff"}), source="api_key")
BOB = Identity("bob", frozenset({"staff"}), source="api_key")
CAPABLE: dict[str, Any] = {"tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}


def _task(task_id: str, status: str = "working", **more: Any) -> dict[str, Any]:
    return {"taskId": task_id, "status": status, "createdAt": "2026-11-27T10:00:00Z", "ttl": 60_000, **more}


class Server:
    """A server connection that answers ``tasks/*`` from a script and records what it was sent."""

    stateless = False  # a handshake-era server (2026-07-28 ones: tests/tasks/test_modern_servers.py)

    def __init__(self, capabilities: Mapping[str, Any] = CAPABLE) -> None:
        self.capabilities = dict(capabilities)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[str, Any] = {}

    async def request(self, method: str, params: dict[str, Any] | None = None, **_: Any) -> Any:
        self.sent.append((method, dict(params or {})))
        answer = self.answers[method]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Reach:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.shared = {"srv": server}

    async def for_call(self, caller: Any, server_id: str) -> Server:
        return self.server


@dataclass
class Session:
    id: str
    told: list[Message] = field(default_factory=list)

    def notify(self, message: Message) -> None:
        self.told.append(message)


class Owners:
    def __init__(self, *sessions: Session) -> None:
        self.sessions = {s.id: s for s in sessions}

    def live(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)


@dataclass
class Caller:
    identity: Identity
    session_id: str = "s1"
    stateless: bool = False
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    asleep: bool = False


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _relay(server: Server, *sessions: Session, **limits: Any) -> tuple[Tasks, Metrics, Clock]:
    metrics, clock = Metrics(process_metrics=False), Clock()
    settings = LimitsConfig(**limits)
    store = MemoryTasks(per_identity=settings.max_tasks_per_identity, total=settings.max_tasks, clock=clock)
    tasks = Tasks(
        TaskIds(b"k" * 32),
        store,
        Reach(server),  # type: ignore[arg-type]
        Owners(*sessions),  # type: ignore[arg-type]
        settings,
        metrics,
        cursors=CursorCodec(b"c" * 32),
        clock=clock,
    )
    return tasks, metrics, clock


async def _created(tasks: Tasks, caller: Caller, server_task: str = "srv-1", endpoint: str = "") -> str:
    shown = await tasks.created(caller, endpoint, "srv", {"task": _task(server_task)})  # type: ignore[arg-type]
    task_id: str = shown["task"]["taskId"]
    assert task_id != server_task
    return task_id


async def test_the_server_is_asked_under_its_id_and_the_client_told_manifolds() -> None:
    server = Server()
    tasks, _, _ = _relay(server)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)
    server.answers["tasks/get"] = _task("srv-1", "completed", statusMessage="done", extra="internal")
    server.answers["tasks/result"] = {"content": [{"type": "text", "text": "kept"}]}
    got = await tasks.request(alice, "", "tasks/get", {"taskId": task_id})  # type: ignore[arg-type]
    # Seen to end: its result is read at once and kept, for another session or replica.
    assert server.sent == [("tasks/get", {"taskId": "srv-1"}), ("tasks/result", {"taskId": "srv-1"})]
    assert got["taskId"] == task_id
    assert got["status"] == "completed"
    assert "extra" not in got  # only a Task's own fields are relayed
    assert "srv-1" not in str(got)
    again = await tasks.request(Caller(ALICE, session_id="s2"), "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    assert again["content"] == [{"type": "text", "text": "kept"}]
    assert len(server.sent) == 2  # from the record


async def test_a_result_is_read_once_from_the_server_then_from_the_record() -> None:
    server = Server()
    tasks, metrics, _ = _relay(server)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)
    server.answers["tasks/result"] = {
        "content": [{"type": "text", "text": "hi"}],
        "_meta": {RELATED_TASK: {"taskId": "srv-1"}},
    }
    first = await tasks.request(alice, "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    again = await tasks.request(Caller(ALICE, session_id="s2"), "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    assert first == again
    assert first["_meta"][RELATED_TASK] == {"taskId": task_id}
    assert [m for m, _ in server.sent] == ["tasks/result"]
    exposition = generate_latest(metrics.registry).decode()
    assert 'manifold_tasks_ended_total{server="srv",status="completed"} 1.0' in exposition
    assert 'manifold_tasks_in_flight{server="srv"} 0.0' in exposition


async def test_a_result_over_the_bound_goes_to_its_first_reader_only_and_names_the_limit() -> None:
    server = Server()
    tasks, _, _ = _relay(server, max_task_result_bytes=1024)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)
    server.answers["tasks/result"] = {"content": [{"type": "text", "text": "x" * 5000}]}
    first = await tasks.request(alice, "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    assert len(first["content"][0]["text"]) == 5000
    with pytest.raises(LimitExceeded) as refused:
        await tasks.request(alice, "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    assert refused.value.limit == "max_task_result_bytes"


async def test_a_servers_error_for_a_result_is_relayed_with_its_ids_replaced_and_its_data_dropped() -> None:
    server = Server()
    tasks, _, _ = _relay(server)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice, server_task="srv-secret-7")
    server.answers["tasks/result"] = RemoteError(
        "srv",
        {"code": -32603, "message": "task srv-secret-7 blew up", "data": {"stack": "/opt/srv/secret.js:1"}},
    )
    for _ in range(2):  # the second from the record
        with pytest.raises(RemoteError) as relayed:
            await tasks.request(alice, "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
        assert relayed.value.error == {"code": -32603, "message": f"task {task_id} blew up"}


async def test_an_id_the_server_no_longer_knows_is_unknown_in_manifolds_words() -> None:
    server = Server()
    tasks, _, _ = _relay(server)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice, server_task="srv-secret-7")
    server.answers["tasks/get"] = RemoteError(
        "srv", {"code": -32602, "message": "Task not found: srv-secret-7"}
    )
    with pytest.raises(InvalidParams) as refused:
        await tasks.request(alice, "", "tasks/get", {"taskId": task_id})  # type: ignore[arg-type]
    assert refused.value.message == "Failed to retrieve task: Task not found"


async def test_another_identity_or_endpoint_never_reaches_the_server() -> None:
    server = Server()
    tasks, _, _ = _relay(server)
    task_id = await _created(tasks, Caller(ALICE))
    for caller, endpoint in ((Caller(BOB), ""), (Caller(ALICE), "research")):
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(InvalidParams):
                await tasks.request(caller, endpoint, method, {"taskId": task_id})  # type: ignore[arg-type]
        listed = await tasks.request(caller, endpoint, "tasks/list", {})  # type: ignore[arg-type]
        assert listed == {"tasks": []}
    assert server.sent == []


async def test_status_reaches_the_creating_session_only_and_unknown_ids_are_dropped() -> None:
    server = Server()
    mine, other = Session("s1"), Session("s2")
    tasks, metrics, _ = _relay(server, mine, other)
    task_id = await _created(tasks, Caller(ALICE, session_id="s1"))
    status = {"jsonrpc": "2.0", "method": "notifications/tasks/status"}
    tasks.status("srv", {**status, "params": _task("never-created", "completed")})
    tasks.status("srv", {**status, "params": _task("srv-1", "exploded")})  # not a status
    tasks.status("other-server", {**status, "params": _task("srv-1", "completed")})  # not its task
    tasks.status("srv", {**status, "params": "junk"})
    assert mine.told == []
    tasks.status("srv", {**status, "params": _task("srv-1", "completed", statusMessage="ok", secret="x")})
    assert [m["params"] for m in mine.told] == [
        {
            "taskId": task_id,
            "status": "completed",
            "statusMessage": "ok",
            "createdAt": "2026-11-27T10:00:00Z",
            "ttl": 60_000,
        }
    ]
    assert other.told == []
    assert (
        'manifold_tasks_ended_total{server="srv",status="completed"} 1.0'
        in generate_latest(metrics.registry).decode()
    )


async def test_a_terminal_task_cannot_be_cancelled_and_a_server_without_cancel_is_not_asked() -> None:
    server = Server()
    tasks, _, _ = _relay(server)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)
    server.answers["tasks/cancel"] = _task("srv-1", "cancelled")
    assert (await tasks.request(alice, "", "tasks/cancel", {"taskId": task_id}))["status"] == "cancelled"  # type: ignore[arg-type]
    with pytest.raises(InvalidParams, match="terminal"):
        await tasks.request(alice, "", "tasks/cancel", {"taskId": task_id})  # type: ignore[arg-type]
    server.capabilities = {"tasks": {"requests": {"tools": {"call": {}}}}}
    other = await _created(tasks, alice, server_task="srv-2")
    with pytest.raises(Exception, match="does not support tasks/cancel"):
        await tasks.request(alice, "", "tasks/cancel", {"taskId": other})  # type: ignore[arg-type]
    assert [m for m, _ in server.sent] == ["tasks/cancel"]


async def test_tasks_per_identity_are_bounded_and_the_one_refused_is_cancelled_at_its_server() -> None:
    server = Server()
    tasks, _, _ = _relay(server, max_tasks_per_identity=2)
    alice = Caller(ALICE)
    await _created(tasks, alice, "srv-1")
    await _created(tasks, alice, "srv-2")
    server.answers["tasks/cancel"] = _task("srv-3", "cancelled")
    with pytest.raises(LimitExceeded) as refused:
        await _created(tasks, alice, "srv-3")
    assert refused.value.limit == "max_tasks_per_identity"
    assert server.sent == [("tasks/cancel", {"taskId": "srv-3"})]


async def test_a_task_lives_as_long_as_its_server_says_within_the_bound_and_is_gone_after() -> None:
    server = Server()
    tasks, _, clock = _relay(server, max_task_ttl=30)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)  # the server asked for 60 s
    listed = await tasks.request(alice, "", "tasks/list", {})  # type: ignore[arg-type]
    assert [(t["taskId"], t["ttl"]) for t in listed["tasks"]] == [(task_id, 30_000)]
    clock.now += 31
    with pytest.raises(InvalidParams):
        await tasks.request(alice, "", "tasks/get", {"taskId": task_id})  # type: ignore[arg-type]
    assert server.sent == []


@pytest.mark.parametrize("created", [{"content": []}, {"task": "x"}, None])
async def test_an_answer_that_is_no_task_is_returned_as_it_is(created: Any) -> None:
    tasks, _, _ = _relay(Server())
    assert await tasks.created(Caller(ALICE), "", "srv", created) == created  # type: ignore[arg-type]


@pytest.mark.parametrize("server_task", [None, 5, "", "x" * 257])
async def test_a_create_task_result_without_a_usable_id_fails_the_call(server_task: Any) -> None:
    tasks, _, _ = _relay(Server())
    with pytest.raises(Exception, match="no usable task id"):
        await tasks.created(Caller(ALICE), "", "srv", {"task": {"taskId": server_task, "status": "working"}})  # type: ignore[arg-type]


async def test_the_audit_log_records_a_tasks_creation_and_how_it_ended_once() -> None:
    server = Server()
    written: list[dict[str, Any]] = []
    tasks, _, _ = _relay(server)
    tasks._audit = written.append  # what make_tasks wires to the audit log's write
    alice = Caller(ALICE)
    shown = await tasks.created(alice, "research", "srv", {"task": _task("srv-1")}, name="srv.research")  # type: ignore[arg-type]
    task_id = shown["task"]["taskId"]
    server.answers["tasks/cancel"] = _task("srv-1", "cancelled")
    await tasks.request(alice, "research", "tasks/cancel", {"taskId": task_id})  # type: ignore[arg-type]
    status = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": _task("srv-1", "completed")}
    tasks.status("srv", status)  # seen to end already: not again
    assert [
        (r["event"], r["outcome"], r["task"], r["identity"], r["name"], r["endpoint"]) for r in written
    ] == [
        ("task", "created", task_id, "alice", "srv.research", "research"),
        ("task", "cancelled", task_id, "alice", "srv.research", "research"),
    ]
    assert "srv-1" not in str(written)


async def test_a_result_too_large_to_keep_is_still_read_in_full_after_a_get_saw_the_task_end() -> None:
    server = Server()
    tasks, _, _ = _relay(server, max_task_result_bytes=1024)
    alice = Caller(ALICE)
    task_id = await _created(tasks, alice)
    server.answers["tasks/get"] = _task("srv-1", "completed")
    server.answers["tasks/result"] = {"content": [{"type": "text", "text": "x" * 5000}]}
    assert (await tasks.request(alice, "", "tasks/get", {"taskId": task_id}))["status"] == "completed"  # type: ignore[arg-type]
    got = await tasks.request(alice, "", "tasks/result", {"taskId": task_id})  # type: ignore[arg-type]
    assert len(got["content"][0]["text"]) == 5000


async def test_a_server_handing_out_one_task_id_twice_is_refused_the_second_time() -> None:
    tasks, _, _ = _relay(Server())
    task_id = await _created(tasks, Caller(ALICE), "srv-1")
    with pytest.raises(ServerProtocolError, match="gave before"):
        await _created(tasks, Caller(BOB), "srv-1")
    with pytest.raises(InvalidParams):  # bob holds nothing that reaches alice's task
        await tasks.request(Caller(BOB), "", "tasks/get", {"taskId": task_id})  # type: ignore[arg-type]
