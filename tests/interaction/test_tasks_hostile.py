"""Tasks through Manifold with a hostile task server behind it (tests/fixtures/task_server.py, a raw
NDJSON server): a task that never ends, status for task ids it never created, results over the
size limit. Raw JSON-RPC over Streamable HTTP against a real ``manifold serve``."""

from __future__ import annotations

import itertools
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import anyio.abc
import orjson
import pytest

from tests.interaction.harness import REPO, RunningManifold, post, raw_session, running_manifold
from tests.interaction.test_tasks_modern import Modern

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = str(REPO / "tests" / "fixtures" / "task_server.py")
TTL = 4  # seconds: limits.max_task_ttl
KEPT = 4096  # limits.max_task_result_bytes
HUGE = 20_000
_IDS = itertools.count(2)


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "servers": {"tasks": {"command": sys.executable, "args": [SERVER, "--result-bytes", str(HUGE)]}},
        "limits": {"max_task_ttl": TTL, "max_task_result_bytes": KEPT},
    }
    async with running_manifold(tmp_path_factory.mktemp("tasks-hostile"), config) as running:
        yield running


async def _call(
    http: aiohttp.ClientSession, url: str, session: str, method: str, params: dict[str, Any]
) -> Any:
    request = {"jsonrpc": "2.0", "id": next(_IDS), "method": method, "params": params}
    status, _, body = await post(http, url, request, {"Mcp-Session-Id": session})
    assert status == 200, body
    return body


async def _create(http: aiohttp.ClientSession, url: str, session: str, tool: str) -> str:
    body = await _call(
        http, url, session, "tools/call", {"name": f"tasks.{tool}", "arguments": {}, "task": {}}
    )
    task_id: str = body["result"]["task"]["taskId"]
    assert not task_id.startswith("task-")  # the server's own ids are task-<n>
    return task_id


async def test_a_task_that_never_ends_ties_nothing_up_and_is_forgotten_at_its_ttl(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        task_id = await _create(http, manifold.url, session, "never")
        waited: dict[str, Any] = {}

        async def wait_for_result() -> None:
            waited.update(await _call(http, manifold.url, session, "tasks/result", {"taskId": task_id}))

        with anyio.fail_after(TTL + 15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_result)
                # While one request waits on the task, the same session is served.
                got = await _call(http, manifold.url, session, "tasks/get", {"taskId": task_id})
                assert got["result"]["status"] == "working"
        # The wait ends with the task's life (its ttl, at most limits.max_task_ttl), not never.
        assert "error" in waited, waited
        gone = await _call(http, manifold.url, session, "tasks/get", {"taskId": task_id})
        assert gone.get("error", {}).get("message") == "Failed to retrieve task: Task not found"


async def test_status_for_ids_the_server_never_created_never_reaches_a_client(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        task_id = await _create(http, manifold.url, session, "never")
        heard: list[dict[str, Any]] = []
        mine = anyio.Event()

        async def listen(task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
            async with http.get(manifold.url, headers=headers) as stream:
                task_status.started()
                async for line in stream.content:
                    if line.startswith(b"data:") and b"notifications/tasks/status" in line:
                        heard.append(orjson.loads(line[5:])["params"])
                        mine.set()

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(listen)
                # The server answers, then sends a forged status and the task's own.
                await _call(http, manifold.url, session, "tasks/get", {"taskId": task_id})
                await mine.wait()
                tg.cancel_scope.cancel()
    assert {status["taskId"] for status in heard} == {task_id}
    assert "forged" not in orjson.dumps(heard).decode()


async def test_a_result_over_the_size_limit_is_given_once_and_then_named(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        first, second = await raw_session(http, manifold.url), await raw_session(http, manifold.url)
        task_id = await _create(http, manifold.url, first, "huge")
        got = await _call(http, manifold.url, first, "tasks/result", {"taskId": task_id})
        assert len(got["result"]["content"][0]["text"]) == HUGE
        again = await _call(http, manifold.url, second, "tasks/result", {"taskId": task_id})
    assert again["error"]["code"] == -32600
    assert again["error"]["data"]["limit"] == "max_task_result_bytes"


async def test_the_servers_words_about_ids_never_reach_a_client(manifold: RunningManifold) -> None:
    """The server dumps internals for an id it does not know; Manifold never asks it about one."""
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        for task_id in ("task-1", "forged-1", 7, {"$gt": ""}):
            body = await _call(http, manifold.url, session, "tasks/get", {"taskId": task_id})
            assert "/srv" not in orjson.dumps(body).decode()
            assert body["error"]["data"] == {"reason": "unknown_task"}


async def test_a_modern_caller_gets_an_oversized_result_once_and_a_never_ending_task_acks_cancel(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        modern = Modern(http, manifold.url, None)
        huge = await modern.create("", tool="tasks.huge")
        assert not huge["taskId"].startswith("task-")
        first = await modern.until_terminal(huge["taskId"])
        assert len(first["result"]["content"][0]["text"]) == HUGE  # given to its first reader
        again = await modern.send("tasks/get", taskId=huge["taskId"])
        assert again["error"]["data"]["limit"] == "max_task_result_bytes", again
        never = await modern.create("", tool="tasks.never")
        polled = await modern.send("tasks/get", taskId=never["taskId"])
        assert polled["result"]["status"] == "working"
        assert "forged" not in orjson.dumps(polled).decode()
        assert (await modern.send("tasks/cancel", taskId=never["taskId"]))["result"] == {
            "resultType": "complete",
            "_meta": polled["result"]["_meta"],
        }
