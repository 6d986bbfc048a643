"""The spans of one request, in memory: parents, links, attributes, errors, and what goes out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from proxy.core.errors import RemoteError, ServerTimeout, ServerUnavailable
from proxy.tracing import active
from tests.tracing.conftest import Traces

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HEADER_TP = "00-1bf7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
UNSAMPLED = TP[:-2] + "00"


@dataclass(frozen=True)
class Identity:
    name: str


@dataclass
class Session:
    id: str = "the-session-id-is-a-credential"
    transport: str = "http"
    protocol_version: str | None = "2025-11-25"
    identity: Identity = Identity("ada@example.com")


def _spans(traces: Traces) -> dict[str, ReadableSpan]:
    spans: list[ReadableSpan] = traces.exporter.get_finished_spans()  # type: ignore[assignment]
    return {span.name: span for span in spans}


def _call(name: str = "github.search", meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "arguments": {"q": "x"}, **({"_meta": meta} if meta is not None else {})}


def test_the_request_span_continues_the_callers_trace_and_names_the_call(traces: Traces) -> None:
    request = traces.factory.request("tools/call", _call(meta={"traceparent": TP}), 7, Session(), None)
    assert active.CURRENT.get() is request
    request.end()
    assert active.CURRENT.get() is None
    span = _spans(traces)["tools/call github.search"]
    assert span.kind is SpanKind.SERVER
    assert span.context.trace_id == int(TP[3:35], 16)
    assert span.parent is not None
    assert span.parent.span_id == int(TP[36:52], 16)
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["jsonrpc.request.id"] == "7"
    assert attributes["gen_ai.tool.name"] == "github.search"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["network.transport"] == "tcp"
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["mcp.session.id"] != Session.id
    assert "enduser.id" not in attributes


def test_meta_is_the_parent_and_a_different_header_context_a_link(traces: Traces) -> None:
    traces.factory.request(
        "tools/call", _call(meta={"traceparent": TP}), 1, Session(), {"traceparent": HEADER_TP}
    ).end()
    span = _spans(traces)["tools/call github.search"]
    assert span.context.trace_id == int(TP[3:35], 16)
    assert [link.context.span_id for link in span.links] == [int(HEADER_TP[36:52], 16)]


def test_the_header_context_is_the_parent_when_meta_has_none(traces: Traces) -> None:
    traces.factory.request("tools/list", {}, 1, Session(), {"traceparent": HEADER_TP}).end()
    span = _spans(traces)["tools/list"]
    assert span.context.trace_id == int(HEADER_TP[3:35], 16)
    assert not span.links


def test_a_caller_that_did_not_sample_is_followed_and_nothing_is_recorded(traces: Traces) -> None:
    request = traces.factory.request("tools/call", _call(meta={"traceparent": UNSAMPLED}), 1, Session(), None)
    assert request.exemplar is None
    client = request.client("tools/call", {"name": "search"}, "github", 3)
    sent = client.params({"name": "search"})["_meta"]["traceparent"]
    assert sent.startswith(UNSAMPLED[:36])
    assert sent.endswith("-00")
    client.end({})
    request.end()
    assert traces.finished() == []


def test_every_attribute_is_redacted_and_bounded(traces: Traces) -> None:
    uri = "https://files.example/doc?sig=very-secret-signature"
    traces.factory.request("resources/read", {"uri": uri}, "a" * 500, Session(), None).end()
    span = _spans(traces)["resources/read"]
    attributes = dict(span.attributes or {})
    assert "very-secret-signature" not in str(attributes)
    assert "[REDACTED]" in str(attributes["mcp.resource.uri"])
    assert len(str(attributes["jsonrpc.request.id"])) <= 64


def test_identity_is_an_attribute_only_when_configured(traces: Traces) -> None:
    traces.factory._identity = True
    traces.factory.request("ping", {}, 1, Session(), None).end()
    assert dict(_spans(traces)["ping"].attributes or {})["enduser.id"] == "ada@example.com"


def test_the_server_is_told_manifolds_client_span_with_the_callers_tracestate_and_baggage(
    traces: Traces,
) -> None:
    meta = {"traceparent": TP, "tracestate": "vendor=1", "baggage": "tenant=blue", "progressToken": 5}
    request = traces.factory.request("tools/call", _call(meta=meta), 1, Session(), None)
    client = request.client("tools/call", {"name": "search", "_meta": meta}, "github", 12)
    params = client.params({"name": "search", "_meta": meta})
    headers = client.headers()
    client.event("notifications/progress")
    client.end({"content": []})
    request.end()
    spans = _spans(traces)
    outbound = spans["tools/call search"]
    assert outbound.kind is SpanKind.CLIENT
    assert outbound.parent is not None
    assert outbound.parent.span_id == spans["tools/call github.search"].context.span_id
    ours = f"00-{outbound.context.trace_id:032x}-{outbound.context.span_id:016x}-01"
    assert params["_meta"] == {
        "progressToken": 5,
        "traceparent": ours,
        "tracestate": "vendor=1",
        "baggage": "tenant=blue",
    }
    assert headers == {"traceparent": ours, "tracestate": "vendor=1", "baggage": "tenant=blue"}
    assert meta["traceparent"] == TP  # the caller's params are not written
    assert dict(outbound.attributes or {})["manifold.server.id"] == "github"
    assert [event.name for event in outbound.events] == ["notifications/progress"]


def test_failures_name_their_error_type(traces: Traces) -> None:
    request = traces.factory.request("tools/call", _call(), 1, Session(), None)
    failures = {
        "a": RemoteError("s", {"code": -32603, "message": "boom"}),
        "b": ServerTimeout("s", "tools/call", 1.0),
        "c": ServerUnavailable("s", "gone"),
    }
    for name, failure in failures.items():
        request.client("tools/call", {"name": name}, "s").end(failure=failure)
    request.client("tools/call", {"name": "d"}, "s").end({"isError": True, "content": []})
    request.end({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "unknown tool"}})
    spans = _spans(traces)
    kinds = {name: dict(spans[f"tools/call {name}"].attributes or {})["error.type"] for name in "abcd"}
    assert kinds == {"a": "-32603", "b": "timeout", "c": "server_unavailable", "d": "tool_error"}
    request_span = spans["tools/call github.search"]
    assert request_span.status.status_code is StatusCode.ERROR
    assert dict(request_span.attributes or {})["error.type"] == "-32602"


def test_a_server_request_relayed_to_the_client_is_a_child_of_the_call_and_carries_it(traces: Traces) -> None:
    request = traces.factory.request("tools/call", _call(meta={"traceparent": TP}), 1, Session(), None)
    client = request.client("tools/call", {"name": "search"}, "github", 3)
    relayed = client.relayed("sampling/createMessage", {"_meta": {"traceparent": HEADER_TP}})
    meta = relayed.meta({"messages": [], "_meta": {"traceparent": HEADER_TP}})["_meta"]
    relayed.end()
    client.end({})
    request.end()
    spans = _spans(traces)
    span = spans["sampling/createMessage"]
    assert span.parent is not None
    assert span.parent.span_id == spans["tools/call search"].context.span_id
    assert meta["traceparent"][36:52] == f"{span.context.span_id:016x}"
    assert [link.context.span_id for link in span.links] == [int(HEADER_TP[36:52], 16)]


def test_a_call_manifold_answered_itself_is_a_tool_error_that_says_why(traces: Traces) -> None:
    request = traces.factory.request("tools/call", _call(), 1, Session(), None)
    request.end({"content": [], "isError": True, "_meta": {"dev.manifold/outcome": "rate_limited"}})
    span = _spans(traces)["tools/call github.search"]
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "tool_error"
    assert dict(span.attributes or {})["manifold.outcome"] == "rate_limited"
