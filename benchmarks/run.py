"""``python -m benchmarks.run``: what Manifold costs compared with no proxy at all.

One run on loopback, bounded in time (``Plan.budget_seconds``) and every loop in count and time:

1. start the fixture servers (Streamable HTTP) and the Manifolds under test (real ``manifold serve``
   processes: K stdio servers, K HTTP servers, and one per middleware variant); idle RSS of each;
2. ``tools/list`` drains through Manifold vs one server listing as many tools, cold then warm;
3. the HTTP client comparison (which client the load generator uses, and what aiohttp/httpx cost);
4. ``tools/call`` load, direct and through every Manifold, in interleaved rounds;
5. RSS per idle client session (1000 sessions, Manifold and direct);
6. py-spy profiles of Manifold under load, when py-spy is installed;
7. everything above stopped, the scale run (:mod:`benchmarks.scale`) on a Manifold of its own:
   10,000 idle sessions and 1,000 calls in flight at once.

It prints the report and writes ``benchmarks/results/latest.md`` and ``latest.json``. A wrong answer
anywhere stops the run with exit code 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread

from benchmarks.clients import available_candidates, open_raw, open_stateless
from benchmarks.figures import MANIFOLD_PREFIXES, MIB, MemoryRecord, Results, evaluate, summarize
from benchmarks.load import CallTarget, wrong_answer_in
from benchmarks.peers import (
    HUB_PREFIX,
    LEGACY_SESSION,
    hub_tool,
    install_mcp_hub,
    open_legacy_sse,
    spawn_mcp_hub,
    wait_hubs_ready,
)
from benchmarks.plan import (
    BENCH_API_KEY,
    FIXED_TOOLS,
    MIDDLEWARES,
    Plan,
    http_server,
    manifold_config,
    stdio_server,
)
from benchmarks.procs import (
    LOOP_ENV,
    REPO,
    Spawned,
    children_of,
    rss_bytes,
    spawn_http_fixture,
    spawn_manifold,
    stop_all,
    wait_listening,
    wait_servers_ready,
)
from benchmarks.report import render, write
from benchmarks.scale import measure_scale
from benchmarks.sections import (
    ALL_OFF,
    Run,
    measure_calls,
    measure_lists,
    measure_sessions,
    middleware_variants,
    profile_under_load,
    tool_names,
)
from benchmarks.stdio import stdio_fixture

__all__ = ["bench", "main"]

DIRECT: Final = "direct-json"
DIRECT_STDIO: Final = "direct-stdio"
DIRECT_STATELESS: Final = "direct-2026"  # direct-json's server reached at 2026-07-28, as Manifold does
HANDSHAKE: Final = "handshake-http-1"  # http-1 with its server pinned to era: handshake
RESULTS_DIR: Final = REPO / "benchmarks" / "results"


async def _bench(run: Run) -> None:
    plan, workdir, results = run.plan, run.workdir, run.results
    max_k = max(plan.server_counts)

    run.say("starting fixture servers")
    http_fx = [
        run.spawn(
            spawn_http_fixture(f"h{i:02d}", workdir, tools=plan.tools_per_server, page_size=plan.page_size)
        )
        for i in range(max_k)
    ]
    sse_fx = (
        run.spawn(
            spawn_http_fixture(
                "sse", workdir, tools=plan.tools_per_server, page_size=plan.page_size, json_response=False
            )
        )
        if plan.sse_direct
        else None
    )
    list_fx: dict[tuple[int, int], Spawned] = {}
    for k, t in plan.list_shapes:
        total = k * (t + len(FIXED_TOOLS)) - len(FIXED_TOOLS)  # one server listing as many as K servers
        list_fx[k, t] = run.spawn(
            spawn_http_fixture(f"list{k}x{t}", workdir, tools=total, page_size=plan.page_size)
        )
    fixtures = list(run.spawned)

    # Everything that does not need the HTTP fixtures starts while they start.
    run.say("starting Manifolds with stdio servers")
    stdio: dict[int, Spawned] = {}
    for k in sorted(set(plan.server_counts) | {k for k, _ in plan.list_shapes}):
        tools = plan.tools_for(k)
        servers = {
            f"s{i:02d}": stdio_server(f"s{i:02d}", tools=tools, page_size=plan.page_size) for i in range(k)
        }
        stdio[k] = run.spawn(
            spawn_manifold(f"stdio-{k}", workdir, manifold_config(servers, page_size=plan.page_size))
        )
    run.say("checking which middleware config keys this Manifold accepts")
    variants = await middleware_variants(run, plan.middlewares)
    middleware = {
        name: run.spawn(spawn_manifold(name.replace(":", "-"), workdir, config))
        for name, config in variants.items()
    }
    direct_stdio = await run.stack.enter_async_context(
        stdio_fixture(
            "d00", workdir / "fixture-d00.log", tools=plan.tools_per_server, page_size=plan.page_size
        )
    )
    await wait_listening(fixtures, plan.startup_seconds)
    run.say("starting Manifolds with HTTP servers")
    http: dict[int, Spawned] = {}
    for k in plan.server_counts:
        servers = {f"h{i:02d}": http_server(http_fx[i].url) for i in range(k)}
        http[k] = run.spawn(
            spawn_manifold(f"http-{k}", workdir, manifold_config(servers, page_size=plan.page_size))
        )
    # The same server as http-1, reached with the initialize handshake: what 2026-07-28 costs.
    handshake_server = {"h00": {**http_server(http_fx[0].url), "era": "handshake"}}
    handshake = run.spawn(
        spawn_manifold(HANDSHAKE, workdir, manifold_config(handshake_server, page_size=plan.page_size))
    )
    hubs = await _start_hubs(run, http_fx)
    await wait_servers_ready([*stdio.values(), *http.values(), handshake], plan.startup_seconds)
    await wait_hubs_ready(list(hubs.values()), plan.startup_seconds)
    for name, spawned in list(middleware.items()):
        # `manifold check` may pass what startup refuses (a policy file's content, say): skip, noted.
        try:
            await wait_servers_ready([spawned], plan.startup_seconds)
        except (RuntimeError, TimeoutError) as exc:
            reason = str(exc).strip().splitlines()[-1:] or ["no reason given"]
            results.middleware_notes[name] = f"SKIPPED: Manifold did not start with it ({reason[0][:200]})"
            del middleware[name]
    manifolds = [*stdio.values(), *http.values(), handshake, *middleware.values()]
    run.say(f"{len(manifolds)} Manifolds and {len(fixtures) + 1} fixture servers up (plus stdio servers)")

    direct_rss = rss_bytes(http_fx[0].pid)  # after the HTTP Manifolds have initialized and listed it
    for k, spawned in stdio.items():
        rss = rss_bytes(spawned.pid)
        results.memory.append(
            MemoryRecord(f"stdio-{k}", k, "stdio", rss / MIB, direct_rss / MIB, rss / direct_rss)
        )
    for k, spawned in http.items():
        rss = rss_bytes(spawned.pid)
        results.memory.append(
            MemoryRecord(f"http-{k}", k, "http", rss / MIB, direct_rss / MIB, rss / direct_rss)
        )

    run.say("tools/list drains")
    specs: list[tuple[str, str, int, int, str, list[str], str]] = []
    for k, t in plan.list_shapes:
        direct = f"direct-{k}x{t}"
        merged = [f"s{i:02d}.{name}" for i in range(k) for name in tool_names(t)]
        specs.append((f"stdio-{k}", "manifold (stdio)", k, t, stdio[k].url, merged, direct))
        if k in http and t == plan.tools_per_server:
            merged = [f"h{i:02d}.{name}" for i in range(k) for name in tool_names(t)]
            specs.append((f"http-{k}", "manifold (http)", k, t, http[k].url, merged, direct))
        total = k * (t + len(FIXED_TOOLS)) - len(FIXED_TOOLS)
        specs.append((direct, "direct", k, t, list_fx[k, t].url, tool_names(total), direct))
    await measure_lists(run, specs)

    available, missing = available_candidates()
    names = [n for n in plan.client_candidates if n in available]
    for name in plan.client_candidates:
        if name in missing:
            results.notes.append(f"client {name}: skipped, {missing[name]}")
    run.say(f"HTTP client comparison: {', '.join(names)}")
    h00 = http_fx[0]
    client_targets = [
        ("clients", CallTarget(f"client:{n}", h00.url, (("echo", "h00"),), None, (h00.pid,))) for n in names
    ]
    factories = {f"client:{n}": available[n] for n in names}
    await measure_calls(run, [client_targets], plan.client_rounds, plan.client_duration, factories)

    def through(name: str, spawned: Spawned, pids: Sequence[int]) -> CallTarget:
        tools = tuple((f"{sid}.echo", sid) for sid in spawned.server_ids)
        return CallTarget(name, spawned.url, tools, spawned.pid, tuple(pids))

    call_targets = [("calls", CallTarget(DIRECT, h00.url, (("echo", "h00"),), None, (h00.pid,)))]
    stdio_sessions = ["stdio"] * max(plan.concurrencies)  # one pipe is one session
    stdio_target = CallTarget(
        DIRECT_STDIO, "stdio:d00", (("echo", "d00"),), None, (direct_stdio.pid,), stdio_sessions
    )
    call_targets.append(("calls", stdio_target))
    stateless_sessions = ["stateless"] * max(plan.concurrencies)  # no sessions at 2026-07-28
    call_targets.append(
        (
            "calls",
            CallTarget(DIRECT_STATELESS, h00.url, (("echo", "h00"),), None, (h00.pid,), stateless_sessions),
        )
    )
    if sse_fx is not None:
        call_targets.append(
            ("calls", CallTarget("direct-sse", sse_fx.url, (("echo", "sse"),), None, (sse_fx.pid,)))
        )
    call_targets += [
        ("calls", through(f"stdio-{k}", stdio[k], children_of(stdio[k].pid))) for k in plan.server_counts
    ]
    call_targets += [
        ("calls", through(f"http-{k}", http[k], [f.pid for f in http_fx[:k]])) for k in plan.server_counts
    ]
    call_targets.append(("calls", through(HANDSHAKE, handshake, [http_fx[0].pid])))
    hub_sessions = [LEGACY_SESSION] * max(plan.concurrencies)  # each poster opens its own session
    for name, hub in hubs.items():
        echoes = tuple((hub_tool(sid, "echo"), sid) for sid in hub.server_ids)
        pids = children_of(hub.pid) if "stdio" in name else [f.pid for f in http_fx[: len(hub.server_ids)]]
        call_targets.append(("calls", CallTarget(name, hub.url, echoes, hub.pid, tuple(pids), hub_sessions)))
    middleware_targets = [
        ("middleware", through(name, spawned, children_of(spawned.pid)))
        for name, spawned in middleware.items()
    ]
    for _, target in call_targets + middleware_targets:
        if target.manifold_pid is not None and len(target.server_pids) != len(target.tools):
            raise RuntimeError(f"{target.name}: found {len(target.server_pids)} server processes")
    count = len(call_targets) + len(middleware_targets)
    run.say(f"tools/call: {count} targets x {plan.concurrencies} x {plan.rounds} rounds")
    factories = {DIRECT_STDIO: direct_stdio.poster_factory(), DIRECT_STATELESS: open_stateless}
    factories.update(dict.fromkeys(hubs, open_legacy_sse))
    keyed = functools.partial(open_raw, headers=(("X-API-Key", BENCH_API_KEY),))
    with_key = {name: keyed for name in middleware if variants[name].get("auth", {}).get("api_keys")}
    factories.update(with_key)
    await measure_calls(
        run, [call_targets, middleware_targets], plan.rounds, plan.duration, factories, with_key
    )

    run.say(f"{plan.sessions} idle sessions")
    biggest = max(plan.server_counts)
    await measure_sessions(run, f"stdio-{biggest}", stdio[biggest])
    await measure_sessions(run, DIRECT, h00)
    reference = results.sessions[-1].kib_per_session
    results.sessions = [
        dataclasses.replace(
            s, reference_kib_per_session=reference, x=s.kib_per_session / reference if reference else math.nan
        )
        for s in results.sessions
    ]

    if plan.profile_seconds > 0 and run.left() < 4 * plan.profile_seconds + 30 + plan.scale_reserve():
        results.notes.append("profile: skipped, not enough of the time budget left")
    elif plan.profile_seconds > 0:
        smallest = min(plan.server_counts)
        run.say("profiling Manifold under load (py-spy)")
        profiled = [t for _, t in call_targets if t.name in (f"stdio-{smallest}", f"http-{smallest}")]
        await profile_under_load(run, profiled)


async def _start_hubs(run: Run, http_fx: Sequence[Spawned]) -> dict[str, Spawned]:
    """mcp-hub at every K, over stdio and over HTTP, with the servers Manifold has (installed by
    ``npm ci`` on the first run; skipped with a note when it cannot be)."""
    plan = run.plan
    if not plan.peers:
        return {}
    cli, version = await install_mcp_hub()
    if cli is None:
        run.results.notes.append(version)
        return {}
    run.say(f"starting mcp-hub {version} (stdio and HTTP servers)")
    run.results.meta["mcp_hub"] = version
    hubs: dict[str, Spawned] = {}
    # The smallest and the largest K (the 1x10 and 16x10): the peer's rows cost run time.
    for k in sorted({min(plan.server_counts), max(plan.server_counts)}):
        stdio_servers = {}
        for i in range(k):
            server = stdio_server(f"s{i:02d}", tools=plan.tools_per_server, page_size=plan.page_size)
            stdio_servers[f"s{i:02d}"] = {"command": server["command"], "args": server["args"]}
        http_servers = {f"h{i:02d}": {"url": http_fx[i].url} for i in range(k)}
        for kind, servers in (("stdio", stdio_servers), ("http", http_servers)):
            name = f"{HUB_PREFIX}{kind}-{k}"
            hubs[name] = run.spawn(spawn_mcp_hub(name, run.workdir, cli, servers))
    return hubs


def _peer_of(name: str) -> str:
    """The mcp-hub run with the same servers as Manifold's ``name``."""
    return HUB_PREFIX + name


def _same_way(name: str) -> str:
    """The direct run that reaches the server the way Manifold does: over stdio, at 2026-07-28
    over HTTP, or with the handshake (``handshake-http-1``, and every middleware variant's stdio)."""
    if name.startswith("stdio-"):
        return DIRECT_STDIO
    if name.startswith("http-"):
        return DIRECT_STATELESS
    return DIRECT


def _git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "proxy"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{head or 'unknown'}{' + uncommitted changes in proxy/' if dirty else ''}"


async def bench(plan: Plan, workdir: Path, *, scale_only: bool = False) -> Results:
    """Run ``plan`` (with ``scale_only``, only its scale run); every process started is stopped
    before this returns or raises.

    Raises:
        WrongAnswer: a response was wrong; nothing measured is trustworthy.
        TimeoutError: the run overran ``plan.budget_seconds``.
    """
    started = time.time()
    results = Results(
        meta={
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "loadavg": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "python": platform.python_version(),
            "revision": _git_revision(),
            "plan": dataclasses.asdict(plan),
            "plan_summary": (
                f"K={list(plan.server_counts)}, c={list(plan.concurrencies)}, {plan.rounds} rounds of "
                f"{plan.duration:g} s per run, lists {['x'.join(map(str, s)) for s in plan.list_shapes]}, "
                f"{plan.sessions} sessions; scale run "
                + (
                    f"{plan.scale_sessions:,} sessions, {plan.scale_calls:,} calls in flight"
                    if plan.scale_sessions
                    else "skipped"
                )
                + (" (scale run only)" if scale_only else "")
                + f"; Manifold's event loop: {os.environ.get(LOOP_ENV, 'uvloop')}"
            ),
        }
    )
    run = Run(plan, workdir, results, [], time.perf_counter())
    try:
        with anyio.fail_after(plan.budget_seconds):
            if not scale_only:
                async with run.stack:
                    await _bench(run)
                run.say("stopping processes (the scale run has the machine to itself)")
                await anyio.to_thread.run_sync(stop_all, run.spawned)
            if not plan.scale_sessions:
                results.notes.append("scale run: skipped (not in this plan)")
            elif run.left() < plan.scale_reserve():
                results.notes.append("scale run: skipped, not enough of the time budget left")
            else:
                await measure_scale(run)
    finally:
        with anyio.CancelScope(shield=True):
            run.say("stopping processes")
            await anyio.to_thread.run_sync(stop_all, run.spawned)
    results.call_rows = summarize(results.calls, "calls", lambda _: DIRECT)
    results.same_transport_rows = summarize(
        results.calls,
        "calls",
        _same_way,
        include=lambda name: name.startswith(MANIFOLD_PREFIXES),
    )
    hubs = {r.target for r in results.calls if r.target.startswith(HUB_PREFIX)}
    results.peer_rows = summarize(
        results.calls,
        "calls",
        _peer_of,
        manifold_vs_manifold=True,
        include=lambda name: name.startswith(MANIFOLD_PREFIXES) and _peer_of(name) in hubs,
    )
    results.client_rows = summarize(results.calls, "clients", lambda _: "client:raw")
    results.middleware_rows = summarize(
        results.calls, "middleware", lambda _: ALL_OFF, manifold_vs_manifold=True
    )
    results.middleware_direct_rows = summarize(results.calls, "middleware", lambda _: DIRECT)
    results.targets = evaluate(results, low=min(plan.concurrencies), high=max(plan.concurrencies))
    results.meta["seconds"] = time.time() - started
    results.meta["loadavg_after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny counts: check the harness, not the timing")
    parser.add_argument("--quick", action="store_true", help="K=1, no lists or middleware: ~90 s")
    parser.add_argument("--rounds", type=int, help="interleaved rounds of call runs")
    parser.add_argument("--duration", type=float, help="seconds per measured call run")
    parser.add_argument(
        "--middlewares",
        help="comma-separated middleware variants to measure (benchmarks/plan.py MIDDLEWARES), e.g. "
        "--quick --middlewares tracing-100,tracing-10 for the tracing rows alone",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profiles")
    parser.add_argument("--no-scale", action="store_true", help="skip the scale run")
    parser.add_argument("--no-peers", action="store_true", help="skip mcp-hub (the peer)")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="Manifold's event loop (uvloop when installed, as `manifold serve` picks; or asyncio's own)",
    )
    parser.add_argument("--scale-only", action="store_true", help="only the scale run (~1 minute)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where latest.md/latest.json go")
    parser.add_argument("--keep-workdir", action="store_true", help="keep configs, logs and raw profiles")
    args = parser.parse_args(argv)
    plan = Plan.smoke() if args.smoke else Plan.quick() if args.quick else Plan()
    changes: dict[str, Any] = {}
    if args.rounds is not None:
        changes["rounds"] = args.rounds
    if args.duration is not None:
        changes["duration"] = args.duration
    if args.middlewares is not None:
        changes["middlewares"] = tuple(name for name in args.middlewares.split(",") if name)
        unknown = set(changes["middlewares"]) - set(MIDDLEWARES)
        if unknown:
            parser.error(f"unknown middleware variants: {', '.join(sorted(unknown))}")
    if args.no_profile:
        changes["profile_seconds"] = 0.0
    if args.no_scale:
        changes["scale_sessions"] = 0
    if args.no_peers:
        changes["peers"] = False
    plan = dataclasses.replace(plan, **changes)
    os.environ[LOOP_ENV] = args.loop  # read by spawn_manifold
    workdir = Path(tempfile.mkdtemp(prefix="manifold-bench-"))
    keep = args.keep_workdir
    try:
        results = anyio.run(
            functools.partial(bench, scale_only=args.scale_only),
            plan,
            workdir,
            backend="asyncio",
            backend_options={"use_uvloop": True},
        )
    except BaseException as exc:
        keep = True
        if (wrong := wrong_answer_in(exc)) is not None:
            print(f"\nWRONG ANSWER: {wrong}\nThe run is void. Logs and configs: {workdir}", file=sys.stderr)
            return 1
        print(f"\nThe run failed. Logs and configs: {workdir}", file=sys.stderr)
        raise
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    markdown, data = write(results, args.out)
    print(render(results))
    print(f"written: {markdown} and {data}" + (f"; workdir kept: {workdir}" if keep else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
