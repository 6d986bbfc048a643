"""Tasks for 2026-07-28 callers through Manifold (the ``io.modelcontextprotocol/tasks`` extension),
bridged onto a handshake-era server's tasks: ``@modelcontextprotocol/server-everything`` over
stdio behind a real ``manifold serve``, driven by raw 2026-07-28 JSON-RPC over Streamable HTTP
(the Python SDK's ``Client`` speaks 2026-07-28 but has no tasks API).

The client declares the extension per request and is handed a task (``resultType: "task"``)
under Manifold's sealed id, unasked; it polls ``tasks/get`` until the result is inlined. What a
hostile caller sends (another identity's id, a guessed one, a handshake-era method) is answered
by Manifold itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import pytest

from proxy.protocol import stateless, versions
from proxy.protocol.extensions import TASKS
from tests.interaction.harness import (
    RunningManifold,
    post,
    running_manifold,
)
from tests.interaction.test_tasks import KEYS, RESEARCH, _create, _result, client_as, tasks_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
WITH_TASKS: dict[str, Any] = {"extensions": {TASKS: {}}}
# The extension's methods about one task, with what else each needs.
TASK_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("tasks/get", {}),
    ("tasks/cancel", {}),
    ("tasks/update", {"inputResponses": {}}),
]


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("tasks-modern")
    async with running_manifold(tmp, tasks_config(tmp)) as running:
        yield running


def request(
    n: int, method: str, capabilities: dict[str, Any] | None, params: dict[str, Any]
) -> dict[str, Any]:
    """A 2026-07-28 request: its envelope declares the tasks extension unless ``capabilities`` says."""
    meta = {
        stateless.PROTOCOL_VERSION_KEY: V,
        stateless.CLIENT_CAPABILITIES_KEY: WITH_TASKS if capabilities is None else capabilities,
        stateless.CLIENT_INFO_KEY: {"name": "raw-2026", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": n, "method": method, "params": {**params, "_meta": meta}}


class Modern:
    """A raw 2026-07-28 caller of one identity."""

    def __init__(self, http: aiohttp.ClientSession, url: str, who: str | None) -> None:
        self._http, self._url, self._who, self._next = http, url, who, 0

    async def send(
        self,
        method: str,
        capabilities: dict[str, Any] | None = None,
        *,
        mcp_name: str | None = None,
        **params: Any,
    ) -> Any:
        self._next += 1
        body = request(self._next, method, capabilities, params)
        headers = {"MCP-Protocol-Version": V, "Mcp-Method": method}
        if self._who is not None:
            headers["Authorization"] = f"Bearer {KEYS[self._who]}"
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        elif method in ("tasks/get", "tasks/update", "tasks/cancel"):
            headers["Mcp-Name"] = mcp_name or str(params.get("taskId"))  # the extension's routing header
        _, _, answer = await post(self._http, self._url, body, headers)
        assert answer["id"] == self._next, answer
        return answer

    async def create(self, topic: str, tool: str = RESEARCH) -> dict[str, Any]:
        answer = await self.send("tools/call", name=tool, arguments={"topic": topic})
        result: dict[str, Any] = answer["result"]
        assert result["resultType"] == "task", result
        return result

    async def until_terminal(self, task_id: str) -> dict[str, Any]:
        with anyio.fail_after(30):
            while True:
                got: dict[str, Any] = (await self.send("tasks/get", taskId=task_id))["result"]
                if got["status"] in ("completed", "failed", "cancelled"):
                    return got
                await anyio.sleep(0.2)


async def test_discover_declares_the_extension_only_to_whoever_sees_a_task_server(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice = await Modern(http, manifold.url, "alice").send("server/discover")
        carol = await Modern(http, manifold.url, "carol").send("server/discover")
        plain = await Modern(http, manifold.url + "/plain", "alice").send("server/discover")
    assert alice["result"]["capabilities"]["extensions"][TASKS] == {}
    assert TASKS not in carol["result"]["capabilities"].get("extensions", {})
    assert TASKS not in plain["result"]["capabilities"].get("extensions", {})


async def test_a_modern_client_polls_a_handshake_era_servers_task_to_its_result(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await alice.create("tides")
        assert task["status"] == "working"
        assert task["ttlMs"] > 0
        assert "ttl" not in task
        # Manifold's sealed id, never the server's 32 hex digits.
        assert len(task["taskId"]) != 32
        assert not all(c in "0123456789abcdef" for c in task["taskId"])
        done = await alice.until_terminal(task["taskId"])
        assert done["status"] == "completed"
        assert done["resultType"] == "complete"
        assert "Research Report: tides" in done["result"]["content"][0]["text"]
        assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})
        again = await alice.until_terminal(task["taskId"])  # kept: read again, the same
        assert again["result"] == done["result"]


async def test_a_task_only_tool_without_the_extension_names_the_missing_capability(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        answer = await Modern(http, manifold.url, "alice").send(
            "tools/call", capabilities={}, name=RESEARCH, arguments={"topic": "x"}
        )
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_cancel_and_update_acknowledge_and_the_task_ends_cancelled(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        task = await alice.create("cancelled")
        update = await alice.send("tasks/update", taskId=task["taskId"], inputResponses={})
        assert update["result"]["resultType"] == "complete"
        # An answer to a question the task never asked: refused, naming it.
        unasked = await alice.send("tasks/update", taskId=task["taskId"], inputResponses={"nothing": {}})
        assert unasked["error"]["code"] == -32602
        assert unasked["error"]["data"]["unknown"] == ["nothing"]
        cancelled = await alice.send("tasks/cancel", taskId=task["taskId"])
        assert cancelled["result"]["resultType"] == "complete"
        assert (await alice.until_terminal(task["taskId"]))["status"] == "cancelled"
        again = await alice.send("tasks/cancel", taskId=task["taskId"])  # ended: acknowledged again
        assert again["result"]["resultType"] == "complete"
        for method in ("tasks/get", "tasks/cancel"):
            undeclared = await alice.send(method, capabilities={}, taskId=task["taskId"])
            assert undeclared["error"]["code"] == -32021, undeclared
        bad = await alice.send("tasks/update", taskId=task["taskId"], inputResponses=[1])
        assert bad["error"]["code"] == -32602


async def test_another_identity_and_guessed_ids_are_unknown_and_removed_methods_are_not_found(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice, bob = Modern(http, manifold.url, "alice"), Modern(http, manifold.url, "bob")
        task = await alice.create("mine")
        task_id = task["taskId"]
        altered = task_id[:-2] + ("AA" if not task_id.endswith("AA") else "BB")
        for method, extra in TASK_CALLS:
            for who, which in ((bob, task_id), (alice, altered), (alice, "0" * 32)):
                answer = await who.send(method, taskId=which, **extra)
                assert answer["error"]["code"] == -32602, (method, which, answer)
                assert answer["error"]["message"] == "Failed to retrieve task: Task not found"
                assert answer["error"].get("data") == {"reason": "unknown_task"}
        # Not a string: its Mcp-Name cannot mirror it; refused before any task is looked at.
        wrong_type = await alice.send("tasks/get", taskId=7)
        assert wrong_type["error"]["code"] == -32020, wrong_type
        mismatched = await alice.send("tasks/get", mcp_name=altered, taskId=task_id)
        assert mismatched["error"]["code"] == -32020, mismatched
        on_plain = Modern(http, manifold.url + "/plain", "alice")
        assert (await on_plain.send("tasks/get", taskId=task_id))["error"]["code"] == -32602
        for method in ("tasks/result", "tasks/list"):
            assert (await alice.send(method, taskId=task_id))["error"]["code"] == -32601
        await alice.send("tasks/cancel", taskId=task_id)


async def test_one_identitys_task_is_reachable_from_either_era_and_no_one_elses(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http, client_as(manifold.url, "alice") as legacy:
        alice, bob = Modern(http, manifold.url, "alice"), Modern(http, manifold.url, "bob")
        made_legacy = await _create(legacy, "legacy-made")  # handshake era: task-augmented
        polled = await alice.until_terminal(made_legacy.task_id)
        assert "Research Report: legacy-made" in polled["result"]["content"][0]["text"]
        assert (await bob.send("tasks/get", taskId=made_legacy.task_id))["error"]["code"] == -32602
        made_modern = await alice.create("modern-made")
        await alice.until_terminal(made_modern["taskId"])
        read = await _result(legacy, made_modern["taskId"])  # handshake era: blocking tasks/result
        assert "Research Report: modern-made" in read["content"][0]["text"]


async def test_server_everythings_clarifying_question_reaches_a_modern_caller_as_input_requests(
    manifold: RunningManifold,
) -> None:
    """server-everything's research task, asked an ambiguous query, sets itself input_required and
    queues an elicitation for the tasks/result its client holds open: Manifold holds it open for
    the 2026-07-28 caller, which reads the question on tasks/get and answers with tasks/update."""
    declared = {"elicitation": {}, **WITH_TASKS}
    async with aiohttp.ClientSession() as http:
        alice = Modern(http, manifold.url, "alice")
        answer = await alice.send(
            "tools/call", declared, name=RESEARCH, arguments={"topic": "python", "ambiguous": True}
        )
        task_id = answer["result"]["taskId"]
        with anyio.fail_after(30):
            while True:
                got = (await alice.send("tasks/get", declared, taskId=task_id))["result"]
                if got["status"] != "working":
                    break
                await anyio.sleep(0.2)
        assert got["status"] == "input_required", got
        [(key, asked)] = got["inputRequests"].items()
        assert asked["method"] == "elicitation/create"
        assert "python" in asked["params"]["message"]
        choice = {"action": "accept", "content": {"interpretation": "snake"}}
        ack = await alice.send("tasks/update", declared, taskId=task_id, inputResponses={key: choice})
        assert ack["result"]["resultType"] == "complete", ack
        done = await alice.until_terminal(task_id)
        assert "Clarification**: snake" in done["result"]["content"][0]["text"]
