"""End to end, tracing: the official SDK client's trace goes on through Manifold to each server,
and a real OTLP receiver (its own process, decoding with ``opentelemetry-proto``) gets it whole.

The client attaches a known span context (trace ``TID``, span ``CLIENT_SPAN``); the SDK puts it in
``params._meta`` of every request it sends, as the MCP conventions say. The servers are ours
(``--trace-tools``: tool ``traced`` answers with the ``_meta`` and trace headers it received).
Each test asserts the whole trace: one trace per call, who is whose parent, the server seeing
Manifold's CLIENT span as its parent, errors on the spans that failed, nothing secret in any
attribute; and hostile callers, servers and collectors, which never fail a call.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import CreateMessageRequestParams, CreateMessageResult, TextContent
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

from proxy.protocol import versions
from tests.fixtures.spawn import fixture_command, free_port, running_http_process
from tests.interaction.harness import REPO, RunningManifold, post, raw_session, running_manifold, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
RECEIVER = Path(__file__).resolve().parents[1] / "fixtures" / "otlp_receiver.py"
RELAY = Path(__file__).resolve().parents[1] / "fixtures" / "relay_server.py"
SECRET_HEADER = "s3cr3t-bearer-value-for-the-trace-test"
POLICY = """\
version: 1
default: allow
rules:
  - id: no-tool-zero
    effect: deny
    match: {tools: ["st.tool_000"]}
"""


@dataclass
class Receiver:
    out: Path
    endpoint: str

    def spans(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    async def trace(
        self, trace_id: str, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 15
    ) -> list[dict[str, Any]]:
        """The spans of ``trace_id`` once ``done`` says they are all there (bounded).

        Polled: the receiver writes a file, and spans arrive in batches on the exporter's schedule.
        """
        with anyio.fail_after(timeout):
            while True:
                found = [s for s in self.spans() if s["trace_id"] == trace_id]
                if done(found):
                    return found
                await anyio.sleep(0.05)


@asynccontextmanager
async def receiving(tmp: Path, protocol: str = "http", mode: str = "ok") -> AsyncIterator[Receiver]:
    port = free_port()
    out = tmp / f"spans-{protocol}-{mode}.jsonl"
    command = [sys.executable, str(RECEIVER), "--protocol", protocol, "--port", str(port), "--out", str(out)]
    async with running_http_process([*command, "--mode", mode], port):
        yield Receiver(out, f"http://127.0.0.1:{port}")


def traced_stdio(name: str) -> dict[str, Any]:
    command = [*fixture_command(name, tools=2), "--trace-tools"]
    return {"command": command[0], "args": command[1:], "request_timeout": 1}


@contextmanager
def client_trace(trace_id: int, span_id: int) -> Iterator[None]:
    """The SDK client's requests carry this span as their parent (the SDK injects it)."""
    span = otel_trace.NonRecordingSpan(
        otel_trace.SpanContext(trace_id, span_id, is_remote=False, trace_flags=otel_trace.TraceFlags(1))
    )
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def _seen(result: Any) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent), result
    seen: dict[str, Any] = orjson.loads(block.text)
    return seen


def _one(spans: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [s for s in spans if s["kind"] == kind and s["name"] == name]
    assert len(found) == 1, (kind, name, [(s["kind"], s["name"]) for s in spans])
    return found[0]


def _has(kind: str, name: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda spans: any(s["kind"] == kind and s["name"] == name for s in spans)


def _nothing_secret(spans: list[dict[str, Any]]) -> None:
    dumped = json.dumps(spans)
    assert SECRET_HEADER not in dumped


@dataclass
class Stack:
    manifold: RunningManifold
    receiver: Receiver
    audit: Path


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("tracing")
    (tmp / "policy.yaml").write_text(POLICY)
    fx_port = free_port()
    fx = [*fixture_command("fx", tools=2, transport="streamable-http", port=fx_port), "--trace-tools"]
    async with receiving(tmp) as receiver, running_http_process(fx, fx_port):
        config = {
            "tracing": {
                "enabled": True,
                "endpoint": receiver.endpoint,
                "schedule_delay_ms": 50,
                "service_name": "manifold-under-test",
            },
            "servers": {
                "fx": {"url": f"http://127.0.0.1:{fx_port}/mcp", "headers": {"X-Api-Key": SECRET_HEADER}},
                "st": traced_stdio("st"),
                "rl": {"command": sys.executable, "args": [str(RELAY), "--name", "rl"], "era": "handshake"},
            },
            "policy": {
                "files": [str(tmp / "policy.yaml")],
                "pins": {"mode": "off"},
                "audit": {"path": str(tmp / "audit.jsonl")},
            },
        }
        async with running_manifold(tmp, config) as manifold:
            yield Stack(manifold, receiver, tmp / "audit.jsonl")


@pytest.mark.parametrize("mode", ["legacy", V])
async def test_an_sdk_clients_call_is_one_trace_from_the_client_through_manifold_to_the_server(
    stack: Stack, mode: str
) -> None:
    trace_id, client_span = secrets.randbits(128) | 1, secrets.randbits(64) | 1
    tid = f"{trace_id:032x}"
    options: dict[str, Any] = {"cache": None} if mode == V else {}
    async with Client(stack.manifold.url, mode=mode, **options) as client:
        with client_trace(trace_id, client_span):
            seen = _seen(await client.call_tool("fx.traced", {"q": "x"}))
    spans = await stack.receiver.trace(tid, _has("CLIENT", "tools/call traced"))
    server = _one(spans, "SERVER", "tools/call fx.traced")
    outbound = _one(spans, "CLIENT", "tools/call traced")
    # The client's trace continued: Manifold's SERVER span is the child of the client's span ...
    assert server["parent_span_id"] == f"{client_span:016x}"
    assert outbound["parent_span_id"] == server["span_id"]
    # ... and the server was told Manifold's CLIENT span is its parent, in _meta and in headers.
    expected = f"00-{tid}-{outbound['span_id']}-01"
    assert seen["meta"]["traceparent"] == expected
    assert seen["headers"]["traceparent"] == [expected]
    attributes = server["attributes"]
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "fx.traced"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["network.transport"] == "tcp"
    assert isinstance(attributes["jsonrpc.request.id"], str)
    assert attributes["mcp.protocol.version"] == (V if mode == V else versions.LATEST)
    if mode != V:  # a session's id is a credential: hashed, never as the client holds it
        assert len(attributes["mcp.session.id"]) == 32
    assert outbound["attributes"]["manifold.server.id"] == "fx"
    assert outbound["attributes"]["gen_ai.tool.name"] == "traced"
    assert server["service"] == "manifold-under-test"
    assert server["path"] == "/v1/traces"
    assert server["status"] != "ERROR"
    assert "enduser.id" not in attributes  # identity only when configured
    _nothing_secret(spans)


async def test_each_call_is_its_own_trace_and_the_audit_log_names_it(stack: Stack) -> None:
    ids = []
    async with Client(stack.manifold.url, mode="legacy") as client:
        for _ in range(2):
            trace_id = secrets.randbits(128) | 1
            with client_trace(trace_id, 7):
                await client.call_tool("st.traced", {})
            ids.append(f"{trace_id:032x}")
    for tid in ids:
        spans = await stack.receiver.trace(tid, _has("CLIENT", "tools/call traced"))
        assert {s["trace_id"] for s in spans} == {tid}
        names = {(s["kind"], s["name"]) for s in spans}
        assert ("INTERNAL", "policy") in names  # the policy decision, a child of the request
        policy = _one(spans, "INTERNAL", "policy")
        assert policy["parent_span_id"] == _one(spans, "SERVER", "tools/call st.traced")["span_id"]
    with anyio.fail_after(10):
        while True:
            audited = [json.loads(line) for line in stack.audit.read_text().splitlines()]
            if {a.get("trace_id") for a in audited} >= set(ids):
                break
            await anyio.sleep(0.05)


async def test_a_denial_a_timeout_and_a_crash_are_error_spans(stack: Stack) -> None:
    async with Client(stack.manifold.url, mode="legacy") as client:
        with client_trace(denied_trace := secrets.randbits(128) | 1, 3), pytest.raises(MCPError):
            await client.call_tool("st.tool_000", {})  # denied, and hidden: an unknown tool to it
        with client_trace(slow_trace := secrets.randbits(128) | 1, 3), pytest.raises(MCPError):
            await client.call_tool("st.hang", {})
        with client_trace(crash_trace := secrets.randbits(128) | 1, 3), pytest.raises(MCPError):
            await client.call_tool("st.crash", {})

    spans = await stack.receiver.trace(f"{denied_trace:032x}", _has("SERVER", "tools/call st.tool_000"))
    policy = _one(spans, "INTERNAL", "policy")
    assert policy["status"] == "ERROR"
    assert policy["attributes"]["error.type"] == "denied"
    request = _one(spans, "SERVER", "tools/call st.tool_000")
    assert request["status"] == "ERROR"
    assert request["attributes"]["error.type"] == "-32602"
    assert not [s for s in spans if s["kind"] == "CLIENT"]  # never sent to the server

    spans = await stack.receiver.trace(f"{slow_trace:032x}", _has("CLIENT", "tools/call hang"))
    outbound = _one(spans, "CLIENT", "tools/call hang")
    assert outbound["status"] == "ERROR"
    assert outbound["attributes"]["error.type"] == "timeout"
    assert _one(spans, "SERVER", "tools/call st.hang")["status"] == "ERROR"

    spans = await stack.receiver.trace(f"{crash_trace:032x}", _has("CLIENT", "tools/call crash"))
    outbound = _one(spans, "CLIENT", "tools/call crash")
    assert outbound["status"] == "ERROR"
    assert outbound["attributes"]["error.type"] == "server_unavailable"
    assert _one(spans, "SERVER", "tools/call st.crash")["status"] == "ERROR"


async def test_a_servers_request_reaches_the_client_with_the_call_trace_and_progress_is_an_event(
    stack: Stack,
) -> None:
    asked: list[dict[str, Any]] = []

    async def sampling(
        context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        asked.append(dict(context.meta or {}))
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="yes"), model="m")

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        pass

    trace_id = secrets.randbits(128) | 1
    tid = f"{trace_id:032x}"
    async with Client(stack.manifold.url, mode="legacy", sampling_callback=sampling) as client:
        with client_trace(trace_id, 11):
            await client.call_tool("rl.sample", {"prompt": "p"})
            await client.call_tool("rl.progress", {"steps": 2}, progress_callback=progressed)
    spans = await stack.receiver.trace(
        tid,
        lambda s: _has("CLIENT", "sampling/createMessage")(s) and _has("CLIENT", "tools/call progress")(s),
    )
    relayed = _one(spans, "CLIENT", "sampling/createMessage")
    assert relayed["parent_span_id"] == _one(spans, "CLIENT", "tools/call sample")["span_id"]
    (meta,) = asked
    assert meta["traceparent"] == f"00-{tid}-{relayed['span_id']}-01"
    assert _one(spans, "CLIENT", "tools/call progress")["events"] == ["notifications/progress"] * 2


async def test_latency_exemplars_carry_the_trace_id(stack: Stack) -> None:
    trace_id = secrets.randbits(128) | 1
    async with Client(stack.manifold.url, mode="legacy") as client:
        with client_trace(trace_id, 5):
            await client.call_tool("fx.traced", {})
    url = stack.manifold.url.replace("/mcp", "/metrics")
    openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
    async with aiohttp.ClientSession() as http, http.get(url, headers=openmetrics) as got:
        body = await got.text()
    assert f'# {{trace_id="{trace_id:032x}"}}' in body


# ---- hostile callers: what arrives in _meta and headers is checked, never passed on as sent ----

GOOD_TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER_TP = "00-1bf7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
META_TP = "00-2cf7651916cd43dd8448eb211c80319c-d7ad6b7169203331-01"  # this trace is the link test's only
HOSTILE: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("oversized traceparent", {"traceparent": "00-" + "a" * 10_240}, {}),
    ("uppercase traceparent", {"traceparent": GOOD_TP.upper()}, {}),
    ("all-zero trace id", {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}, {}),
    ("version ff", {"traceparent": "ff" + GOOD_TP[2:]}, {}),
    ("not a string", {"traceparent": {"nested": [1, 2]}, "tracestate": 7, "baggage": None}, {}),
    ("malformed header", {}, {"traceparent": "garbage", "tracestate": "=,=", "baggage": ";;;"}),
    ("oversized tracestate", {"traceparent": GOOD_TP, "tracestate": "k=" + "v" * 20_000}, {}),
    (
        "long tracestate",
        {"traceparent": GOOD_TP, "tracestate": ",".join(f"v{i}=" + "x" * 40 for i in range(20))},
        {},
    ),
    ("oversized baggage", {"traceparent": GOOD_TP, "baggage": ",".join(f"k{i}=v" for i in range(5000))}, {}),
]


async def _raw_call(
    manifold: RunningManifold, meta: dict[str, Any], headers: dict[str, str]
) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        message = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "fx.traced", "arguments": {}, "_meta": meta},
        }
        status, _, body = await post(http, manifold.url, message, {"Mcp-Session-Id": session, **headers})
        return status, body


@pytest.mark.parametrize(("case", "meta", "headers"), HOSTILE, ids=[case for case, _, _ in HOSTILE])
async def test_hostile_trace_context_is_ignored_or_truncated_never_an_error_never_forwarded(
    stack: Stack, case: str, meta: dict[str, Any], headers: dict[str, str]
) -> None:
    status, body = await _raw_call(stack.manifold, meta, headers)
    assert status == 200, body
    assert "result" in body, body
    assert not body["result"].get("isError"), body
    seen = orjson.loads(body["result"]["content"][0]["text"])
    got = seen["meta"]
    # Whatever came, the server gets Manifold's own, valid context, and bounded state.
    traceparent = got["traceparent"]
    assert len(traceparent) == 55
    assert traceparent.startswith("00-")
    assert traceparent != meta.get("traceparent")
    if meta.get("traceparent") == GOOD_TP:
        assert traceparent[3:35] == GOOD_TP[3:35]  # a valid parent is continued
    assert len(got.get("tracestate", "")) <= 512
    assert len(got.get("baggage", "").encode()) <= 8192
    assert got.get("baggage", "").count(",") < 64
    assert seen["headers"]["traceparent"] == [traceparent]


async def test_meta_is_the_parent_and_conflicting_headers_are_a_link(stack: Stack) -> None:
    status, body = await _raw_call(
        stack.manifold,
        {"traceparent": META_TP, "tracestate": "vendor=abc", "baggage": "tenant=blue"},
        {"traceparent": OTHER_TP},
    )
    assert status == 200, body
    seen = orjson.loads(body["result"]["content"][0]["text"])
    assert seen["meta"]["tracestate"] == "vendor=abc"  # the caller's tracestate kept
    assert seen["meta"]["baggage"] == "tenant=blue"
    spans = await stack.receiver.trace(META_TP[3:35], _has("CLIENT", "tools/call traced"))
    server = _one(spans, "SERVER", "tools/call fx.traced")
    assert server["parent_span_id"] == META_TP[36:52]
    assert server["links"] == [[OTHER_TP[3:35], OTHER_TP[36:52]]]


# ---- a stdio client (manifold stdio), the OTEL_* variables, and OTLP over gRPC -------------------


async def test_a_stdio_client_is_traced_over_grpc_as_the_otel_variables_say(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m.yaml", {"servers": {"st": traced_stdio("st")}})
    async with receiving(tmp_path, "grpc") as receiver:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_SERVICE_NAME": "manifold-stdio",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "proxy.cli", "stdio", "--config", str(config)],
            cwd=str(REPO),
            env=env,
        )
        trace_id, client_span = secrets.randbits(128) | 1, secrets.randbits(64) | 1
        with anyio.fail_after(60):
            for mode in ("legacy", V):
                options: dict[str, Any] = {"cache": None} if mode == V else {}
                async with Client(params, mode=mode, **options) as client:
                    with client_trace(trace_id, client_span):
                        seen = _seen(await client.call_tool("st.traced", {}))
                assert seen["meta"]["traceparent"][3:35] == f"{trace_id:032x}"
        spans = await receiver.trace(
            f"{trace_id:032x}", lambda s: len([x for x in s if x["kind"] == "CLIENT"]) == 2
        )
    servers = [s for s in spans if s["kind"] == "SERVER" and s["name"] == "tools/call st.traced"]
    assert len(servers) == 2  # one per era (the SDK lists tools first: those are traced too)
    assert {s["parent_span_id"] for s in servers} == {f"{client_span:016x}"}
    assert {s["attributes"]["network.transport"] for s in servers} == {"pipe"}
    assert {s["service"] for s in servers} == {"manifold-stdio"}
    assert {s["path"] for s in servers} == {"/opentelemetry.proto.collector.trace.v1.TraceService/Export"}


# ---- a collector that hangs, refuses or is not there: calls go on, drops are counted -------------


@pytest.mark.parametrize("mode", ["hang", "refuse", "down"])
async def test_a_collector_that_hangs_refuses_or_is_down_never_slows_a_call(
    tmp_path: Path, mode: str
) -> None:
    async with _collector(tmp_path, mode) as endpoint:
        config = {
            "tracing": {
                "enabled": True,
                "endpoint": endpoint,
                "schedule_delay_ms": 20,
                "max_queue_size": 4,
                "max_export_batch_size": 2,
                "export_timeout_ms": 500,
            },
            "servers": {"st": traced_stdio("st")},
        }
        async with (
            running_manifold(tmp_path, config) as manifold,
            Client(manifold.url, mode="legacy") as client,
        ):
            with anyio.fail_after(20):  # 40 calls; a blocked export would hold each for 0.5 s or more
                for _ in range(40):
                    result = await client.call_tool("st.tool_001", {})
                    assert not result.is_error
            dropped = await _dropped(manifold, expect=mode)
    assert dropped > 0


@asynccontextmanager
async def _collector(tmp_path: Path, mode: str) -> AsyncIterator[str]:
    if mode == "down":
        yield f"http://127.0.0.1:{free_port()}"  # nobody listens there
        return
    async with receiving(tmp_path, "http", mode) as receiver:
        yield receiver.endpoint


async def _dropped(manifold: RunningManifold, *, expect: str) -> float:
    """``manifold_trace_spans_dropped_total`` once it counts a drop (bounded wait)."""
    url = manifold.url.replace("/mcp", "/metrics")
    with anyio.fail_after(15):
        while True:
            async with aiohttp.ClientSession() as http, http.get(url) as got:
                body = await got.text()
            total = sum(
                float(line.rsplit(" ", 1)[1])
                for line in body.splitlines()
                if line.startswith("manifold_trace_spans_dropped_total{")
            )
            if total > 0:
                return total
            await anyio.sleep(0.1)
