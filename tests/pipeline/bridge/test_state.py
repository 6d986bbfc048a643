"""Sealed request states: only the request and the caller they were issued for, only in time."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequestState
from proxy.pipeline.bridge.state import Boundary, RequestStates, arguments_digest
from proxy.policy.model import Identity

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
BOB = Identity("bob", frozenset({"dev"}), "api_key")
# ALICE's name and roles, but other principals: a token named like her key, another issuer's alice.
TOKEN_ALICE = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://a.example")
PARTNER_ALICE = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://b.example")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def boundary(identity: Identity = ALICE, **changes: str) -> Boundary:
    fields = {
        "server_id": "fx",
        "method": "tools/call",
        "target": "fx.ask",
        "arguments": arguments_digest({"a": 1}),
    }
    fields.update(changes)
    return Boundary(identity=identity, **fields)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def states(clock: Clock) -> RequestStates:
    return RequestStates(b"k" * 32, ttl=60, clock=clock)


def test_a_sealed_state_opens_for_its_own_request(states: RequestStates) -> None:
    token = states.seal(boundary(), "server", "inner-state", round=2)
    opened = states.open(token, boundary())
    assert (opened.kind, opened.payload, opened.round) == ("server", "inner-state", 2)


def test_argument_order_does_not_matter() -> None:
    assert arguments_digest({"a": 1, "b": [1, 2]}) == arguments_digest({"b": [1, 2], "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})
    assert arguments_digest(None) == arguments_digest({})


@pytest.mark.parametrize(
    "other",
    [
        boundary(BOB),
        boundary(TOKEN_ALICE),
        boundary(server_id="other"),
        boundary(method="prompts/get"),
        boundary(target="fx.other"),
        boundary(arguments=arguments_digest({"a": 2})),
    ],
    ids=["identity", "token-named-like-the-key", "server", "method", "target", "arguments"],
)
def test_a_state_does_not_open_for_another_request_or_caller(states: RequestStates, other: Boundary) -> None:
    token = states.seal(boundary(), "parked", "call-1")
    with pytest.raises(InvalidRequestState):
        states.open(token, other)


def test_a_state_sealed_for_one_issuers_alice_does_not_open_for_anothers(states: RequestStates) -> None:
    token = states.seal(boundary(TOKEN_ALICE), "server", "inner")
    with pytest.raises(InvalidRequestState):
        states.open(token, boundary(PARTNER_ALICE))


def test_a_state_expires(states: RequestStates, clock: Clock) -> None:
    token = states.seal(boundary(), "server", "s")
    clock.now += 59
    states.open(token, boundary())
    clock.now += 2
    with pytest.raises(InvalidRequestState) as caught:
        states.open(token, boundary())
    assert caught.value.data == {"reason": "invalid_request_state"}


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the MAC altered
        lambda t: "x" + t,  # the claims altered
        lambda t: t.split(".")[0],  # no MAC
        lambda t: "",
        lambda t: 12345,
        lambda t: None,
        lambda t: "a" * 70_000,
    ],
    ids=["mac", "claims", "no-mac", "empty", "number", "none", "huge"],
)
def test_tampered_or_foreign_states_are_refused(states: RequestStates, mangle: object) -> None:
    token = states.seal(boundary(), "server", "s")
    with pytest.raises(InvalidRequestState):
        states.open(mangle(token), boundary())  # type: ignore[operator]


def test_another_key_cannot_open_it(states: RequestStates, clock: Clock) -> None:
    token = states.seal(boundary(), "server", "s")
    with pytest.raises(InvalidRequestState):
        RequestStates(b"q" * 32, ttl=60, clock=clock).open(token, boundary())


def test_a_servers_state_carries_an_approval_mark_only_once_marked_and_a_forged_mark_fails(
    states: RequestStates,
) -> None:
    plain = states.seal(boundary(), "server", "their-state")
    assert states.open(plain, boundary()).approval == ""
    marked = states.approved(plain, boundary(), "mark-1")
    opened = states.open(marked, boundary())
    assert (opened.kind, opened.payload, opened.approval) == ("server", "their-state", "mark-1")
    _, _, mac = marked.partition(".")
    assert states.approved(marked, boundary(), "mark-2") != marked
    with pytest.raises(InvalidRequestState):  # the mark is under the MAC like every claim
        states.open(plain.partition(".")[0] + "." + mac, boundary())
    with pytest.raises(InvalidRequestState):  # marking checks the state first
        states.approved(plain, boundary(BOB), "mark-1")
    parked = states.seal(boundary(), "parked", "call-id")
    assert states.approved(parked, boundary(), "mark-1") == parked  # a running call: not marked
