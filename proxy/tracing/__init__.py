"""OpenTelemetry tracing: one trace from the client through Manifold to each server and back.

    settings   the ``tracing:`` section and the ``OTEL_*`` variables → on or off, and how (pure)
    w3c        traceparent / tracestate / baggage read defensively, rebuilt, never passed as sent (pure)
    active     what the hot path asks: is tracing on, which request is traced (no OpenTelemetry)
    spans      the spans themselves, on the OpenTelemetry SDK
    export     the SDK's provider: OTLP HTTP/gRPC, batch export, bounded queue, drops counted

The OpenTelemetry packages are an optional extra (``pip install mcp-manifold[tracing]``) and are
imported only by :func:`start` once the config or the environment switches tracing on; with it
off, nothing of them is loaded and a call pays one ``None`` check per place that could trace.
The pipeline's stages are wrapped in spans by :mod:`proxy.pipeline.stages.traced`.

May import: config, core, protocol (pinned in tests/test_architecture.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from proxy.tracing import active
from proxy.tracing.settings import TracingSettings, resolve

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["Running", "TraceIds", "TracingUnavailable", "started"]

logger = logging.getLogger("proxy.tracing")


class TracingUnavailable(RuntimeError):
    """Tracing is switched on, but the OpenTelemetry packages (the ``tracing`` extra) are missing."""


class TraceIds(logging.Filter):
    """Puts ``trace_id`` and ``span_id`` on each log record written while a request is traced."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (ids := active.ids()) is not None:
            record.trace_id, record.span_id = ids
        return True


class Running:
    """Tracing while it is on: the provider, and where dropped spans are counted."""

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self._lock = threading.Lock()  # dropped() is called from the SDK's export thread
        self._count: Callable[[str, int], None] | None = None
        self._early: dict[str, int] = {}  # drops before a counter was handed over

    def dropped(self, reason: str, count: int) -> None:
        with self._lock:
            if self._count is None:
                self._early[reason] = self._early.get(reason, 0) + count
                return
            counter = self._count
        counter(reason, count)

    def count_drops(self, counter: Callable[[str, int], None]) -> None:
        """Count dropped spans with ``counter`` (a gateway's metrics), those so far included."""
        with self._lock:
            self._count = counter
            early, self._early = self._early, {}
        for reason, count in early.items():
            counter(reason, count)


@contextmanager
def started(settings: TracingSettings, env: Mapping[str, str]) -> Iterator[Running | None]:
    """Tracing on, as ``settings`` and ``env`` say, for the block; None when it is off.

    Raises:
        TracingUnavailable: tracing is switched on but the ``tracing`` extra is not installed.
    """
    resolved = resolve(settings, env)
    if resolved is None:
        yield None
        return
    try:
        from proxy.tracing.export import provider, shut_down
        from proxy.tracing.spans import SpanFactory
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing is switched on (the tracing: section or an OTEL_* variable) but the OpenTelemetry "
            "packages are missing: pip install 'mcp-manifold[tracing]'"
        ) from exc
    running = Running()
    traces = provider(resolved, running.dropped)
    running.provider = traces
    factory = SpanFactory(
        traces.get_tracer("manifold"),
        identity=resolved.identity,
        max_length=resolved.max_attribute_length,
    )
    ids = TraceIds()
    handlers = logging.getLogger().handlers
    for handler in handlers:
        handler.addFilter(ids)
    active.tracer = factory
    logger.info(
        "tracing on: OTLP %s to %s, sampler %s%s",
        resolved.protocol,
        resolved.endpoint,
        resolved.sampler,
        f" ({resolved.ratio})" if "ratio" in resolved.sampler else "",
    )
    try:
        yield running
    finally:
        active.tracer = None
        for handler in handlers:
            handler.removeFilter(ids)
        shut_down(traces)
