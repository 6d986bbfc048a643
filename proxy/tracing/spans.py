"""The spans of one client request, on the OpenTelemetry SDK (imported only when tracing is on).

Named and attributed per the OpenTelemetry semantic conventions for MCP (``docs/gen-ai/mcp.md``):

    {mcp.method.name} {target}     SERVER   the client's request (target: the tool or prompt)
      policy | shape | validate | rate_limit | confirm | sign_in     INTERNAL   a pipeline stage
      {mcp.method.name} {target}   CLIENT   the request sent to the server (its original name)
        {method}                   CLIENT   a server's request relayed to the client

The request span's parent is the ``traceparent`` of the request's ``params._meta``, else that of
its HTTP headers; when both are valid and differ, ``_meta`` is the parent and the header context
a link. Every string attribute goes through :func:`proxy.core.redaction.redact_text` and is cut to
``max_attribute_length``; nothing from the arguments or results is recorded. Attributes are
built only for spans that are sampled: an unsampled request costs a span id and the propagation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextvars import Token
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)

from proxy.core.errors import RemoteError, ServerTimeout, ServerUnavailable
from proxy.core.redaction import redact_text
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.tracing import active
from proxy.tracing.w3c import CARRIER_KEYS, Carried, Parent, format_traceparent, read_carrier

__all__ = ["ClientSpan", "RelaySpan", "RequestSpan", "SpanFactory", "StageSpan"]

_NAMED: Final = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
_NETWORK: Final = {"stdio": "pipe", "http": "tcp"}
_NOTHING: Final = Carried()
_OURS: Final = "dev.manifold/outcome"
_NAMES_KEPT: Final = 4096


def _target(method: str, params: Mapping[str, Any] | None) -> str | None:
    if method in _NAMED and params is not None:
        name = params.get("name")
        return name if isinstance(name, str) else None
    return None


def _span_context(parent: Parent) -> SpanContext:
    flags = TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT)
    return SpanContext(parent.trace_id, parent.span_id, is_remote=True, trace_flags=flags)


def _carried(carrier: Any) -> Carried:
    return read_carrier(carrier) if isinstance(carrier, Mapping) and carrier else _NOTHING


class SpanFactory:
    """Makes the spans; one per process (:func:`proxy.tracing.start`)."""

    def __init__(self, tracer: Tracer, *, identity: bool, max_length: int) -> None:
        self._tracer = tracer
        self._identity = identity
        self._max = max_length
        self._names: dict[str, str] = {}

    def text(self, value: str) -> str:
        """An attribute value as it may be exported: credentials redacted, length bounded."""
        return redact_text(value[: self._max * 4])[: self._max]

    def name(self, value: str) -> str:
        """:meth:`text` of a name that recurs (a method, a tool, a server id), remembered: the
        catalog bounds them, and at 100 % sampling each call names several."""
        named = self._names.get(value)
        if named is None:
            if len(self._names) >= _NAMES_KEPT:
                self._names.clear()
            named = self._names[value] = self.text(value)
        return named

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        request_id: RequestId,
        session: Any,
        headers: Mapping[str, str] | None,
    ) -> RequestSpan:
        from_meta = _carried(params.get("_meta"))
        from_headers = _carried(headers)
        parent = from_meta.parent or from_headers.parent
        links = None
        if (
            from_meta.parent is not None
            and from_headers.parent is not None
            and (from_meta.parent.trace_id, from_meta.parent.span_id)
            != (from_headers.parent.trace_id, from_headers.parent.span_id)
        ):
            links = [Link(_span_context(from_headers.parent), {"manifold.link": "http.headers"})]
        context = (
            Context() if parent is None else set_span_in_context(NonRecordingSpan(_span_context(parent)))
        )
        target = _target(method, params)
        # Named in full (and redacted) only once it is known to be recorded: most are not, at 10 %.
        span = self._tracer.start_span(method, context=context, kind=SpanKind.SERVER, links=links)
        if span.is_recording():
            span.update_name(self.name(method if target is None else f"{method} {target}"))
            attributes: dict[str, Any] = {"mcp.method.name": self.name(method)}
            if request_id is not None:
                attributes["jsonrpc.request.id"] = self.text(str(request_id))
            if target is not None:
                attributes[_NAMED[method]] = self.name(target)
            if method == "tools/call":
                attributes["gen_ai.operation.name"] = "execute_tool"
            elif method == "resources/read" and isinstance(uri := params.get("uri"), str):
                attributes["mcp.resource.uri"] = self.text(uri)
            version = getattr(session, "protocol_version", None)
            if isinstance(version, str):
                attributes["mcp.protocol.version"] = self.name(version)
            session_id = getattr(session, "id", None)
            if isinstance(session_id, str) and session_id:
                # Hashed: the id is a bearer credential for the session.
                attributes["mcp.session.id"] = hashlib.sha256(session_id.encode()).hexdigest()[:32]
            transport = _NETWORK.get(getattr(session, "transport", ""), None)
            if transport is not None:
                attributes["network.transport"] = transport
            if self._identity and (identity := getattr(session, "identity", None)) is not None:
                attributes["enduser.id"] = self.text(str(identity.name))
            span.set_attributes(attributes)
        tracestate = parent.tracestate if parent is not None else None
        baggage = (
            from_meta.baggage if from_meta.parent is not None or from_meta.baggage else from_headers.baggage
        )
        return RequestSpan(self, span, tracestate, baggage)


class _Unrecorded:
    """The stage of a request that is not recorded: nothing to start or end."""

    def end(self, outcome: str | None = None) -> None:
        pass


_UNRECORDED: Final = _Unrecorded()


class StageSpan:
    def __init__(self, span: Span) -> None:
        self._span = span

    def end(self, outcome: str | None = None) -> None:
        if outcome is not None and self._span.is_recording():
            self._span.set_attributes({"error.type": outcome, "manifold.outcome": outcome})
            self._span.set_status(StatusCode.ERROR, outcome)
        self._span.end()


def _failure_type(failure: BaseException) -> tuple[str, str | None]:
    """``error.type`` and the status description of a request that failed with ``failure``."""
    if isinstance(failure, RemoteError):
        return str(failure.error.get("code")), str(failure.error.get("message", ""))
    if isinstance(failure, ServerTimeout):
        return "timeout", str(failure)
    if isinstance(failure, ServerUnavailable):
        return "server_unavailable", str(failure)
    if not isinstance(failure, Exception):
        return "cancelled", None
    return type(failure).__qualname__, None


def _carrier(span: Span, tracestate: str | None, baggage: str | None) -> dict[str, str]:
    context = span.get_span_context()
    sampled = context.trace_flags.sampled
    carrier = {"traceparent": format_traceparent(context.trace_id, context.span_id, sampled)}
    if tracestate is not None:
        carrier["tracestate"] = tracestate
    if baggage is not None:
        carrier["baggage"] = baggage
    return carrier


def _with_carrier(params: Mapping[str, Any] | None, carrier: Mapping[str, str]) -> dict[str, Any]:
    """``params`` whose ``_meta`` carries ``carrier`` (the caller's carrier keys replaced)."""
    out = dict(params or {})
    meta = out.get("_meta")
    meta = {k: v for k, v in meta.items() if k not in CARRIER_KEYS} if isinstance(meta, Mapping) else {}
    meta.update(carrier)
    out["_meta"] = meta
    return out


class RelaySpan:
    def __init__(self, span: Span, tracestate: str | None, baggage: str | None) -> None:
        self._span = span
        self._tracestate = tracestate
        self._baggage = baggage

    def meta(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return _with_carrier(params, _carrier(self._span, self._tracestate, self._baggage))

    def end(self, failure: BaseException | None = None) -> None:
        if failure is not None and self._span.is_recording():
            kind, description = _failure_type(failure)
            self._span.set_attribute("error.type", kind)
            self._span.set_status(StatusCode.ERROR, description)
        self._span.end()


class ClientSpan:
    def __init__(self, factory: SpanFactory, span: Span, tracestate: str | None, baggage: str | None) -> None:
        self._factory = factory
        self._span = span
        self._tracestate = tracestate
        self._baggage = baggage
        self._carrier = _carrier(span, tracestate, baggage)  # the same in _meta and in headers

    def params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return _with_carrier(params, self._carrier)

    def headers(self) -> dict[str, str]:
        return dict(self._carrier)

    def event(self, method: str) -> None:
        if self._span.is_recording():
            self._span.add_event(self._factory.name(method))

    def relayed(self, method: str, params: Mapping[str, Any] | None) -> RelaySpan:
        links = None
        theirs = _carried(params.get("_meta") if params is not None else None)
        if theirs.parent is not None:  # the server's own span, as it named it
            links = [Link(_span_context(theirs.parent), {"manifold.link": "server"})]
        context = set_span_in_context(self._span)
        span = self._factory._tracer.start_span(
            self._factory.text(method), context=context, kind=SpanKind.CLIENT, links=links
        )
        if span.is_recording():
            span.set_attribute("mcp.method.name", self._factory.name(method))
        return RelaySpan(span, self._tracestate, self._baggage)

    def end(self, result: Any = None, failure: BaseException | None = None) -> None:
        span = self._span
        if span.is_recording():
            if failure is not None:
                kind, description = _failure_type(failure)
                span.set_attribute("error.type", kind)
                if isinstance(failure, RemoteError):
                    span.set_attribute("rpc.response.status_code", kind)
                span.set_status(StatusCode.ERROR, self._factory.text(description) if description else None)
            elif isinstance(result, dict) and result.get("isError") is True:
                span.set_attribute("error.type", "tool_error")
                span.set_status(StatusCode.ERROR)
        span.end()


class RequestSpan:
    def __init__(self, factory: SpanFactory, span: Span, tracestate: str | None, baggage: str | None) -> None:
        self._factory = factory
        self._span = span
        self._tracestate = tracestate
        self._baggage = baggage
        context = span.get_span_context()
        self.trace_id = f"{context.trace_id:032x}"
        self.span_id = f"{context.span_id:016x}"
        self._sampled = context.trace_flags.sampled
        self._recording = span.is_recording()
        self._context: Context | None = None
        self._token: Token[active.RequestTrace | None] = active.CURRENT.set(self)

    @property
    def recording(self) -> bool:
        return self._recording

    @property
    def exemplar(self) -> dict[str, str] | None:
        return {"trace_id": self.trace_id} if self._sampled else None

    def _parent(self) -> Context:
        if self._context is None:
            self._context = set_span_in_context(self._span)
        return self._context

    def stage(self, name: str) -> StageSpan | _Unrecorded:
        if not self._recording:  # nothing under an unrecorded request is recorded either
            return _UNRECORDED
        span = self._factory._tracer.start_span(name, context=self._parent(), kind=SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attribute("manifold.stage", name)
        return StageSpan(span)

    def client(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        server_id: str,
        request_id: RequestId | None = None,
    ) -> ClientSpan:
        factory = self._factory
        if not self._recording:
            # Unrecorded: the server is told this request's own (unsampled) context; no span of ours.
            return ClientSpan(factory, self._span, self._tracestate, self._baggage)
        target = _target(method, params)
        span = factory._tracer.start_span(method, context=self._parent(), kind=SpanKind.CLIENT)
        if span.is_recording():
            span.update_name(factory.name(method if target is None else f"{method} {target}"))
            attributes: dict[str, Any] = {
                "mcp.method.name": factory.name(method),
                "manifold.server.id": factory.name(server_id),
            }
            if target is not None:
                attributes[_NAMED[method]] = factory.name(target)
            if method == "tools/call":
                attributes["gen_ai.operation.name"] = "execute_tool"
            if request_id is not None:
                attributes["jsonrpc.request.id"] = str(request_id)
            span.set_attributes(attributes)
        return ClientSpan(factory, span, self._tracestate, self._baggage)

    def end(self, ended: Any = None) -> None:
        """``ended``: the result, or the JSON-RPC error response the request was answered with."""
        if isinstance(ended, dict) and "jsonrpc" in ended and "error" in ended:
            self._failed(ended)
        else:
            self._result(ended)
        try:
            active.CURRENT.reset(self._token)
        except ValueError:  # ended in another context than it began: nothing of ours to restore
            active.CURRENT.set(None)
        self._span.end()

    def _result(self, result: Any) -> None:
        if not self._span.is_recording() or not isinstance(result, dict):
            return
        if result.get("isError") is True:
            meta = result.get("_meta")
            ours = meta.get(_OURS) if isinstance(meta, dict) else None
            self._span.set_attribute("error.type", "tool_error")
            if isinstance(ours, str):
                self._span.set_attribute("manifold.outcome", self._factory.text(ours))
            self._span.set_status(StatusCode.ERROR)

    def _failed(self, response: Message) -> None:
        error = response.get("error")
        if not self._span.is_recording() or not isinstance(error, dict):
            return
        code = str(error.get("code"))
        self._span.set_attributes({"error.type": code, "rpc.response.status_code": code})
        message = error.get("message")
        self._span.set_status(
            StatusCode.ERROR, self._factory.text(message) if isinstance(message, str) else None
        )
