"""Tasks the other way round with hostile servers behind a real ``manifold serve``
(tests/fixtures/asking_task_server.py, raw NDJSON over stdio): polling ids they never got or another
server's, cancelling, flooding, and a client that never answers. The client is the official
Python SDK client with an elicitation callback, over Streamable HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.interaction.harness import REPO, RunningManifold, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = [sys.executable, str(REPO / "tests" / "fixtures" / "asking_task_server.py")]
TTL = 3  # seconds: limits.max_task_ttl
HELD = 4  # limits.max_client_tasks_per_server
RELATED = "io.modelcontextprotocol/related-task"


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("client-tasks-audit") / "audit.jsonl"


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory, audit: Path) -> AsyncIterator[RunningManifold]:
    servers = {name: {"command": SERVER[0], "args": SERVER[1:]} for name in ("a", "b", "c", "d")}
    config = {
        "servers": servers,
        "limits": {"max_task_ttl": TTL, "max_client_tasks_per_server": HELD},
        "policy": {"audit": {"path": str(audit)}},
    }
    async with running_manifold(tmp_path_factory.mktemp("client-tasks"), config) as running:
        yield running


class User:
    """The elicitation callback: answers with a name, or never (until cancelled)."""

    def __init__(self, *, answers: bool = True) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.cancelled = anyio.Event()

    async def __call__(self, context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        self.asked.append(params.message)
        if not self.answers:
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled.set()
        return t.ElicitResult(action="accept", content={"name": "Ada"})


@asynccontextmanager
async def connected(manifold: RunningManifold, user: User) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
        Client(
            streamable_http_client(manifold.url, http_client=http), mode="legacy", elicitation_callback=user
        ) as c,
    ):
        yield c


async def call(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    with anyio.fail_after(40):
        result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, t.TextContent)
    return json.loads(block.text)


async def sample(manifold: RunningManifold, name: str, **labels: str) -> float:
    """One sample of /metrics of the running ``manifold serve`` now; 0 if not yet exposed."""
    async with httpx2.AsyncClient() as http:
        text = (await http.get(manifold.url.replace("/mcp", "/metrics"))).text
    shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{shown}}} "
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


def _audited(audit: Path, task_id: str) -> list[tuple[str, str, str]]:
    """The audit log's records of ``task_id``: (direction, server, outcome), in order."""
    records = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
    return [(r["direction"], r["server"], r["outcome"]) for r in records if r.get("task") == task_id]


def _not_found(answer: dict[str, Any]) -> bool:
    error = answer.get("error") or {}
    return error.get("code") == -32602 and "Task not found" in error.get("message", "")


async def test_manifold_declares_the_tasks_it_holds(manifold: RunningManifold) -> None:
    async with connected(manifold, User()) as client:
        assert await call(client, "a.declared") == {
            "list": {},
            "cancel": {},
            "requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}},
        }


async def test_a_held_task_is_polled_listed_and_read_under_manifolds_id(manifold: RunningManifold) -> None:
    user = User()
    async with connected(manifold, user) as client:
        report = await call(client, "a.ask")
    task = report["created"]["result"]["task"]
    assert (task["status"], task["ttl"]) == ("working", TTL * 1000)  # the ttl asked, capped
    assert report["statuses"][-1] == "completed"
    assert task["taskId"] in [listed["taskId"] for listed in report["list"]["result"]["tasks"]]
    related = {RELATED: {"taskId": task["taskId"]}}
    assert report["result"] == {"result": {"action": "accept", "content": {"name": "Ada"}, "_meta": related}}
    assert user.asked == ["Your name?"]


async def test_another_servers_ids_and_ids_never_given_are_not_found_and_reach_nobody(
    manifold: RunningManifold,
) -> None:
    user = User()
    async with connected(manifold, user) as client:
        theirs = (await call(client, "a.ask"))["created"]["result"]["task"]["taskId"]
        for probe in (
            await call(client, "b.probe", {"taskId": theirs}),
            await call(client, "a.probe", {"taskId": "guessed-" + theirs}),
        ):
            for method, answer in probe.items():
                if method == "tasks/list":
                    continue
                assert _not_found(answer), (method, answer)
                assert theirs not in json.dumps(answer)
        assert (await call(client, "b.probe", {"taskId": theirs}))["tasks/list"] == {"result": {"tasks": []}}
    assert len(user.asked) == 1  # only a's own question reached the client


async def test_a_server_that_cancels_ends_the_question_and_cannot_cancel_twice(
    manifold: RunningManifold, audit: Path
) -> None:
    user = User(answers=False)
    ended = "manifold_client_tasks_ended_total"
    labels = {"server": "a", "method": "elicitation/create"}
    created_before = await sample(manifold, "manifold_client_tasks_created_total", **labels)
    cancelled_before = await sample(manifold, ended, **labels, status="cancelled")
    async with connected(manifold, user) as client:
        report = await call(client, "a.ask", {"cancel": True})
        assert report["cancel"]["result"]["status"] == "cancelled"
        # Counted once each, in series of their own, on the real /metrics.
        assert await sample(manifold, "manifold_client_tasks_created_total", **labels) == created_before + 1
        assert await sample(manifold, ended, **labels, status="cancelled") == cancelled_before + 1
        # And audited: created, then cancelled, under the id the server was given.
        task_id = report["cancel"]["result"]["taskId"]
        with anyio.fail_after(10):  # a worker thread writes the audit log
            while len(mine := _audited(audit, task_id)) < 2:  # noqa: ASYNC110 (another process writes it)
                await anyio.sleep(0.05)
        assert mine == [("client", "a", "created"), ("client", "a", "cancelled")]
        assert report["get"]["result"]["status"] == "cancelled"
        assert "cancelled by the server" in report["result"]["error"]["message"]
        assert report["cancel_again"]["error"]["code"] == -32602
        with anyio.fail_after(10):
            await user.cancelled.wait()  # the client's question was withdrawn


async def test_a_client_that_never_answers_ends_the_task_at_its_ttl_and_nothing_hangs(
    manifold: RunningManifold,
) -> None:
    user = User(answers=False)
    async with connected(manifold, user) as client:
        with anyio.fail_after(TTL + 15):
            report = await call(client, "d.ask", {"method": "sampling/createMessage"})
    # The Python client declared no sampling: the held task fails as the plain request would.
    assert report["statuses"][-1] == "failed", report
    assert report["result"]["error"]["code"] == -32601, report
    user = User(answers=False)
    async with connected(manifold, user) as client:
        started = anyio.current_time()
        report = await call(client, "d.ask")  # d: a's tasks of the other tests count until their ttl
        took = anyio.current_time() - started
    assert report["statuses"][-1] == "failed", report
    assert "within the task's ttl" in report["result"]["error"]["message"], report
    assert took < TTL + 10
    assert user.asked == ["Your name?"]


async def test_a_flood_of_held_tasks_is_bounded_by_the_named_limit(manifold: RunningManifold) -> None:
    user = User(answers=False)
    labels = {"server": "c", "method": "elicitation/create"}
    before = await sample(manifold, "manifold_client_tasks_created_total", **labels)
    # c's tasks are created by this test only: as many ended cancelled before as created.
    assert await sample(manifold, "manifold_client_tasks_ended_total", **labels, status="cancelled") == before
    async with connected(manifold, user) as client:
        report = await call(client, "c.flood", {"count": HELD + 3})
        assert report["created"] == HELD
        # The refused ones were never created: only the held ones are counted.
        assert await sample(manifold, "manifold_client_tasks_created_total", **labels) == before + HELD
        # The flood cancels what it created: each ended once, none left in flight.
        ended = await sample(manifold, "manifold_client_tasks_ended_total", **labels, status="cancelled")
        assert ended == before + HELD
        assert await sample(manifold, "manifold_client_tasks_in_flight", server="c") == 0
        assert len(report["refused"]) == 3
        for error in report["refused"]:
            assert error["code"] == -32600
            assert error["data"]["limit"] == "max_client_tasks_per_server"
        # Another server is not bounded by c's tasks.
        assert (await call(client, "b.ask", {"cancel": True}))["cancel"]["result"]["status"] == "cancelled"
    assert len(user.asked) <= HELD + 1
