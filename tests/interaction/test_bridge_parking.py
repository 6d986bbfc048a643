"""End to end, the parking bridge: the official SDK client at 2026-07-28 ↔ a real ``manifold
serve`` ↔ the conformance fixture in its handshake-only era over stdio, which asks its client
real ``elicitation/create`` / ``sampling/createMessage`` / ``roots/list`` requests mid-call.

Manifold turns each such request into ``input_required`` for the stateless client, whose callbacks
answer it; the retry carries the answers back to the waiting server. Over stdio a question does
not say which call it is about, so every test here finishes (or fails) the calls it starts: a
call left parked would make the next test's questions unattributable.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from proxy.protocol import stateless, versions
from tests.interaction.harness import REPO, RunningManifold, post, running_manifold
from tests.protocol.schemas import validator

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
ALICE_KEY = "mfd_alice-parking-key-0123456789abcdefghijklmno"
BOB_KEY = "mfd_bob-parking-key-0123456789abcdefghijklmnopqr"
HANDSHAKE_FIXTURE = {
    "command": sys.executable,
    "args": ["-m", "tests.conformance_modern.fixture_server", "--era", "legacy", "--transport", "stdio"],
    "cwd": str(REPO),
}
ELICIT = "fx.test_input_required_result_elicitation"


def _stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "auth": {
            "anonymous": {"enabled": True},
            "api_keys": [
                {"name": "alice", "key": _stored(ALICE_KEY), "roles": ["staff"]},
                {"name": "bob", "key": _stored(BOB_KEY), "roles": ["staff"]},
            ],
        },
        "servers": {"fx": HANDSHAKE_FIXTURE},
    }
    async with running_manifold(tmp_path_factory.mktemp("parking"), config) as running:
        yield running


class Answers:
    """The client's callbacks: they record what the server asked and answer it."""

    def __init__(self) -> None:
        self.elicited: list[ElicitRequestParams] = []
        self.sampled: list[CreateMessageRequestParams] = []
        self.roots_listed = 0

    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.elicited.append(params)
        if "color" in params.message:
            return ElicitResult(action="accept", content={"color": "blue"})
        if "context" in params.message:
            return ElicitResult(action="accept", content={"context": "the bridge"})
        return ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        self.sampled.append(params)
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="Paris"), model="m"
        )

    async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:
        self.roots_listed += 1
        return ListRootsResult(roots=[Root.model_validate({"uri": "file:///srv/project", "name": "project"})])

    def client(self, url: str) -> Client:
        return Client(
            url,
            mode=V,
            cache=None,
            elicitation_callback=self.elicit,
            sampling_callback=self.sample,
            list_roots_callback=self.list_roots,
        )


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_a_legacy_servers_elicitation_is_answered_by_the_modern_clients_callback(
    manifold: RunningManifold,
) -> None:
    answers = Answers()
    async with answers.client(manifold.url) as client:
        result = await client.call_tool(ELICIT, {})
    assert _text(result) == "Hello, Ada!"
    assert [p.message for p in answers.elicited] == ["What is your name?"]
    assert answers.elicited[0].model_dump(by_alias=True, exclude_none=True)["requestedSchema"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    }


async def test_sampling_and_roots_questions_reach_the_clients_callbacks(manifold: RunningManifold) -> None:
    answers = Answers()
    async with answers.client(manifold.url) as client:
        sampled = await client.call_tool("fx.test_input_required_result_sampling", {})
        roots = await client.call_tool("fx.test_input_required_result_list_roots", {})
    assert _text(sampled) == "LLM response: Paris"
    assert [(p.max_tokens, p.messages[0].content) for p in answers.sampled] == [
        (100, TextContent(type="text", text="What is the capital of France?"))
    ]
    assert _text(roots) == "Client roots: file:///srv/project"
    assert answers.roots_listed == 1


async def test_each_round_of_a_multi_round_call_is_asked_in_turn(manifold: RunningManifold) -> None:
    answers = Answers()
    async with answers.client(manifold.url) as client:
        result = await client.call_tool("fx.test_input_required_result_multi_round", {})
    assert _text(result) == "Ada likes blue"
    assert [p.message for p in answers.elicited] == [
        "Step 1: What is your name?",
        "Step 2: What is your favorite color?",
    ]


async def test_the_handshake_era_interactive_tools_and_a_prompt_are_bridged_too(
    manifold: RunningManifold,
) -> None:
    answers = Answers()
    async with answers.client(manifold.url) as client:
        sampled = await client.call_tool("fx.test_sampling", {"prompt": "Say hi"})
        elicited = await client.call_tool("fx.test_elicitation", {"message": "Who are you?"})
        prompt = await client.get_prompt("fx.test_input_required_result_prompt", {})
    assert _text(sampled) == "LLM response: Paris"
    assert answers.sampled[0].messages[0].content == TextContent(type="text", text="Say hi")
    assert _text(elicited) == 'User response: action=accept, content={"name": "Ada"}'
    assert [p.message for p in answers.elicited] == ["Who are you?", "What context should the prompt use?"]
    content = prompt.messages[0].content
    assert isinstance(content, TextContent)
    assert content.text == "Use this context: the bridge"


async def test_a_client_that_cannot_be_asked_gets_32021_and_the_server_is_free_again(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode=V, cache=None) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool(ELICIT, {})
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}}
    # The refused call was cancelled, not left parked: another caller's question is attributable.
    answers = Answers()
    async with answers.client(manifold.url) as client:
        assert _text(await client.call_tool(ELICIT, {})) == "Hello, Ada!"


def _call(
    request_id: int, responses: dict[str, Any] | None = None, state: str | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": ELICIT,
        "arguments": {},
        "_meta": {
            stateless.PROTOCOL_VERSION_KEY: V,
            stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {}},
            stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": ELICIT}
    if key is not None:
        headers["X-API-Key"] = key
    status, _, answer = await post(http, url, body, headers)
    validator(V, "JSONRPCMessage")(answer)
    assert isinstance(answer, dict)
    return status, answer


async def _parked(http: aiohttp.ClientSession, url: str, key: str | None = None) -> tuple[str, str]:
    """Start a call that parks; returns its question's key and the state to retry with."""
    status, answer = await _post(http, url, _call(1), key)
    assert status == 200
    result = answer["result"]
    validator(V, "InputRequiredResult")(result)
    ((question, request),) = result["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    return question, result["requestState"]


async def _finish(
    http: aiohttp.ClientSession, url: str, question: str, state: str, key: str | None = None
) -> None:
    answer = {question: {"action": "accept", "content": {"name": "Ada"}}}
    status, body = await _post(http, url, _call(9, answer, state), key)
    assert status == 200
    assert body["result"]["resultType"] == "complete"
    assert body["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_a_tampered_request_state_is_refused_with_400_and_the_call_stays_answerable(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        question, state = await _parked(http, manifold.url)
        answer = {question: {"action": "accept", "content": {"name": "Mallory"}}}
        status, body = await _post(http, manifold.url, _call(2, answer, state + "-TAMPERED"))
        assert (status, body["id"], body["error"]["code"]) == (400, 2, -32602)
        assert body["error"]["data"] == {"reason": "invalid_request_state"}
        await _finish(http, manifold.url, question, state)


async def test_another_identity_cannot_answer_a_parked_call(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        question, state = await _parked(http, manifold.url, ALICE_KEY)
        answer = {question: {"action": "accept", "content": {"name": "Bob"}}}
        for key in (BOB_KEY, None):
            status, body = await _post(http, manifold.url, _call(3, answer, state), key)
            assert (status, body["error"]["code"]) == (400, -32602)
        await _finish(http, manifold.url, question, state, ALICE_KEY)
