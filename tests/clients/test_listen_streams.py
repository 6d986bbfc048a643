"""``subscriptions/listen`` at revision 2026-07-28, in memory: ASGI calls into ``McpEndpoint`` in
front of a real ``Gateway`` whose one server is an in-memory handshake-era server that can
change its lists and tell of resource updates whenever a test says so.

Covered here: the stream (SSE, acknowledgement first, tagged notifications of the kinds asked
for only, keep-alives), the honoured subset of ``resourceSubscriptions`` (readable and accepted
only), one subscription per URI at the server shared by listen streams and handshake sessions,
the policy re-checked for every update, the ends (disconnect, graceful end, outside
cancellation, a client too slow), and the registry on its own.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jwt
import orjson
import pytest

from proxy.app.gateway import Gateway
from proxy.clients import listen_streams as listen
from proxy.clients.listen_streams import Ending, Listens
from proxy.inbound import listen_sse
from proxy.inbound.streamable_http import McpEndpoint, OriginPolicy
from proxy.policy.model import ANONYMOUS
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from proxy.protocol.sse import SSEDecoder
from proxy.protocol.subscriptions import SUBSCRIPTION_ID_KEY, Filter
from proxy.router.dispatch import CAPABILITIES
from tests.inbound.memory_server import INITIALIZE, META, REFUSED, Server, V, request, running, valid
from tests.protocol.schemas import validator

pytestmark = pytest.mark.anyio

ACK = "notifications/subscriptions/acknowledged"
URIS = ("mem://a", REFUSED, "mem://secret")


@dataclass
class Stream:
    """One response as the endpoint sends it, its SSE events readable as they arrive."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    finished: bool = False  # the endpoint sent its last body chunk
    done: anyio.Event = field(default_factory=anyio.Event)  # the endpoint returned
    hang_up: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)  # the server's, not the client's
    stall_after: int | None = None  # body chunks written before the client stops reading
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    events: list[Any] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)
    read: int = 0

    async def next(self) -> Any:
        """The next SSE event, decoded and checked against the 2026-07-28 schema."""
        with anyio.fail_after(5):
            while self.read == len(self.events):
                await self.arrived.wait()
                self.arrived = anyio.Event()
        event = self.events[self.read]
        self.read += 1
        return valid(event)

    def json(self) -> Any:
        return orjson.loads(b"".join(self.chunks))

    def pings(self) -> int:
        return self.chunks.count(b": ping\n\n")


def listen_request(request_id: Any = 1, meta: Any = META, **notifications: Any) -> dict[str, Any]:
    return request("subscriptions/listen", request_id, meta, notifications=notifications)


ROUTED = {
    "mcp-protocol-version": V,
    "mcp-method": "subscriptions/listen",
    "accept": "application/json, text/event-stream",
}


async def serve(endpoint: McpEndpoint, body: Any, headers: dict[str, str], stream: Stream) -> None:
    """Run one POST through the endpoint; the client hangs up when ``stream.hang_up`` is set."""
    head = {"host": "127.0.0.1:8080", "content-type": "application/json", **headers}
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(k.encode(), v.encode()) for k, v in head.items()],
        "client": ("127.0.0.1", 1),
    }
    delivered = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
        await stream.hang_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            stream.status = message["status"]
            stream.headers = {bytes(k).decode(): bytes(v).decode() for k, v in message["headers"]}
            return
        if stream.stall_after is not None and len(stream.chunks) >= stream.stall_after:
            await anyio.Event().wait()  # a client that stopped reading: the write never returns
        chunk = message.get("body", b"")
        stream.chunks.append(chunk)
        stream.finished = not message.get("more_body", False)
        stream.events += [orjson.loads(event.data) for event in stream.decoder.feed(chunk)]
        stream.arrived.set()

    try:
        with stream.scope:
            await endpoint(scope, receive, send)
    finally:
        stream.done.set()


@asynccontextmanager
async def listening(
    endpoint: McpEndpoint, body: Any, headers: dict[str, str] = ROUTED, *, stall_after: int | None = None
) -> AsyncIterator[Stream]:
    """A listen request in flight; the client hangs up on the way out."""
    stream = Stream(stall_after=stall_after)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, endpoint, body, headers, stream)
            try:
                yield stream
            finally:
                stream.hang_up.set()


async def once(endpoint: McpEndpoint, body: Any, headers: dict[str, str] = ROUTED) -> Stream:
    stream = Stream()
    with anyio.fail_after(10):
        await serve(endpoint, body, headers, stream)
    return stream


@dataclass
class Served:
    gateway: Gateway
    endpoint: McpEndpoint
    server: Server


@asynccontextmanager
async def serving(**config: Any) -> AsyncIterator[Served]:
    """A gateway in front of a server whose lists change on cue, and the endpoint in front of it."""
    server = Server(prompts=[{"name": "p0"}], resources=[{"uri": uri, "name": uri} for uri in URIS])
    async with running(server, **config) as gateway:
        yield Served(gateway, McpEndpoint(gateway.inbound, OriginPolicy("127.0.0.1", [], [])), server)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serving() as started:
        yield started


def subscription_id(event: Any) -> Any:
    params = event["params"] if "params" in event else event["result"]
    return params["_meta"][SUBSCRIPTION_ID_KEY]


async def test_modern_callers_are_told_of_list_changes_and_resource_subscriptions() -> None:
    assert CAPABILITIES["tools"] == {"listChanged": True}
    assert CAPABILITIES["prompts"] == {"listChanged": True}
    assert CAPABILITIES["resources"] == {"subscribe": True, "listChanged": True}


async def test_a_listen_is_an_sse_stream_acknowledged_first_then_tagged_changes(served: Served) -> None:
    async with listening(served.endpoint, listen_request("L-1", toolsListChanged=True)) as stream:
        ack = await stream.next()
        assert (stream.status, stream.headers["content-type"]) == (200, "text/event-stream")
        assert stream.headers["x-accel-buffering"] == "no"
        validator(V, "SubscriptionsAcknowledgedNotification")(ack)
        assert ack["method"] == ACK
        assert ack["params"] == {
            "_meta": {SUBSCRIPTION_ID_KEY: "L-1"},
            "notifications": {"toolsListChanged": True},
        }
        await served.server.change("tools")
        changed = await stream.next()
        assert changed == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID_KEY: "L-1"}},
        }
        assert len(served.gateway.listens) == 1
    assert len(served.gateway.listens) == 0  # the client hung up: the stream is gone
    assert not stream.finished  # and nothing was written after it left


async def test_each_stream_carries_only_the_kinds_it_asked_for(served: Served) -> None:
    tools_only = listen_request(1, toolsListChanged=True)
    prompts_only = listen_request(1, promptsListChanged=True)  # the same id from another client
    async with (
        listening(served.endpoint, tools_only) as tools,
        listening(served.endpoint, prompts_only) as prompts,
    ):
        assert (await tools.next())["params"]["notifications"] == {"toolsListChanged": True}
        assert (await prompts.next())["params"]["notifications"] == {"promptsListChanged": True}
        await served.server.change("tools")
        await served.server.change("prompts")
        assert (await tools.next())["method"] == "notifications/tools/list_changed"
        assert (await prompts.next())["method"] == "notifications/prompts/list_changed"
        await served.server.change("prompts")
        await served.server.change("tools")
        assert (await tools.next())["method"] == "notifications/tools/list_changed"
        assert (await prompts.next())["method"] == "notifications/prompts/list_changed"


async def test_resource_subscriptions_are_honoured_for_readable_uris_the_server_accepted(
    served: Served,
) -> None:
    body = listen_request(resourceSubscriptions=["mem://a", "mem://nowhere", REFUSED, "mem://a"])
    async with listening(served.endpoint, body) as stream:
        ack = await stream.next()
        assert ack["params"]["notifications"] == {"resourceSubscriptions": ["mem://a"]}
        assert sorted(served.server.asked("resources/subscribe")) == ["mem://a", REFUSED]
        await served.server.update(REFUSED)  # not honoured: never delivered
        await served.server.update("mem://a")
        updated = await stream.next()
        assert updated["params"] == {"uri": "mem://a", "_meta": {SUBSCRIPTION_ID_KEY: 1}}
    with anyio.fail_after(5):
        await served.server.unsubscribed.wait()
    assert served.server.asked("resources/unsubscribe") == ["mem://a"]


async def test_one_subscription_at_the_server_serves_every_stream_watching_a_uri(served: Served) -> None:
    watch = listen_request(resourceSubscriptions=["mem://a"])
    async with listening(served.endpoint, watch) as first:
        await first.next()
        async with listening(served.endpoint, {**watch, "id": 2}) as second:
            await second.next()
            await served.server.update("mem://a")
            assert subscription_id(await first.next()) == 1
            assert subscription_id(await second.next()) == 2
        assert served.server.asked("resources/subscribe") == ["mem://a"]
        assert served.server.asked("resources/unsubscribe") == []  # the first still watches
    with anyio.fail_after(5):
        await served.server.unsubscribed.wait()
    assert served.server.asked("resources/unsubscribe") == ["mem://a"]


async def _legacy(endpoint: McpEndpoint) -> Callable[[str, dict[str, Any]], Awaitable[Stream]]:
    """A handshake-era session on the same endpoint: a function that sends it a request."""
    accept = {"accept": "application/json, text/event-stream"}
    session = (await once(endpoint, {**INITIALIZE, "id": 0}, accept)).headers["mcp-session-id"]
    headers = {**accept, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    await once(endpoint, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)

    async def ask(method: str, params: dict[str, Any]) -> Stream:
        return await once(endpoint, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers)

    return ask


async def test_a_legacy_subscription_and_a_listen_share_one_subscription_at_the_server(
    served: Served,
) -> None:
    handshake = await _legacy(served.endpoint)
    assert (await handshake("resources/subscribe", {"uri": "mem://a"})).json()["result"] == {}
    async with listening(served.endpoint, listen_request(resourceSubscriptions=["mem://a"])) as stream:
        await stream.next()
        await handshake("resources/unsubscribe", {"uri": "mem://a"})
        assert served.server.asked("resources/unsubscribe") == []  # the listen stream still watches
    with anyio.fail_after(5):
        await served.server.unsubscribed.wait()
    assert served.server.asked("resources/subscribe") == ["mem://a"]
    assert served.server.asked("resources/unsubscribe") == ["mem://a"]


async def test_a_legacy_session_sees_a_listens_subscription_as_taken(served: Served) -> None:
    async with listening(served.endpoint, listen_request(resourceSubscriptions=["mem://a"])) as stream:
        await stream.next()
        handshake = await _legacy(served.endpoint)
        await handshake("resources/subscribe", {"uri": "mem://a"})
        assert served.server.asked("resources/subscribe") == ["mem://a"]  # once, by the listen
    # The handshake session still wants it: closing the stream must not unsubscribe.
    assert served.server.asked("resources/unsubscribe") == []


async def test_the_policy_decides_what_a_stream_may_watch_and_is_asked_again_for_every_update(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    hide = "version: 1\ndefault: allow\nrules:\n- {{id: hide, effect: deny, match: {{resources: [{}]}}}}\n"
    policy.write_text(hide.format('"mem://secret"'))
    async with serving(policy={"files": [str(policy)], "reload": False}) as served:
        body = listen_request(resourcesListChanged=True, resourceSubscriptions=["mem://secret", "mem://a"])
        async with listening(served.endpoint, body) as stream:
            ack = await stream.next()
            assert ack["params"]["notifications"] == {
                "resourcesListChanged": True,
                "resourceSubscriptions": ["mem://a"],
            }
            assert served.server.asked("resources/subscribe") == ["mem://a"]
            policy.write_text(hide.format('"mem://a"'))
            served.gateway.reload_policy()
            # What each identity may see changed: the stream hears it like a handshake session does.
            assert (await stream.next())["method"] == "notifications/resources/list_changed"
            await served.server.update("mem://a")  # no longer readable by this caller: not delivered
            await served.server.change("tools")  # not asked for
            await served.server.change("resources")  # told after the update, so heard after it
            assert (await stream.next())["method"] == "notifications/resources/list_changed"


async def test_a_graceful_end_sends_the_listen_requests_response_and_closes(served: Served) -> None:
    async with listening(served.endpoint, listen_request("L-7", promptsListChanged=True)) as stream:
        await stream.next()
        served.gateway.listens.end_all()
        final = await stream.next()
        validator(V, "SubscriptionsListenResultResponse")(final)
        assert final == {
            "jsonrpc": "2.0",
            "id": "L-7",
            "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: "L-7"}},
        }
        with anyio.fail_after(5):
            await stream.done.wait()  # ended by the server, not by the client hanging up
        assert stream.finished


async def test_a_server_cancelling_the_stream_from_outside_still_ends_it_gracefully(served: Served) -> None:
    async with listening(served.endpoint, listen_request("L-8", toolsListChanged=True)) as stream:
        await stream.next()
        stream.scope.cancel()  # as uvicorn does to a request still running past its grace period
        final = await stream.next()
        assert (final["id"], subscription_id(final)) == ("L-8", "L-8")
        with anyio.fail_after(5):
            await stream.done.wait()
        assert stream.finished
        assert len(served.gateway.listens) == 0


async def test_a_silent_stream_is_kept_alive(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listen_sse, "_KEEPALIVE", 0.01)
    async with listening(served.endpoint, listen_request(toolsListChanged=True)) as stream:
        await stream.next()
        with anyio.fail_after(5):
            while stream.pings() < 2:
                await stream.arrived.wait()  # set by every chunk, a ping too
                stream.arrived = anyio.Event()
        await served.server.change("tools")
        assert (await stream.next())["method"] == "notifications/tools/list_changed"


@pytest.mark.slow
async def test_a_client_too_slow_to_read_loses_its_stream(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listen_sse, "_FINAL_WRITE", 0.01)
    monkeypatch.setattr(served.gateway.listens, "_buffer", 1)  # one unread notification at most
    body = listen_request(toolsListChanged=True, promptsListChanged=True, resourcesListChanged=True)
    async with listening(served.endpoint, body, stall_after=1) as stream:
        await stream.next()  # the acknowledgement: every write after it blocks
        for kind in ("tools", "prompts", "resources"):  # one being written, one queued, one too many
            served.gateway.listens.publish(jsonrpc.notification(f"notifications/{kind}/list_changed"))
        with anyio.fail_after(5):
            await stream.done.wait()  # abandoned by the server, the client never hung up
        assert len(served.gateway.listens) == 0
    assert not stream.finished
    assert "ending the stream" in caplog.text


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({k: v for k, v in ROUTED.items() if k != "accept"}, 406),  # no Accept: a listen needs SSE
        ({**ROUTED, "accept": "application/json"}, 406),
    ],
)
async def test_a_listen_without_sse_in_accept_is_406(
    served: Served, headers: dict[str, str], status: int
) -> None:
    response = await once(served.endpoint, listen_request(toolsListChanged=True), headers)
    assert response.status == status
    assert len(served.gateway.listens) == 0


@pytest.mark.parametrize(
    "body",
    [
        {**listen_request(), "params": {"_meta": META}},
        listen_request(toolsListChanged="yes"),
        listen_request(resourceSubscriptions="mem://a"),
    ],
)
async def test_a_bad_filter_is_invalid_params_in_json_with_the_id(served: Served, body: Any) -> None:
    response = await once(served.endpoint, body)
    assert (response.status, response.headers["content-type"]) == (400, "application/json")
    error = response.json()
    validator(V, "JSONRPCMessage")(error)
    assert (error["id"], error["error"]["code"]) == (1, -32602)


async def test_a_listen_is_classified_like_any_modern_request(served: Served) -> None:
    wrong_method = await once(served.endpoint, listen_request(), {**ROUTED, "mcp-method": "tools/list"})
    assert (wrong_method.status, wrong_method.json()["error"]["code"]) == (400, -32020)
    no_envelope = await once(served.endpoint, listen_request(meta={}))
    assert (no_envelope.status, no_envelope.json()["error"]["code"]) == (400, -32602)


# ---- the registry on its own -----------------------------------------------------------------


async def test_a_repeat_still_unread_is_dropped_and_a_read_one_comes_again() -> None:
    listens = Listens()
    subscription = listens.open("s", ANONYMOUS, Filter(tools=True, uris=("a://",)))
    tools = jsonrpc.notification("notifications/tools/list_changed")
    updated = jsonrpc.notification("notifications/resources/updated", {"uri": "a://"})
    assert (await subscription.next() or {}).get("method") == ACK
    for message in (tools, updated, tools, updated, jsonrpc.notification("notifications/progress")):
        listens.publish(message)
    assert [(await subscription.next(0.01) or {}).get("method") for _ in range(3)] == [
        "notifications/tools/list_changed",
        "notifications/resources/updated",
        None,  # nothing more: the repeats said nothing new, progress is never for a stream
    ]
    listens.publish(tools)
    assert (await subscription.next(0.01) or {}).get("method") == "notifications/tools/list_changed"
    listens.close(subscription)


async def test_publish_asks_allowed_only_for_streams_that_want_the_message() -> None:
    listens = Listens()
    wanting = listens.open(1, ANONYMOUS, Filter(uris=("a://",)))
    other = listens.open(2, ANONYMOUS, Filter(tools=True))
    asked: list[Any] = []

    def allowed(subscription: Any) -> bool:
        asked.append(subscription.id)
        return False

    listens.publish(jsonrpc.notification("notifications/resources/updated", {"uri": "a://"}), allowed)
    assert asked == [1]
    await wanting.next()
    assert await wanting.next(0.01) is None
    listens.end_all()
    for subscription in (wanting, other):
        listens.close(subscription)


async def test_interest_in_a_uri_counts_open_streams_but_the_one_asking() -> None:
    listens = Listens()
    first = listens.open(1, ANONYMOUS, Filter(uris=("a://",)))
    assert listens.watching("a://")
    assert not listens.watching("a://", besides=first)
    assert not listens.watching("b://")
    listens.close(first)
    assert first.ending is Ending.GRACEFUL
    assert not listens.watching("a://")


async def test_an_overflowing_stream_ends_without_a_response() -> None:
    listens = Listens(buffer=1)
    subscription = listens.open(1, ANONYMOUS, Filter(tools=True, prompts=True))
    listens.publish(jsonrpc.notification("notifications/tools/list_changed"))
    listens.publish(jsonrpc.notification("notifications/prompts/list_changed"))
    assert subscription.ending is Ending.OVERFLOW
    assert subscription.lost.is_set()
    assert (await subscription.next() or {}).get("method") == ACK
    with pytest.raises(anyio.EndOfStream):
        await subscription.next()
    listens.close(subscription)


async def test_pump_writes_the_ack_the_notifications_and_the_response_in_order() -> None:
    listens = Listens()
    subscription = listens.open("p", ANONYMOUS, Filter(resources=True))
    written: list[Message] = []
    listens.publish(jsonrpc.notification("notifications/resources/list_changed"))
    subscription.end()
    with anyio.fail_after(5):
        await listen.pump(subscription, _append(written))
    assert [m.get("method", "response") for m in written] == [
        ACK,
        "notifications/resources/list_changed",
        "response",
    ]
    assert written[-1]["id"] == "p"
    listens.close(subscription)


def _append(written: list[Message]) -> Callable[[Message], Awaitable[None]]:
    async def write(message: Message) -> None:
        written.append(message)

    return write


# ---- what one caller may hold open (issue #14) ----------------------------------------------


def refusals(served: Served, limit: str) -> float:
    registry = served.gateway.metrics.registry
    return registry.get_sample_value("manifold_limit_refusals_total", {"limit": limit}) or 0.0


async def test_an_identity_past_its_listen_streams_is_refused_naming_the_limit_until_one_closes() -> None:
    # Two per identity: one per session times the two sessions it may have.
    limits = {"max_listen_streams_per_session": 1, "max_sessions_per_identity": 2}
    async with serving(limits=limits) as served:
        async with listening(served.endpoint, listen_request(1, toolsListChanged=True)) as first:
            await first.next()
            async with listening(served.endpoint, listen_request(2, toolsListChanged=True)) as second:
                await second.next()
                refused = await once(served.endpoint, listen_request(3, toolsListChanged=True))
                assert refused.status == 400
                error = refused.json()["error"]
                assert error["data"] == {"limit": "max_listen_streams_per_session", "max": 2}
                assert "limits.max_listen_streams_per_session" in error["message"]
                assert refused.json()["id"] == 3
                assert refusals(served, "max_listen_streams_per_session") == 1
        assert len(served.gateway.listens) == 0  # each block waited for its stream's end
        async with listening(served.endpoint, listen_request(4, toolsListChanged=True)) as again:
            assert (await again.next())["method"] == ACK


async def test_one_issuers_alice_does_not_use_up_another_issuers_listen_streams() -> None:
    secrets = {"https://a.example": "a-secret-of-at-least-32-bytes-for-hs256", "https://b.example": "b" * 40}
    auth = {"jwt": [{"issuer": iss, "secret": secret} for iss, secret in secrets.items()]}
    limits = {"max_listen_streams_per_session": 1, "max_sessions_per_identity": 1}
    now = int(time.time())

    def alice_of(iss: str) -> dict[str, str]:
        token = jwt.encode({"sub": "alice", "iss": iss, "exp": now + 600}, secrets[iss], algorithm="HS256")
        return {**ROUTED, "authorization": f"Bearer {token}"}

    async with serving(auth=auth, limits=limits) as served:
        ours, theirs = alice_of("https://a.example"), alice_of("https://b.example")
        async with listening(served.endpoint, listen_request(1, toolsListChanged=True), ours) as first:
            await first.next()
            # The same sub and name from another issuer is another identity, with its own stream.
            async with listening(served.endpoint, listen_request(2, toolsListChanged=True), theirs) as second:
                assert (await second.next())["method"] == ACK
            refused = await once(served.endpoint, listen_request(3, toolsListChanged=True), ours)
            assert refused.json()["error"]["data"] == {"limit": "max_listen_streams_per_session", "max": 1}


async def test_a_session_past_its_resource_subscriptions_is_refused_naming_the_limit() -> None:
    async with serving(limits={"max_subscriptions_per_session": 1}) as served:
        handshake = await _legacy(served.endpoint)
        assert (await handshake("resources/subscribe", {"uri": "mem://a"})).json()["result"] == {}
        # The same URI again holds nothing more.
        assert (await handshake("resources/subscribe", {"uri": "mem://a"})).json()["result"] == {}
        error = (await handshake("resources/subscribe", {"uri": "mem://secret"})).json()["error"]
        assert error["code"] == -32600
        assert error["data"] == {"limit": "max_subscriptions_per_session", "max": 1}
        assert refusals(served, "max_subscriptions_per_session") == 1
        assert "mem://secret" not in served.server.asked("resources/subscribe")
        await handshake("resources/unsubscribe", {"uri": "mem://a"})
        assert (await handshake("resources/subscribe", {"uri": "mem://secret"})).json()["result"] == {}
