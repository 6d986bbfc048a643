"""``input_required`` across the era bridge: a handshake-era task server (tests/fixtures/
era_task_server.py, over stdio) asks for input during a task, on a ``tasks/result`` Manifold
holds open; a 2026-07-28 caller (raw JSON-RPC over Streamable HTTP) reads the question as the
task's ``inputRequests`` on ``tasks/get`` and answers with ``tasks/update``.

Also through ``manifold stdio`` (NDJSON on its pipes), the same way.

Hostile: another identity's answer, an answer to a question never asked, one given twice, a
malformed one: each refused, and the server never sees it (the task ends with the owner's
answer, as the result shows). A server that asks and then dies fails its task only.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from proxy.protocol import stateless, versions
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold, write_config
from tests.interaction.test_tasks import KEYS, _stored
from tests.interaction.test_tasks_modern import Modern

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = str(REPO / "tests" / "fixtures" / "era_task_server.py")
ELICIT: dict[str, Any] = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def _config() -> dict[str, Any]:
    keys = [{"name": n, "key": _stored(k), "roles": ["staff"]} for n, k in KEYS.items()]
    return {
        "auth": {"api_keys": keys},
        "servers": {
            "era": {"command": sys.executable, "args": [SERVER], "prefix": ""},
            "dying": {"command": sys.executable, "args": [SERVER]},
        },
        "limits": {"max_held_questions": 1},
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    async with running_manifold(tmp_path_factory.mktemp("tasks-input"), _config()) as running:
        yield running


class Asker(Modern):
    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        answer = await self.send("tools/call", ELICIT, name=tool, arguments=arguments)
        result: dict[str, Any] = answer["result"]
        assert result["resultType"] == "task", result
        return result

    async def get(self, task_id: str) -> dict[str, Any]:
        answer = await self.send("tasks/get", ELICIT, taskId=task_id)
        assert "result" in answer, answer
        got: dict[str, Any] = answer["result"]
        return got

    async def until(self, task_id: str, *statuses: str) -> dict[str, Any]:
        with anyio.fail_after(30):
            while True:
                got = await self.get(task_id)
                if got["status"] in statuses:
                    return got
                await anyio.sleep(0.1)

    async def update(self, task_id: str, responses: Any) -> dict[str, Any]:
        return dict(await self.send("tasks/update", ELICIT, taskId=task_id, inputResponses=responses))


ACCEPT = {"action": "accept", "content": {"confirm": True}}


async def test_the_servers_question_is_shown_and_answered_across_the_bridge(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Asker(http, manifold.url, "alice")
        task = await alice.call("confirm_delete", filename="a.txt")
        asking = await alice.until(task["taskId"], "input_required", "completed", "failed")
        assert asking["status"] == "input_required", asking
        [(key, request)] = asking["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Delete a.txt?"
        assert "requestState" not in asking
        ack = await alice.update(task["taskId"], {key: ACCEPT})
        assert {k: v for k, v in ack["result"].items() if k != "_meta"} == {"resultType": "complete"}, ack
        done = await alice.until(task["taskId"], "completed", "failed")
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "deleted a.txt"


async def test_answers_that_are_not_the_owners_to_give_are_refused_and_never_reach_the_server(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        alice, bob = Asker(http, manifold.url, "alice"), Asker(http, manifold.url, "bob")
        task = await alice.call("confirm_delete", filename="b.txt")
        task_id = task["taskId"]
        asking = await alice.until(task_id, "input_required")
        [key] = asking["inputRequests"]
        # Another identity: the task is unknown to it, its question with it.
        stolen = await bob.update(task_id, {key: ACCEPT})
        assert stolen["error"]["code"] == -32602
        assert stolen["error"]["data"] == {"reason": "unknown_task"}
        peek = await bob.send("tasks/get", ELICIT, taskId=task_id)
        assert peek["error"]["code"] == -32602
        assert "inputRequests" not in str(peek)
        # A question never asked, and a malformed answer to the real one: refused whole.
        never = await alice.update(task_id, {key: ACCEPT, "elicitation-99": ACCEPT})
        assert never["error"]["code"] == -32602, never
        assert never["error"]["data"] == {"unknown": ["elicitation-99"], "outstanding": [key]}
        for malformed in ({"action": "maybe"}, "yes", {"action": "accept", "content": [1]}):
            bad = await alice.update(task_id, {key: malformed})
            assert bad["error"]["code"] == -32602, bad
            assert key in bad["error"]["message"]
        assert (await alice.get(task_id))["inputRequests"] == asking["inputRequests"]  # still asked
        # The owner declines; a second answer to the same question is refused.
        assert "result" in await alice.update(task_id, {key: {"action": "decline"}})
        twice = await alice.update(task_id, {key: ACCEPT})
        assert twice["error"]["code"] == -32602
        assert twice["error"]["data"]["unknown"] == [key]
        done = await alice.until(task_id, "completed", "failed")
        assert done["result"]["content"][0]["text"] == "kept b.txt"  # the decline, not bob's accept


async def test_a_task_waiting_on_its_owner_leaves_another_calls_question_attributable(
    manifold: RunningManifold,
) -> None:
    """Over stdio a server's question does not say which request it is about: the tasks/result
    Manifold holds open for a task (its question unanswered) must not make a plain call's
    question on the same shared connection ambiguous. That call asks during the task-augmented
    call, before its task exists (MRTR, then a task)."""
    async with aiohttp.ClientSession() as http:
        alice = Asker(http, manifold.url, "alice")
        waiting = await alice.call("confirm_delete", filename="d.txt")
        asked = await alice.until(waiting["taskId"], "input_required")
        first = (await alice.send("tools/call", ELICIT, name="test_tool_with_task", arguments={}))["result"]
        assert first["resultType"] == "input_required", first
        [key] = first["inputRequests"]
        name = {"action": "accept", "content": {"name": "Alice"}}
        retry = {"inputResponses": {key: name}, "requestState": first["requestState"]}
        second = await alice.send("tools/call", ELICIT, name="test_tool_with_task", arguments={}, **retry)
        assert second["result"]["resultType"] == "task", second
        done = await alice.until(second["result"]["taskId"], "completed", "failed")
        assert "Alice" in done["result"]["content"][0]["text"]
        await alice.update(waiting["taskId"], dict.fromkeys(asked["inputRequests"], ACCEPT))
        assert (await alice.until(waiting["taskId"], "completed"))["status"] == "completed"


async def test_questions_past_the_limit_are_refused_to_the_server_by_name(
    manifold: RunningManifold,
) -> None:
    """``limits.max_held_questions`` is 1 here: multi_input's second question is refused (the
    server's task fails with the refusal, naming the limit); the first was shown."""
    async with aiohttp.ClientSession() as http:
        alice = Asker(http, manifold.url, "alice")
        task = await alice.call("multi_input")
        done = await alice.until(task["taskId"], "failed", "completed")
        assert done["status"] == "failed", done
        assert "max_held_questions" in done["error"]["message"], done


async def test_a_server_that_asks_and_dies_fails_only_its_own_task(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        alice = Asker(http, manifold.url, "alice")
        other = await alice.call("confirm_delete", filename="c.txt")
        dying = await alice.call("dying.ask_and_die")
        assert (await alice.until(dying["taskId"], "input_required"))["inputRequests"]
        failed = await alice.until(dying["taskId"], "failed")
        assert failed["error"]["code"] == -32603, failed
        assert "result" not in failed
        assert (await alice.get(dying["taskId"]))["status"] == "failed"  # kept, not re-asked
        # The other server's task goes on, and is answered.
        asking = await alice.until(other["taskId"], "input_required")
        await alice.update(other["taskId"], dict.fromkeys(asking["inputRequests"], ACCEPT))
        answered = await alice.until(other["taskId"], "completed")
        assert answered["result"]["content"][0]["text"] == "deleted c.txt"


async def test_the_question_crosses_the_bridge_through_manifold_stdio(tmp_path: Path) -> None:
    """A desktop-style 2026-07-28 client spawns ``manifold stdio`` (NDJSON on its pipes)."""
    config = write_config(
        tmp_path / "m.yaml", {"servers": {"era": {"command": sys.executable, "args": [SERVER]}}}
    )
    command = [sys.executable, "-m", "proxy.cli", "stdio", "--config", str(config)]
    numbers = itertools.count(1)
    async with await anyio.open_process(command, cwd=REPO, stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)

        async def send(method: str, **params: Any) -> Any:
            number = next(numbers)
            meta = {
                stateless.PROTOCOL_VERSION_KEY: versions.LATEST_STATELESS,
                stateless.CLIENT_CAPABILITIES_KEY: ELICIT,
                stateless.CLIENT_INFO_KEY: {"name": "raw-stdio", "version": "0"},
            }
            message = {"jsonrpc": "2.0", "id": number, "method": method, "params": {**params, "_meta": meta}}
            assert process.stdin is not None
            await process.stdin.send(json.dumps(message).encode() + b"\n")
            while True:  # notifications may come first
                answer = json.loads(await lines.receive_until(b"\n", 1 << 20))
                if answer.get("id") == number:
                    return answer

        async def until(task_id: str, *statuses: str) -> dict[str, Any]:
            while True:
                got: dict[str, Any] = (await send("tasks/get", taskId=task_id))["result"]
                if got["status"] in statuses:
                    return got
                await anyio.sleep(0.1)

        with anyio.fail_after(60):
            task = await send("tools/call", name="era.confirm_delete", arguments={"filename": "s.txt"})
            task_id = task["result"]["taskId"]
            asking = await until(task_id, "input_required")
            [key] = asking["inputRequests"]
            refused = await send("tasks/update", taskId=task_id, inputResponses={key: {"action": "yes"}})
            assert refused["error"]["code"] == -32602
            ack = await send("tasks/update", taskId=task_id, inputResponses={key: ACCEPT})
            assert ack["result"]["resultType"] == "complete"
            done = await until(task_id, "completed", "failed")
            assert done["result"]["content"][0]["text"] == "deleted s.txt"
        await process.stdin.aclose()
        with anyio.fail_after(20):
            await process.wait()


CONFIRM = """\
version: 1
default: allow
rules:
  - id: adding-is-serious
    effect: confirm
    match: {tools: ["fx.add"]}
    confirm: {reason: adding is serious, timeout: 30}
"""


async def test_a_held_calls_confirm_question_is_shown_and_answered_too(tmp_path: Path) -> None:
    """A gateway-held task (``tasks: held``) whose call waits for a ``confirm`` answer: the question
    Manifold asks on the task's reader is the task's ``inputRequests`` for a 2026-07-28 owner."""
    (tmp_path / "policy.yaml").write_text(CONFIRM)
    keys = [{"name": n, "key": _stored(k), "roles": ["staff"]} for n, k in KEYS.items()]
    config = {
        "auth": {"api_keys": keys},
        "servers": {"fx": {**fixture_server("fx", tools=2), "tasks": "held"}},
        "policy": {"files": [str(tmp_path / "policy.yaml")]},
    }
    async with running_manifold(tmp_path, config) as running, aiohttp.ClientSession() as http:
        alice = Asker(http, running.url, "alice")
        task = await alice.call("fx.add", a=2, b=3)
        asking = await alice.until(task["taskId"], "input_required", "completed", "failed")
        assert asking["status"] == "input_required", asking
        [(key, request)] = asking["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        approve = {"action": "accept", "content": {"approve": True}}
        assert "result" in await alice.update(task["taskId"], {key: approve})
        done = await alice.until(task["taskId"], "completed", "failed")
        assert done["result"]["content"][0]["text"] == "5", done
