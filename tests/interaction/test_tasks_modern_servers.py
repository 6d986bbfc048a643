"""A 2026-07-28 server's own tasks (the ``io.modelcontextprotocol/tasks`` extension) through
Manifold, for callers of both eras: tests/fixtures/modern_task_server.py over stdio (and over
Streamable HTTP) behind a real ``manifold serve``, driven by raw 2026-07-28 JSON-RPC over
Streamable HTTP and by the Python SDK client in the handshake era (raw JSON-RPC for the
``tasks/*`` methods, which it has no API for), and through ``manifold stdio``.

A caller holds Manifold's sealed id, never the server's; the server is told the extension only on
the calls whose task Manifold takes; a handshake-era client's blocking ``tasks/result`` is
answered by polling the server, its questions asked on that request and answered with
``tasks/update``. What a hostile server sends (a malformed handle, a task that never ends, a
``tasks/get`` about another task, a flood of questions, a handle nobody asked for, a huge result)
fails only the request it answers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp.types as t
import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from proxy.protocol.extensions import TASKS
from proxy.tasks.modern_servers import MAX_INPUT_REQUESTS, MIN_POLL
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import REPO, RunningManifold, running_manifold, write_config
from tests.interaction.test_tasks import KEYS, _stored, client_as
from tests.interaction.test_tasks_modern import TASK_CALLS, Modern

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = str(REPO / "tests" / "fixtures" / "modern_task_server.py")
RESULT_BYTES = 5000  # the "huge" tool's text: over max_task_result_bytes below
MAX_RESULT = 2048
TTL = 6.0  # limits.max_task_ttl: a task that never ends is given up on after this
POLICY = """\
version: 1
default: allow
rules: []
guardrails:
  patterns: {ticket: "TCK-[0-9]{6}"}
  rules:
    - id: tickets-stay-inside
      effect: redact
      match: {directions: [tool_results], detectors: ["custom:ticket"], tools: ["modern.*"]}
"""


def _config(tmp: Path) -> dict[str, Any]:
    (tmp / "policy.yaml").write_text(POLICY)
    keys = [{"name": n, "key": _stored(k), "roles": ["staff"]} for n, k in KEYS.items()]
    return {
        "auth": {"api_keys": keys},
        "servers": {
            "modern": {"command": sys.executable, "args": [SERVER, "--result-bytes", str(RESULT_BYTES)]}
        },
        "endpoints": {"side": {"servers": ["modern"]}},
        "limits": {"max_task_result_bytes": MAX_RESULT, "max_task_ttl": TTL},
        "policy": {"files": [str(tmp / "policy.yaml")], "audit": {"path": str(tmp / "audit.jsonl")}},
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("tasks-modern-servers")
    async with running_manifold(tmp, _config(tmp)) as running:
        yield running


async def _create(alice: Modern, tool: str, **arguments: Any) -> dict[str, Any]:
    answer = await alice.send("tools/call", name=f"modern.{tool}", arguments=arguments)
    result: dict[str, Any] = answer["result"]
    assert result["resultType"] == "task", answer
    return result


async def _until(alice: Modern, task_id: str, status: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            got: dict[str, Any] = (await alice.send("tasks/get", taskId=task_id))["result"]
            if got["status"] in (status, "completed", "failed", "cancelled"):
                return got
            await anyio.sleep(0.1)


async def _seen(alice: Modern) -> list[list[Any]]:
    """The tasks/* requests that reached the server: [method, the server's task id]."""
    answer = await alice.send("tools/call", name="modern.seen", arguments={})
    seen: list[list[Any]] = orjson.loads(answer["result"]["content"][0]["text"])
    return seen


async def _raw(client: Client, method: str, params: dict[str, Any]) -> Any:
    return await client.session._dispatcher.send_raw_request(method, params, {})


async def _legacy_create(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    raw = await _raw(client, "tools/call", {"name": f"modern.{tool}", "arguments": arguments, "task": {}})
    task: dict[str, Any] = t.CreateTaskResult.model_validate(raw).model_dump(by_alias=True)["task"]
    return task


# ---- 2026-07-28 callers ------------------------------------------------------------------------


async def test_discover_declares_the_extension_for_a_servers_own_tasks(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        found = await Modern(http, manifold.url, "alice").send("server/discover")
    assert found["result"]["capabilities"]["extensions"][TASKS] == {}


async def test_a_modern_caller_polls_the_servers_task_under_manifolds_id_checked_when_read(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await _create(alice, "slow_compute", seconds=0.3, label="TCK-123456")
        assert task["status"] == "working"
        assert isinstance(task["ttlMs"], int)
        assert task["pollIntervalMs"] == 100
        assert "ttl" not in task
        assert "pollInterval" not in task
        assert not task["taskId"].startswith("modern-")
        done = await _until(alice, task["taskId"], "completed")
        assert done["status"] == "completed"
        assert done["taskId"] == task["taskId"]
        text = done["result"]["content"][0]["text"]
        assert text.startswith("computed ")
        assert "TCK-123456" not in text  # the tool_results guardrail, at the first read
        assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})
        seen = await _seen(alice)
    asked = [s for s in seen if s[0] == "tasks/get"]
    assert asked
    assert all(str(s[1]).startswith("modern-") for s in asked)  # the server's own ids only


async def test_without_the_extension_the_server_runs_the_tool_plainly(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        plain = await alice.send(
            "tools/call", capabilities={}, name="modern.slow_compute", arguments={"seconds": 0.1}
        )
        assert plain["result"]["resultType"] == "complete"
        assert "declared: False" in plain["result"]["content"][0]["text"]
        only = await alice.send("tools/call", capabilities={}, name="modern.failing_job", arguments={})
        assert only["error"]["code"] == -32021, only


async def test_a_failed_task_inlines_its_error_with_manifolds_id(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await _create(alice, "protocol_error_job")
        done = await _until(alice, task["taskId"], "failed")
    assert done["status"] == "failed"
    assert done["error"]["code"] == -32603
    assert done["error"]["message"] == f"the job {task['taskId']} failed"  # never the server's id


async def test_input_requests_are_shown_and_tasks_update_reaches_the_server(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await _create(alice, "confirm_delete", filename="a.txt")
        waiting = await _until(alice, task["taskId"], "input_required")
        assert waiting["status"] == "input_required"
        assert list(waiting["inputRequests"]) == ["confirm"]
        assert waiting["inputRequests"]["confirm"]["method"] == "elicitation/create"
        answer = {"action": "accept", "content": {"confirm": True}}
        update = await alice.send("tasks/update", taskId=task["taskId"], inputResponses={"confirm": answer})
        assert update["result"]["resultType"] == "complete", update
        done = await _until(alice, task["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "deleted a.txt"


async def test_cancel_reaches_the_server_and_the_task_ends_cancelled(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await _create(alice, "slow_compute", seconds=30)
        cancels = sum(1 for s in await _seen(alice) if s[0] == "tasks/cancel")
        cancelled = await alice.send("tasks/cancel", taskId=task["taskId"])
        assert cancelled["result"]["resultType"] == "complete", cancelled
        got = (await alice.send("tasks/get", taskId=task["taskId"]))["result"]
        assert got["status"] == "cancelled"
        seen = await _seen(alice)
    assert sum(1 for s in seen if s[0] == "tasks/cancel") == cancels + 1  # it reached the server


async def test_ids_of_another_identity_or_endpoint_and_forged_ones_never_reach_the_server(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice, bob = Modern(http, manifold.url, "alice"), Modern(http, manifold.url, "bob")
        side = Modern(http, manifold.url + "/side", "alice")
        task = await _create(alice, "slow_compute", seconds=30)
        before = len(await _seen(alice))
        task_id = task["taskId"]
        altered = task_id[:-2] + ("AA" if not task_id.endswith("AA") else "BB")
        for method, extra in TASK_CALLS:
            for who, which in ((bob, task_id), (side, task_id), (alice, altered), (alice, "modern-1")):
                answer = await who.send(method, taskId=which, **extra)
                assert answer["error"]["code"] == -32602, (method, answer)
                assert answer["error"]["message"] == "Failed to retrieve task: Task not found"
        assert len(await _seen(alice)) == before  # none of them reached the server
        await alice.send("tasks/cancel", taskId=task_id)


# ---- handshake-era callers ---------------------------------------------------------------------


async def test_a_handshake_era_client_reads_a_modern_servers_task_with_tasks_result(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        assert client.server_capabilities is not None
        assert client.server_capabilities.tasks is not None  # a server it is shown runs tasks
        task = await _legacy_create(client, "slow_compute", seconds=0.3, label="TCK-654321")
        assert task["status"] == "working"
        assert not task["taskId"].startswith("modern-")
        assert "ttlMs" not in task
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})  # blocks: polled
        assert result["content"][0]["text"].startswith("computed ")
        assert "TCK-654321" not in result["content"][0]["text"]
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
        got = await _raw(client, "tasks/get", {"taskId": task["taskId"]})
        assert got["status"] == "completed"
        listed = await _raw(client, "tasks/list", {})
        assert task["taskId"] in [one["taskId"] for one in listed["tasks"]]


async def test_a_handshake_era_client_is_asked_the_tasks_question_on_its_open_tasks_result(
    manifold: RunningManifold,
) -> None:
    asked: list[t.ElicitRequestParams] = []

    async def elicit(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(params)
        return t.ElicitResult(action="accept", content={"confirm": True})

    async with client_as(manifold.url, "alice", elicit=elicit) as client:
        task = await _legacy_create(client, "confirm_delete", filename="b.txt")
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
    assert result["content"][0]["text"] == "deleted b.txt"
    assert len(asked) == 1
    assert asked[0].message == "Delete the file?"
    meta = asked[0].meta or {}
    assert dict(meta)["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}


async def test_a_handshake_era_client_cancels_a_modern_servers_task(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "alice") as client:
        task = await _legacy_create(client, "slow_compute", seconds=30)
        cancelled = await _raw(client, "tasks/cancel", {"taskId": task["taskId"]})
        assert cancelled["status"] == "cancelled"
        assert cancelled["taskId"] == task["taskId"]
        with pytest.raises(MCPError) as read:
            await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert "cancelled" in read.value.error.message


async def test_a_plain_call_of_a_handshake_era_client_is_run_plainly(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "alice") as client:
        call = {"name": "modern.slow_compute", "arguments": {"seconds": 0.1}}
        plain = await _raw(client, "tools/call", call)
    assert "declared: False" in plain["content"][0]["text"]


async def test_a_modern_servers_task_runs_through_manifold_stdio(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "m.yaml", {"servers": {"modern": {"command": sys.executable, "args": [SERVER]}}}
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )

    async def elicit(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        return t.ElicitResult(action="decline")

    with anyio.fail_after(60):
        async with Client(params, mode="legacy", elicitation_callback=elicit) as client:
            task = await _legacy_create(client, "confirm_delete", filename="c.txt")
            result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
            assert result["content"][0]["text"] == "kept c.txt"
            assert (await _raw(client, "tasks/get", {"taskId": task["taskId"]}))["status"] == "completed"
            listed = await _raw(client, "tasks/list", {})
            assert [one["taskId"] for one in listed["tasks"]] == [task["taskId"]]


async def test_a_modern_task_server_over_streamable_http_gets_its_routing_headers(tmp_path: Path) -> None:
    """Behind Manifold over HTTP, the server refuses (-32020) any request whose Mcp-Method or
    Mcp-Name does not mirror its body: its tasks/* carry Mcp-Name with the server's own id."""
    port = free_port()
    command = [sys.executable, SERVER, "--port", str(port)]
    config = {"servers": {"modern": {"url": f"http://127.0.0.1:{port}/mcp"}}}
    async with (
        running_http_process(command, port),
        running_manifold(tmp_path, config) as manifold,
        aiohttp.ClientSession() as http,
    ):
        alice = Modern(http, manifold.url, None)
        task = await _create(alice, "confirm_delete", filename="h.txt")
        waiting = await _until(alice, task["taskId"], "input_required")
        answer = {"action": "accept", "content": {"confirm": True}}
        await alice.send("tasks/update", taskId=task["taskId"], inputResponses={"confirm": answer})
        done = await _until(alice, task["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "deleted h.txt", (waiting, done)
        other = await _create(alice, "slow_compute", seconds=30)
        await alice.send("tasks/cancel", taskId=other["taskId"])
        seen = await _seen(alice)
    assert {method for method, _ in seen} == {"tasks/get", "tasks/update", "tasks/cancel"}, seen


# ---- hostile servers ---------------------------------------------------------------------------


async def test_a_malformed_handle_fails_only_its_call(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http, client_as(manifold.url, "alice") as client:
        alice = Modern(http, manifold.url, "alice")
        modern = await alice.send("tools/call", name="modern.bad_handle", arguments={})
        assert modern["error"]["code"] == -32603, modern
        assert "no usable task id" in modern["error"]["message"]
        with pytest.raises(MCPError) as legacy:
            await _legacy_create(client, "bad_handle")
        assert "no usable task id" in legacy.value.error.message
        greeted = await alice.send("tools/call", name="modern.greet", arguments={"name": "still"})
        assert greeted["result"]["content"][0]["text"] == "Hello, still!"


async def test_a_handle_nobody_asked_for_is_the_servers_fault(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http, client_as(manifold.url, "alice") as client:
        alice = Modern(http, manifold.url, "alice")
        modern = await alice.send("tools/call", capabilities={}, name="modern.unasked", arguments={})
        assert "task handle nobody asked for" in modern["error"]["message"], modern
        with pytest.raises(MCPError) as legacy:
            await _raw(client, "tools/call", {"name": "modern.unasked", "arguments": {}})
        assert "task handle nobody asked for" in legacy.value.error.message


async def test_a_tasks_get_about_another_task_is_refused(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        first = await _create(alice, "slow_compute", seconds=30)
        other = await _create(alice, "other_id")
        answer = await alice.send("tasks/get", taskId=other["taskId"])
        assert answer["error"]["code"] == -32603, answer
        assert "another task" in answer["error"]["message"]
        assert "modern-" not in orjson.dumps(answer).decode()
        assert (await alice.send("tasks/get", taskId=first["taskId"]))["result"]["status"] == "working"
        await alice.send("tasks/cancel", taskId=first["taskId"])


async def test_a_flood_of_input_requests_is_bounded_and_the_bound_named(manifold: RunningManifold) -> None:
    async def elicit(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        raise AssertionError("nothing is asked of a flood")

    async with aiohttp.ClientSession() as http, client_as(manifold.url, "alice", elicit=elicit) as client:
        alice = Modern(http, manifold.url, "alice")
        modern = await _create(alice, "flood")
        await anyio.sleep(0.2)
        shown = await alice.send("tasks/get", taskId=modern["taskId"])
        assert f"more than {MAX_INPUT_REQUESTS} inputRequests" in shown["error"]["message"], shown
        legacy = await _legacy_create(client, "flood")
        with pytest.raises(MCPError) as read:
            await _raw(client, "tasks/result", {"taskId": legacy["taskId"]})
        assert "MAX_INPUT_REQUESTS" in read.value.error.message


async def test_a_task_that_never_ends_is_given_up_at_its_ttl_polled_no_faster_than_the_bound(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http, client_as(manifold.url, "alice") as client:
        alice = Modern(http, manifold.url, "alice")
        task = await _legacy_create(client, "never")
        before = len(await _seen(alice))
        started = time.monotonic()
        with pytest.raises(MCPError) as read:
            await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        waited = time.monotonic() - started
        polls = len(await _seen(alice)) - before
    assert read.value.error.code == -32001, read.value.error  # the request timeout
    assert waited <= TTL + 3
    assert polls <= waited / MIN_POLL + 2  # pollIntervalMs 0 is not taken at its word


async def test_a_huge_result_is_given_once_and_then_refused_naming_the_limit(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        task = await _legacy_create(client, "huge")
        first = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert len(first["content"][0]["text"]) == RESULT_BYTES
        with pytest.raises(MCPError) as again:
            await _raw(client, "tasks/result", {"taskId": task["taskId"]})
    assert "max_task_result_bytes" in orjson.dumps(again.value.error.model_dump()).decode()
