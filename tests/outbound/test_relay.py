"""Whose request a server's request is about, as transcripts: the relays in flight in, one out."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.core.errors import NoClientToAsk
from proxy.outbound.pending import Pending
from proxy.outbound.relay import Relay, related_task, relay_for
from proxy.protocol.jsonrpc import Message


@dataclass(eq=False)
class Caller:
    """A Relay: one client request, of session ``session_id``."""

    session_id: str
    asleep: bool = False
    capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None

    def notify(self, message: Message) -> None:
        raise AssertionError("not notified in these tests")

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        raise AssertionError("not asked in these tests")


A1, A2, B1 = Caller("a"), Caller("a"), Caller("b")
B_ASLEEP = Caller("b", asleep=True)
PER_CLIENT = Caller("mine")


def test_the_request_whose_stream_carried_it_is_the_one_it_is_about() -> None:
    assert relay_for(2, {1: A1, 2: B1}, None) is B1


def test_a_related_request_made_on_nobodys_behalf_names_no_one() -> None:
    assert relay_for(1, {1: None, 2: B1}, None) is B1  # then it is attributed as if unrelated


@pytest.mark.parametrize("related", [None, 9, "1"])
def test_one_session_alone_in_flight_is_the_one_asked_its_oldest_request_first(related: Any) -> None:
    assert relay_for(related, {1: A1, 2: None, 3: A2}, None) is A1


def test_among_sessions_in_flight_the_one_awake_is_asked() -> None:
    assert relay_for(None, {1: B_ASLEEP, 2: A2}, None) is A2


def test_sessions_in_flight_fall_back_to_the_connections_own_client() -> None:
    assert relay_for(None, {1: A1, 2: B1}, PER_CLIENT) is PER_CLIENT
    assert relay_for(None, {}, PER_CLIENT) is PER_CLIENT


def test_no_client_request_in_flight_names_no_one() -> None:
    with pytest.raises(NoClientToAsk, match="only during one") as raised:
        relay_for(None, {1: None}, None, method="roots/list", server_id="fs")
    assert raised.value.code == -32603
    assert raised.value.data == {"reason": "no_client_request", "server": "fs", "method": "roots/list"}


def test_two_sessions_awake_in_flight_cannot_be_told_apart_and_the_error_says_so() -> None:
    """Not -32601 "method not found": the method exists, the client asked may even support it;
    what failed is telling the two sessions apart, and the message and data say so and name the fix."""
    with pytest.raises(NoClientToAsk) as raised:
        relay_for(None, {1: A1, 2: B1}, None, method="sampling/createMessage", server_id="r1")
    error = raised.value
    assert error.code == -32603
    assert error.message.startswith(
        "Manifold cannot tell which client sampling/createMessage from server 'r1' is for: "
        "2 client sessions have calls in flight on its shared connection"
    )
    assert "configure session_mode: per_client for 'r1'" in error.message
    assert error.data == {
        "reason": "unattributable",
        "server": "r1",
        "method": "sampling/createMessage",
        "sessions": 2,
        "fix": "session_mode: per_client",
    }


def test_a_caller_is_a_relay() -> None:
    relay: Relay = A1  # mypy checks Caller against the Protocol
    assert relay.session_id == "a"


@pytest.mark.parametrize(
    ("params", "task"),
    [
        ({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}}, "t1"),
        ({"_meta": {"io.modelcontextprotocol/related-task": "t1"}}, None),
        ({"_meta": "x"}, None),
        ({}, None),
        (None, None),
        ("junk", None),
    ],
)
def test_the_task_a_server_request_names_is_read_from_its_meta(params: Any, task: Any) -> None:
    message: Message = {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create"}
    if params is not None:
        message["params"] = params
    assert related_task(message) == task


def test_a_request_about_a_task_is_attributed_to_the_tasks_result_waiting_on_it() -> None:
    pending = Pending("srv")
    loop = asyncio.new_event_loop()
    first, _ = pending.open(None, loop)
    waiting, slot = pending.open(None, loop)
    slot.task = "t2"
    assert pending.waiting_on("t2") == waiting != first
    assert pending.waiting_on("t1") is None
    assert pending.waiting_on(None) is None
    pending.close(waiting)
    assert pending.waiting_on("t2") is None
    loop.close()
