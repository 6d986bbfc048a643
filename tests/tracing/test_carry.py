"""What goes out: Manifold's context when the request is traced, the caller's cleaned when not."""

from __future__ import annotations

from proxy.tracing import active
from proxy.tracing.carry import to_client, to_server
from tests.tracing.conftest import Traces
from tests.tracing.test_spans import Session

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_untraced_the_callers_context_goes_on_only_if_it_parses() -> None:
    bad = {"name": "t", "_meta": {"traceparent": "00-" + "f" * 600, "progressToken": 1}}
    span, params, headers = to_server("tools/call", bad, None, "s", 1)
    assert span is None
    assert params == {"name": "t", "_meta": {"progressToken": 1}}
    assert headers is None
    good = {"name": "t", "_meta": {"traceparent": TP}}
    assert to_server("tools/call", good, {"Mcp-Param-X": "1"}, "s", 1)[1:] == (good, {"Mcp-Param-X": "1"})
    assert to_client(None, "sampling/createMessage", {"_meta": {"traceparent": "x"}}) == (None, {"_meta": {}})


def test_traced_the_server_is_told_manifolds_span_in_meta_and_headers(traces: Traces) -> None:
    request = traces.factory.request(
        "tools/call", {"name": "s.t", "_meta": {"traceparent": TP}}, 1, Session(), None
    )
    span, params, headers = to_server(
        "tools/call", {"name": "t", "_meta": {"traceparent": TP}}, {"A": "b"}, "s", 9
    )
    assert span is not None
    assert params is not None
    assert headers is not None
    ours = params["_meta"]["traceparent"]
    assert ours[3:35] == TP[3:35]
    assert ours != TP
    assert headers == {"A": "b", "traceparent": ours}
    relayed, asked = to_client(span, "roots/list", None)
    assert relayed is not None
    assert asked is not None
    assert asked["_meta"]["traceparent"][3:35] == TP[3:35]
    relayed.end()
    span.end({})
    request.end({})
    assert active.CURRENT.get() is None
