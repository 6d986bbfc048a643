"""End to end, asking a person before a tool runs (``effect: confirm``): the official SDK client
in both eras ↔ a real ``manifold serve`` ↔ the stdio fixture server.

A handshake-era client is asked with a form-mode ``elicitation/create`` (its elicitation
callback answers); a 2026-07-28 client gets ``input_required`` with Manifold's own question and
a sealed ``requestState``. Every refusal is an ``isError`` result from Manifold, never the tool's.
Each test is written as the attack: a client that declines, dismisses, never answers, answers
with the wrong shape or too much, replays an accepted answer, or brings another call's state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitResult, TextContent

from proxy.pipeline.bridge.state import arguments_digest
from proxy.protocol import stateless, versions
from tests.interaction.harness import RunningManifold, fixture_server, post, running_manifold
from tests.interaction.test_policy import (
    ListChanged,
    audited,
    connect,
    listed,
    pinned,
    pins_config,
    redefine_echo,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
POLICY = """\
version: 1
default: allow
rules:
  - id: ask-echo
    effect: confirm
    description: echo repeats what it is given
    match: {tools: ["fx.echo"]}
    confirm: {reason: "Echo sends your words back; check them first.", timeout: 2}
  - id: ask-add
    effect: confirm
    match: {tools: ["fx.add"]}
    confirm: {reason: adding is serious, remember: session, timeout: 30}
  - id: ask-tool-000
    effect: confirm
    match: {tools: ["fx.tool_000"]}
    confirm: {reason: numbered tools, remember: {minutes: 5}, remember_any_arguments: true}
  - id: never-hang
    effect: deny
    match: {tools: ["fx.hang"]}
  - id: ask-hang
    effect: confirm
    match: {tools: ["fx.hang"]}
"""
SECRET = "s3cr3t-value-0123456789"
BEARER = "abcdefghijklmnopqrstuvwxyz0123"


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("confirm")
    (tmp / "policy.yaml").write_text(POLICY)
    config = {
        "auth": {"anonymous": {"enabled": True}},
        "servers": {"fx": fixture_server("fx", tools=2)},
        "policy": {
            "files": [str(tmp / "policy.yaml")],
            "pins": {"mode": "off"},
            "audit": {"path": str(tmp / "audit.jsonl")},
        },
    }
    async with running_manifold(tmp, config) as running:
        yield running


class Person:
    """An elicitation callback: records each question and answers as told."""

    def __init__(self, *answers: ElicitResult | None) -> None:
        self.answers = list(answers)
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        answer = self.answers.pop(0) if self.answers else None
        if answer is None:  # never answers: Manifold's timeout must end the wait
            await anyio.sleep_forever()
        assert answer is not None
        return answer

    def legacy(self, url: str) -> Client:
        return Client(url, mode="legacy", elicitation_callback=self)

    def modern(self, url: str) -> Client:
        return Client(url, mode=V, cache=None, elicitation_callback=self)


APPROVE = ElicitResult(action="accept", content={"approve": True})


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _refused(result: Any, how: str) -> str:
    assert result.is_error
    meta = result.model_dump(by_alias=True)["_meta"]
    assert meta["dev.manifold/outcome"] == "not_confirmed"
    assert meta["dev.manifold/confirmation"] == how
    return _text(result)


# ---- handshake era: form-mode elicitation ------------------------------------------------------


@pytest.mark.parametrize("client", ["legacy", "modern"])
async def test_an_approved_call_runs_and_the_question_names_tool_server_reason_and_masked_arguments(
    manifold: RunningManifold, client: str
) -> None:
    person = Person(APPROVE)
    arguments = {"api_token": SECRET, "note": f"Authorization: Bearer {BEARER}", "text": "hello"}
    async with getattr(person, client)(manifold.url) as session:
        with anyio.fail_after(30):
            result = await session.call_tool("fx.echo", arguments)
    assert not result.is_error
    assert orjson.loads(_text(result))["arguments"] == arguments  # the server got them unchanged
    (asked,) = person.asked
    assert "'fx.echo' on server 'fx'" in asked.message
    assert "Echo sends your words back; check them first." in asked.message
    assert "text: hello" in asked.message
    assert SECRET not in asked.message
    assert BEARER not in asked.message
    assert "api_token: [REDACTED]" in asked.message
    schema = asked.model_dump(by_alias=True)["requestedSchema"]
    assert schema["required"] == ["approve"]


@pytest.mark.parametrize("client", ["legacy", "modern"])
@pytest.mark.parametrize(("action", "how"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_declined_or_dismissed_call_never_reaches_the_server(
    manifold: RunningManifold, client: str, action: str, how: str
) -> None:
    person = Person(ElicitResult(action=action))  # type: ignore[arg-type]
    async with getattr(person, client)(manifold.url) as session:
        result = await session.call_tool("fx.echo", {"text": "rm -rf"})
    text = _refused(result, how)
    assert "did not run 'fx.echo'" in text
    assert "rule ask-echo" in text
    assert "rm -rf" not in text  # Manifold's answer, not the echo's


@pytest.mark.parametrize("client", ["legacy", "modern"])
async def test_approve_false_is_a_decline(manifold: RunningManifold, client: str) -> None:
    person = Person(ElicitResult(action="accept", content={"approve": False}))
    async with getattr(person, client)(manifold.url) as session:
        result = await session.call_tool("fx.echo", {"text": "x"})
    _refused(result, "declined")


@pytest.mark.parametrize("client", ["legacy", "modern"])
@pytest.mark.parametrize(
    "content",
    [
        pytest.param({}, id="accept-without-content"),
        pytest.param({"approve": "yes"}, id="approve-not-a-boolean"),
        pytest.param({"approve": True, "also": "run the next one"}, id="extra-field"),
        pytest.param({"approve": True, "remember": "for this session"}, id="remember-not-offered"),
        pytest.param({"approve": True, "pad": "x" * 200_000}, id="huge-content"),
    ],
)
async def test_an_accept_of_the_wrong_shape_is_refused(
    manifold: RunningManifold, client: str, content: dict[str, Any]
) -> None:
    person = Person(ElicitResult(action="accept", content=content))
    async with getattr(person, client)(manifold.url) as session:
        result = await session.call_tool("fx.echo", {"text": "x"})
    assert "did not fit Manifold's question" in _refused(result, "invalid")


@pytest.mark.parametrize("client", ["legacy", "modern"])
async def test_a_client_without_elicitation_is_refused_with_how_to_get_it_approved(
    manifold: RunningManifold, client: str
) -> None:
    options: dict[str, Any] = {"mode": "legacy"} if client == "legacy" else {"mode": V, "cache": None}
    async with Client(manifold.url, **options) as session:
        result = await session.call_tool("fx.echo", {"text": "x"})
    text = _refused(result, "unavailable")
    assert "cannot be asked" in text
    assert "elicitation" in text
    assert "ask an operator" in text


async def test_nobody_answering_ends_in_a_refusal_when_the_rules_timeout_passes(
    manifold: RunningManifold,
) -> None:
    person = Person(None)
    async with person.legacy(manifold.url) as session:
        with anyio.fail_after(20):  # the rule's timeout is 2 s
            result = await session.call_tool("fx.echo", {"text": "x"})
    assert "nobody answered in time (within 2 s)" in _refused(result, "timeout")


async def test_a_denied_tool_answers_as_missing_and_nobody_is_asked(manifold: RunningManifold) -> None:
    person = Person(APPROVE)
    async with person.legacy(manifold.url) as session:
        with pytest.raises(MCPError, match=r"fx\.hang"):
            await session.call_tool("fx.hang", {})
    assert person.asked == []


async def test_remember_for_this_session_covers_the_same_arguments_in_this_session_only(
    manifold: RunningManifold,
) -> None:
    remember = ElicitResult(action="accept", content={"approve": True, "remember": "for this session"})
    person = Person(remember, ElicitResult(action="decline"))
    async with person.legacy(manifold.url) as session:
        assert _text(await session.call_tool("fx.add", {"a": 1, "b": 2})) == "3"
        assert _text(await session.call_tool("fx.add", {"a": 1, "b": 2})) == "3"  # not asked
        assert len(person.asked) == 1
        choices = person.asked[0].model_dump(by_alias=True)["requestedSchema"]["properties"]["remember"]
        assert choices["enum"] == ["no", "for this session"]
        _refused(await session.call_tool("fx.add", {"a": 1, "b": 3}), "declined")  # other arguments
        assert len(person.asked) == 2
    other = Person(ElicitResult(action="decline"))
    async with other.legacy(manifold.url) as session:  # another session of the same identity
        _refused(await session.call_tool("fx.add", {"a": 1, "b": 2}), "declined")
    assert len(other.asked) == 1


async def test_remember_for_minutes_covers_any_arguments_when_the_rule_says_so(
    manifold: RunningManifold,
) -> None:
    remember = ElicitResult(action="accept", content={"approve": True, "remember": "for 5 minutes"})
    person = Person(remember)
    async with person.legacy(manifold.url) as session:
        assert _text(await session.call_tool("fx.tool_000", {"n": 1})) == "fx:tool_000"
    again = Person()
    async with again.legacy(manifold.url) as session:  # another session: minutes are not per session
        assert _text(await session.call_tool("fx.tool_000", {"n": 2})) == "fx:tool_000"
    assert again.asked == []


async def test_questions_and_answers_are_audited_and_counted(manifold: RunningManifold) -> None:
    audit = Path(manifold.log_path).parent / "audit.jsonl"
    person = Person(APPROVE, ElicitResult(action="decline"))
    async with person.legacy(manifold.url) as session:
        await session.call_tool("fx.echo", {"text": "audited-accept"})
        await session.call_tool("fx.echo", {"text": "audited-decline"})
    records = [r for r in await audited(audit, 1) if r.get("event") == "confirmation"]
    with anyio.fail_after(10):
        while not {"accepted", "declined"} <= {r["outcome"] for r in records}:
            await anyio.sleep(0.05)
            records = [r for r in await audited(audit, 1) if r.get("event") == "confirmation"]
    accepted = next(r for r in records if r["outcome"] == "accepted")
    assert accepted["approver"] == "anonymous"
    assert (accepted["how"], accepted["name"], accepted["rules"]) == ("elicitation", "fx.echo", ["ask-echo"])
    assert accepted["ts"]
    async with aiohttp.ClientSession() as http:
        metrics_url = manifold.url.removesuffix("/mcp") + "/metrics"
        async with http.get(metrics_url) as response:
            body = await response.text()
    assert 'manifold_confirmations_total{outcome="accepted"}' in body
    assert 'manifold_confirmations_total{outcome="declined"}' in body


# ---- 2026-07-28: input_required, raw --------------------------------------------------------------


def _call(
    request_id: int,
    arguments: dict[str, Any],
    responses: dict[str, Any] | None = None,
    state: str | None = None,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "fx.echo",
        "arguments": arguments,
        "_meta": {
            stateless.PROTOCOL_VERSION_KEY: V,
            stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {}} if capabilities is None else capabilities,
            stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": "fx.echo"}
    status, _, answer = await post(http, url, body, headers)
    assert isinstance(answer, dict)
    return status, answer


async def _asked(http: aiohttp.ClientSession, url: str, arguments: dict[str, Any]) -> str:
    status, answer = await _post(http, url, _call(1, arguments))
    assert status == 200
    result = answer["result"]
    assert result["resultType"] == "input_required"
    (key,) = result["inputRequests"]
    assert key == "manifold-confirm"
    assert result["inputRequests"][key]["method"] == "elicitation/create"
    state = result["requestState"]
    assert isinstance(state, str)
    return state


ACCEPT = {"manifold-confirm": {"action": "accept", "content": {"approve": True}}}


async def test_a_replayed_accepted_answer_is_refused(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        state = await _asked(http, manifold.url, {"text": "once"})
        status, first = await _post(http, manifold.url, _call(2, {"text": "once"}, ACCEPT, state))
        assert status == 200
        assert first["result"]["isError"] is False
        status, again = await _post(http, manifold.url, _call(3, {"text": "once"}, ACCEPT, state))
    assert status == 400
    assert again["error"]["code"] == -32602


async def test_an_answer_with_another_calls_state_is_refused(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        state = await _asked(http, manifold.url, {"text": "harmless"})
        status, answer = await _post(http, manifold.url, _call(2, {"text": "harmful"}, ACCEPT, state))
    assert status == 400
    assert answer["error"]["code"] == -32602


async def test_responses_without_a_state_are_not_an_approval(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        status, answer = await _post(http, manifold.url, _call(1, {"text": "sneaky"}, ACCEPT))
    assert status == 200
    assert answer["result"]["resultType"] == "input_required"


@pytest.mark.parametrize(
    "responses",
    [
        pytest.param({}, id="no-answer"),
        pytest.param({"manifold-confirm": "yes"}, id="not-an-object"),
        pytest.param({"manifold-confirm": {"action": "accept"}}, id="no-content"),
        pytest.param({"manifold-confirm": {"action": "accept", "content": {"approve": 1}}}, id="not-boolean"),
        pytest.param({**ACCEPT, "other": {"action": "accept"}}, id="extra-answer"),
        pytest.param(
            {"manifold-confirm": {"action": "accept", "content": {"approve": True, "x": "y" * 100_000}}},
            id="huge",
        ),
    ],
)
async def test_a_retry_with_a_wrong_answer_is_refused(
    manifold: RunningManifold, responses: dict[str, Any]
) -> None:
    async with aiohttp.ClientSession() as http:
        state = await _asked(http, manifold.url, {"text": "x"})
        status, answer = await _post(http, manifold.url, _call(2, {"text": "x"}, responses, state))
    assert status == 200
    result = answer["result"]
    assert result["isError"] is True
    assert result["_meta"]["dev.manifold/confirmation"] == "invalid"


async def test_an_answer_after_the_rules_timeout_is_refused(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        state = await _asked(http, manifold.url, {"text": "late"})
        await anyio.sleep(3.1)  # the rule's timeout (2 s) passing is the point: there is no event
        status, answer = await _post(http, manifold.url, _call(2, {"text": "late"}, ACCEPT, state))
    assert status == 200
    assert answer["result"]["_meta"]["dev.manifold/confirmation"] == "timeout"


def _endings(records: list[dict[str, Any]], arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """How each question about a call with these arguments ended: (outcome, how), less "asked".
    (Other tests' questions end meanwhile too: abandoned ones a few seconds after their deadline.)"""
    digest = arguments_digest(arguments)
    return [
        (r["outcome"], r["how"])
        for r in records
        if r.get("event") == "confirmation"
        and r.get("arguments_digest") == digest
        and r["outcome"] != "asked"
    ]


async def test_a_caller_who_cancels_while_asked_ends_the_question_as_abandoned(
    manifold: RunningManifold,
) -> None:
    audit_path = Path(manifold.log_path).parent / "audit.jsonl"
    seen = len(audit_path.read_bytes().splitlines()) if audit_path.exists() else 0
    person = Person(None)  # never answers
    async with person.legacy(manifold.url) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "fx.add", {"a": 1, "b": 1234})
        with anyio.fail_after(10):
            while not person.asked:  # noqa: ASYNC110 (the callback's call is the event; it never returns)
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()  # the caller gives up: notifications/cancelled
    records = await audited(audit_path, seen + 1)
    with anyio.fail_after(10):
        while not (ended := _endings(records[seen:], {"a": 1, "b": 1234})):
            await anyio.sleep(0.05)
            records = await audited(audit_path, seen + 1)
    assert ended == [("abandoned", "elicitation")]


async def test_a_stateless_caller_who_never_answers_ends_the_question_as_abandoned(
    manifold: RunningManifold,
) -> None:
    audit_path = Path(manifold.log_path).parent / "audit.jsonl"
    seen = len(audit_path.read_bytes().splitlines()) if audit_path.exists() else 0
    async with aiohttp.ClientSession() as http:
        arguments = {"text": "gone for good"}
        state = await _asked(http, manifold.url, arguments)
        with anyio.fail_after(20):  # the rule's timeout (2 s), then the grace
            while not (ended := _endings((await audited(audit_path, seen + 1))[seen:], arguments)):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert ended == [("abandoned", "input_required")]
        status, answer = await _post(http, manifold.url, _call(2, arguments, ACCEPT, state))
    assert (status, answer["error"]["code"]) == (400, -32602)  # the question is over


# ---- pins.mode confirm: a changed tool is asked about before its first call ------------------------


async def test_pins_confirm_asks_once_before_the_first_call_of_a_changed_tool_showing_the_change(
    tmp_path: Path,
) -> None:
    notices = ListChanged()
    person = Person(APPROVE)
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "confirm")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices, elicitation_callback=person) as client,
    ):
        await pinned(tmp_path / "pins" / "pins.json", "alpha/echo")
        assert not (await client.call_tool("alpha.echo", {"k": 0})).is_error
        assert person.asked == []  # not changed: nobody is asked
        await redefine_echo(client, notices)
        assert "alpha.echo" in await listed(client)  # served, not hidden
        result = await client.call_tool("alpha.echo", {"k": 1})
        assert orjson.loads(_text(result))["arguments"] == {"k": 1}
        (asked,) = person.asked
        assert "The tool changed since it was approved: description:" in asked.message
        assert "'now also deletes your files'" in asked.message
        assert not (await client.call_tool("alpha.echo", {"k": 2})).is_error
        assert len(person.asked) == 1  # once per identity and new definition
        assert "each identity is asked before its first call of it" in manifold.log()


@pytest.mark.parametrize("declares", [True, False])
async def test_pins_confirm_refuses_a_changed_tool_the_user_declines_or_cannot_be_asked_about(
    tmp_path: Path, declares: bool
) -> None:
    notices = ListChanged()
    options: dict[str, Any] = (
        {"elicitation_callback": Person(ElicitResult(action="decline"))} if declares else {}
    )
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "confirm")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices, **options) as client,
    ):
        await redefine_echo(client, notices)
        result = await client.call_tool("alpha.echo", {"k": 1})
    if declares:
        assert "changed the tool since it was approved (tool pins)" in _refused(result, "declined")
    else:
        assert "manifold pins accept" in _refused(result, "unavailable")


async def test_pins_confirm_after_a_restart_still_shows_what_changed(tmp_path: Path) -> None:
    """Issue #27: the pins file keeps hashes only; the approved text is kept beside it, so the
    question asked after a restart says what changed, not that the old text is unknown."""
    definitions = tmp_path / "pins" / "pins.json.definitions.json"
    async with running_manifold(tmp_path, pins_config(tmp_path, "confirm")) as manifold:
        await pinned(tmp_path / "pins" / "pins.json", "alpha/echo")
        with anyio.fail_after(10):
            while not definitions.exists():  # noqa: ASYNC110 (a worker thread writes it)
                await anyio.sleep(0.02)
        assert manifold.process.poll() is None
    # While Manifold is down, the server's echo changes (its description lives in this file).
    (tmp_path / "echo-description.txt").write_text("now also deletes your files")
    person = Person(APPROVE)
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "confirm")) as manifold,
        connect(manifold.url, mode="legacy", elicitation_callback=person) as client,
    ):
        assert not (await client.call_tool("alpha.echo", {"k": 1})).is_error
    (asked,) = person.asked
    assert "The tool changed since it was approved: description:" in asked.message
    assert "'now also deletes your files'" in asked.message
    assert "not known" not in asked.message
