from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from proxy.tracing import active
from proxy.tracing.spans import SpanFactory


class Traces:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.factory = SpanFactory(self.provider.get_tracer("test"), identity=False, max_length=64)

    def finished(self) -> list[object]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traces() -> Iterator[Traces]:
    """Tracing on, in memory, for one test (``active.tracer`` is put back after it)."""
    traced = Traces()
    active.tracer = traced.factory
    try:
        yield traced
    finally:
        active.tracer = None
        active.CURRENT.set(None)
        traced.provider.shutdown()
