"""What the hot path asks about tracing: is it on, and which request is being traced.

Nothing here imports OpenTelemetry. :data:`tracer` is None unless ``manifold serve`` switched
tracing on (:func:`proxy.tracing.start`); every place that traces checks it first, so a
Manifold with tracing off pays one attribute read per call and allocates nothing for it.

The request being traced travels in a context variable (:data:`CURRENT`), set by the router
around one client request and read below it (the call pipeline's stages, the outbound
connection, the log and audit lines): the layers between need not carry it. The trace context
of an inbound HTTP request's headers travels the same way (:data:`HEADERS`), from the HTTP
transport to the router.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final, Protocol

from proxy.protocol.jsonrpc import RequestId

__all__ = [
    "CURRENT",
    "HEADERS",
    "ClientTrace",
    "RelayTrace",
    "RequestTrace",
    "StageTrace",
    "Tracer",
    "begin",
    "ids",
    "tracer",
]


class StageTrace(Protocol):
    """One stage of the call pipeline (policy, rate limit, validation, confirm)."""

    def end(self, outcome: str | None = None) -> None:
        """``outcome``: why the stage answered itself (``denied``, ``rate_limited`` …), if it did."""
        ...


class RelayTrace(Protocol):
    """A server's request (sampling, elicitation, roots) on its way to the client."""

    def meta(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """``params`` with ``_meta`` carrying this span's context."""
        ...

    def end(self, failure: BaseException | None = None) -> None: ...


class ClientTrace(Protocol):
    """One request Manifold sends to a server (a span of kind CLIENT)."""

    def params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """``params`` whose ``_meta`` carries this span's context (the caller's tracestate and
        baggage kept, cleaned)."""
        ...

    def headers(self) -> dict[str, str]:
        """The same context as HTTP headers (``traceparent``, ``tracestate``, ``baggage``)."""
        ...

    def event(self, method: str) -> None:
        """A notification about this request was relayed to the client."""
        ...

    def relayed(self, method: str, params: Mapping[str, Any] | None) -> RelayTrace: ...

    def end(self, result: Any = None, failure: BaseException | None = None) -> None: ...


class RequestTrace(Protocol):
    """One client request (a span of kind SERVER)."""

    @property
    def trace_id(self) -> str: ...

    @property
    def span_id(self) -> str: ...

    @property
    def recording(self) -> bool:
        """Whether this request's spans are recorded (sampled); nothing under it is otherwise."""
        ...

    @property
    def exemplar(self) -> dict[str, str] | None:
        """``{"trace_id": …}`` for a latency histogram, when this trace is sampled."""
        ...

    def stage(self, name: str) -> StageTrace: ...

    def client(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        server_id: str,
        request_id: RequestId | None = None,
    ) -> ClientTrace:
        """A span for the request sent to ``server_id`` (``request_id``: its id there)."""
        ...

    def end(self, ended: Any = None) -> None:
        """``ended``: the request's result, or the error response it was answered with (None:
        cancelled)."""
        ...


class Tracer(Protocol):
    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        request_id: RequestId,
        session: Any,
        headers: Mapping[str, str] | None,
    ) -> RequestTrace: ...


tracer: Tracer | None = None  # set by proxy.tracing.start while tracing is on

# The client request being traced in this task, and the trace headers of its HTTP request.
CURRENT: ContextVar[RequestTrace | None] = ContextVar("manifold_trace", default=None)
HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar("manifold_trace_headers", default=None)


class _Off:
    """What :func:`begin` gives when tracing is off: one shared object whose end does nothing."""

    def end(self, ended: Any = None) -> None:
        pass


_OFF: Final = _Off()


def begin(method: str, params: Any, request_id: RequestId, session: Any) -> RequestTrace | _Off:
    """The span of one client request (when tracing is off, a shared no-op: nothing allocated)."""
    if tracer is None:
        return _OFF
    carried = params if isinstance(params, Mapping) else {}
    return tracer.request(method, carried, request_id, session, HEADERS.get())


def ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the request being traced here, as lowercase hex; or None."""
    current = CURRENT.get() if tracer is not None else None
    return None if current is None else (current.trace_id, current.span_id)
