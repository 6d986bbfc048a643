"""The OpenTelemetry SDK's tracer provider, built from :class:`~proxy.tracing.settings.Resolved`.

OTLP over HTTP/protobuf or gRPC, behind the SDK's batch span processor: ending a span appends
it to a bounded queue and returns; a thread of the SDK's exports batches. Nothing a collector
does (hang, refuse, vanish) reaches a call: the queue fills and spans are dropped, and every
dropped span is counted (``manifold_trace_spans_dropped_total{reason}``, reason ``queue_full``
or ``export_failed``).

Sampling is parent-based by default: a caller that sent a ``traceparent`` decides with its
sampled flag; a root trace is sampled as ``sampler`` says (``OTEL_TRACES_SAMPLER``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)

from proxy import __version__
from proxy.tracing.settings import Resolved

__all__ = ["Dropped", "provider"]

Dropped = Callable[[str, int], None]  # told (reason, count) of spans that never left
_SHUTDOWN_WAIT: Final = 2.0  # seconds a stop waits for the last export
_WARN_EVERY: Final = 60.0  # seconds between two warnings about failed exports

logger = logging.getLogger("proxy.tracing.export")
# The SDK logs every retry and every dropped batch (a line a second while a collector is down);
# Manifold counts them instead, and says so at most once a minute (_Counting).
_SDK_LOGGERS: Final = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")


def _sampler(resolved: Resolved) -> Sampler:
    ratio = TraceIdRatioBased(resolved.ratio)
    return {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": ParentBased(ALWAYS_ON),
        "parentbased_always_off": ParentBased(ALWAYS_OFF),
        "parentbased_traceidratio": ParentBased(ratio),
    }[resolved.sampler]


def _exporter(resolved: Resolved) -> SpanExporter:
    timeout = resolved.export_timeout_ms / 1000
    if resolved.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        insecure = resolved.endpoint.startswith("http://")
        return Grpc(
            endpoint=resolved.endpoint, insecure=insecure, headers=dict(resolved.headers), timeout=timeout
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=resolved.endpoint, headers=dict(resolved.headers), timeout=timeout)


class _Counting(SpanExporter):
    """The exporter, telling of every span a failed export lost."""

    def __init__(self, inner: SpanExporter, dropped: Dropped, endpoint: str = "") -> None:
        self._inner = inner
        self._dropped = dropped
        self._endpoint = endpoint
        self._warned = -_WARN_EVERY
        self._lost = 0  # spans lost since the last warning

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter's bug must not end the SDK's worker thread
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._dropped("export_failed", len(spans))
            self._lost += len(spans)
            if (now := time.monotonic()) - self._warned >= _WARN_EVERY:
                logger.warning(
                    "tracing: could not export %d spans to %s (the collector refused, timed out or is "
                    "down); calls are unaffected; manifold_trace_spans_dropped_total counts them",
                    self._lost,
                    self._endpoint,
                )
                self._warned, self._lost = now, 0
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _Bounded(SpanProcessor):
    """The SDK's batch processor, telling of each span its full queue pushes out.

    The SDK drops the oldest queued span when the queue is full and only logs it; the queue's
    length is read here (a private attribute, looked up defensively) to count it.
    """

    def __init__(self, inner: BatchSpanProcessor, max_queue_size: int, dropped: Dropped) -> None:
        self._inner = inner
        self._max = max_queue_size
        self._dropped = dropped
        self._queue: Any = getattr(getattr(inner, "_batch_processor", None), "_queue", None)

    def on_start(self, span: SdkSpan, parent_context: Any = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        sampled = span.context is not None and span.context.trace_flags.sampled
        if sampled and self._queue is not None and len(self._queue) >= self._max:
            self._dropped("queue_full", 1)
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def provider(resolved: Resolved, dropped: Dropped) -> TracerProvider:
    """A tracer provider exporting as ``resolved`` says; ``dropped`` is told of lost spans
    (from the SDK's export thread)."""
    resource = Resource.create(
        {
            **resolved.resource_attributes,
            "service.name": resolved.service_name,
            "service.version": __version__,
        }
    )
    limits = SpanLimits(max_span_attribute_length=resolved.max_attribute_length)
    # No exit hook of the SDK's own: it would wait up to 30 s for a collector that hangs;
    # shut_down waits a bounded time instead.
    traces = TracerProvider(
        resource=resource, sampler=_sampler(resolved), span_limits=limits, shutdown_on_exit=False
    )
    for name in _SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    batch = BatchSpanProcessor(
        _Counting(_exporter(resolved), dropped, resolved.endpoint),
        max_queue_size=resolved.max_queue_size,
        schedule_delay_millis=resolved.schedule_delay_ms,
        max_export_batch_size=resolved.max_export_batch_size,
        export_timeout_millis=resolved.export_timeout_ms,
    )
    traces.add_span_processor(_Bounded(batch, resolved.max_queue_size, dropped))
    return traces


def shut_down(traces: TracerProvider) -> None:
    """Export what is queued, waiting at most :data:`_SHUTDOWN_WAIT` seconds: a collector that
    hangs must not hold the process (the thread is a daemon; what it has not sent is lost)."""
    stopping = threading.Thread(target=traces.shutdown, name="manifold-trace-shutdown", daemon=True)
    stopping.start()
    stopping.join(_SHUTDOWN_WAIT)
