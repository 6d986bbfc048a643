"""Export never blocks a call, and every span that never leaves is counted."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from proxy.tracing.export import _Bounded, _Counting


class Broken(SpanExporter):
    def __init__(self, result: SpanExportResult | None) -> None:
        self.result = result

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.result is None:
            raise RuntimeError("an exporter's own bug")
        return self.result

    def shutdown(self) -> None:
        pass


def test_spans_a_failed_export_lost_are_counted_and_an_exporters_error_is_contained() -> None:
    counted: list[tuple[str, int]] = []
    spans: list[ReadableSpan] = []
    assert _Counting(Broken(SpanExportResult.SUCCESS), lambda r, n: counted.append((r, n))).export(spans) is (
        SpanExportResult.SUCCESS
    )
    assert counted == []
    for result in (SpanExportResult.FAILURE, None):
        assert (
            _Counting(Broken(result), lambda r, n: counted.append((r, n))).export([])
            is SpanExportResult.FAILURE
        )
    assert counted == [("export_failed", 0), ("export_failed", 0)]


class Queueing:
    """The batch processor as far as _Bounded reads it: a queue that only fills (no export)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._batch_processor = self
        self._queue: deque[ReadableSpan] = deque(maxlen=size)

    def on_start(self, span: object, parent_context: object = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self._queue.appendleft(span)

    def shutdown(self) -> None:
        pass


def test_a_full_queue_drops_spans_without_waiting_and_counts_each() -> None:
    counted: list[tuple[str, int]] = []
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(_Bounded(Queueing(2), 2, lambda r, n: counted.append((r, n))))  # type: ignore[arg-type]
    tracer = provider.get_tracer("test")
    for _ in range(5):
        tracer.start_span("s").end()
    assert counted == [("queue_full", 1)] * 3


def test_the_sdks_batch_processor_still_has_the_queue_that_is_counted() -> None:
    """The SDK keeps its queue private: should it move, this fails rather than drops going uncounted."""
    batch = BatchSpanProcessor(Broken(SpanExportResult.SUCCESS), max_queue_size=2, max_export_batch_size=2)
    try:
        queue = _Bounded(batch, 2, lambda r, n: None)._queue
        assert isinstance(queue, deque)
        assert queue.maxlen == 2
    finally:
        batch.shutdown()  # type: ignore[no-untyped-call]


def test_failed_exports_are_said_once_a_minute_not_once_a_batch(caplog: pytest.LogCaptureFixture) -> None:
    counting = _Counting(
        Broken(SpanExportResult.FAILURE), lambda r, n: None, "http://collector:4318/v1/traces"
    )
    with caplog.at_level(logging.WARNING, logger="proxy.tracing.export"):
        for _ in range(5):
            counting.export([])
    (warning,) = caplog.records
    assert "http://collector:4318/v1/traces" in warning.getMessage()
