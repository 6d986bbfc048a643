"""Gateway-held tasks, end to end: SDK fixture servers (which run no tasks) configured
``tasks: held`` behind a real ``manifold serve``, driven by the official Python SDK client over
Streamable HTTP with raw task requests (the SDK has no client-side tasks API).

A task-augmented call is answered at once with Manifold's task; the call runs on; its outcome is
read with ``tasks/result`` from another session; a confirm-gated call is ``input_required`` until
the owner's ``tasks/result`` answers the question; cancel cancels the call; a server dying fails
the task; the per-identity limit bounds held tasks as it bounds relayed ones.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp.types as t
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.interaction.harness import (
    RunningManifold,
    everything_server,
    fixture_server,
    running_manifold,
    write_config,
)
from tests.interaction.test_reload import config_path, until
from tests.interaction.test_tasks import KEYS, _stored, client_as  # the same keys and client
from tests.interaction.test_tasks_modern import Modern

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

POLICY = """\
version: 1
default: allow
rules:
  - id: adding-is-serious
    effect: confirm
    match: {tools: ["fx.add"]}
    confirm: {reason: adding is serious, timeout: 30}
guardrails:
  patterns: {ticket: "TCK-[0-9]{6}"}
  rules:
    - id: tickets-stay-inside
      effect: redact
      match: {directions: [tool_results], detectors: ["custom:ticket"], tools: ["everything.*"]}
"""
PER_IDENTITY = 30


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("held")
    (tmp / "policy.yaml").write_text(POLICY)
    keys = [{"name": n, "key": _stored(k), "roles": ["staff"]} for n, k in KEYS.items()]
    config = {
        "auth": {"api_keys": keys},
        "servers": {
            # Held, but echo (tools.echo.tasks: relay) and a per-tool setting naming no tool.
            "fx": {
                **fixture_server("fx", tools=2),
                "tasks": "held",
                "tools": {"echo": {"tasks": "relay"}, "ghost": {"tasks": "held"}},
            },
            # Not held, but one tool is (servers.<id>.tools.<tool>.tasks: held).
            "mixed": {**fixture_server("mixed", tools=2), "tools": {"slow": {"tasks": "held"}}},
            "doomed": {**fixture_server("doomed", tools=1), "tasks": "held"},
            "plain": fixture_server("plain", tools=1),  # not held: a task field is passed on
            "everything": everything_server(),  # runs tasks itself: relayed
        },
        "limits": {"max_tasks_per_identity": PER_IDENTITY},
        "policy": {"files": [str(tmp / "policy.yaml")], "audit": {"path": str(tmp / "audit.jsonl")}},
    }
    async with running_manifold(tmp, config) as running:
        yield running


async def _raw(client: Client, method: str, params: dict[str, Any]) -> Any:
    return await client.session._dispatcher.send_raw_request(method, params, {})


async def _create(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    raw = await _raw(client, "tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 60_000}})
    task: dict[str, Any] = t.CreateTaskResult.model_validate(raw).model_dump(by_alias=True)["task"]
    return task


async def _status(client: Client, task_id: str) -> str:
    got = await _raw(client, "tasks/get", {"taskId": task_id})
    return str(got["status"])


async def _until(client: Client, task_id: str, statuses: set[str]) -> str:
    for _ in range(300):  # polling tasks/get is the protocol; bounded (30 s)
        if (status := await _status(client, task_id)) in statuses:
            return status
        await anyio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {statuses}")


async def test_a_slow_call_is_answered_at_once_and_read_from_another_session(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        initialized = client.session.initialize_result
        assert initialized is not None
        assert initialized.capabilities.tasks is not None
        with anyio.fail_after(2):  # the call takes 3 s: only a task answers this soon
            task = await _create(client, "fx.slow", {"seconds": 3})
        assert task["status"] == "working"
        assert not task["taskId"].startswith("held:")
        assert await _status(client, task["taskId"]) == "working"
    async with client_as(manifold.url, "alice") as other:
        result = await _raw(other, "tasks/result", {"taskId": task["taskId"]})
        assert result["content"][0]["text"] == "done"
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
        assert await _status(other, task["taskId"]) == "completed"
        listed = await _raw(other, "tasks/list", {})
        assert task["taskId"] in {x["taskId"] for x in listed["tasks"]}
    async with client_as(manifold.url, "bob") as bob:
        with pytest.raises(MCPError) as refused:
            await _raw(bob, "tasks/result", {"taskId": task["taskId"]})
        assert refused.value.error.code == -32602
    path = manifold.log_path.parent / "audit.jsonl"
    with anyio.fail_after(10):
        while True:  # written in batches off the event loop: read until both are there
            audit = [orjson.loads(line) for line in path.read_bytes().splitlines()]
            mine = [r for r in audit if r.get("event") == "task" and r.get("task") == task["taskId"]]
            if len(mine) >= 2:
                break
            await anyio.sleep(0.05)
    assert [r["outcome"] for r in mine] == ["created", "completed"]


async def test_a_confirm_gated_call_waits_as_input_required_until_its_reader_approves(
    manifold: RunningManifold,
) -> None:
    asked: list[dict[str, Any]] = []

    async def approve(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(params.model_dump(by_alias=True))
        return t.ElicitResult(action="accept", content={"approve": True})

    async with client_as(manifold.url, "alice", elicit=approve) as client:
        task = await _create(client, "fx.add", {"a": 2, "b": 3})
        assert await _until(client, task["taskId"], {"input_required"}) == "input_required"
        assert not asked  # nobody is asked until the owner reads the result
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert result["content"][0]["text"] == "5"
        assert len(asked) == 1
        related = asked[0]["_meta"]["io.modelcontextprotocol/related-task"]
        assert related == {"taskId": task["taskId"]}
        assert await _status(client, task["taskId"]) == "completed"


async def test_a_declined_confirmation_fails_the_task_without_calling_the_server(
    manifold: RunningManifold,
) -> None:
    async def decline(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        return t.ElicitResult(action="decline")

    async with client_as(manifold.url, "alice", elicit=decline) as client:
        task = await _create(client, "fx.add", {"a": 2, "b": 3})
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert result["isError"] is True
        assert result["_meta"]["dev.manifold/outcome"] == "not_confirmed"
        assert await _status(client, task["taskId"]) == "failed"


async def test_cancelling_a_held_task_cancels_its_call(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "alice") as client:
        task = await _create(client, "fx.hang", {})
        with anyio.fail_after(10):
            cancelled = await _raw(client, "tasks/cancel", {"taskId": task["taskId"]})
        assert cancelled["status"] == "cancelled"
        with pytest.raises(MCPError) as again:
            await _raw(client, "tasks/cancel", {"taskId": task["taskId"]})
        assert again.value.error.code == -32602
        with pytest.raises(MCPError):
            await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert await _status(client, task["taskId"]) == "cancelled"
        # The server is free again: the hung call was cancelled there, and a new call answers.
        answer = await client.call_tool("fx.echo", {"n": 1})
        assert not answer.is_error


async def test_a_held_call_whose_server_dies_fails_the_task_only(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "alice") as client:
        task = await _create(client, "doomed.crash", {})
        with pytest.raises(MCPError):
            with anyio.fail_after(30):
                await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert await _status(client, task["taskId"]) == "failed"
        other = await _create(client, "fx.slow", {"seconds": 0})
        assert (await _raw(client, "tasks/result", {"taskId": other["taskId"]}))["content"][0][
            "text"
        ] == "done"


async def test_held_tasks_are_bounded_by_the_per_identity_limit(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "bob") as client:
        made = 0
        refused: MCPError | None = None
        for _ in range(10_000):  # bounded: the limit refuses long before
            try:
                await _create(client, "fx.slow", {"seconds": 0})
            except MCPError as exc:
                refused = exc
                break
            made += 1
        assert made == PER_IDENTITY
        assert refused is not None
        assert refused.error.code == -32600
        assert "max_tasks_per_identity" in str(refused.error.data)


async def test_a_server_not_held_gets_the_call_as_it_was_asked(manifold: RunningManifold) -> None:
    async with client_as(manifold.url, "alice") as client:
        raw = await _raw(client, "tools/call", {"name": "plain.echo", "arguments": {}, "task": {"ttl": 1000}})
        assert "task" not in raw
        assert raw["content"]


async def test_a_relayed_tasks_result_passes_the_result_guardrails_when_it_is_read(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        arguments = {"topic": "ticket TCK-123456", "ambiguous": False}
        task = await _create(client, "everything.simulate-research-query", arguments)
        assert not task["taskId"].startswith("held:")
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        text = orjson.dumps(result).decode()
        assert "Research Report" in text  # the server's result, read at its end ...
        assert "TCK-123456" not in text  # ... with what the guardrail redacts redacted
    async with client_as(manifold.url, "alice") as other:  # and as it was kept
        again = orjson.dumps(await _raw(other, "tasks/result", {"taskId": task["taskId"]})).decode()
        assert "Research Report" in again
        assert "TCK-123456" not in again


async def test_held_tools_are_listed_as_optional_tasks_and_the_others_as_their_servers_say(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        listed = await _raw(client, "tools/list", {})
    support = {tool["name"]: (tool.get("execution") or {}).get("taskSupport") for tool in listed["tools"]}
    assert support["fx.slow"] == "optional"  # the server's tasks: held
    assert support["fx.hang"] == "optional"
    assert support["fx.echo"] is None  # tools.echo.tasks: relay takes it out
    assert support["mixed.slow"] == "optional"  # held on its own
    assert support["mixed.echo"] is None
    assert support["plain.echo"] is None
    assert support["everything.simulate-research-query"] == "required"  # its server's own word


async def test_a_tool_held_on_its_own_is_held_and_its_siblings_are_called_plainly(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        with anyio.fail_after(2):  # the call takes 3 s: only a task answers this soon
            task = await _create(client, "mixed.slow", {"seconds": 3})
        assert task["status"] == "working"
        for sibling in ("mixed.echo", "fx.echo"):  # not held: the task field is passed on
            raw = await _raw(client, "tools/call", {"name": sibling, "arguments": {}, "task": {"ttl": 1000}})
            assert "task" not in raw
            assert raw["content"]
        result = await _raw(client, "tasks/result", {"taskId": task["taskId"]})
        assert result["content"][0]["text"] == "done"


async def test_a_per_tool_setting_naming_no_tool_is_warned_about_and_holds_nothing(
    manifold: RunningManifold,
) -> None:
    async with client_as(manifold.url, "alice") as client:
        with pytest.raises(MCPError) as unknown:
            await _raw(client, "tools/call", {"name": "fx.ghost", "arguments": {}, "task": {}})
        assert unknown.value.error.code == -32602
    log = manifold.log_path.read_text()
    assert "lists no tool 'ghost'" in log


async def test_a_2026_caller_declaring_the_extension_gets_a_held_task_and_polls_it(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        caller = Modern(http, manifold.url, "alice")
        listed = await caller.send("tools/list")
        shown = {t["name"]: t for t in listed["result"]["tools"]}
        assert shown["fx.slow"]["execution"]["taskSupport"] == "optional"
        with anyio.fail_after(2):  # the call takes 2 s: only a task answers this soon
            answer = await caller.send("tools/call", name="fx.slow", arguments={"seconds": 2})
        handle = answer["result"]
        assert handle["resultType"] == "task", handle
        assert handle["status"] == "working"
        assert "ttlMs" in handle
        assert "pollIntervalMs" in handle
        task_id = handle["taskId"]
        got = await caller.until_terminal(task_id)  # polling is the extension's way
        assert got["status"] == "completed"
        assert got["result"]["content"][0]["text"] == "done"
        # Without the extension an optional tool is called plainly.
        plain = await caller.send("tools/call", {}, name="fx.slow", arguments={"seconds": 0})
        assert plain["result"]["content"][0]["text"] == "done"
        # Cancelled: the hung call stops, the task says so.
        hung = (await caller.send("tools/call", name="fx.hang", arguments={}))["result"]
        cancelled = (await caller.send("tasks/cancel", taskId=hung["taskId"]))["result"]
        assert cancelled["resultType"] == "complete"
        got = (await caller.send("tasks/get", taskId=hung["taskId"]))["result"]
        assert got["status"] == "cancelled"
        # Another identity's poll of it is an unknown task.
        bob = Modern(http, manifold.url, "bob")
        refused = await bob.send("tasks/get", taskId=task_id)
        assert refused["error"]["code"] == -32602


async def test_a_reload_changes_which_tools_are_held_and_listed_as_tasks(tmp_path: Path) -> None:
    keys = [{"name": n, "key": _stored(k), "roles": ["staff"]} for n, k in KEYS.items()]
    before = {"auth": {"api_keys": keys}, "servers": {"fx": fixture_server("fx", tools=1)}}
    async with running_manifold(tmp_path, before) as running, client_as(running.url, "alice") as client:
        raw = await _raw(client, "tools/call", {"name": "fx.slow", "arguments": {"seconds": 0}, "task": {}})
        assert "task" not in raw  # not held: called plainly
        held = {**fixture_server("fx", tools=1), "tools": {"slow": {"tasks": "held"}}}
        write_config(config_path(tmp_path), {**before, "servers": {"fx": held}})
        running.process.send_signal(signal.SIGHUP)
        await until(lambda: _reloaded(running))
        async with client_as(running.url, "alice") as after:
            for _ in range(100):  # the restarted server lists again (bounded: 10 s)
                listed = await _raw(after, "tools/list", {})
                shown = {t["name"]: t for t in listed["tools"]}
                if "fx.slow" in shown:
                    break
                await anyio.sleep(0.1)
            assert shown["fx.slow"]["execution"] == {"taskSupport": "optional"}
            assert "execution" not in shown["fx.echo"]
            with anyio.fail_after(2):  # the call takes 3 s: only a task answers this soon
                task = await _create(after, "fx.slow", {"seconds": 3})
            result = await _raw(after, "tasks/result", {"taskId": task["taskId"]})
            assert result["content"][0]["text"] == "done"


async def _reloaded(running: RunningManifold) -> bool:
    return "config reloaded (SIGHUP)" in running.log()  # the metrics need credentials here
