"""Results of one run: raw records, the figures made from them, and the issue's targets.

Every figure is given twice: absolute, and as a ratio to the direct run (the fixture server
reached with no proxy) of the same invocation. Call ratios are *paired*: each round's Manifold
run is divided by that round's direct run, and the median of those ratios is reported, so a
machine that gets busier or quieter during the run moves both sides of each ratio together.
"""

from __future__ import annotations

import functools
import math
import operator
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from benchmarks.load import CallRun
from benchmarks.profile import Profile

__all__ = [
    "MANIFOLD_PREFIXES",
    "MIB",
    "CallRecord",
    "CallRow",
    "ListRecord",
    "MemoryRecord",
    "Results",
    "ScaleRecord",
    "SessionRecord",
    "Target",
    "evaluate",
    "summarize",
]

MIB = 1024 * 1024


@dataclass(frozen=True)
class CallRecord:
    """One measured call run, as stored in the JSON."""

    group: str  # calls | clients | middleware | profile
    target: str
    round: int
    concurrency: int
    calls: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    client_cpu_us: float  # per call, the load generator
    manifold_cpu_us: float | None  # per call, the Manifold process
    servers_cpu_us: float  # per call, every server process behind the target

    @classmethod
    def of(cls, group: str, round_: int, run: CallRun) -> CallRecord:
        calls = max(run.calls, 1)
        return cls(
            group,
            run.target,
            round_,
            run.concurrency,
            run.calls,
            run.seconds,
            run.rps,
            run.p(0.50),
            run.p(0.99),
            run.client_cpu / calls * 1e6,
            run.manifold_cpu / calls * 1e6 if run.manifold_cpu is not None else None,
            run.servers_cpu / calls * 1e6,
        )


@dataclass(frozen=True)
class CallRow:
    """A target at one concurrency: medians over rounds, and paired ratios to a reference."""

    target: str
    concurrency: int
    rounds: int
    calls: int
    p50_ms: float
    p99_ms: float
    rps: float
    client_cpu_us: float
    manifold_cpu_us: float | None
    servers_cpu_us: float
    reference: str
    p50_x: float
    p99_x: float
    rps_x: float
    client_cpu_x: float
    manifold_cpu_x: float | None  # Manifold's CPU per call / the direct server's CPU per call
    servers_cpu_x: float


@dataclass(frozen=True)
class ListRecord:
    target: str
    via: str  # "manifold (stdio)", "manifold (http)", "direct"
    shape: str  # "16x10": servers x numbered tools each
    tools: int
    pages: int
    cold_ms: float
    warm_ms: float  # median over the warm drains
    warm_drains: int
    reference: str = ""
    cold_x: float = math.nan
    warm_x: float = math.nan


@dataclass(frozen=True)
class MemoryRecord:
    target: str
    servers: int
    transport: str
    rss_mib: float
    reference_rss_mib: float  # one direct fixture server, idle
    x: float


@dataclass(frozen=True)
class SessionRecord:
    target: str
    sessions: int
    seconds: float
    rss_before_mib: float
    rss_after_mib: float
    kib_per_session: float
    reference_kib_per_session: float = math.nan
    x: float = math.nan


@dataclass(frozen=True)
class ScaleRecord:
    """The scale run (:mod:`benchmarks.scale`): idle sessions and calls in flight at once."""

    target: str
    servers: int
    sessions_wanted: int
    sessions_opened: int
    sessions_seconds: float
    calls_wanted: int
    calls_answered: int  # answered right (refusals are in ``errors``)
    slow_seconds: float  # how long the server holds each call
    in_flight_client: int  # the most calls outstanding at one instant, at the load generator
    in_flight_manifold: float | None  # manifold_requests_in_flight at its peak (None: not read)
    rss_before_mib: float
    rss_sessions_mib: float
    rss_peak_mib: float  # the most sampled while the calls were in flight
    kib_per_session: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    first_answer_after_last_send: bool
    probe_calls: int  # echo calls at c=1 while every slow call was in flight
    probe_p50_ms: float
    probe_p99_ms: float
    errors: dict[str, int]  # refusals by kind; wrong answers never get here: they void the run
    raised_limits: dict[str, Any]  # what the scale Manifold's config raises beyond the base config
    open_files: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def all_in_flight(self) -> bool:
        """Every call outstanding at once at the client, and counted in flight by Manifold."""
        return (
            self.in_flight_client == self.calls_wanted
            and self.in_flight_manifold is not None
            and self.in_flight_manifold >= self.calls_wanted
        )


@dataclass(frozen=True)
class Target:
    what: str
    threshold: str
    measured: str
    verdict: str  # PASS | FAIL | SKIP


@dataclass
class Results:
    meta: dict[str, Any]
    calls: list[CallRecord] = field(default_factory=list)
    call_rows: list[CallRow] = field(default_factory=list)
    same_transport_rows: list[CallRow] = field(default_factory=list)  # vs direct over the same transport
    peer_rows: list[CallRow] = field(default_factory=list)  # Manifold vs mcp-hub with the same servers
    client_rows: list[CallRow] = field(default_factory=list)
    middleware_rows: list[CallRow] = field(default_factory=list)
    middleware_direct_rows: list[CallRow] = field(default_factory=list)  # the same, vs the direct run
    middleware_notes: dict[str, str] = field(default_factory=dict)  # variant -> config / skip reason
    lists: list[ListRecord] = field(default_factory=list)
    memory: list[MemoryRecord] = field(default_factory=list)
    sessions: list[SessionRecord] = field(default_factory=list)
    scale: ScaleRecord | None = None
    profiles: list[Profile] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _median(values: Iterable[float]) -> float:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else math.nan


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


def summarize(
    records: Sequence[CallRecord],
    group: str,
    reference_of: Callable[[str], str | None],
    *,
    manifold_vs_manifold: bool = False,
    include: Callable[[str], bool] = lambda _: True,
) -> list[CallRow]:
    """One row per (target, concurrency) of ``group``, with paired ratios to ``reference_of(target)``.

    A reference's records may belong to another group (the direct run is in ``calls``). Manifold's
    CPU per call is compared with the reference's server CPU per call (a direct run), or with the
    reference's Manifold CPU per call when ``manifold_vs_manifold`` (middleware on vs off).
    """
    by_key: dict[tuple[str, int], list[CallRecord]] = {}
    for record in records:
        by_key.setdefault((record.target, record.concurrency), []).append(record)
    rows: list[CallRow] = []
    for record in records:
        key = (record.target, record.concurrency)
        if record.group != group or key not in by_key or not include(record.target):
            continue
        mine = by_key.pop(key)
        reference = reference_of(record.target) or record.target
        theirs = {
            r.round: r for r in records if r.target == reference and r.concurrency == record.concurrency
        }

        def paired(
            get: Callable[[CallRecord], float | None],
            base: Callable[[CallRecord], float | None],
            mine: list[CallRecord] = mine,
            theirs: dict[int, CallRecord] = theirs,
        ) -> float:
            return _median(_ratio(get(m), base(theirs[m.round])) for m in mine if m.round in theirs)

        manifold = [m.manifold_cpu_us for m in mine if m.manifold_cpu_us is not None]
        rows.append(
            CallRow(
                target=record.target,
                concurrency=record.concurrency,
                rounds=len(mine),
                calls=sum(m.calls for m in mine),
                p50_ms=_median(m.p50_ms for m in mine),
                p99_ms=_median(m.p99_ms for m in mine),
                rps=_median(m.rps for m in mine),
                client_cpu_us=_median(m.client_cpu_us for m in mine),
                manifold_cpu_us=_median(manifold) if manifold else None,
                servers_cpu_us=_median(m.servers_cpu_us for m in mine),
                reference=reference,
                p50_x=paired(lambda r: r.p50_ms, lambda r: r.p50_ms),
                p99_x=paired(lambda r: r.p99_ms, lambda r: r.p99_ms),
                rps_x=paired(lambda r: r.rps, lambda r: r.rps),
                client_cpu_x=paired(lambda r: r.client_cpu_us, lambda r: r.client_cpu_us),
                manifold_cpu_x=(
                    paired(
                        lambda r: r.manifold_cpu_us,
                        (lambda r: r.manifold_cpu_us)
                        if manifold_vs_manifold
                        else (lambda r: r.servers_cpu_us),
                    )
                    if manifold
                    else None
                ),
                servers_cpu_x=paired(lambda r: r.servers_cpu_us, lambda r: r.servers_cpu_us),
            )
        )
    return rows


# ----------------------------------------------------------------------------- targets

MANIFOLD_PREFIXES = ("stdio-", "http-")


def _verdict(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "FAIL")


def _listing(pairs: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f"{name} {_x(value)}" for name, value in pairs) or "not measured"


# The targets (#20), as ratios to the direct run of the same invocation.
P50_MAX: Final = 1.25  # tools/call p50 at the low concurrency, x direct
THROUGHPUT_MIN: Final = 0.95  # calls/s at the high concurrency, x direct (HTTP, and stdio for stdio-K)
CPU_MAX: Final = 0.25  # Manifold CPU per call, x the direct server's own CPU per call
MIDDLEWARE_MAX: Final = 1.10  # everything on vs everything off (p50, 1/throughput)
RSS_MAX_MIB: Final = 50.0  # Manifold idle, with the most stdio servers of the run (16)
SESSION_MAX_KIB: Final = 4.0  # per idle client session
PEER_STDIO_MIN: Final = 1.10  # calls/s at the high concurrency, stdio-1 x mcp-hub-stdio-1
PEER_HTTP_MIN: Final = 1.50  # calls/s at the high concurrency, every http-K x mcp-hub-http-K
LIST_MAX: Final = (
    1.0  # a warm merged tools/list vs one server listing as many tools (an earlier target, kept)
)


def _scale_target(scale: ScaleRecord | None) -> Target:
    what = "scale: idle sessions open and tools/call in flight at once, one Manifold"
    threshold = "all sessions open, every call in flight at once (client and Manifold), 0 errors"
    if scale is None:
        return Target(what, threshold, "not run", "SKIP")
    errors = sum(scale.errors.values())
    gauge = "not read" if scale.in_flight_manifold is None else f"{scale.in_flight_manifold:,.0f}"
    measured = (
        f"{scale.sessions_opened:,}/{scale.sessions_wanted:,} sessions; {scale.in_flight_client:,}/"
        f"{scale.calls_wanted:,} calls in flight at once (Manifold's gauge {gauge}); {errors} errors; "
        f"RSS {_f(scale.rss_before_mib, 1)} / {_f(scale.rss_sessions_mib, 1)} / "
        f"{_f(scale.rss_peak_mib, 1)} MiB (before / sessions / peak); p50 {_f(scale.p50_ms, 0)} ms, "
        f"p99 {_f(scale.p99_ms, 0)} ms (server holds {scale.slow_seconds:g} s)"
    )
    ok = (
        scale.sessions_opened == scale.sessions_wanted
        and scale.all_in_flight
        and scale.calls_answered == scale.calls_wanted
        and errors == 0
    )
    return Target(
        what.replace("idle sessions", f"{scale.sessions_wanted:,} idle sessions").replace(
            "tools/call", f"{scale.calls_wanted:,} tools/call"
        ),
        threshold,
        measured,
        _verdict(ok),
    )


def evaluate(results: Results, *, low: int, high: int) -> list[Target]:
    """The issue's targets, from the summarized figures; ``low``/``high``: the two concurrencies.

    Rows marked "(informative)" are measured and judged against the same threshold, but the issue
    does not set them as targets.
    """
    through = [r for r in results.call_rows if r.target.startswith(MANIFOLD_PREFIXES)]
    targets: list[Target] = []

    def check(what: str, threshold: str, pairs: list[tuple[str, float]], ok: Callable[[float], bool]) -> None:
        values = [v for _, v in pairs if not math.isnan(v)]
        passed = all(ok(v) for v in values) if values else None
        targets.append(Target(what, threshold, _listing(pairs), _verdict(passed)))

    check(
        f"tools/call p50 at c={low} vs direct",
        f"≤ {P50_MAX:.2f}x",
        [(r.target, r.p50_x) for r in through if r.concurrency == low],
        lambda v: v <= P50_MAX,
    )
    check(
        f"tools/call throughput at c={high} vs direct (HTTP)",
        f"≥ {THROUGHPUT_MIN:.2f}x",
        [(r.target, r.rps_x) for r in through if r.concurrency == high],
        lambda v: v >= THROUGHPUT_MIN,
    )
    like = results.same_transport_rows
    check(
        f"tools/call throughput at c={high}, stdio-K vs direct-stdio",
        f"≥ {THROUGHPUT_MIN:.2f}x",
        [
            (f"{r.target}/{r.reference}", r.rps_x)
            for r in like
            if r.concurrency == high and r.target.startswith("stdio-")
        ],
        lambda v: v >= THROUGHPUT_MIN,
    )
    check(
        f"  like for like: p50 at c={low} vs the same server reached directly the same way",
        f"≤ {P50_MAX:.2f}x (informative)",
        [(f"{r.target}/{r.reference}", r.p50_x) for r in like if r.concurrency == low],
        lambda v: v <= P50_MAX,
    )
    # Against the peer (mcp-hub, same servers, same client): stdio-1, and HTTP at every K.
    peer_targets: list[tuple[str, Callable[[str], bool], float]] = [
        ("stdio-1", lambda name: name == "stdio-1", PEER_STDIO_MIN),
        ("every http-K", lambda name: name.startswith("http-"), PEER_HTTP_MIN),
    ]
    for label, wanted, least in peer_targets:
        check(
            f"throughput at c={high} vs mcp-hub with the same servers: {label}",
            f"≥ {least:.2f}x",
            [
                (f"{r.target}/{r.reference}", r.rps_x)
                for r in results.peer_rows
                if r.concurrency == high and wanted(r.target)
            ],
            functools.partial(operator.le, least),
        )
    for c in (high, low):
        check(
            f"Manifold CPU per call vs the direct server's own, c={c}",
            f"≤ {CPU_MAX:.2f}x",
            [(r.target, r.manifold_cpu_x or math.nan) for r in through if r.concurrency == c],
            lambda v: v <= CPU_MAX,
        )
    variants = {r.target for r in results.middleware_rows} - {"mw:all-off"}
    # Issue #34's "everything on" (auth, policy, validation, rate limits, audit, metrics) is
    # mw:core-on when the run has more rows than those; mw:all-on adds every other feature.
    everything = next(
        (name for name in ("mw:core-on", "mw:all-on") if name in variants), next(iter(variants), None)
    )  # one alone = all
    on = {r.concurrency: r for r in results.middleware_rows if r.target == everything}
    if on:
        pairs = [(f"p50 c={low}", on[low].p50_x), (f"1/throughput c={high}", 1 / on[high].rps_x)]
        check(
            f"everything on vs everything off ({everything})",
            f"≤ {MIDDLEWARE_MAX:.2f}x slower",
            pairs,
            lambda v: v <= MIDDLEWARE_MAX,
        )
        cpu = [(f"c={c}", on[c].manifold_cpu_x or math.nan) for c in (low, high)]
        check(
            f"everything on vs off: Manifold CPU per call ({everything})",
            f"≤ {MIDDLEWARE_MAX:.2f}x",
            cpu,
            lambda v: v <= MIDDLEWARE_MAX,
        )
    else:
        reason = results.middleware_notes.get("mw:all-on", "no middleware is configurable yet")
        targets.append(
            Target("everything on vs everything off", f"≤ {MIDDLEWARE_MAX:.2f}x slower", reason, "SKIP")
        )
    every = {r.concurrency: r for r in results.middleware_rows if r.target == "mw:all-on"}
    if every and everything != "mw:all-on":
        check(
            "  every row on together (mw:all-on) vs off: Manifold CPU per call",
            f"≤ {MIDDLEWARE_MAX:.2f}x (informative)",
            [(f"c={c}", every[c].manifold_cpu_x or math.nan) for c in (low, high) if c in every],
            lambda v: v <= MIDDLEWARE_MAX,
        )
    stdio_rss = [r for r in results.memory if r.transport == "stdio"]
    biggest = max(stdio_rss, key=lambda r: r.servers, default=None)
    targets.append(
        Target(
            f"Manifold RSS, idle, {biggest.servers if biggest else '?'} stdio servers",
            f"≤ {RSS_MAX_MIB:g} MiB",
            f"{_f(biggest.rss_mib, 1)} MiB" if biggest else "not measured",
            _verdict(biggest.rss_mib <= RSS_MAX_MIB if biggest else None),
        )
    )
    per_session = [
        (f"{s.target} ({s.sessions:,})", s.kib_per_session)
        for s in results.sessions
        if s.target.startswith(MANIFOLD_PREFIXES)
    ]
    if results.scale is not None and results.scale.sessions_opened:
        scale = results.scale
        per_session.append((f"{scale.target} ({scale.sessions_opened:,})", scale.kib_per_session))
    values = [v for _, v in per_session if not math.isnan(v)]
    targets.append(
        Target(
            "memory per idle client session",
            f"≤ {SESSION_MAX_KIB:g} KiB",
            ", ".join(f"{name} {_f(v, 1)} KiB" for name, v in per_session) or "not measured",
            _verdict(all(v <= SESSION_MAX_KIB for v in values) if values else None),
        )
    )
    targets.append(_scale_target(results.scale))
    for shape in sorted({r.shape for r in results.lists if r.via != "direct"}, reverse=True):
        check(
            f"warm merged tools/list {shape} vs one server listing as many",
            f"≤ {LIST_MAX:.2f}x (no slower)",
            [(r.target, r.warm_x) for r in results.lists if r.shape == shape and r.via != "direct"],
            lambda v: v <= LIST_MAX,
        )
    return targets


def _f(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"
