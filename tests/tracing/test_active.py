"""The hot path's view of tracing: nothing while it is off, the request's ids while one is traced."""

from __future__ import annotations

from proxy.tracing import active
from tests.tracing.conftest import Traces
from tests.tracing.test_spans import Session


def test_off_no_ids_whatever_the_context_holds() -> None:
    assert active.tracer is None
    assert active.ids() is None


def test_on_the_ids_of_the_request_being_traced_and_none_after_it(traces: Traces) -> None:
    assert active.ids() is None
    request = traces.factory.request("ping", {}, 1, Session(), None)
    assert active.ids() == (request.trace_id, request.span_id)
    assert len(request.trace_id) == 32
    assert len(request.span_id) == 16
    request.end()
    assert active.ids() is None
