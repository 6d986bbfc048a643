from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from proxy.core.errors import (
    MessageTooLarge,
    RemoteError,
    ServerProtocolError,
    ServerTimeout,
    ServerUnavailable,
)
from proxy.observe.boundary import wire_error
from proxy.outbound.connection import ServerConnection
from proxy.outbound.health import ServerState, backoff_delay
from proxy.outbound.transport import Failed, Transport
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from tests.outbound.memory import Handler, MemoryTransport, answer, initialize_result

pytestmark = pytest.mark.anyio

Reply = Callable[[Message | Failed], Awaitable[None]]


class Recorder:
    def __init__(self) -> None:
        self.listings: list[list[str]] = []
        self.states: list[tuple[ServerState, str | None]] = []
        self.updated = anyio.Event()
        self.notifications: list[Message] = []

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        if kind != "tools":
            return
        self.listings.append([tool["name"] for tool in items])
        self.updated.set()
        self.updated = anyio.Event()

    def server_notification(self, server_id: str, message: Message) -> None:
        self.notifications.append(message)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        self.states.append((state, reason))


def paged_server(pages: Sequence[tuple[list[str], str | None]], on_call: Handler | None = None) -> Handler:
    """Serves initialize, tools/list from ``pages`` (cursor "" asks for page 0), and tools/call."""

    async def handle(message: Message, reply: Reply) -> None:
        method = message.get("method")
        if method == "initialize":
            await reply(answer(message, initialize_result()))
        elif method == "tools/list":
            cursor = (message.get("params") or {}).get("cursor")
            index = int(cursor.removeprefix("p")) if cursor else 0
            names, next_cursor = pages[min(index, len(pages) - 1)]
            result: dict[str, Any] = {
                "tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]
            }
            if next_cursor is not None:
                result["nextCursor"] = next_cursor
            await reply(answer(message, result))
        elif method == "tools/call" and on_call is not None:
            await on_call(message, reply)
        elif "id" in message and method is not None:  # server/discover among them: a handshake-era server
            await reply({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": method}})

    return handle


@asynccontextmanager
async def connected(
    transport: Transport, recorder: Recorder, **options: Any
) -> AsyncIterator[ServerConnection]:
    connection = ServerConnection(
        "mem", transport, recorder, connect_timeout=5, answer_error=wire_error, **options
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run)
        with anyio.fail_after(5):
            await connection.first_attempt_done.wait()
        yield connection
        tg.cancel_scope.cancel()


async def test_every_page_is_drained_before_the_server_is_ready() -> None:
    recorder = Recorder()
    pages = [(["a", "b"], "p1"), (["c"], "p2"), (["d"], None)]
    async with connected(MemoryTransport(paged_server(pages)), recorder) as connection:
        assert connection.state is ServerState.READY
    assert recorder.listings == [["a", "b", "c", "d"]]


@pytest.mark.parametrize(
    "pages",
    [
        [(["a"], "p1"), (["b"], "p1")],  # the server repeats a cursor
        [(["a"], "p1"), (["b"], "")],  # an empty-string cursor
    ],
)
async def test_bad_cursors_end_the_drain_with_what_was_listed(
    pages: list[tuple[list[str], str | None]],
) -> None:
    recorder = Recorder()
    async with connected(MemoryTransport(paged_server(pages)), recorder):
        pass
    assert recorder.listings == [["a", "b"]]


async def test_a_server_that_pages_forever_is_cut_off_at_max_pages() -> None:
    recorder = Recorder()
    pages = [([f"t{i}"], f"p{i + 1}") for i in range(50)]
    async with connected(MemoryTransport(paged_server(pages)), recorder, max_pages=5):
        pass
    assert recorder.listings == [["t0", "t1", "t2", "t3", "t4"]]


async def test_answers_out_of_order_reach_the_request_that_asked() -> None:
    async def on_call(message: Message, reply: Reply) -> None:
        delay = message["params"]["arguments"]["delay"]
        await anyio.sleep(delay)
        await reply(answer(message, {"delay": delay}))

    async with connected(MemoryTransport(paged_server([([], None)], on_call)), Recorder()) as connection:
        results: dict[float, Any] = {}

        async def call(delay: float) -> None:
            params = {"name": "x", "arguments": {"delay": delay}}
            results[delay] = await connection.request("tools/call", params)

        async with anyio.create_task_group() as tg:
            for delay in (0.05, 0.0, 0.03, 0.01):
                tg.start_soon(call, delay)
    assert results == {d: {"delay": d} for d in (0.05, 0.0, 0.03, 0.01)}


async def test_a_timeout_raises_and_tells_the_server_under_its_own_id() -> None:
    async def never(message: Message, reply: Reply) -> None:
        await anyio.sleep_forever()

    transport = MemoryTransport(paged_server([([], None)], never))
    async with connected(transport, Recorder()) as connection:
        with pytest.raises(ServerTimeout, match=r"did not answer tools/call within 0\.1s"):
            await connection.request("tools/call", {"name": "x"}, timeout=0.1)
    sent = transport.links[0].sent
    call = next(m for m in sent if m.get("method") == "tools/call")
    cancel = next(m for m in sent if m.get("method") == "notifications/cancelled")
    assert cancel["params"]["requestId"] == call["id"]


async def test_a_cancelled_caller_sends_notifications_cancelled() -> None:
    started = anyio.Event()

    async def never(message: Message, reply: Reply) -> None:
        started.set()
        await anyio.sleep_forever()

    transport = MemoryTransport(paged_server([([], None)], never))
    async with connected(transport, Recorder()) as connection:
        with anyio.move_on_after(5) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(connection.request, "tools/call", {"name": "x"})
                await started.wait()
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
    reasons = [
        m["params"]["reason"] for m in transport.links[0].sent if m.get("method") == "notifications/cancelled"
    ]
    assert reasons == ["cancelled by the client"]


async def test_a_jsonrpc_error_from_the_server_is_a_remote_error() -> None:
    async def refuse(message: Message, reply: Reply) -> None:
        await reply(
            {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "no such tool"}}
        )

    async with connected(MemoryTransport(paged_server([([], None)], refuse)), Recorder()) as connection:
        with pytest.raises(RemoteError) as caught:
            await connection.request("tools/call", {"name": "x"})
    assert caught.value.error == {"code": -32602, "message": "no such tool"}


@pytest.mark.slow
async def test_a_dying_server_fails_in_flight_calls_then_restarts_and_is_relisted() -> None:
    started = anyio.Event()

    async def never(message: Message, reply: Reply) -> None:
        started.set()
        await anyio.sleep_forever()

    recorder = Recorder()
    transport = MemoryTransport(paged_server([(["a"], None)], never))
    async with connected(transport, recorder) as connection:
        failure: list[BaseException] = []

        async def call() -> None:
            try:
                await connection.request("tools/call", {"name": "x"})
            except ServerUnavailable as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            transport.hang_up.set()
        assert [str(f) for f in failure] == ["server 'mem' is unavailable: the server hung up"]
        with pytest.raises(ServerUnavailable):
            await connection.request("tools/call", {"name": "x"})  # fails fast while down
        with anyio.fail_after(5):
            while connection.state is not ServerState.READY or len(recorder.listings) < 2:
                await recorder.updated.wait()
    assert recorder.listings == [["a"], ["a"]]
    assert connection.restarts == 1
    assert (ServerState.BACKOFF, "the server hung up") in recorder.states


@pytest.mark.slow
async def test_a_server_choosing_an_unknown_revision_is_not_used() -> None:
    async def handle(message: Message, reply: Reply) -> None:
        if message.get("method") == "initialize":
            await reply(answer(message, initialize_result("1999-01-01")))

    recorder = Recorder()
    async with connected(MemoryTransport(handle), recorder) as connection:
        assert connection.state is ServerState.BACKOFF
        assert "1999-01-01" in (connection.reason or "")
    assert recorder.listings == []


async def test_list_changed_from_the_server_triggers_a_relist() -> None:
    pages: list[tuple[list[str], str | None]] = [(["a"], None)]

    async def on_call(message: Message, reply: Reply) -> None:
        pages[0] = (["a", "b"], None)
        await reply(answer(message, {"content": []}))
        await reply({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    recorder = Recorder()
    async with connected(MemoryTransport(paged_server(pages, on_call)), recorder) as connection:
        listed = recorder.updated
        await connection.request("tools/call", {"name": "grow"})
        with anyio.fail_after(5):
            await listed.wait()
    assert recorder.listings == [["a"], ["a", "b"]]


def test_backoff_doubles_up_to_the_cap() -> None:
    delays = [backoff_delay(n, jitter=0) for n in range(10)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == 30.0


async def test_a_request_the_transport_reports_failed_raises_that_error_and_the_rest_go_on() -> None:
    async def on_call(message: Message, reply: Reply) -> None:
        if message["params"]["name"] == "bad":
            await reply(Failed(message["id"], ServerProtocolError("mem", "its answer was unusable")))
        else:
            await reply(answer(message, {"content": []}))

    async with connected(MemoryTransport(paged_server([([], None)], on_call)), Recorder()) as connection:
        with pytest.raises(
            ServerProtocolError, match="server 'mem' broke the protocol: its answer was unusable"
        ):
            await connection.request("tools/call", {"name": "bad"})
        assert await connection.request("tools/call", {"name": "good"}) == {"content": []}
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)


class FailsFirst:
    """A transport whose first link breaks in a way nobody planned for."""

    def __init__(self, transport: MemoryTransport) -> None:
        self._transport = transport
        self.connects = 0

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Any]:
        self.connects += 1
        if self.connects == 1:
            raise RuntimeError("a bug, say")
        async with self._transport.connect() as link:
            yield link


@pytest.mark.slow
async def test_an_unexpected_error_in_one_lifetime_is_logged_counted_and_followed_by_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[tuple[str, BaseException]] = []
    recorder = Recorder()
    transport = FailsFirst(MemoryTransport(paged_server([(["a"], None)])))
    async with connected(
        transport, recorder, on_internal_error=lambda *seen: counted.append(seen)
    ) as connection:
        assert (connection.state, connection.reason) == (ServerState.BACKOFF, "internal error: RuntimeError")
        with anyio.fail_after(5):
            while connection.state is not ServerState.READY:
                await recorder.updated.wait()
    assert [(where, str(exc)) for where, exc in counted] == [("outbound.connection", "a bug, say")]
    [logged] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "internal error" in logged.getMessage()
    assert "server mem" in logged.getMessage()
    assert logged.exc_info is not None  # the traceback, once
    assert connection.restarts == 1


class FussyListener(Recorder):
    def server_notification(self, server_id: str, message: Message) -> None:
        raise KeyError("the gateway choked on it")


async def test_a_message_whose_handling_fails_costs_that_message_only() -> None:
    async def on_call(message: Message, reply: Reply) -> None:
        await reply(jsonrpc.notification("notifications/message", {"level": "info", "data": "x"}))
        await reply(answer(message, {"content": []}))

    counted: list[str] = []
    async with connected(
        MemoryTransport(paged_server([([], None)], on_call)),
        FussyListener(),
        on_internal_error=lambda where, _: counted.append(where),
    ) as connection:
        assert await connection.request("tools/call", {"name": "x"}) == {"content": []}
        assert await connection.request("tools/call", {"name": "x"}) == {"content": []}
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
    assert counted == ["outbound.dispatch", "outbound.dispatch"]


async def test_messages_with_odd_ids_and_params_are_dropped_without_harm() -> None:
    async def on_call(message: Message, reply: Reply) -> None:
        our_id = message["id"]
        for odd in (
            {"jsonrpc": "2.0", "id": "not-ours", "result": {}},
            {"jsonrpc": "2.0", "id": 10**6, "result": {}},
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}},
            jsonrpc.notification("notifications/progress", {"progressToken": our_id, "progress": "lots"}),
            jsonrpc.notification("notifications/progress", {"progressToken": [our_id]}),
            jsonrpc.notification("notifications/cancelled", {"requestId": {"a": 1}}),
        ):
            await reply(odd)
        await reply(Failed(10**6, ServerProtocolError("mem", "an answer for no one")))
        await reply(answer(message, {"content": []}))
        await reply(answer(message, {"content": ["a second answer is dropped"]}))

    async with connected(MemoryTransport(paged_server([([], None)], on_call)), Recorder()) as connection:
        assert await connection.request("tools/call", {"name": "x"}) == {"content": []}
        assert await connection.request("tools/call", {"name": "x"}) == {"content": []}
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)


async def test_a_server_whose_last_calls_all_failed_at_the_transport_is_failing_until_one_succeeds() -> None:
    mode = {"fail": True}

    async def on_call(message: Message, reply: Reply) -> None:
        if mode["fail"]:
            await reply(Failed(message["id"], ServerProtocolError("mem", "HTTP 200 with no response")))
        elif message["params"]["name"] == "refuse":  # the server's own error: it works
            await reply({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "no"}})
        else:
            await reply(answer(message, {"content": []}))

    recorder = Recorder()
    handler = paged_server([(["a"], None)], on_call)
    async with connected(MemoryTransport(handler), recorder, failures_until_unready=3) as connection:
        for attempt in range(3):
            assert connection.state is ServerState.READY, attempt
            with pytest.raises(ServerProtocolError):
                await connection.request("tools/call", {"name": "a"})
        failing = "its last 3 calls failed; the last: HTTP 200 with no response"
        assert recorder.states[-1] == (ServerState.FAILING, failing)
        assert (connection.state.value, connection.reason) == ("failing", failing)
        mode["fail"] = False  # still served while failing: one answer makes it ready again
        with pytest.raises(RemoteError):
            await connection.request("tools/call", {"name": "refuse"})
        assert recorder.states[-2:] == [(ServerState.FAILING, failing), (ServerState.READY, None)]


async def test_what_a_caller_can_provoke_never_makes_a_server_failing() -> None:
    # A slow tool (timed out) and an answer past a size limit (a big file asked for): one
    # client could otherwise take a required server, and the replica's /readyz, out of service.
    too_large = ServerProtocolError("mem", "its answer was too large")
    too_large.__cause__ = MessageTooLarge("a JSON body", limit="max_server_message_bytes", maximum=8)

    async def on_call(message: Message, reply: Reply) -> None:
        if message["params"]["name"] == "big":
            await reply(Failed(message["id"], too_large))
        # "slow": never answered

    refused: list[str] = []
    handler = paged_server([(["big", "slow"], None)], on_call)
    async with connected(
        MemoryTransport(handler),
        Recorder(),
        failures_until_unready=1,
        on_limit=lambda e: refused.append(e.limit),
    ) as connection:
        for _ in range(2):
            with pytest.raises(ServerTimeout):
                await connection.request("tools/call", {"name": "slow"}, timeout=0.05)
            with pytest.raises(ServerProtocolError):
                await connection.request("tools/call", {"name": "big"})
        assert connection.state is ServerState.READY
    assert refused == ["max_server_message_bytes"] * 2


async def test_json_rpc_errors_the_server_answers_never_make_it_failing() -> None:
    async def on_call(message: Message, reply: Reply) -> None:
        await reply({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "no"}})

    handler = paged_server([(["a"], None)], on_call)
    async with connected(MemoryTransport(handler), Recorder(), failures_until_unready=1) as connection:
        for _ in range(3):
            with pytest.raises(RemoteError):
                await connection.request("tools/call", {"name": "a"})
        assert connection.state is ServerState.READY


async def test_a_list_past_max_items_is_cut_counted_and_remembered_for_health() -> None:
    refused: list[str] = []
    recorder = Recorder()
    pages = [([f"t{i}", f"u{i}"], f"p{i + 1}") for i in range(10)]
    handler = paged_server(pages)
    async with connected(
        MemoryTransport(handler), recorder, max_items=5, on_limit=lambda exc: refused.append(exc.limit)
    ) as connection:
        assert connection.capped == {"tools": 5}
    assert recorder.listings == [["t0", "u0", "t1", "u1", "t2"]]
    assert refused == ["max_server_items"]


async def test_a_failure_that_names_no_request_fails_every_call_in_flight_and_the_link_lives_on() -> None:
    calls: list[Message] = []
    both_in = anyio.Event()

    async def on_call(message: Message, reply: Reply) -> None:
        if message["params"]["name"] == "good":
            await reply(answer(message, {"content": []}))
            return
        calls.append(message)
        if len(calls) == 2:
            both_in.set()
            await reply(Failed(None, ServerProtocolError("mem", "it wrote a message too large")))

    async with connected(MemoryTransport(paged_server([([], None)], on_call)), Recorder()) as connection:
        failures: list[str] = []

        async def call() -> None:
            try:
                await connection.request("tools/call", {"name": "waits"})
            except ServerProtocolError as exc:
                failures.append(str(exc))

        with anyio.fail_after(5):  # far below the 60 s request timeout
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                tg.start_soon(call)
            assert await connection.request("tools/call", {"name": "good"}) == {"content": []}
        assert (connection.state, connection.restarts) == (ServerState.READY, 0)
    assert failures == ["server 'mem' broke the protocol: it wrote a message too large"] * 2


@pytest.mark.slow
async def test_every_restart_is_counted_in_the_metric_the_first_one_included() -> None:
    from proxy.observe.metrics import Metrics
    from proxy.servers.connections import ServerHealth

    metrics = Metrics(process_metrics=False)
    health = ServerHealth(metrics, ["mem"])

    class Counted(Recorder):
        def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
            super().state_changed(server_id, state, reason)
            health.state_changed(server_id, state, reason)

    recorder = Counted()
    transport = FailsFirst(MemoryTransport(paged_server([(["a"], None)])))
    async with connected(transport, recorder) as connection:
        with anyio.fail_after(5):
            while connection.state is not ServerState.READY:
                await recorder.updated.wait()
    restarts = metrics.registry.get_sample_value("manifold_server_restarts_total", {"server": "mem"})
    assert (connection.restarts, restarts) == (1, 1.0)
    assert recorder.states[0] == (ServerState.STARTING, None)  # the first start is told too


async def test_untraced_a_callers_malformed_trace_context_is_not_passed_on_and_a_valid_one_is() -> None:
    received: list[dict[str, Any]] = []

    async def on_call(message: Message, reply: Reply) -> None:
        received.append(message["params"].get("_meta", {}))
        await reply(answer(message, {"content": []}))

    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with connected(MemoryTransport(paged_server([([], None)], on_call)), Recorder()) as connection:
        for meta in (
            {"traceparent": "00-" + "a" * 10_240, "tracestate": "a=1", "progressToken": "p"},
            {"traceparent": good, "tracestate": "a=1,a=2", "baggage": "k=v,bad key=1"},
            {"traceparent": good, "tracestate": "a=1"},
        ):
            await connection.request("tools/call", {"name": "x", "_meta": meta})
    assert received == [
        {"progressToken": "p"},  # the rest of _meta stays
        {"traceparent": good, "baggage": "k=v"},
        {"traceparent": good, "tracestate": "a=1"},
    ]
