"""What one benchmark run does: sizes, durations, and the Manifold configs it starts.

:data:`MIDDLEWARES` is the plug-in point for the per-middleware cost: one named entry per
middleware, each a config fragment that switches it on (and one that switches it off). A run
asks ``manifold check`` whether the Manifold in the tree accepts each fragment and skips, with
a note, any it does not accept yet; "all off" (the off fragments that are accepted) always runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.fixtures.spawn import fixture_command

__all__ = [
    "BENCH_API_KEY",
    "CORE_MIDDLEWARES",
    "FIXED_TOOLS",
    "MIDDLEWARES",
    "Overlay",
    "Plan",
    "SCALE_STOP_SECONDS",
    "deep_merge",
    "http_server",
    "manifold_config",
    "materialize",
    "stdio_server",
    "wants_otlp",
]

# The fixture's tools besides tool_000 … tool_{T-1} (tests/fixtures/fixture_server.py).
FIXED_TOOLS: Final = ("echo", "add", "slow", "hang", "crash", "add_tool", "drop_stream")
_CONNECT_TIMEOUT: Final = 120  # dozens of processes start at once on two cores
SCALE_STOP_SECONDS: Final = 15.0  # kept after the scale run for stopping and the report


@dataclass(frozen=True)
class Plan:
    """Sizes and bounds of one run. Every loop stops at a count and at a time, whichever is first."""

    server_counts: tuple[int, ...] = (1, 4, 16)  # K: servers behind Manifold in the call runs
    concurrencies: tuple[int, ...] = (1, 16)
    rounds: int = 3  # each round runs every target once, interleaved; figures are medians
    duration: float = 2.0  # seconds per measured call run ...
    max_calls: int = 40_000  # ... or this many calls
    warmup_calls: int = 30  # per worker, before each measured run
    tools_per_server: int = 10  # T for the call runs
    list_shapes: tuple[tuple[int, int], ...] = ((16, 10), (4, 100))  # (K, T) for the list drains
    list_repeats: int = 30  # warm drains per target ...
    list_seconds: float = 6.0  # ... or this long
    page_size: int = 100  # Manifold's catalog.page_size and the direct fixture's page size
    sessions: int = 1000  # idle sessions opened for the per-session memory figure ...
    sessions_seconds: float = 90.0  # ... within this long
    sessions_settle: float = 0.5  # seconds before reading RSS after opening them
    client_rounds: int = 2  # the HTTP client comparison
    client_duration: float = 1.0
    client_candidates: tuple[str, ...] = ("raw", "h11", "aiohttp", "httpx", "httpx2")
    middlewares: tuple[str, ...] = (
        "auth",
        "audit",
        "policy",
        "validation",
        "ratelimit",
        "metrics",
        "access-log",
        "guardrails",
        "tracing-100",
        "tracing-10",
    )
    middleware_servers: int = 1  # K for the middleware on/off runs
    sse_direct: bool = True  # also the fixture in SSE mode, directly
    peers: bool = True  # mcp-hub (benchmarks/peers.py) beside Manifold at every K, same servers
    profile_seconds: float = 8.0  # py-spy per profiled Manifold (0: no profile)
    # The scale run (benchmarks/scale.py), last, on a Manifold of its own (0 sessions: skipped).
    scale_sessions: int = 10_000  # idle sessions opened ...
    scale_session_connections: int = 16  # ... over this many keep-alive connections
    scale_sessions_seconds: float = 120.0  # ... within this long
    scale_calls: int = 1_000  # tools/call in flight at once, one connection and session each
    scale_slow_seconds: float = 8.0  # how long the fixture's `slow` tool holds each call
    scale_call_timeout: float = 30.0  # beyond the sleep, before a call counts as unanswered
    scale_connect_seconds: float = 30.0  # to open the calls' connections
    scale_probe_seconds: float = 5.0  # echo at c=1 while all the calls are in flight (at most)
    scale_servers: int = 4  # stdio fixture servers behind the scale Manifold
    scale_seconds: float = 90.0  # the whole scale step, start to stop (about 16 s on a quiet box)
    startup_seconds: float = 150.0
    budget_seconds: float = 580.0  # the whole run, startup to report

    def __post_init__(self) -> None:
        if self.scale_sessions and self.scale_sessions < self.scale_calls:
            raise ValueError(
                "scale_sessions must be at least scale_calls: each call has a session of its own"
            )

    @classmethod
    def smoke(cls) -> Plan:
        """Tiny counts: proves the harness works end to end in a few seconds."""
        return cls(
            server_counts=(2,),
            concurrencies=(1, 4),
            rounds=1,
            duration=0.3,
            max_calls=60,
            warmup_calls=2,
            tools_per_server=3,
            list_shapes=((2, 3),),
            list_repeats=2,
            list_seconds=2.0,
            sessions=20,
            sessions_seconds=10.0,
            sessions_settle=0.0,
            client_rounds=1,
            client_duration=0.2,
            client_candidates=("raw", "aiohttp"),
            middlewares=(),  # "all off" still runs; the config check has a test of its own
            sse_direct=False,  # chunked SSE answers are covered by a test of the client alone
            peers=False,  # needs npm: tests/benchmarks/test_peers.py covers the peer alone
            profile_seconds=0.0,
            scale_sessions=40,
            scale_session_connections=4,
            scale_sessions_seconds=20.0,
            scale_calls=12,
            scale_slow_seconds=3.0,
            scale_call_timeout=10.0,
            scale_connect_seconds=10.0,
            scale_probe_seconds=0.5,
            scale_servers=2,
            scale_seconds=20.0,
            startup_seconds=40.0,
            budget_seconds=120.0,
        )

    @classmethod
    def quick(cls) -> Plan:
        """One server behind each Manifold, no lists, clients, middleware blocks or scale run: about
        a minute and a half, for trying one change at a time (the figures are real; the run is just
        smaller)."""
        return cls(
            server_counts=(1,),
            list_shapes=(),
            sessions=200,
            client_candidates=(),
            middlewares=(),
            sse_direct=False,
            profile_seconds=6.0,
            scale_sessions=0,
            budget_seconds=240.0,
        )

    def scale_reserve(self) -> float:
        """Seconds the steps before the scale run leave for it (its bound, and stopping after it)."""
        return self.scale_seconds + SCALE_STOP_SECONDS if self.scale_sessions else 0.0

    def tools_for(self, servers: int) -> int:
        """T for the stdio Manifold with ``servers`` servers: a list shape's T when one matches."""
        for k, t in self.list_shapes:
            if k == servers:
                return t
        return self.tools_per_server


@dataclass(frozen=True)
class Overlay:
    """Config fragments that switch one middleware on and off, plus files they refer to.

    ``{dir}`` in any string is replaced by the directory the config is written to.
    """

    on: Mapping[str, Any]
    off: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


# A key for loopback benchmarks only (its stored form below is what the config holds).
BENCH_API_KEY: Final = "manifold-bench-key-not-a-secret"
BENCH_API_KEY_SHA256: Final = "8e70262f7f04f2fe2e86bd60cb569ff7acda586af6bb7f18a3858f14049c4663"
# Issue #34's "everything on": the features it names. "all on" adds every other row (guardrails,
# tracing, the access log), each measured alone too.
CORE_MIDDLEWARES: Final = ("auth", "policy", "validation", "ratelimit", "audit", "metrics")

_ALLOW_ALL = """\
version: 1
default: allow
rules:
  - id: bench-allow-all
    effect: allow
    match: {}
"""
_EVERY_DETECTOR = """\
version: 1
guardrails:
  rules:
    - id: bench-every-detector
      effect: audit
      match: {directions: [tool_arguments, tool_results]}
"""
_NO_REAL_LIMIT = """\
version: 1
default: allow
limits:
  - id: bench-global
    rate: 10000/second
    burst: 10000
    per: []
"""

# ---------------------------------------------------------------------------------------------
# MIDDLEWARE OVERLAYS: one entry per middleware on the tools/call path.
# The keys are those of proxy/config/model.py (`policy:`, `metrics:`, `logging:`; rate limits live in
# policy files). When a key changes, change its entry here: each run's report says which entries
# `manifold check` (or Manifold's startup) rejected, and why, and skips them. Each "on" must let
# every call through: the cost measured is the check, never a refusal. The call targets outside
# this section run Manifold's defaults (whatever those switch on).
# ---------------------------------------------------------------------------------------------
MIDDLEWARES: Final[dict[str, Overlay]] = {
    # The load generator sends BENCH_API_KEY (X-API-Key) to every variant whose config has keys.
    "auth": Overlay(
        on={"auth": {"api_keys": [{"name": "bench", "key": f"sha256:{BENCH_API_KEY_SHA256}"}]}},
        note="an API key on every request (X-API-Key), checked per request; off: anonymous access",
    ),
    "audit": Overlay(
        on={"policy": {"audit": {"path": "{dir}/audit.jsonl"}}},
        off={"policy": {"audit": {"path": None}}},
        note="one JSON audit line per call's policy decision, written to a file",
    ),
    "policy": Overlay(
        on={"policy": {"files": ["{dir}/bench-allow-all.yaml"]}},
        off={"policy": {"files": []}},
        files={"bench-allow-all.yaml": _ALLOW_ALL},
        note="one allow-all rule: a policy decision for every call",
    ),
    "validation": Overlay(
        on={"policy": {"validate_arguments": True, "validate_results": True}},
        off={"policy": {"validate_arguments": False, "validate_results": False}},
        note="arguments against the tool's inputSchema (echo's is a plain object schema; no outputSchema)",
    ),
    "ratelimit": Overlay(  # limits live in a policy file (proxy/policy/limits.py)
        on={"policy": {"files": ["{dir}/bench-allow-all.yaml", "{dir}/bench-limits.yaml"]}},
        files={"bench-allow-all.yaml": _ALLOW_ALL, "bench-limits.yaml": _NO_REAL_LIMIT},
        note="one global limit nobody reaches (with the allow-all policy it is loaded with)",
    ),
    "guardrails": Overlay(  # rules live in a policy file (docs/reference/guardrails.md)
        on={"policy": {"files": ["{dir}/bench-allow-all.yaml", "{dir}/bench-guardrails.yaml"]}},
        files={"bench-allow-all.yaml": _ALLOW_ALL, "bench-guardrails.yaml": _EVERY_DETECTOR},
        note="every built-in detector on each call's arguments and result (audit: nothing refused); "
        "the 4 KiB figures are benchmarks.guard_cost's",
    ),
    # Tracing (proxy.tracing): every call a root trace (the load generator sends no traceparent),
    # sampled at 100 % or 10 %, exported over OTLP/HTTP to a real receiver on loopback (`{otlp}`,
    # tests/fixtures/otlp_receiver.py, decoding every request): the cost is Manifold's spans,
    # propagation and export thread. The target: at most 1.15x "all off" at 10 %.
    "tracing-100": Overlay(
        on={
            "tracing": {
                "enabled": True,
                "endpoint": "{otlp}",
                "sampler": "traceidratio",
                "sampler_ratio": 1.0,
            }
        },
        off={"tracing": {"enabled": False}},
        note="OpenTelemetry spans for every call (100 % sampled), OTLP/HTTP to a loopback receiver",
    ),
    "tracing-10": Overlay(
        on={
            "tracing": {
                "enabled": True,
                "endpoint": "{otlp}",
                "sampler": "traceidratio",
                "sampler_ratio": 0.1,
            }
        },
        off={"tracing": {"enabled": False}},
        note="the same at 10 % sampling (unsampled calls still get ids and propagate them)",
    ),
    "metrics": Overlay(
        on={"metrics": {"enabled": True}},
        off={"metrics": {"enabled": False}},
        note="Prometheus counters and the latency histogram per call",
    ),
    "access-log": Overlay(
        on={"log_level": "info", "logging": {"access_log": True}},
        off={"logging": {"access_log": False}},
        note="one JSON log line per inbound HTTP request (written to a file here)",
    ),
}


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``base``: mappings merge, lists concatenate (without repeats), the rest replaces.

    An empty list replaces (it is how an "off" fragment clears a list).
    """
    merged = dict(base)
    for key, value in overlay.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(old, value)
        elif isinstance(old, list) and isinstance(value, list) and value:
            merged[key] = old + [item for item in value if item not in old]
        else:
            merged[key] = value
    return merged


def materialize(value: Any, directory: Path, otlp: str = "") -> Any:
    """``value`` with ``{dir}`` in every string replaced by ``directory`` (and ``{otlp}`` by the
    OTLP receiver's URL)."""
    if isinstance(value, str):
        return value.replace("{dir}", str(directory)).replace("{otlp}", otlp)
    if isinstance(value, Mapping):
        return {key: materialize(item, directory, otlp) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [materialize(item, directory, otlp) for item in value]
    return value


def wants_otlp(value: Any) -> bool:
    """Whether a config fragment names the OTLP receiver (``{otlp}``)."""
    if isinstance(value, str):
        return "{otlp}" in value
    if isinstance(value, Mapping):
        return any(wants_otlp(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(wants_otlp(item) for item in value)
    return False


def stdio_server(name: str, *, tools: int, page_size: int) -> dict[str, Any]:
    command = fixture_command(name, tools=tools, page_size=page_size)
    return {"command": command[0], "args": command[1:], "connect_timeout": _CONNECT_TIMEOUT}


def http_server(url: str) -> dict[str, Any]:
    return {"url": url, "transport": "streamable-http", "connect_timeout": _CONNECT_TIMEOUT}


def manifold_config(
    servers: Mapping[str, dict[str, Any]], *, page_size: int, overlay: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "listen": {"host": "127.0.0.1"},
        "catalog": {"page_size": page_size},
        # The idle-session and scale runs open more sessions, all as one anonymous identity, than
        # the defaults keep (100 per identity): past them the oldest would be evicted, and RSS
        # per session would be measured over sessions that no longer exist.
        "limits": {"max_sessions": 20_000, "max_sessions_per_identity": 20_000},
        "servers": dict(servers),
    }
    return deep_merge(base, overlay or {})
