"""Switching tracing on and off, and log lines that name the trace they were written in."""

from __future__ import annotations

import logging
import sys

import pytest

from proxy.tracing import TraceIds, TracingUnavailable, active, started
from proxy.tracing.settings import TracingSettings
from tests.tracing.conftest import Traces
from tests.tracing.test_spans import Session


def test_off_leaves_the_hot_path_with_nothing_to_do() -> None:
    with started(TracingSettings(), {}) as running:
        assert running is None
        assert active.tracer is None


def test_on_for_the_block_only_and_drops_before_a_counter_are_counted_later() -> None:
    settings = TracingSettings(enabled=True, endpoint="http://127.0.0.1:9", export_timeout_ms=100)
    with started(settings, {}) as running:
        assert running is not None
        assert active.tracer is not None
        running.dropped("export_failed", 2)
        counted: list[tuple[str, int]] = []
        running.count_drops(lambda reason, count: counted.append((reason, count)))
        running.dropped("queue_full", 1)
        assert counted == [("export_failed", 2), ("queue_full", 1)]
    assert active.tracer is None


def test_a_log_line_written_while_a_request_is_traced_names_the_trace(
    traces: Traces, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(TraceIds())
    logger = logging.getLogger("proxy.test")
    with caplog.at_level(logging.INFO):
        logger.info("before")
        request = traces.factory.request("ping", {}, 1, Session(), None)
        logger.info("during")
        request.end()
    before, during = caplog.records
    assert not hasattr(before, "trace_id")
    assert during.trace_id == request.trace_id  # type: ignore[attr-defined]
    assert during.span_id == request.span_id  # type: ignore[attr-defined]


def test_on_without_the_extra_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "proxy.tracing.export", None)  # as if OpenTelemetry were missing
    with (
        pytest.raises(TracingUnavailable, match=r"mcp-manifold\[tracing\]"),
        started(TracingSettings(enabled=True), {}),
    ):
        pass
    assert active.tracer is None
