"""Each pipeline stage in its own span: ended when it hands the call on, or with its own answer."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from proxy.core.errors import HiddenByPolicy
from proxy.pipeline.context import CallContext, Handler, Stage, tool_error
from proxy.pipeline.stages.traced import Traced, traced
from proxy.tracing import active
from tests.pipeline.stages.contexts import call_context
from tests.tracing.conftest import Traces
from tests.tracing.test_spans import Session

pytestmark = pytest.mark.anyio


class Authorize:
    def __init__(self, answer: Any = None, raises: Exception | None = None) -> None:
        self.answer, self.raises = answer, raises

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if self.raises is not None:
            raise self.raises
        if self.answer is not None:
            return self.answer
        return await call_next(ctx)


class Measure(Authorize):  # a stage with no span of its own
    pass


def _by_name(traces: Traces) -> dict[str, ReadableSpan]:
    spans: list[ReadableSpan] = traces.exporter.get_finished_spans()  # type: ignore[assignment]
    return {span.name: span for span in spans}


async def _run(stage: Stage, traces: Traces) -> Any:
    request = traces.factory.request("tools/call", {"name": "s.t"}, 1, Session(), None)
    ended_before_the_server: list[bool] = []

    async def server(ctx: CallContext) -> Any:
        ended_before_the_server.append("policy" in _by_name(traces))
        return {"content": []}

    try:
        return await Traced(stage, "policy")(call_context(), server), ended_before_the_server
    finally:
        request.end()


async def test_a_stage_that_hands_the_call_on_ends_its_span_then(traces: Traces) -> None:
    _, ended = await _run(Authorize(), traces)
    assert ended == [True]  # the server's time is not in the stage's span
    policy = _by_name(traces)["policy"]
    assert policy.status.status_code is StatusCode.UNSET
    assert policy.parent is not None
    assert policy.parent.span_id == _by_name(traces)["tools/call s.t"].context.span_id


async def test_a_stage_that_answers_itself_says_why_on_its_span(traces: Traces) -> None:
    await _run(Authorize(answer=tool_error("no", outcome="denied")), traces)
    policy = _by_name(traces)["policy"]
    assert policy.status.status_code is StatusCode.ERROR
    assert dict(policy.attributes or {})["error.type"] == "denied"


async def test_a_stage_that_raises_says_so_on_its_span(traces: Traces) -> None:
    with pytest.raises(HiddenByPolicy):
        await _run(Authorize(raises=HiddenByPolicy("unknown tool: s.t")), traces)
    assert dict(_by_name(traces)["policy"].attributes or {})["error.type"] == "denied"


def test_stages_are_wrapped_only_while_tracing_is_on(traces: Traces) -> None:
    stages: list[Stage] = [Measure(), Authorize()]
    wrapped = traced(stages)
    assert wrapped[0] is stages[0]
    assert isinstance(wrapped[1], Traced)
    active.tracer = None
    assert traced(stages) is stages


async def test_under_an_unsampled_request_a_stage_runs_as_it_is(traces: Traces) -> None:
    unsampled = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}
    request = traces.factory.request("tools/call", {"name": "s.t", "_meta": unsampled}, 1, Session(), None)
    handed: list[Handler] = []

    async def stage(ctx: CallContext, call_next: Handler) -> Any:
        handed.append(call_next)
        return await call_next(ctx)

    async def server(ctx: CallContext) -> Any:
        return {"content": []}

    try:
        await Traced(stage, "policy")(call_context(), server)
    finally:
        request.end()
    assert handed == [server]  # not wrapped: nothing is recorded under it
    assert traces.finished() == []
