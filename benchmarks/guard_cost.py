"""What guardrails cost (issue #29), measured on real processes on loopback:

1. **CPU per call.** Two Manifolds with one stdio fixture server each, the same allow-all policy,
   one with a guardrail rule that runs every built-in detector on every tool result
   (``effect: audit``, no ``detectors`` condition: nothing is refused, everything is scanned).
   A third runs only the secret detectors (``detectors: ["*_key", "*_token", private_key, jwt]``).
   Closed-loop ``tools/call echo`` with a 4 KiB argument of ordinary prose, so each result the
   guardrails read is about 4 KiB (and never the same twice: each call's arguments carry its
   number and the run's random tag, echoed in the result, so a cache keyed by content would not
   help; the built-in detectors keep none); interleaved rounds at c=1 and c=16. Manifold's CPU per call
   (``/proc``) on vs off, as the median of the paired per-round ratios.
2. **Event-loop lag.** Two Manifolds whose guardrails read a 4 MiB tool result (``max_bytes``
   8 MiB): one scans on a worker thread past ``in_thread_bytes`` (the default 64 KiB), one inline
   (``in_thread_bytes`` above the result). While the 4 MiB call runs, another session pings in a
   loop; the slowest ping is how long the loop was held.

    .venv/bin/python -m benchmarks.guard_cost [--rounds 12] [--duration 1.5] [--quick]

Every loop is bounded in count and time; the whole run in ``--budget`` seconds. Hold
``flock /tmp/manifold-bench.lock`` around it on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from benchmarks.clients import open_raw
from benchmarks.load import CallTarget, McpClient, run_calls
from benchmarks.plan import manifold_config, stdio_server
from benchmarks.procs import children_of, spawn_manifold, stop_all, wait_listening, wait_servers_ready

REPO = Path(__file__).resolve().parents[1]
GUARD_SERVER = str(REPO / "tests" / "fixtures" / "guard_server.py")
_PROSE = (
    "The quarterly report lists 1,284 open tickets across 17 teams; median age is 4.2 days. "
    "def merge(a, b):\n    return sorted(set(a) | set(b))\n"
    "Build 2024.11.3 passed 9,812 of 9,830 tests (sha 3f9c2e1a); the rest are quarantined flakes. "
)
PAD = (_PROSE * (4096 // len(_PROSE) + 1))[:4096]
ALLOW_ALL = "version: 1\ndefault: allow\n"
SECRETS_ONLY = """\
version: 1
guardrails:
  rules:
    - id: bench-secrets
      effect: audit
      match: {directions: [tool_results], detectors: ["*_key", "*_token", private_key, jwt]}
"""
EVERY_DETECTOR = """\
version: 1
guardrails:
  rules:
    - id: bench-every-detector
      effect: audit
      match: {directions: [tool_results]}
"""


def guard_configs(
    directory: Path, servers: dict[str, Any], guardrails: dict[str, Any] | None, rules: str = "guard.yaml"
) -> dict[str, Any]:
    (directory / "allow.yaml").write_text(ALLOW_ALL)
    (directory / "guard.yaml").write_text(EVERY_DETECTOR)
    (directory / "secrets.yaml").write_text(SECRETS_ONLY)
    files = [str(directory / "allow.yaml")]
    if guardrails is not None:
        files.append(str(directory / rules))
    policy: dict[str, Any] = {"files": files, "pins": {"mode": "off"}}
    if guardrails:
        policy["guardrails"] = guardrails
    limits = {"max_argument_bytes": 16 << 20, "max_request_bytes": 16 << 20}
    return manifold_config(servers, page_size=100, overlay={"policy": policy, "limits": limits})


async def cpu_per_call(workdir: Path, rounds: int, duration: float) -> dict[str, Any]:
    servers = {"s00": stdio_server("s00", tools=10, page_size=100)}
    off = spawn_manifold("guard-off", workdir, guard_configs(workdir, servers, None))
    on = spawn_manifold("guard-on", workdir, guard_configs(workdir, servers, {}))
    secrets = spawn_manifold("guard-secrets", workdir, guard_configs(workdir, servers, {}, "secrets.yaml"))
    spawned = [off, on, secrets]
    try:
        await wait_listening(spawned, 60)
        await wait_servers_ready(spawned, 60)
        targets = {
            s.name: CallTarget(s.name, s.url, (("s00.echo", "s00"),), s.pid, tuple(children_of(s.pid)))
            for s in spawned
        }
        per_call: dict[tuple[str, int], list[float]] = {}
        for round_ in range(rounds):
            for concurrency in (1, 16):
                order = ["guard-off", "guard-on", "guard-secrets"]
                order = order[round_ % 3 :] + order[: round_ % 3]
                for name in order:
                    run = await run_calls(
                        targets[name],
                        concurrency,
                        duration=duration,
                        max_calls=40_000,
                        warmup_calls=30,
                        extra={"pad": PAD},
                    )
                    assert run.manifold_cpu is not None
                    per_call.setdefault((name, concurrency), []).append(run.manifold_cpu / run.calls * 1e6)
        report: dict[str, Any] = {}
        for concurrency in (1, 16):
            offs = per_call["guard-off", concurrency]
            row: dict[str, Any] = {"off_us": statistics.median(offs)}
            for name, label in (("guard-on", "every_detector"), ("guard-secrets", "secrets_only")):
                ons = per_call[name, concurrency]
                row[f"{label}_us"] = statistics.median(ons)
                ratios = [b / a for a, b in zip(offs, ons, strict=True)]
                row[f"{label}_ratio"] = statistics.median(ratios)
                row[f"{label}_ratios"] = [round(r, 3) for r in ratios]  # per round: the spread
            report[f"c={concurrency}"] = row
        return report
    finally:
        stop_all(spawned)


async def _ping_while(client: McpClient, busy: anyio.Event, lags: list[float], bound: float) -> None:
    deadline = time.perf_counter() + bound
    request_id = 10_000
    while not busy.is_set() and time.perf_counter() < deadline:
        request_id += 1
        started = time.perf_counter()
        await client.request(request_id, "ping", None)
        lags.append(time.perf_counter() - started)


async def loop_lag(workdir: Path, size: int, calls: int) -> dict[str, Any]:
    server = {
        "g": {"command": sys.executable, "args": [GUARD_SERVER, "--record", str(workdir / "rec.jsonl")]}
    }
    threaded = spawn_manifold("lag-thread", workdir, guard_configs(workdir, server, {"max_bytes": 8 << 20}))
    inline_settings = {"max_bytes": 8 << 20, "in_thread_bytes": 64 << 20}
    inline = spawn_manifold("lag-inline", workdir, guard_configs(workdir, server, inline_settings))
    spawned = [threaded, inline]
    report: dict[str, Any] = {}
    try:
        await wait_listening(spawned, 60)
        await wait_servers_ready(spawned, 60)
        for manifold in spawned:
            caller = McpClient(await open_raw(manifold.url))
            pinger = McpClient(await open_raw(manifold.url))
            try:
                await caller.initialize()
                await pinger.initialize()
                lags: list[float] = []
                durations: list[float] = []
                for index in range(calls):
                    done = anyio.Event()
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_ping_while, pinger, done, lags, 60.0)
                        started = time.perf_counter()
                        with anyio.fail_after(60):
                            answer = await caller.request(
                                100 + index, "tools/call", {"name": "g.big", "arguments": {"size": size}}
                            )
                        durations.append(time.perf_counter() - started)
                        done.set()
                    text = answer["content"][0]["text"]
                    assert len(text) == size, len(text)
                report[manifold.name] = {
                    "call_s": statistics.median(durations),
                    "pings": len(lags),
                    "max_ping_ms": max(lags) * 1e3,
                    "p99_ping_ms": sorted(lags)[int(0.99 * (len(lags) - 1))] * 1e3,
                }
            finally:
                await caller.poster.aclose()
                await pinger.poster.aclose()
        return report
    finally:
        stop_all(spawned)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with anyio.fail_after(args.budget), tempfile.TemporaryDirectory(prefix="guard-cost-") as tmp:
        workdir = Path(tmp)
        results: dict[str, Any] = {}
        results["cpu_per_call_4KiB_result"] = await cpu_per_call(workdir, args.rounds, args.duration)
        results["loop_lag_4MiB_result"] = await loop_lag(workdir, 4 << 20, args.lag_calls)
        return results


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Many short rounds: one round's paired ratio moves by ±15% on a shared 2-core box, so the
    # median needs a dozen of them to settle within a few percent.
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--duration", type=float, default=1.5, help="seconds per measured run")
    parser.add_argument("--lag-calls", type=int, default=3)
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s, 1 lag call")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.lag_calls = 1, 1.0, 1
    results = anyio.run(main, args)
    sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    _cli()
