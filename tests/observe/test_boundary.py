"""The fault boundary's own rules: what a refusal by a limit becomes on the wire, and that it is
counted under the limit's name."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.core.errors import INVALID_REQUEST, LimitExceeded, MessageTooLarge
from proxy.observe.boundary import Boundary
from proxy.observe.metrics import Metrics, Where


@dataclass
class _Counts:
    refused: list[str] = field(default_factory=list)
    internal: list[Where] = field(default_factory=list)

    def internal_error(self, where: Where) -> None:
        self.internal.append(where)

    def limit_refused(self, limit: str) -> None:
        self.refused.append(limit)


@dataclass(frozen=True)
class _Session:
    id: str = "s" * 32
    stateless: bool = False


def test_a_refusal_by_a_limit_names_it_and_is_counted_under_its_name() -> None:
    counts = _Counts()
    refusal = LimitExceeded("a batch of 500 entries", limit="max_batch", maximum=100)
    response = Boundary(counts).answer(refusal, 7, method="tools/call", session=_Session())
    assert response == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": INVALID_REQUEST,
            "message": "a batch of 500 entries (limits.max_batch is 100)",
            "data": {"limit": "max_batch", "max": 100},
        },
    }
    assert (counts.refused, counts.internal) == (["max_batch"], [])


def test_a_size_refusal_gives_the_value_once_and_a_transport_can_count_it_itself() -> None:
    counts = _Counts()
    too_large = MessageTooLarge("a JSON body", limit="max_server_message_bytes", maximum=1024)
    assert too_large.message == "a JSON body exceeded 1024 bytes (limits.max_server_message_bytes)"
    Boundary(counts).refused(too_large)
    assert counts.refused == ["max_server_message_bytes"]


def test_the_refusal_counter_is_exposed_per_limit() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.limit_refused("max_sessions")
    metrics.limit_refused("max_sessions")
    body, _ = metrics.render()
    assert b'manifold_limit_refusals_total{limit="max_sessions"} 2.0' in body


def test_a_sign_in_needed_names_the_server_what_to_do_and_where() -> None:
    from proxy.core.errors import SignInNeeded
    from proxy.observe.boundary import wire_error

    response = wire_error(SignInNeeded("gh", "https://gw.example/signin/abc", "sign in at the link"), 7)
    assert response["error"] == {
        "code": -32000,
        "message": "server 'gh' needs your own credentials: sign in at the link",
        "data": {"server": "gh", "reason": "sign_in_needed", "url": "https://gw.example/signin/abc"},
    }
    bare = wire_error(SignInNeeded("gh", None, "ask an operator"), 8)["error"]["data"]
    assert bare == {"server": "gh", "reason": "sign_in_needed"}
