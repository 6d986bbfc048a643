"""Prometheus metrics: what the gateway counts, with bounded labels, on its own registry.

Each :class:`Metrics` owns a ``CollectorRegistry`` (never the process-global one), so tests and
several gateways in one process do not share counters. The gateway calls one method per event;
:meth:`Metrics.render` produces the ``/metrics`` body.

Families (``manifold_`` prefix, base units, ``_total`` on counters)::

    manifold_tool_calls_total{server,tool,outcome[,identity]}   counter
    manifold_tool_call_duration_seconds{server[,tool]}          histogram, 0.5 ms … 60 s
    manifold_policy_decisions_total{effect,rule}                counter
    manifold_rate_limit_rejections_total{limit}                 counter
    manifold_rate_limit_backend_errors_total{backend}           counter
    manifold_limit_refusals_total{limit}                        counter
    manifold_sign_ins_total{method,outcome}                     counter
    manifold_list_requests_total{kind}                          counter
    manifold_list_pages_served_total{kind}                      counter
    manifold_catalog_tools{server}                              gauge
    manifold_server_up{server}                                  gauge (1 ready, 0 not)
    manifold_server_restarts_total{server}                      counter
    manifold_server_connect_duration_seconds{server}            histogram
    manifold_requests_in_flight                                 gauge
    manifold_client_sessions_active{transport}                  gauge
    manifold_listen_streams_open{transport}                     gauge
    manifold_tool_pin_drift_total{server}                       counter
    manifold_confirmations_total{outcome}                       counter
    manifold_config_reloads_total{outcome}                      counter
    manifold_received_bytes_total{transport}                    counter
    manifold_sent_bytes_total{transport}                        counter
    manifold_trace_spans_dropped_total{reason}                  counter
    manifold_tasks_created_total{server}, _ended_total{server,status}, _in_flight{server},
    manifold_task_duration_seconds{server}                      tasks clients created
    manifold_client_tasks_created_total{server,method}, _ended_total{server,method,status},
    manifold_client_tasks_in_flight{server}                     tasks held for a server's asks
    manifold_guardrail_*, manifold_internal_errors_total, …     see docs/reference/metrics.md
    manifold_build_info{version}                                gauge, always 1

Cardinality is bounded by construction. Label values come from the config (server ids, limit
names, rule ids) or from the catalog (tool names), never from what a client typed: a tool name
the catalog does not know is passed as ``None`` and recorded as ``"unknown"``. As a second guard,
after ``max_tool_label_values`` distinct tool names (and as many identities and rule ids) any new
value is recorded as ``"other"``. Session ids, request ids and arguments are never labels; an
``identity`` label exists only when an operator opts in (``identity_labels``), and then only on
``manifold_tool_calls_total``: a histogram per identity would multiply every bucket.

Worst case with the defaults: 2000 tools x ~19 series of the per-tool latency histogram, about
40k series; turn ``per_tool_latency`` off to keep one histogram per server instead.

The hot path (:meth:`Metrics.tool_call`) is one dict lookup for the cached label children, one
counter addition and one histogram observation, without a lock: the families written on every
call are :mod:`proxy.observe.plain`'s, turned into samples only when scraped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, get_args

from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from proxy import __version__
from proxy.config.observe import MetricsSettings
from proxy.observe.labels import OTHER, UNKNOWN, Bounded, Children, InFlight
from proxy.observe.plain import PlainCounter, PlainFamily, PlainHistogram
from proxy.observe.recent import RecentCalls, RecentRefusals

__all__ = [
    "CONNECT_BUCKETS",
    "DEFAULT_RULE",
    "LATENCY_BUCKETS",
    "OTHER",
    "OUTCOMES",
    "UNAVAILABLE",
    "UNKNOWN",
    "Effect",
    "ListKind",
    "Metrics",
    "Outcome",
    "Where",
]

Outcome = Literal[
    "ok",
    "tool_error",
    "input_required",
    "denied",
    "rate_limited",
    "timeout",
    "server_error",
    "cancelled",
    "invalid",
    "error",
]
"""How a ``tools/call`` ended (the words of ``proxy.pipeline.context.outcome_of``). ``tool_error``: the
tool answered ``isError: true`` (the call itself worked); ``input_required``: a 2026-07-28 round
that asks the client for input (its retry is counted again); ``server_error``: the server failed,
went away or answered a JSON-RPC error; ``invalid``: refused before routing (unknown tool, bad
arguments); ``error``: an unexpected exception in Manifold itself."""
OUTCOMES: Final[frozenset[str]] = frozenset(get_args(Outcome))
_FAILED: Final = frozenset({"tool_error", "timeout", "server_error", "error"})  # the server's or ours

Effect = Literal["allow", "deny", "confirm"]
ListKind = Literal["tools", "prompts", "resources", "resourceTemplates"]  # the gateway's kind names
# Whose fault boundary caught a failure: a client's request, a server's question relayed to a
# client, one server connection, one client session (a transport's task), a background task.
Where = Literal["request", "server_request", "server_connection", "session", "task"]
_LIST_KINDS: Final[frozenset[str]] = frozenset(get_args(ListKind))

DEFAULT_RULE: Final = "default"  # a policy decision no rule matched
UNAVAILABLE: Final = "unavailable"  # a rate-limit denial because the limit store failed (fail_closed)

# Tool calls: from a cache hit in the gateway (sub-millisecond) to a slow tool (a minute).
LATENCY_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# One message inspected: tens of microseconds for a small one, up to a second for megabytes.
GUARD_BUCKETS: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
# Server start + initialize + first tools/list; connect_timeout defaults to 30 s.
CONNECT_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# Entries in the tool-call child cache; past it, new combinations still count (via labels()).
_CACHE_LIMIT: Final = 65536


_CallChildren = tuple[PlainCounter, PlainHistogram]


class Metrics:
    """Every metric Manifold exports, on a registry of its own.

    Methods never raise for a label value (values are mapped, not rejected), except for an
    ``outcome`` or list ``kind`` outside its enumeration, which is a bug in the caller.
    """

    def __init__(self, settings: MetricsSettings | None = None, *, process_metrics: bool = True) -> None:
        settings = settings or MetricsSettings()
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=True)
        if process_metrics:
            # process_cpu_seconds_total per call is the number the hot-path budget is about.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        r = self.registry
        self._identity_labels = settings.identity_labels
        self.recent = RecentCalls()  # the admin API's per-server rates and latencies
        self.refusals = RecentRefusals()
        self._per_tool = settings.per_tool_latency
        self._tool_label = Bounded(settings.max_tool_label_values)
        self._identity_label = Bounded(settings.max_tool_label_values)
        self._rule_label = Bounded(settings.max_tool_label_values)
        self._detector_label = Bounded(settings.max_tool_label_values)

        def counter(name: str, doc: str, *labels: str) -> Children[Counter]:
            return Children(Counter(name, doc, labels, registry=r))

        def gauge(name: str, doc: str, *labels: str) -> Children[Gauge]:
            return Children(Gauge(name, doc, labels, registry=r))

        call_labels = ("server", "tool", "outcome", *(("identity",) if settings.identity_labels else ()))
        # The families written on every call are plain numbers (proxy.observe.plain): no lock each.
        self._calls = PlainFamily.counter(
            r, "manifold_tool_calls", "tools/call requests, by how they ended.", call_labels
        )
        self._call_seconds = PlainFamily.histogram(
            r,
            "manifold_tool_call_duration_seconds",
            "Time from receiving a tools/call to having its answer, in seconds.",
            ("server", "tool") if settings.per_tool_latency else ("server",),
            LATENCY_BUCKETS,
        )
        # (server, tool as given, outcome, identity or None) -> (counter child, histogram child)
        self._call_children: dict[tuple[str, str | None, str, str | None], _CallChildren] = {}

        self._endpoint_calls = PlainFamily.counter(
            r,
            "manifold_endpoint_tool_calls",
            "tools/call requests by the endpoint they came in on ('/mcp': the whole catalog; "
            "else a configured endpoint's name) and how they ended.",
            ("endpoint", "outcome"),
        )
        self._discovery_calls = counter(
            "manifold_discovery_calls",
            "Meta-tool calls of progressive discovery (search_tools, describe_tools, call_tool), by "
            "endpoint and how they were answered; call_tool's call itself counts as a tools/call too.",
            "endpoint",
            "tool",
            "outcome",
        )
        self._decisions = PlainFamily.counter(  # one a call with a policy: plain, like the calls
            r,
            "manifold_policy_decisions",
            "Policy decisions, by effect and deciding rule.",
            ("effect", "rule"),
        )
        self._rate_limited = counter(
            "manifold_rate_limit_rejections", "Calls refused by a rate limit.", "limit"
        )
        self._backend_errors = counter(
            "manifold_rate_limit_backend_errors", "Rate-limit backend failures.", "backend"
        )
        self._list_requests = counter(
            "manifold_list_requests", "Listings clients started (a list request without a cursor).", "kind"
        )
        self._list_pages = counter(
            "manifold_list_pages_served", "List pages served, first pages and continuations.", "kind"
        )
        self._catalog = gauge(
            "manifold_catalog_tools", "Tools each server contributes to the catalog.", "server"
        )
        self._up = gauge("manifold_server_up", "1 when the server is connected and ready, else 0.", "server")
        self._restarts = counter(
            "manifold_server_restarts", "Times a server was restarted after failing.", "server"
        )
        self._connect = Children(
            Histogram(
                "manifold_server_connect_duration_seconds",
                "Time to connect to a server, initialize it and list its tools, in seconds.",
                ("server",),
                buckets=CONNECT_BUCKETS,
                registry=r,
            )
        )
        self._in_flight = PlainFamily.gauge(
            r, "manifold_requests_in_flight", "Inbound requests being handled."
        ).labels()
        self._in_flight_tracker = InFlight(self._in_flight)
        self._sessions = gauge("manifold_client_sessions_active", "Open client sessions.", "transport")
        self._revocation_errors = counter(
            "manifold_session_revocation_errors",
            "Failed Redis calls of the ended-session store: revoke, check (a take-over) or follow.",
            "operation",
        )
        self._listens = gauge(
            "manifold_listen_streams_open", "Open subscriptions/listen streams (2026-07-28).", "transport"
        )
        self._pin_drift = counter(
            "manifold_tool_pin_drift", "Tool definitions that differ from their pinned version.", "server"
        )
        self._reloads = counter(
            "manifold_config_reloads",
            "Config reloads (a changed file, SIGHUP) by outcome: applied, unchanged or refused.",
            "outcome",
        )
        self._spans_dropped = counter(
            "manifold_trace_spans_dropped",
            "Spans of sampled traces never exported: queue_full (the export queue, tracing.max_queue_size, "
            "was full) or export_failed (the collector refused, hung past the timeout, or was down).",
            "reason",
        )
        self._confirmations = counter(
            "manifold_confirmations",
            "Tool calls a confirm rule asked a person about, by how it ended.",
            "outcome",
        )
        self._internal = counter(
            "manifold_internal_errors",
            "Failures Manifold caught at a fault boundary: a bug or an unforeseen input; see the log.",
            "where",
        )
        self._limit_refusals = counter(
            "manifold_limit_refusals",
            "Requests, messages and connections refused by a configured limit (limits.<limit>).",
            "limit",
        )
        self._sign_ins = counter(
            "manifold_sign_ins",
            "Bearer tokens verified (each once; a remembered token is not counted again), by outcome.",
            "method",
            "outcome",
        )
        self._guard_findings = counter(
            "manifold_guardrail_findings",
            "What guardrail detectors found, by detector, direction and the effect carried out.",
            "detector",
            "direction",
            "effect",
        )
        self._guard_seconds = Children(
            Histogram(
                "manifold_guardrail_inspection_duration_seconds",
                "Time to inspect one message (walk and detectors, on the loop or a worker thread).",
                ("direction",),
                buckets=GUARD_BUCKETS,
                registry=r,
            )
        )
        self._hook_seconds = Children(
            Histogram(
                "manifold_guardrail_hook_duration_seconds",
                "Time an external inspection service took to answer, by hook and outcome "
                "(allow, deny, redact, confirm, cached, failed).",
                ("hook", "outcome"),
                buckets=LATENCY_BUCKETS,
                registry=r,
            )
        )
        self._tasks_created = counter(
            "manifold_tasks_created", "Tasks clients created through Manifold.", "server"
        )
        self._tasks_ended = counter(
            "manifold_tasks_ended",
            "Tasks seen to end: completed, failed, cancelled or expired.",
            "server",
            "status",
        )
        self._tasks_open = gauge(
            "manifold_tasks_in_flight", "Tasks created and not yet seen to end.", "server"
        )
        self._task_seconds = Children(
            Histogram(
                "manifold_task_duration_seconds",
                "Time from a task's creation to Manifold seeing it end, in seconds.",
                ("server",),
                buckets=CONNECT_BUCKETS,
                registry=r,
            )
        )
        h = "Tasks Manifold holds for a server (its task-augmented sampling or elicitation)"
        self._ct_made = counter("manifold_client_tasks_created", f"{h}.", "server", "method")
        self._ct_end = counter("manifold_client_tasks_ended", f"{h}, ended.", "server", "method", "status")
        self._ct_open = gauge("manifold_client_tasks_in_flight", f"{h}, not yet ended.", "server")
        self._received = PlainFamily.counter(
            r, "manifold_received_bytes", "Bytes received from clients.", ("transport",)
        )
        self._sent = PlainFamily.counter(r, "manifold_sent_bytes", "Bytes sent to clients.", ("transport",))
        gauge("manifold_build_info", "Manifold's version; always 1.", "version").get(__version__).set(1)

    # ---- tool calls (the hot path) ------------------------------------------------------

    def tool_call(
        self,
        server: str,
        tool: str | None,
        outcome: Outcome,
        seconds: float,
        identity: str | None = None,
        exemplar: dict[str, str] | None = None,
    ) -> None:
        """Count one ``tools/call`` and observe its duration.

        ``tool`` is the catalog's namespaced name, or ``None`` when the client named a tool the
        catalog does not have (``server`` is then ``"unknown"`` too). ``identity`` is ignored
        unless ``identity_labels`` is on. ``exemplar`` (``{"trace_id": …}``, when the call was
        traced and sampled) is kept with the latency observation: the OpenMetrics exposition
        shows it, and a dashboard links the bucket to the trace.

        Raises:
            ValueError: ``outcome`` is not one of :data:`OUTCOMES`.
        """
        key = (server, tool, outcome, identity if self._identity_labels else None)
        children = self._call_children.get(key)
        if children is None:
            children = self._new_call_children(key)
        children[0].inc()
        children[1].observe(seconds, exemplar)
        self.recent.record(server, outcome not in _FAILED, seconds)

    def _new_call_children(self, key: tuple[str, str | None, str, str | None]) -> _CallChildren:
        server, tool, outcome, identity = key
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {sorted(OUTCOMES)}")
        server_label = server or UNKNOWN
        tool_label = self._tool_label(tool)
        labels = [server_label, tool_label, outcome]
        identity_label = None
        if self._identity_labels:
            identity_label = self._identity_label(identity)
            labels.append(identity_label)
        counter = self._calls.labels(*labels)
        histogram_labels = (server_label, tool_label) if self._per_tool else (server_label,)
        histogram = self._call_seconds.labels(*histogram_labels)
        children = (counter, histogram)
        # A name past the guard (recorded as "other") is not cached under its own key, or the
        # cache would be the unbounded thing; admitted names and None are bounded.
        overflow = (tool_label == OTHER != tool) or (identity_label == OTHER != identity)
        if not overflow and len(self._call_children) < _CACHE_LIMIT:
            self._call_children[key] = children
        return children

    def in_flight(self) -> InFlight:
        """A context manager counting one inbound request in progress (same object every time)."""
        return self._in_flight_tracker

    def request_started(self) -> None:
        self._in_flight.inc()

    def request_finished(self) -> None:
        self._in_flight.dec()

    # ---- policy and limits --------------------------------------------------------------

    def policy_decision(self, effect: Effect, rule: str | None) -> None:
        """Count one decision, labelled with one deciding rule id; ``None`` when the default decided.

        A decision may name several rules (``Decision.rule_ids``, sorted): pass the first, so
        that the counts add up to the number of decisions.
        """
        self._decisions.labels(effect, self._rule_label(rule) if rule else DEFAULT_RULE).inc()

    def rate_limited(self, limit: str | None) -> None:
        """Count one call refused by the limit rule ``limit``; ``None``: the limit store was down."""
        self._rate_limited.get(limit or UNAVAILABLE).inc()
        self.refusals.record(f"rate limit {limit or UNAVAILABLE}")

    def rate_limit_backend_error(self, backend: str) -> None:
        self._backend_errors.get(backend).inc()

    # ---- catalog listing ----------------------------------------------------------------

    def endpoint_call(self, endpoint: str, outcome: Outcome) -> None:
        """Count one ``tools/call`` under its endpoint: ``""`` (``/mcp``) or a configured
        endpoint's name, so the label's values are bounded by the configuration."""
        self._endpoint_calls.labels(endpoint or "/mcp", outcome).inc()

    def discovery_call(self, endpoint: str, tool: str, outcome: str) -> None:
        """Count one meta-tool call on ``endpoint`` (as :meth:`endpoint_call` labels it). ``tool``
        and ``outcome`` come from :mod:`proxy.views.discovery`'s closed sets."""
        self._discovery_calls.get(endpoint or "/mcp", tool, outcome).inc()

    def list_request(self, kind: ListKind, pages: int = 1) -> None:
        """A client started a listing (``<kind>/list`` without a cursor) and got ``pages`` pages.

        ``pages`` is 1 normally, 0 when the request was refused.

        Raises:
            ValueError: ``kind`` is not one of :data:`ListKind`.
        """
        self._list_kind(kind)
        self._list_requests.get(kind).inc()
        if pages:
            self._list_pages.get(kind).inc(pages)

    def list_page_served(self, kind: ListKind) -> None:
        """A continuation page (``<kind>/list`` with a cursor) was served.

        Raises:
            ValueError: ``kind`` is not one of :data:`ListKind`.
        """
        self._list_kind(kind)
        self._list_pages.get(kind).inc()

    @staticmethod
    def _list_kind(kind: str) -> None:
        if kind not in _LIST_KINDS:
            raise ValueError(f"unknown list kind {kind!r}; expected one of {sorted(_LIST_KINDS)}")

    # ---- servers ------------------------------------------------------------------------

    def catalog_size(self, server: str, tools: int) -> None:
        self._catalog.get(server).set(tools)

    def server_up(self, server: str, up: bool) -> None:
        self._up.get(server).set(1 if up else 0)
        self._restarts.get(server)  # a restart counter from 0, so increase() sees the first one

    def server_restart(self, server: str) -> None:
        self._restarts.get(server).inc()

    def server_connect_seconds(self, server: str, seconds: float) -> None:
        self._connect.get(server).observe(seconds)

    def trace_spans_dropped(self, reason: str, count: int) -> None:
        """Count spans tracing lost (``queue_full``, ``export_failed``: a fixed set); called from
        the OpenTelemetry SDK's export thread."""
        self._spans_dropped.get(reason).inc(count)

    def task_created(self, server: str) -> None:
        self._tasks_created.get(server).inc()
        self._tasks_open.get(server).inc()

    def task_ended(self, server: str, status: str, seconds: float | None) -> None:
        """A task seen to end (``status``: a fixed set); ``seconds`` since its creation, if known."""
        self._tasks_ended.get(server, status).inc()
        self._tasks_open.get(server).dec()
        if seconds is not None:
            self._task_seconds.get(server).observe(seconds)

    def client_task(self, server: str, method: str, status: str | None = None) -> None:
        """A task Manifold holds for ``server``'s task-augmented ``method`` (sampling or
        elicitation): created when ``status`` is ``None``, else ended with it (a fixed set)."""
        made = status is None
        (self._ct_made.get(server, method) if made else self._ct_end.get(server, method, str(status))).inc()
        self._ct_open.get(server).inc(1 if made else -1)

    def pin_drift(self, server: str) -> None:
        self._pin_drift.get(server).inc()

    def config_reload(self, outcome: str) -> None:
        """Count one config reload (``applied``, ``unchanged`` or ``refused``: a fixed set)."""
        self._reloads.get(outcome).inc()

    def guardrail_finding(self, detector: str, direction: str, effect: str, count: int = 1) -> None:
        """Count findings of one detector (a fixed set of names; custom ones are bounded too)."""
        self._guard_findings.get(self._detector_label(detector), direction, effect).inc(count)

    def guardrail_inspection(self, direction: str, seconds: float) -> None:
        self._guard_seconds.get(direction).observe(seconds)

    def guardrail_hook(self, hook: str, outcome: str, seconds: float) -> None:
        self._hook_seconds.get(hook, outcome).observe(seconds)

    def confirmation(self, outcome: str) -> None:
        """Count one question about a call (``proxy.enforce.confirm.question.Outcome``: a fixed set)."""
        self._confirmations.get(outcome).inc()

    # ---- sessions and traffic -----------------------------------------------------------

    def session_opened(self, transport: str) -> None:
        self._sessions.get(transport).inc()

    def session_closed(self, transport: str) -> None:
        self._sessions.get(transport).dec()

    def sessions_active(self, transport: str, sessions: int) -> None:
        """Set the count outright (for callers that recount rather than track)."""
        self._sessions.get(transport).set(sessions)

    def session_revocation_error(self, operation: str) -> None:
        """Count one failed Redis call of the ended-session store (``revoke`` or ``check``)."""
        self._revocation_errors.get(operation).inc()

    def listen_opened(self, transport: str) -> None:
        self._listens.get(transport).inc()

    def listen_closed(self, transport: str) -> None:
        self._listens.get(transport).dec()

    def internal_error(self, where: Where) -> None:
        """Count one failure a fault boundary caught (``where``: whose boundary it was)."""
        self._internal.get(where).inc()

    def limit_refused(self, limit: str) -> None:
        """Count one refusal by ``limits.<limit>`` (a config field name: bounded by construction)."""
        self._limit_refusals.get(limit).inc()
        self.refusals.record(limit)

    def sign_in(self, method: str, outcome: str) -> None:
        """Count one token verified: ``method`` jwt | oauth | introspection, ``outcome`` ok or why
        not (both words of the authenticator's own: bounded by construction)."""
        self._sign_ins.get(method, outcome).inc()

    def bytes_in(self, transport: str, size: int) -> None:
        self._received.labels(transport).inc(size)

    def bytes_out(self, transport: str, size: int) -> None:
        self._sent.labels(transport).inc(size)

    # ---- exposition ---------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition body and its content type; OpenMetrics when ``accept`` asks for it."""
        from prometheus_client.exposition import choose_encoder

        encoder: Callable[[CollectorRegistry], bytes]
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
