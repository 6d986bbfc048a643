"""The metrics stage: every tools/call counted once by how it ended and timed, whatever ends it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.observe import MetricsSettings
from proxy.core.errors import (
    HiddenByPolicy,
    InvalidParams,
    RemoteError,
    ServerTimeout,
    ServerUnavailable,
)
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import tool_error
from proxy.pipeline.stages.metrics import Measure
from tests.pipeline.stages.contexts import Recorder, call_context, cancelled_mid_call, sample, ticks

pytestmark = pytest.mark.anyio

CALLS = "manifold_tool_calls_total"
SECONDS = "manifold_tool_call_duration_seconds"


def calls(metrics: Metrics, outcome: str, tool: str = "gh.get_issue") -> float | None:
    return sample(metrics.registry, CALLS, server="gh", tool=tool, outcome=outcome)


def tool_call_samples(metrics: Metrics) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for family in metrics.registry.collect()
        if family.name in ("manifold_tool_calls", SECONDS)
        for s in family.samples
    ]


async def test_a_call_that_succeeds_is_passed_on_counted_as_ok_and_timed_by_the_clock() -> None:
    metrics = Metrics(process_metrics=False)
    stage = Measure(metrics, clock=ticks(100.0, 100.25))
    call_next = Recorder()
    ctx = call_context()

    result = await stage(ctx, call_next)

    assert result is call_next.result
    assert call_next.seen == [ctx]
    assert calls(metrics, "ok") == 1.0
    assert sample(metrics.registry, f"{SECONDS}_count", server="gh", tool="gh.get_issue") == 1.0
    assert sample(metrics.registry, f"{SECONDS}_sum", server="gh", tool="gh.get_issue") == 0.25
    assert sample(metrics.registry, f"{SECONDS}_bucket", server="gh", tool="gh.get_issue", le="0.1") == 0.0
    assert sample(metrics.registry, f"{SECONDS}_bucket", server="gh", tool="gh.get_issue", le="0.25") == 1.0


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        ({"content": [], "isError": True}, "tool_error"),
        (tool_error("no", outcome="denied"), "denied"),
        (tool_error("slow down", outcome="rate_limited"), "rate_limited"),
        (tool_error("bad arguments", outcome="invalid_arguments"), "invalid"),
        (tool_error("withheld", outcome="invalid_result"), "tool_error"),
        ({"resultType": "input_required", "inputRequests": {}}, "input_required"),
    ],
)
async def test_an_answer_is_counted_by_the_outcome_it_carries(result: dict[str, Any], outcome: str) -> None:
    metrics = Metrics(process_metrics=False)

    answered = await Measure(metrics, clock=ticks(1.0, 2.0))(call_context(), Recorder(result))

    assert answered is result
    assert calls(metrics, outcome) == 1.0
    assert calls(metrics, "ok") is None


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ServerTimeout("gh", "tools/call", 60.0), "timeout"),
        (ServerUnavailable("gh", "the process exited with code 1"), "server_error"),
        (RemoteError("gh", {"code": -32000, "message": "boom"}), "server_error"),
        (HiddenByPolicy("unknown tool: gh.get_issue"), "denied"),
        (InvalidParams("bad"), "invalid"),
        (RuntimeError("a bug"), "error"),
    ],
)
async def test_an_exception_from_the_call_propagates_unchanged_and_is_counted_by_its_kind(
    error: Exception, outcome: str
) -> None:
    metrics = Metrics(process_metrics=False)

    with pytest.raises(type(error)) as raised:
        await Measure(metrics, clock=ticks(5.0, 5.5))(call_context(), Recorder(raises=error))

    assert raised.value is error
    assert calls(metrics, outcome) == 1.0
    assert sample(metrics.registry, f"{SECONDS}_sum", server="gh", tool="gh.get_issue") == 0.5


async def test_a_cancelled_call_is_counted_as_cancelled_and_the_cancellation_goes_on() -> None:
    metrics = Metrics(process_metrics=False)
    stage = Measure(metrics, clock=ticks(1.0, 3.0))

    reached_the_caller = await cancelled_mid_call(lambda call_next: stage(call_context(), call_next))

    assert reached_the_caller == ["cancelled"]
    assert calls(metrics, "cancelled") == 1.0
    assert sample(metrics.registry, f"{SECONDS}_sum", server="gh", tool="gh.get_issue") == 2.0


@pytest.mark.parametrize("method", ["prompts/get", "resources/read", "completion/complete"])
async def test_requests_other_than_tool_calls_pass_through_uncounted(method: str) -> None:
    metrics = Metrics(process_metrics=False)
    call_next = Recorder({"messages": []})
    ctx = call_context(method=method, name="gh.summarize")

    result = await Measure(metrics, clock=ticks())(ctx, call_next)

    assert result == {"messages": []}
    assert call_next.seen == [ctx]
    assert tool_call_samples(metrics) == []


async def test_the_identity_is_a_label_only_when_the_operator_asks_for_it() -> None:
    plain = Metrics(process_metrics=False)
    labelled = Metrics(MetricsSettings(identity_labels=True), process_metrics=False)

    await Measure(plain, clock=ticks(0.0, 0.001))(call_context(), Recorder())
    await Measure(labelled, clock=ticks(0.0, 0.001))(call_context(), Recorder())

    assert [labels for name, labels, _ in tool_call_samples(plain) if name == CALLS] == [
        {"server": "gh", "tool": "gh.get_issue", "outcome": "ok"}
    ]
    assert [labels for name, labels, _ in tool_call_samples(labelled) if name == CALLS] == [
        {"server": "gh", "tool": "gh.get_issue", "outcome": "ok", "identity": "alice"}
    ]
