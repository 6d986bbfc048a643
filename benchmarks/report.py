"""The report of one run: Markdown tables of every figure, absolute and as a ratio, plus the JSON.

The figures themselves come from :mod:`benchmarks.figures`; nothing here computes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from benchmarks.figures import CallRow, Results, ScaleRecord

__all__ = ["render", "write"]


def _f(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _call_table(rows: Sequence[CallRow], reference_label: str, manifold_label: str) -> list[str]:
    header = [
        "target",
        "c",
        "calls",
        "p50 ms",
        f"p50 x{reference_label}",
        "p99 ms",
        f"p99 x{reference_label}",
        "calls/s",
        f"calls/s x{reference_label}",
        "Manifold CPU µs/call",
        manifold_label,
        "servers CPU µs/call",
        f"x{reference_label}",
        "client CPU µs/call",
        f"x{reference_label}",
    ]
    return _table(
        header,
        (
            [
                r.target,
                str(r.concurrency),
                f"{r.calls:,}",
                _f(r.p50_ms, 3),
                _x(r.p50_x),
                _f(r.p99_ms, 3),
                _x(r.p99_x),
                _f(r.rps, 0),
                _x(r.rps_x),
                _f(r.manifold_cpu_us, 0),
                _x(r.manifold_cpu_x),
                _f(r.servers_cpu_us, 0),
                _x(r.servers_cpu_x),
                _f(r.client_cpu_us, 0),
                _x(r.client_cpu_x),
            ]
            for r in rows
        ),
    )


def _scale_section(scale: ScaleRecord | None) -> list[str]:
    out = ["", "## Scale: idle sessions and calls in flight at once, one Manifold", ""]
    if scale is None:
        return [*out, "Not run (see the notes)."]
    errors = ", ".join(f"{kind} x{n}" for kind, n in sorted(scale.errors.items())) or "none"
    gauge = "not read" if scale.in_flight_manifold is None else f"{scale.in_flight_manifold:,.0f}"
    raised = ", ".join(f"{k}: {v:,}" for k, v in scale.raised_limits.items()) or "none"
    hold = scale.slow_seconds * 1e3
    out += [
        f"`{scale.target}`: one Manifold with {scale.servers} stdio fixture servers, started after "
        "everything else had stopped. Sessions opened over a few keep-alive connections and left "
        f"idle; then {scale.calls_wanted:,} `tools/call` of the fixture's `slow` tool (held "
        f"{scale.slow_seconds:g} s by the server), one connection and one session each, all sent at "
        "once; the probe calls `echo` at c=1 while they are all in flight. Every answer checked "
        "(its own id, `done`, not before the sleep); refusals counted below.",
        "",
    ]
    out += _table(
        ["what", "measured"],
        [
            [
                "sessions opened",
                f"{scale.sessions_opened:,} of {scale.sessions_wanted:,} in "
                f"{_f(scale.sessions_seconds, 1)} s",
            ],
            [
                "RSS before / with the sessions / peak of the calls",
                f"{_f(scale.rss_before_mib, 1)} / {_f(scale.rss_sessions_mib, 1)} / "
                f"{_f(scale.rss_peak_mib, 1)} MiB",
            ],
            ["RSS per idle session", f"{_f(scale.kib_per_session, 2)} KiB"],
            [
                "calls in flight at once: load generator / Manifold's manifold_requests_in_flight",
                f"{scale.in_flight_client:,} / {gauge} of {scale.calls_wanted:,}",
            ],
            [
                "first answer after the last call was sent",
                "yes" if scale.first_answer_after_last_send else "no",
            ],
            ["calls answered right", f"{scale.calls_answered:,} of {scale.calls_wanted:,}"],
            [
                "call latency p50 / p99 / max",
                f"{_f(scale.p50_ms, 0)} / {_f(scale.p99_ms, 0)} / {_f(scale.max_ms, 0)} ms "
                f"(the server holds {_f(hold, 0)} ms)",
            ],
            [
                "beyond the hold: p50 / p99",
                f"{_f(scale.p50_ms - hold, 0)} / {_f(scale.p99_ms - hold, 0)} ms",
            ],
            [
                "probe: echo at c=1 meanwhile, p50 / p99",
                f"{_f(scale.probe_p50_ms, 3)} / {_f(scale.probe_p99_ms, 3)} ms over "
                f"{scale.probe_calls:,} calls",
            ],
            ["errors (refusals, by kind)", errors],
            ["limits raised for this run (beyond 20,000 sessions)", raised],
            ["open-files limit (soft)", scale.open_files],
            ["seconds, start to stop", _f(scale.seconds, 1)],
        ],
    )
    if scale.notes:
        out += [""] + [f"- {note}" for note in scale.notes]
    return out


def render(results: Results) -> str:
    meta = results.meta
    out = [
        "# Manifold benchmark: what the gateway costs compared with no proxy",
        "",
        f"Run {meta.get('started', '?')} on {meta.get('host', '?')} ({meta.get('cpus', '?')} CPUs, "
        f"load average before the run {meta.get('loadavg', '?')}, after {meta.get('loadavg_after', '?')}); "
        f"Manifold at {meta.get('revision', '?')}; took {_f(meta.get('seconds'), 0)} s. "
        f"Plan: {meta.get('plan_summary', '')}.",
        "",
        "Ratios are to the direct run of the same invocation (the fixture server reached with no proxy, "
        "Streamable HTTP, JSON responses); call ratios are medians of per-round paired ratios.",
        "",
        "## Targets",
        "",
    ]
    out += _table(
        ["target", "threshold", "measured", "verdict"],
        ([t.what, t.threshold, t.measured, t.verdict] for t in results.targets),
    )
    out += ["", "## tools/call", ""]
    out += _call_table(results.call_rows, "direct", "x direct server CPU")
    out += [
        "",
        "`direct-json`: the load generator straight to one fixture server (`--json-response`); "
        "`direct-2026`: the same server reached at 2026-07-28 (each POST self-contained, the envelope "
        "in `_meta`, no session), as Manifold reaches its HTTP servers; `direct-sse`: the same in SSE "
        "mode; `direct-stdio`: the same server over stdio (requests "
        "multiplexed on its pipes, as Manifold does). `stdio-K`/`http-K`: through Manifold with K servers "
        "reached over stdio / Streamable HTTP, calls spread round-robin over their `echo` tools; Manifold "
        "reaches them at 2026-07-28 (one POST per request, an envelope on each). `handshake-http-1`: "
        "http-1 with its server pinned to `era: handshake` (initialize, one session). Manifold "
        "CPU per call is compared with the direct fixture server's CPU per call.",
        "",
        "### Like for like: through Manifold vs the same kind of server reached directly",
        "",
        "`stdio-K` against `direct-stdio`, `http-K` against `direct-2026`, `handshake-http-1` against "
        "`direct-json`: the SDK's stdio server costs more per call than its HTTP one, and its 2026-07-28 "
        "path more than its handshake one, which the table above charges to Manifold.",
        "",
    ]
    out += _call_table(results.same_transport_rows, "same", "x same server CPU")
    if results.peer_rows:
        out += [
            "",
            "### Against a peer: Manifold vs mcp-hub with the same servers",
            "",
            "`stdio-K` against `mcp-hub-stdio-K`, `http-K` against `mcp-hub-http-K` (benchmarks/peers.py: "
            "mcp-hub, npm, pinned; its `/mcp` is the 2024-11-05 HTTP+SSE transport, answers on an event "
            "stream). Ratios are Manifold's over the hub's; the CPU column is Manifold's over the hub's own.",
            "",
        ]
        out += _call_table(results.peer_rows, "hub", "x hub CPU")
    out += [
        "",
        "## tools/list: a full drain",
        "",
    ]
    out += _table(
        [
            "target",
            "via",
            "shape",
            "tools",
            "pages",
            "cold ms",
            "cold xdirect",
            "warm ms",
            "warm xdirect",
            "warm n",
        ],
        (
            [
                r.target,
                r.via,
                r.shape,
                str(r.tools),
                str(r.pages),
                _f(r.cold_ms, 2),
                _x(r.cold_x),
                _f(r.warm_ms, 2),
                _x(r.warm_x),
                str(r.warm_drains),
            ]
            for r in results.lists
        ),
    )
    out += ["", "## Memory (Manifold's own RSS; servers are separate processes)", ""]
    out += _table(
        ["target", "servers", "transport", "RSS MiB", "direct server RSS MiB", "xdirect"],
        (
            [r.target, str(r.servers), r.transport, _f(r.rss_mib, 1), _f(r.reference_rss_mib, 1), _x(r.x)]
            for r in results.memory
        ),
    )
    out += [""]
    out += _table(
        [
            "idle sessions on",
            "sessions",
            "seconds",
            "RSS before MiB",
            "RSS after MiB",
            "KiB/session",
            "xdirect",
        ],
        (
            [
                r.target,
                str(r.sessions),
                _f(r.seconds, 1),
                _f(r.rss_before_mib, 1),
                _f(r.rss_after_mib, 1),
                _f(r.kib_per_session, 1),
                _x(r.x),
            ]
            for r in results.sessions
        ),
    )
    out += _scale_section(results.scale)
    out += ["", "## Stage cost (each switched on alone; ratios to all off)", ""]
    out += _call_table(results.middleware_rows, "all-off", "x all-off Manifold CPU")
    out += ["", "The same runs against the direct run (`direct-json`):", ""]
    out += _table(
        [
            "target",
            "c",
            "p50 ms",
            "p50 xdirect",
            "calls/s",
            "calls/s xdirect",
            "Manifold CPU µs/call",
            "x direct server CPU",
        ],
        (
            [
                r.target,
                str(r.concurrency),
                _f(r.p50_ms, 3),
                _x(r.p50_x),
                _f(r.rps, 0),
                _x(r.rps_x),
                _f(r.manifold_cpu_us, 0),
                _x(r.manifold_cpu_x),
            ]
            for r in results.middleware_direct_rows
        ),
    )
    out += [""]
    out += [f"- `{name}`: {note}" for name, note in results.middleware_notes.items()]
    out += ["", "## HTTP clients (the load generator's candidates, against the direct fixture)", ""]
    out += _call_table(results.client_rows, "raw", "x")
    for profile in results.profiles:
        cpu = profile.cpu_us_per_call
        out += ["", f"## Profile: {profile.target} ({profile.samples} samples under c=16 load)", ""]
        if profile.note:
            out += [profile.note, ""]
        out += [
            f"Manifold CPU per call during the profile: {_f(cpu, 0)} µs (py-spy's own sampling included); "
            "µs/call below = share x that. Native time is charged to the Python frame that called into "
            "it: `Runner.run` is the event loop itself (uvloop: epoll, socket and pipe reads), "
            "`Child._flush` a write(2) on a stdio server's pipe, `_OneWrite.write` the one socket write "
            "of a response (its head and body together). A write's share includes the kernel's "
            "work to wake the process that reads it.",
            "",
        ]
        if profile.areas:
            out += [
                "Busy time by area (leaf frame): "
                + ", ".join(f"{k} {v:.0%}" for k, v in profile.areas.items())
            ]
            out += [""]

        def us(share: float, cpu: float | None = cpu) -> str:
            return _f(share * cpu, 0) if cpu is not None else "-"

        out += _table(
            ["self time: function", "share", "~µs/call"],
            ([h.where, f"{h.share:.1%}", us(h.share)] for h in profile.self_top),
        )
        out += [""]
        out += _table(
            ["Manifold code incl. callees", "share", "~µs/call"],
            ([h.where, f"{h.share:.1%}", us(h.share)] for h in profile.manifold_inclusive),
        )
    if results.notes:
        out += ["", "## Notes", ""] + [f"- {note}" for note in results.notes]
    return "\n".join(out) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write(results: Results, directory: Path, stem: str = "latest") -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` into ``directory``; returns both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / f"{stem}.md"
    markdown.write_text(render(results))
    data = directory / f"{stem}.json"
    data.write_bytes(orjson.dumps(_jsonable(asdict(results)), option=orjson.OPT_INDENT_2))
    return markdown, data
