"""input_required with a 2026-07-28 server: passed to stateless callers with the state wrapped,
unrolled into real requests for handshake-era callers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.clients.session import Client, ClientSession, InboundRequest, StatelessCaller
from proxy.core.errors import InvalidRequestState, MethodNotFound, ServerProtocolError
from proxy.outbound.connection import ServerConnection
from proxy.pipeline.bridge.mrtr import Rounds
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import CallContext
from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import Message

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")
BOB = Identity("bob", frozenset(), "api_key")
ELICIT = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "name?", "requestedSchema": {}},
}


@dataclass
class Scripted:
    """A stateless server: answers each request with the next scripted result; records params."""

    script: list[dict[str, Any]]
    sent: list[dict[str, Any]] = field(default_factory=list)
    server_id: str = "fx"
    stateless: bool = True

    async def request(self, method: str, params: dict[str, Any] | None = None, **_: Any) -> Any:
        self.sent.append(dict(params or {}))
        return self.script.pop(0)


def call(session: Client, params: dict[str, Any], asked: list[Message] | None = None) -> CallContext:
    def stream(message: Message) -> None:  # the client answers every request at once
        if asked is not None and "id" in message:
            asked.append(message)
            answer = {"action": "accept", "content": {"name": "Ada"}}
            assert isinstance(session, ClientSession)  # only a session is asked with a request
            session.answered({"jsonrpc": "2.0", "id": message["id"], "result": answer})

    return CallContext(InboundRequest(session, stream), 1, "tools/call", "fx", "fx.ask", params)


def stateless_session(identity: Identity = ALICE) -> StatelessCaller:
    return StatelessCaller("r1", "http", "2026-07-28", {"elicitation": {}}, identity)


def handshake_session(capabilities: dict[str, Any] | None = None) -> ClientSession:
    return ClientSession(
        "s1",
        "http",
        protocol_version="2025-11-25",
        capabilities=capabilities or {"elicitation": {}},
        initialized=True,
    )


def rounds(max_rounds: int = 10) -> Rounds:
    return Rounds(RequestStates(b"k" * 32, ttl=60), max_rounds=max_rounds)


def as_connection(server: Scripted) -> ServerConnection:
    return server  # type: ignore[return-value]  # duck-typed: request(), server_id, stateless


async def test_a_modern_caller_gets_the_servers_state_wrapped_and_the_retry_unwrapped() -> None:
    server = Scripted(
        [
            {"resultType": "input_required", "inputRequests": {"n": ELICIT}, "requestState": "inner-1"},
            {"content": [{"type": "text", "text": "hi Ada"}]},
        ]
    )
    bridge = rounds()
    args = {"name": "ask", "arguments": {"x": 1}}
    first = await bridge.pass_through(as_connection(server), call(stateless_session(), args))
    assert first["inputRequests"] == {"n": ELICIT}
    assert "inner-1" not in first["requestState"].split(".")
    retry = {**args, "inputResponses": {"n": {"action": "accept"}}, "requestState": first["requestState"]}
    final = await bridge.pass_through(as_connection(server), call(stateless_session(), retry))
    assert final == {"content": [{"type": "text", "text": "hi Ada"}]}
    assert server.sent[1]["requestState"] == "inner-1"
    assert server.sent[1]["inputResponses"] == {"n": {"action": "accept"}}


@pytest.mark.parametrize(
    ("identity", "arguments"),
    [(BOB, {"x": 1}), (ALICE, {"x": 2})],
    ids=["another identity", "other arguments"],
)
async def test_a_wrapped_state_is_good_only_for_its_caller_and_request(
    identity: Identity, arguments: dict[str, Any]
) -> None:
    server = Scripted([{"resultType": "input_required", "inputRequests": {"n": ELICIT}, "requestState": "s"}])
    bridge = rounds()
    first = await bridge.pass_through(
        as_connection(server), call(stateless_session(), {"name": "ask", "arguments": {"x": 1}})
    )
    retry = {"name": "ask", "arguments": arguments, "requestState": first["requestState"]}
    with pytest.raises(InvalidRequestState):
        await bridge.pass_through(as_connection(server), call(stateless_session(identity), retry))
    assert len(server.sent) == 1  # the forged retry never reached the server


async def test_a_raw_server_state_is_refused() -> None:
    server = Scripted([])
    with pytest.raises(InvalidRequestState):
        await rounds().pass_through(
            as_connection(server), call(stateless_session(), {"name": "ask", "requestState": "inner-1"})
        )


async def test_a_legacy_caller_is_asked_for_real_and_the_server_retried_with_the_answers() -> None:
    server = Scripted(
        [
            {"resultType": "input_required", "inputRequests": {"n": ELICIT}, "requestState": "st-1"},
            {"resultType": "input_required", "inputRequests": {"m": ELICIT}, "requestState": "st-2"},
            {"content": [], "resultType": "complete"},
        ]
    )
    asked: list[Message] = []
    result = await rounds().unroll(as_connection(server), call(handshake_session(), {"name": "ask"}, asked))
    assert result == {"content": [], "resultType": "complete"}  # the router strips resultType
    assert [m["method"] for m in asked] == ["elicitation/create", "elicitation/create"]
    assert asked[0]["params"] == ELICIT["params"]
    assert server.sent[1] == {
        "name": "ask",
        "inputResponses": {"n": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": "st-1",
    }
    assert server.sent[2]["requestState"] == "st-2"
    assert set(server.sent[2]["inputResponses"]) == {"m"}


async def test_a_legacy_callers_own_request_state_never_reaches_the_server() -> None:
    """The first unrolled round goes out with the params the client sent: a state of its own
    making (a guess at a server's, or one the server gave somebody else) is refused there."""
    server = Scripted([{"content": []}])
    for crafted in ("st-1", "eyJ0IjoiYWRtaW4ifQ.forged", 7):
        with pytest.raises(InvalidRequestState):
            await rounds().unroll(
                as_connection(server), call(handshake_session(), {"name": "ask", "requestState": crafted})
            )
    assert server.sent == []


async def test_a_legacy_caller_may_bring_back_a_state_manifold_sealed_for_this_request() -> None:
    server = Scripted(
        [
            {"resultType": "input_required", "inputRequests": {"n": ELICIT}, "requestState": "inner-1"},
            {"content": []},
        ]
    )
    bridge = rounds()
    args = {"name": "ask", "arguments": {"x": 1}}
    first = await bridge.pass_through(as_connection(server), call(stateless_session(), args))
    session = handshake_session()
    session.identity = ALICE
    await bridge.unroll(as_connection(server), call(session, {**args, "requestState": first["requestState"]}))
    assert server.sent[1]["requestState"] == "inner-1"  # unwrapped: the server's own again


async def test_unrolling_is_bounded() -> None:
    again = {"resultType": "input_required", "requestState": "again"}
    server = Scripted([again] * 3)
    with pytest.raises(ServerProtocolError, match="after 3 rounds"):
        await rounds(max_rounds=3).unroll(
            as_connection(server), call(handshake_session(), {"name": "ask"}, [])
        )
    assert len(server.sent) == 3


async def test_a_legacy_caller_without_the_capability_is_not_asked() -> None:
    server = Scripted([{"resultType": "input_required", "inputRequests": {"n": ELICIT}}])
    asked: list[Message] = []
    with pytest.raises(MethodNotFound):
        await rounds().unroll(
            as_connection(server), call(handshake_session({"sampling": {}}), {"name": "ask"}, asked)
        )
    assert asked == []


@pytest.mark.parametrize(
    "result",
    [
        {"resultType": "input_required", "inputRequests": {"n": {"method": "tools/call", "params": {}}}},
        {"resultType": "input_required", "inputRequests": ["not", "a", "map"]},
        {"resultType": "input_required"},
    ],
    ids=["unaskable method", "not a map", "nothing to ask or retry"],
)
async def test_a_malformed_input_required_is_the_servers_fault(result: dict[str, Any]) -> None:
    with pytest.raises(ServerProtocolError) as caught:
        await rounds().unroll(
            as_connection(Scripted([result])), call(handshake_session(), {"name": "ask"}, [])
        )
    assert caught.value.code == -32603
    assert caught.value.server_id == "fx"
