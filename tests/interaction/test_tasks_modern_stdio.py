"""The tasks extension for 2026-07-28 callers through ``manifold stdio``: raw 2026-07-28 JSON-RPC
over the process's pipes (the way a desktop client spawns it), with
``@modelcontextprotocol/server-everything`` (a handshake-era server running tasks) and a fixture
server whose calls Manifold holds as tasks (``tasks: held``) behind it.

Created unasked for a caller declaring the extension, polled with ``tasks/get`` to the inlined
result, cancelled; the required-task error without the extension; and what a hostile caller
sends (guessed, malformed ids, removed methods, undeclared requests) answered by Manifold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from proxy.protocol import versions
from proxy.protocol.extensions import TASKS
from tests.interaction.harness import REPO, everything_server, fixture_server, write_config
from tests.interaction.test_tasks_modern import request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
WITH_TASKS: dict[str, Any] = {"extensions": {TASKS: {}}}
RESEARCH = "everything.simulate-research-query"
UNKNOWN = {"reason": "unknown_task"}


class Caller:
    """A raw 2026-07-28 client on ``manifold stdio``'s pipes: one request at a time, each with
    its own envelope; lines that answer nothing asked (notifications) are passed over."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._next = 0

    async def send(self, method: str, capabilities: dict[str, Any] | None = None, **params: Any) -> Any:
        self._next += 1
        body = request(self._next, method, capabilities, params)
        await self._stdin.send(json.dumps(body).encode() + b"\n")
        with anyio.fail_after(60):
            while True:
                answer = json.loads(await self._stdout.receive_until(b"\n", 1 << 22))
                if answer.get("id") == self._next:
                    return answer

    async def until_ended(self, task_id: str) -> dict[str, Any]:
        with anyio.fail_after(60):
            while True:  # polling is the extension's way
                got: dict[str, Any] = (await self.send("tasks/get", taskId=task_id))["result"]
                if got["status"] in ("completed", "failed", "cancelled"):
                    return got
                await anyio.sleep(0.2)


@asynccontextmanager
async def manifold_stdio(tmp_path: Path) -> AsyncIterator[Caller]:
    config = write_config(
        tmp_path / "m.yaml",
        {
            "servers": {
                "everything": everything_server(),
                "fx": {**fixture_server("fx", tools=1), "tasks": "held"},
            }
        },
    )
    command = [sys.executable, "-m", "proxy.cli", "stdio", "--config", str(config)]
    async with await anyio.open_process(command, cwd=str(REPO), stderr=subprocess.DEVNULL) as process:
        try:
            yield Caller(process)
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()  # the client's goodbye: Manifold exits
            with anyio.fail_after(20):
                await process.wait()


@pytest.fixture(scope="module")
async def caller(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Caller]:
    async with manifold_stdio(tmp_path_factory.mktemp("tasks-stdio")) as running:
        yield running


async def test_discover_declares_the_extension_and_the_list_says_which_tools_run_as_tasks(
    caller: Caller,
) -> None:
    discovered = await caller.send("server/discover")
    assert discovered["result"]["capabilities"]["extensions"][TASKS] == {}
    listed = await caller.send("tools/list")
    support = {t["name"]: (t.get("execution") or {}).get("taskSupport") for t in listed["result"]["tools"]}
    assert support[RESEARCH] == "required"  # the server's own word
    assert support["fx.slow"] == "optional"  # held by Manifold


async def test_a_relayed_task_is_created_unasked_and_polled_to_its_inlined_result(caller: Caller) -> None:
    answer = await caller.send("tools/call", name=RESEARCH, arguments={"topic": "tides"})
    task = answer["result"]
    assert task["resultType"] == "task", answer
    assert task["status"] == "working"
    assert task["ttlMs"] > 0
    done = await caller.until_ended(task["taskId"])
    assert done["status"] == "completed"
    assert "Research Report: tides" in done["result"]["content"][0]["text"]


async def test_a_held_task_is_created_polled_and_another_cancelled(caller: Caller) -> None:
    with anyio.fail_after(2):  # the call takes 2 s: only a task answers this soon
        answer = await caller.send("tools/call", name="fx.slow", arguments={"seconds": 2})
    task = answer["result"]
    assert task["resultType"] == "task", answer
    done = await caller.until_ended(task["taskId"])
    assert (done["status"], done["result"]["content"][0]["text"]) == ("completed", "done")
    hung = (await caller.send("tools/call", name="fx.hang", arguments={}))["result"]
    cancelled = await caller.send("tasks/cancel", taskId=hung["taskId"])
    assert cancelled["result"]["resultType"] == "complete"
    assert (await caller.until_ended(hung["taskId"]))["status"] == "cancelled"
    plain = await caller.send("tools/call", {}, name="fx.slow", arguments={"seconds": 0})
    assert plain["result"]["content"][0]["text"] == "done"  # no extension: called plainly


async def test_a_relayed_task_is_cancelled(caller: Caller) -> None:
    task = (await caller.send("tools/call", name=RESEARCH, arguments={"topic": "stopped"}))["result"]
    cancelled = await caller.send("tasks/cancel", taskId=task["taskId"])
    assert cancelled["result"]["resultType"] == "complete"
    assert (await caller.until_ended(task["taskId"]))["status"] == "cancelled"
    again = await caller.send("tasks/cancel", taskId=task["taskId"])  # ended: acknowledged again
    assert again["result"]["resultType"] == "complete"


async def test_a_task_only_tool_without_the_extension_names_the_missing_capability(caller: Caller) -> None:
    answer = await caller.send("tools/call", {}, name=RESEARCH, arguments={"topic": "x"})
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_hostile_ids_undeclared_requests_and_removed_methods_are_answered_by_manifold(
    caller: Caller,
) -> None:
    task = (await caller.send("tools/call", name="fx.slow", arguments={"seconds": 0}))["result"]
    task_id = task["taskId"]
    altered = task_id[:-2] + ("AA" if not task_id.endswith("AA") else "BB")
    for which in (altered, "0" * 32, 7, None, {"taskId": task_id}):
        for method in ("tasks/get", "tasks/cancel"):
            answer = await caller.send(method, taskId=which)
            assert answer["error"]["code"] == -32602, (method, which, answer)
            assert answer["error"].get("data") == UNKNOWN, answer
    for method in ("tasks/get", "tasks/cancel"):
        assert (await caller.send(method, {}, taskId=task_id))["error"]["code"] == -32021
    for method in ("tasks/result", "tasks/list"):
        assert (await caller.send(method, taskId=task_id))["error"]["code"] == -32601
    assert (await caller.until_ended(task_id))["status"] == "completed"  # none of that touched it
