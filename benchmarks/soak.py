"""``python -m benchmarks.soak [--minutes N]``: Manifold under steady load, churn, kills and abuse.

One real ``manifold serve`` on loopback fronts three fixture servers: ``shared`` (stdio, one
connection for everyone), ``perclient`` (stdio, ``session_mode: per_client``: a process per
client session that calls it) and ``http`` (Streamable HTTP, a process this run starts). For
``--minutes`` (default 10), all at once:

* steady load: ``--clients`` sessions call the three echo tools round-robin, ``--rate`` calls/s in
  all, every answer checked against its request (wrong = crossed; lost = no answer or an error);
* session churn: ``--churn-workers`` loops open a session, call each server, DELETE it, again
  and again (thousands of sessions: what each ended session leaves behind must plateau);
* a kill: ``shared``'s process gets SIGKILL every ``--kill-every`` s; recovery is the time until
  the first call started after the kill is answered;
* a hostile client: malformed JSON, 300-deep nesting, a 5 MiB body, a 1000-entry batch, initialize
  with 100 KiB of capabilities, idle and slowloris connections (a few at a time, each bounded);
* a sample of Manifold's RSS, FDs and child processes every ``--sample-every`` s.

The report goes to stdout and ``benchmarks/results/soak-latest.md`` / ``.json``. Exit code 1 if
Manifold died, any answer was wrong, any was lost outside a kill window, a killed server never
came back, or RSS grew faster than the threshold over the second half of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import aiohttp
import anyio
import anyio.to_thread

from benchmarks.plan import http_server, manifold_config, stdio_server
from benchmarks.procs import (
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
from benchmarks.run import _git_revision
from benchmarks.soak_report import Sample, SoakResult, Thresholds, render, summarize, write
from benchmarks.soak_traffic import HOSTILE_KINDS, Kill, Tally, churn, hostile, steady

__all__ = ["SoakPlan", "main", "soak"]

SHARED: Final = "shared"
PER_CLIENT: Final = "perclient"
HTTP: Final = "http"
RESULTS_DIR: Final = REPO / "benchmarks" / "results"
_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class SoakPlan:
    """Sizes and bounds of one soak. Every loop stops by itself at ``seconds``."""

    seconds: float = 600.0
    clients: int = 8  # steady sessions
    rate: float = 160.0  # steady calls per second, all clients together
    churn_workers: int = 4  # session churn loops at once: thousands of sessions opened and ended
    churn_pause: float = 0.1  # seconds between one loop's churned sessions
    per_client_every: int = 5  # every n-th session of the first loop also calls the per_client server
    kill_first: float = 30.0  # seconds into the run
    kill_every: float = 60.0
    kill_settle: float = 15.0  # no kill closer than this to the end (room to recover)
    sample_every: float = 5.0
    hostile: bool = True
    hostile_kinds: tuple[str, ...] = HOSTILE_KINDS  # cycled in this order
    hostile_pause: float = 1.0  # seconds between hostile requests
    held: int = 4  # idle/slowloris connections open at once, at most
    hold_seconds: float = 20.0  # each held connection is closed after this
    big_capabilities: int = 100 * 1024  # bytes of capabilities in the big initialize
    call_timeout: float = 15.0  # per request, client side
    request_timeout: float = 10.0  # Manifold's per-server request_timeout
    session_idle_timeout: float = 60.0  # abandoned (hostile) sessions are reaped within the run
    startup_seconds: float = 60.0
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def server_pid(manifold: int, name: str) -> int | None:
    """The live child of ``manifold`` running the fixture server ``--name name``, if any."""
    for pid in children_of(manifold):
        args = _cmdline(pid)
        if "--name" in args and args[args.index("--name") + 1 : args.index("--name") + 2] == [name]:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state != "Z":
                return pid
    return None


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Manifold's ``/metrics`` as ``{'name{labels}': value}``; empty when it does not answer in 3 s."""
    try:
        with anyio.fail_after(3):
            async with http.get(url.replace("/mcp", "/metrics")) as response:
                text = await response.text() if response.status == 200 else ""
    except (TimeoutError, aiohttp.ClientError):
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("manifold_") and " " in line:
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                found[name] = float(value)
    return found


def _family(metrics: dict[str, float], name: str) -> dict[str, float]:
    return {key: value for key, value in metrics.items() if key.split("{", 1)[0] == name}


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _kill_strays(pids: set[int]) -> None:
    """SIGKILL fixture servers Manifold started that outlived it (it was killed, or hung)."""
    for pid in pids:
        if any(arg.endswith("fixture_server.py") for arg in _cmdline(pid)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _config(plan: SoakPlan, http_url: str) -> dict[str, object]:
    bounds = {"connect_timeout": 60, "request_timeout": plan.request_timeout}
    servers = {
        SHARED: {**stdio_server(SHARED, tools=3, page_size=100), **bounds},
        PER_CLIENT: {
            **stdio_server(PER_CLIENT, tools=3, page_size=100),
            **bounds,
            "session_mode": "per_client",
        },
        HTTP: {**http_server(http_url), **bounds},
    }
    overlay = {"sessions": {"idle_timeout": plan.session_idle_timeout}, "log_level": "warning"}
    return manifold_config(servers, page_size=100, overlay=overlay)


async def soak(plan: SoakPlan, workdir: Path, say: Callable[[str], None]) -> SoakResult:
    """Run ``plan``; every process started is stopped before this returns or raises.

    Raises:
        RuntimeError, TimeoutError: the processes did not start.
    """
    wall0 = time.monotonic()
    meta: dict[str, object] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "revision": _git_revision(),
        "loadavg": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "plan": dataclasses.asdict(plan),
        "summary": (
            f"{plan.clients} steady clients at {plan.rate:g} calls/s in all over {SHARED} (stdio), "
            f"{PER_CLIENT} (stdio, per_client) and {HTTP} (Streamable HTTP); session churn from "
            f"{plan.churn_workers} loops, {plan.churn_pause:g} s apart; SIGKILL of "
            f"{SHARED}'s process at {plan.kill_first:g} s and every {plan.kill_every:g} s; "
            f"hostile client {'on: ' + ', '.join(plan.hostile_kinds) if plan.hostile else 'off'} "
            f"(a request every {plan.hostile_pause:g} s; "
            f"at most {plan.held} idle/slowloris connections, each closed after {plan.hold_seconds:g} s); "
            f"sessions idle for {plan.session_idle_timeout:g} s expire; "
            f"a sample every {plan.sample_every:g} s."
        ),
    }
    spawned: list[Spawned] = []
    seen_children: set[int] = set()
    counters: dict[str, float] = {}
    stack = contextlib.AsyncExitStack()
    try:
        say("starting the HTTP fixture server and Manifold")
        with anyio.fail_after(plan.startup_seconds):
            fixture = spawn_http_fixture(HTTP, workdir, tools=3, page_size=100)
            spawned.append(fixture)
            await wait_listening([fixture], plan.startup_seconds)
            manifold = spawn_manifold("soak", workdir, _config(plan, fixture.url))
            spawned.append(manifold)
            await wait_servers_ready([manifold], plan.startup_seconds)
        pid = manifold.pid
        t0 = time.monotonic()
        tally = Tally(clock=lambda: time.monotonic() - t0)
        samples: list[Sample] = []
        deadline = plan.seconds
        died: list[float] = []

        http = await stack.enter_async_context(aiohttp.ClientSession())

        async def sample() -> None:
            children = children_of(pid)
            seen_children.update(children)
            sessions = sum(
                _family(await scrape(http, manifold.url), "manifold_client_sessions_active").values()
            )
            samples.append(
                Sample(
                    tally.clock(),
                    rss_bytes(pid) / _MIB,
                    _fds(pid),
                    len(children),
                    sum(tally.calls.values()),
                    int(sessions),
                )
            )

        async def sampler(scope: anyio.CancelScope) -> None:
            while True:
                if manifold.process.poll() is not None:
                    died.append(tally.clock())
                    say(f"Manifold DIED (exit code {manifold.process.returncode}); stopping the run")
                    scope.cancel()
                    return
                await sample()
                if tally.clock() >= deadline:
                    return
                await anyio.sleep(min(plan.sample_every, max(0.0, deadline - tally.clock())))

        async def killer() -> None:
            at = plan.kill_first
            while at + plan.kill_settle <= deadline:
                await anyio.sleep(max(0.0, at - tally.clock()))
                victim = server_pid(pid, SHARED)
                if victim is None:
                    tally.error(SHARED, "kill skipped: no live process found")
                else:
                    os.kill(victim, signal.SIGKILL)
                    tally.kills.append(Kill(SHARED, victim, tally.clock()))
                    say(f"killed {SHARED} (pid {victim})")
                at += plan.kill_every

        async def progress() -> None:
            while tally.clock() + 30 < deadline:
                await anyio.sleep(30)
                lost = len(tally.failures)
                last = samples[-1] if samples else None
                rss = f", RSS {last.rss_mib:.1f} MiB, {last.fds} FDs" if last else ""
                say(f"{sum(tally.calls.values()):,} calls, {tally.wrong} wrong, {lost} lost{rss}")

        say(f"soaking for {plan.seconds:g} s")
        servers = (SHARED, PER_CLIENT, HTTP)
        grace = max(plan.call_timeout, plan.hold_seconds) + 5
        # Every loop stops by itself at the deadline; whatever still runs a bound later is stopped.
        with anyio.move_on_after(plan.seconds + grace):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sampler, tg.cancel_scope)
                tg.start_soon(killer)
                tg.start_soon(progress)
                bounds = {"deadline": deadline, "timeout": plan.call_timeout}
                for index in range(plan.clients):
                    tg.start_soon(
                        partial(
                            steady,
                            manifold.url,
                            tally,
                            servers,
                            index=index,
                            interval=plan.clients / plan.rate,
                            **bounds,
                        )
                    )
                for worker in range(plan.churn_workers):  # each starts a process on the per_client
                    tg.start_soon(  # server now and then: the first loop alone does, to keep them few
                        partial(
                            churn,
                            manifold.url,
                            tally,
                            (SHARED, HTTP),
                            PER_CLIENT if worker == 0 else None,
                            pause=plan.churn_pause,
                            per_client_every=plan.per_client_every,
                            **bounds,
                        )
                    )
                if plan.hostile:
                    tg.start_soon(
                        partial(
                            hostile,
                            manifold.url,
                            tally,
                            SHARED,
                            pause=plan.hostile_pause,
                            held=plan.held,
                            hold_seconds=plan.hold_seconds,
                            big_capabilities=plan.big_capabilities,
                            kinds=plan.hostile_kinds,
                            **bounds,
                        )
                    )
        ended = min(tally.clock(), deadline)
        alive = manifold.process.poll() is None
        if alive:
            metrics = await scrape(http, manifold.url)
            for name in ("manifold_limit_refusals_total", "manifold_server_restarts_total"):
                counters.update(_family(metrics, name))
            counters.update(_family(metrics, "manifold_tool_calls_total"))
        meta["seconds"] = ended
        say("stopping processes")
    finally:
        with anyio.CancelScope(shield=True):
            await stack.aclose()
            await anyio.to_thread.run_sync(stop_all, spawned)
            _kill_strays(seen_children)
    meta["wall_seconds"] = time.monotonic() - wall0
    meta["loadavg_after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return summarize(
        meta,
        samples,
        tally,
        started=0.0,
        ended=ended,
        alive=alive,
        exit_code=manifold.process.returncode if not alive else None,
        thresholds=plan.thresholds,
        counters=counters,
    )


def main(argv: Sequence[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=doc.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--clients", type=int, default=SoakPlan.clients, help="steady sessions")
    parser.add_argument("--rate", type=float, default=SoakPlan.rate, help="steady calls/s, all clients")
    parser.add_argument("--kill-every", type=float, default=SoakPlan.kill_every, help="seconds between kills")
    parser.add_argument("--sample-every", type=float, default=SoakPlan.sample_every)
    parser.add_argument(
        "--churn-workers", type=int, default=SoakPlan.churn_workers, help="session churn loops at once"
    )
    parser.add_argument("--no-hostile", action="store_true", help="no hostile client")
    parser.add_argument(
        "--hostile-kinds",
        type=lambda text: tuple(text.split(",")),
        default=HOSTILE_KINDS,
        help=f"comma-separated subset of {','.join(HOSTILE_KINDS)} (to find which one does harm)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where soak-latest.md/.json go")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the config and logs")
    args = parser.parse_args(argv)
    plan = SoakPlan(
        seconds=args.minutes * 60,
        clients=args.clients,
        rate=args.rate,
        kill_first=min(SoakPlan.kill_first, args.kill_every),
        kill_every=args.kill_every,
        sample_every=args.sample_every,
        churn_workers=args.churn_workers,
        hostile=not args.no_hostile,
        hostile_kinds=args.hostile_kinds,
    )
    if unknown := set(plan.hostile_kinds) - set(HOSTILE_KINDS):
        parser.error(f"unknown hostile kinds: {', '.join(sorted(unknown))}")
    workdir = Path(tempfile.mkdtemp(prefix="manifold-soak-"))
    clock0 = time.monotonic()

    def say(message: str) -> None:
        print(f"[soak {time.monotonic() - clock0:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        result = anyio.run(soak, plan, workdir, say, backend="asyncio", backend_options={"use_uvloop": True})
    except BaseException:
        print(f"\nThe soak failed to run. Logs and config: {workdir}", file=sys.stderr)
        raise
    markdown, data = write(result, args.out)
    print(render(result))
    if args.keep_workdir or not result.passed:
        print(f"logs and config kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"written: {markdown} and {data}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
