"""The outbound listen stream: its filter and tags as transcripts, then its keeper against a
scripted ``listen`` (no server, no link)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from proxy.core.errors import InvalidParams, MethodNotFound, RemoteError, ServerUnavailable
from proxy.outbound.listening import Listening, listen_filter, untagged
from proxy.protocol.jsonrpc import Message

pytestmark = pytest.mark.anyio

TAG = "io.modelcontextprotocol/subscriptionId"
EVERYTHING = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}
SUBSCRIBABLE = {"resources": {"subscribe": True}}


# ---- the filter -----------------------------------------------------------------------------


def test_the_filter_asks_for_every_change_the_server_offers_to_tell_of() -> None:
    assert listen_filter(EVERYTHING, {"r://b", "r://a"}) == {
        "notifications": {
            "toolsListChanged": True,
            "promptsListChanged": True,
            "resourcesListChanged": True,
            "resourceSubscriptions": ["r://a", "r://b"],
        }
    }


def test_a_server_that_lets_resources_be_subscribed_is_asked_for_its_uris_even_none() -> None:
    assert listen_filter(SUBSCRIBABLE, set()) == {"notifications": {"resourceSubscriptions": []}}


def test_the_uris_are_not_asked_of_a_server_that_offers_no_subscriptions() -> None:
    caps = {"tools": {"listChanged": True}, "resources": {"listChanged": True}}
    assert listen_filter(caps, {"r://a"}) == {
        "notifications": {"toolsListChanged": True, "resourcesListChanged": True}
    }


@pytest.mark.parametrize("caps", [{}, {"tools": {}, "resources": {}}, {"tools": None, "logging": {}}])
def test_a_server_with_nothing_to_tell_of_gets_no_listen_stream(caps: dict[str, Any]) -> None:
    assert listen_filter(caps, {"r://a"}) is None


# ---- the tag --------------------------------------------------------------------------------


def updated(meta: dict[str, Any] | None) -> Message:
    params: dict[str, Any] = {"uri": "r://a"}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params}


def test_the_streams_tag_is_taken_off_and_the_rest_of_meta_kept() -> None:
    assert untagged(updated({TAG: 7, "traceparent": "t"})) == updated({"traceparent": "t"})


def test_a_meta_that_was_only_the_tag_goes_with_it() -> None:
    assert untagged(updated({TAG: 7})) == updated(None)


@pytest.mark.parametrize(
    "message",
    [
        updated({"traceparent": "t"}),
        updated(None),
        {"jsonrpc": "2.0", "method": "notifications/message", "params": ["x"]},
        {"jsonrpc": "2.0", "method": "notifications/message"},
    ],
)
def test_an_untagged_notification_passes_as_it_is(message: Message) -> None:
    assert untagged(message) is message


# ---- what clients subscribe to --------------------------------------------------------------


def test_subscribing_and_unsubscribing_change_the_filters_uris() -> None:
    listening = Listening("s", backoff=lambda attempt: 0.0)
    assert listening.watch("resources/subscribe", {"uri": "r://b"}, SUBSCRIBABLE) == {}
    listening.watch("resources/subscribe", {"uri": "r://a"}, SUBSCRIBABLE)
    listening.watch("resources/unsubscribe", {"uri": "r://b"}, SUBSCRIBABLE)
    listening.watch("resources/unsubscribe", {"uri": "r://never"}, SUBSCRIBABLE)
    assert listening.filter(SUBSCRIBABLE) == {"notifications": {"resourceSubscriptions": ["r://a"]}}


def test_subscribing_to_a_server_that_offers_no_subscriptions_is_refused() -> None:
    listening = Listening("s", backoff=lambda attempt: 0.0)
    with pytest.raises(MethodNotFound, match="server 's' offers no resource subscriptions"):
        listening.watch("resources/subscribe", {"uri": "r://a"}, {"resources": {"listChanged": True}})


@pytest.mark.parametrize("params", [None, {}, {"uri": 7}])
def test_subscribing_without_a_uri_is_refused(params: dict[str, Any] | None) -> None:
    listening = Listening("s", backoff=lambda attempt: 0.0)
    with pytest.raises(InvalidParams, match='resources/subscribe needs a string "uri"'):
        listening.watch("resources/subscribe", params, SUBSCRIBABLE)


# ---- keeping the stream open ----------------------------------------------------------------


class Server:
    """A scripted ``listen``: each stream stays open until cancelled, or until ``end`` makes it
    return (or raise ``end_with``). Records what happened, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.filters: list[dict[str, Any] | None] = []
        self.opened = anyio.Event()
        self.end = anyio.Event()
        self.end_with: BaseException | None = None

    async def __call__(self, params: dict[str, Any] | None) -> object:
        n = len(self.filters)
        self.filters.append(params)
        self.events.append(f"open {n}")
        self.opened.set()
        self.opened = anyio.Event()
        try:
            await self.end.wait()
        except anyio.get_cancelled_exc_class():
            self.events.append(f"cancel {n}")
            raise
        self.end = anyio.Event()
        self.events.append(f"end {n}")
        if self.end_with is not None:
            raise self.end_with
        return {}

    async def next_open(self) -> None:
        with anyio.fail_after(3):
            await self.opened.wait()


@asynccontextmanager
async def kept(listening: Listening, server: Server, caps: dict[str, Any]) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        opened = server.opened
        tg.start_soon(listening.keep, server, caps)
        with anyio.fail_after(3):
            await opened.wait()
        yield
        tg.cancel_scope.cancel()


async def test_a_new_subscription_opens_a_new_stream_before_the_old_one_is_cancelled() -> None:
    listening, server = Listening("s", backoff=lambda attempt: 0.0), Server()
    async with kept(listening, server, EVERYTHING):
        listening.watch("resources/subscribe", {"uri": "r://a"}, EVERYTHING)
        await server.next_open()
        listening.watch("resources/subscribe", {"uri": "r://a"}, EVERYTHING)  # no change: kept
        await anyio.wait_all_tasks_blocked()
        assert server.events == ["open 0", "open 1", "cancel 0"]
    assert [f["notifications"]["resourceSubscriptions"] for f in server.filters if f] == [[], ["r://a"]]
    assert server.events[-1] == "cancel 1"  # and the last one with the link


async def test_a_stream_the_server_ends_is_reopened_after_a_growing_backoff_reset_by_a_change() -> None:
    attempts: list[int] = []

    def backoff(attempt: int) -> float:
        attempts.append(attempt)
        return 0.0

    listening, server = Listening("s", backoff=backoff), Server()
    async with kept(listening, server, SUBSCRIBABLE):
        for _ in range(2):
            server.end.set()
            await server.next_open()
        listening.watch("resources/subscribe", {"uri": "r://a"}, SUBSCRIBABLE)
        await server.next_open()
        server.end.set()
        await server.next_open()
    assert attempts == [0, 1, 0]
    assert server.events[:7] == ["open 0", "end 0", "open 1", "end 1", "open 2", "open 3", "cancel 2"]


@pytest.mark.parametrize(
    ("failure", "logged"),
    [
        (RemoteError("s", {"code": -32601, "message": "no listen"}), True),
        (ServerUnavailable("s", "gone"), False),
    ],
)
async def test_a_stream_that_fails_is_reopened_and_a_refusal_is_logged(
    failure: BaseException, logged: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.outbound.connection")
    listening, server = Listening("s", backoff=lambda attempt: 0.0), Server()
    server.end_with = failure
    async with kept(listening, server, SUBSCRIBABLE):
        server.end.set()
        await server.next_open()
    lines = [record.getMessage() for record in caplog.records]
    assert ("server s: subscriptions/listen failed: " + str(failure) in lines) is logged
    assert "server s: its listen stream ended; reopening in 0.0s" in lines
