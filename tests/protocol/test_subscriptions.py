"""The listen filter and the messages of a listen stream, pure: transcripts against the schema."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import InvalidParams
from proxy.protocol import jsonrpc, versions
from proxy.protocol.subscriptions import (
    SUBSCRIPTION_ID_KEY,
    Filter,
    acknowledgement,
    completion,
    event_key,
    tagged,
)
from tests.protocol.schemas import validator

V = versions.LATEST_STATELESS
TOOLS = jsonrpc.notification("notifications/tools/list_changed")
PROMPTS = jsonrpc.notification("notifications/prompts/list_changed")
RESOURCES = jsonrpc.notification("notifications/resources/list_changed")


def updated(uri: str) -> dict[str, Any]:
    return jsonrpc.notification("notifications/resources/updated", {"uri": uri})


def test_a_filter_reads_the_flags_and_the_uris_in_order_without_repeats() -> None:
    notifications = {"toolsListChanged": True, "resourceSubscriptions": ["b://", "a://", "b://"], "x": 1}
    parsed = Filter.parse({"notifications": notifications})
    assert parsed == Filter(tools=True, uris=("b://", "a://"))
    assert Filter.parse({"notifications": {}}) == Filter()


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"notifications": None},
        {"notifications": ["toolsListChanged"]},
        {"notifications": {"toolsListChanged": "yes"}},
        {"notifications": {"promptsListChanged": 1}},
        {"notifications": {"resourceSubscriptions": "a://"}},
        {"notifications": {"resourceSubscriptions": ["a://", 7]}},
    ],
)
def test_a_malformed_filter_is_invalid_params(params: dict[str, Any]) -> None:
    with pytest.raises(InvalidParams):
        Filter.parse(params)


def test_a_filter_lets_through_only_what_it_asked_for() -> None:
    wants = Filter(prompts=True, uris=("a://x",)).wants
    assert [wants(m) for m in (TOOLS, PROMPTS, RESOURCES)] == [False, True, False]
    assert wants(updated("a://x"))
    assert not wants(updated("a://y"))
    assert not wants(jsonrpc.notification("notifications/resources/updated"))  # no uri at all
    everything = Filter(tools=True, prompts=True, resources=True, uris=("a://x",))
    for never in (
        jsonrpc.notification("notifications/progress", {"progressToken": 1, "progress": 1}),
        jsonrpc.notification("notifications/message", {"level": "error", "data": "x"}),
        jsonrpc.notification("notifications/cancelled", {"requestId": 1}),
    ):
        assert not everything.wants(never)


def test_the_acknowledgement_names_only_what_is_honoured_tagged_with_the_listen_id() -> None:
    ack = acknowledgement("listen-1", Filter(tools=True, uris=("a://x",)))
    validator(V, "SubscriptionsAcknowledgedNotification")(ack)
    assert ack["params"] == {
        "_meta": {SUBSCRIPTION_ID_KEY: "listen-1"},
        "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["a://x"]},
    }
    assert acknowledgement(3, Filter())["params"]["notifications"] == {}


def test_only_narrows_the_uris_and_keeps_the_flags() -> None:
    narrowed = Filter(resources=True, uris=("a://", "b://", "c://")).only({"c://", "a://", "z://"})
    assert narrowed == Filter(resources=True, uris=("a://", "c://"))


def test_a_tagged_copy_carries_the_listen_id_and_leaves_the_original_alone() -> None:
    original = jsonrpc.notification(
        "notifications/resources/updated",
        {"uri": "a://x", "_meta": {SUBSCRIPTION_ID_KEY: "the-servers-own", "trace": "t"}},
    )
    copy = tagged(original, 7)
    validator(V, "ResourceUpdatedNotification")(copy)
    assert copy["params"] == {"uri": "a://x", "_meta": {SUBSCRIPTION_ID_KEY: 7, "trace": "t"}}
    assert original["params"]["_meta"][SUBSCRIPTION_ID_KEY] == "the-servers-own"
    shared = tagged(TOOLS, 7)
    validator(V, "ToolListChangedNotification")(shared)
    assert shared["params"] == {"_meta": {SUBSCRIPTION_ID_KEY: 7}}
    assert "params" not in TOOLS


def test_the_completion_is_the_listen_requests_response_with_its_id_twice() -> None:
    response = completion("listen-9")
    validator(V, "SubscriptionsListenResultResponse")(response)
    assert response == {
        "jsonrpc": "2.0",
        "id": "listen-9",
        "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: "listen-9"}},
    }


def test_repeats_are_recognised_by_method_and_uri() -> None:
    assert event_key(TOOLS) == event_key(jsonrpc.notification("notifications/tools/list_changed"))
    assert event_key(updated("a://x")) != event_key(updated("a://y"))
    assert event_key(TOOLS) != event_key(PROMPTS)
