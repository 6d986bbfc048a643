"""``python -m benchmarks.calls_ab --base REV``: Python function calls per ``tools/call``, a revision
against this tree: a cost figure that the machine's load does not move.

On a shared, busy box, CPU per call moves by tens of percent between runs, more than a change on
the call path saves. The number of Python function calls Manifold makes per call moves far less
(only where timing decides how work is batched: a few percent on asyncio's loop, ~0 on uvloop's).
For ``http`` and ``stdio`` (one fixture server behind Manifold, as ``http-1`` and ``stdio-1``):
each Manifold runs under ``cProfile``, takes warm-up calls, then ``--calls`` echo calls at c=16;
it is stopped with SIGINT and the profile's exact call count is read. The base revision is
exported with ``git archive`` (``proxy/`` and ``tests/fixtures/``) into a temporary directory.

``--client 2026`` sends the load at 2026-07-28 (each POST self-contained: Manifold's inbound
stateless path) instead of in handshake-era sessions. ``--cpu-rounds N`` adds Manifold's process
CPU per call (``/proc``, without the profiler) in N rounds that alternate the two trees, each
round's ratio after/before, and their median: on a loaded box the paired ratio moves less than
either figure. ``--middleware NAME`` switches on one of ``benchmarks.plan.MIDDLEWARES`` in both
Manifolds (e.g. ``ratelimit``: what a change to that middleware saves).

Every echo is checked as in ``benchmarks.run``. Wall time is not measured here: use
``benchmarks.run`` for that.
"""

from __future__ import annotations

import argparse
import io
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import anyio
import yaml

from benchmarks.clients import PosterFactory, open_raw, open_stateless
from benchmarks.load import CallTarget, run_calls
from benchmarks.plan import MIDDLEWARES, deep_merge, http_server, manifold_config, materialize, stdio_server
from benchmarks.procs import (
    REPO,
    Spawned,
    spawn_http_fixture,
    stop_all,
    total_cpu,
    wait_listening,
    wait_servers_ready,
)
from tests.fixtures.spawn import free_port

__all__ = ["main"]

_WARMUP: Final = 200
_PROFILED: Final = """\
import cProfile, sys
if sys.argv[2] == "asyncio":
    sys.modules["uvloop"] = None  # proxy.cli.commands then runs asyncio's own loop
from proxy.cli.commands import main
profile = cProfile.Profile()
profile.enable()
try:
    main(sys.argv[3:])
finally:
    profile.disable()
    profile.dump_stats(sys.argv[1])
"""
_PLAIN: Final = """\
import sys
if sys.argv[2] == "asyncio":
    sys.modules["uvloop"] = None
from proxy.cli.commands import main
main(sys.argv[3:])
"""
_CLIENTS: Final[dict[str, PosterFactory]] = {"handshake": open_raw, "2026": open_stateless}


def _export(revision: str, into: Path) -> Path:
    """``proxy/`` and ``tests/fixtures/`` at ``revision``, under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "proxy", "tests/fixtures"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _start(argv: list[str], tree: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=tree,  # `python -c` puts the working directory first on sys.path
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _count(
    tree: Path,
    kind: str,
    fixture_url: str,
    workdir: Path,
    loop: str,
    calls: int,
    client: str = "handshake",
    profiled: bool = True,
    middleware: str | None = None,
) -> float:
    """Python function calls Manifold at ``tree`` made, from its start to its stop; without
    ``profiled``, its process CPU seconds per measured call instead."""
    name = f"{tree.name}-{kind}"
    servers = (
        {"h00": http_server(fixture_url)}
        if kind == "http"
        else {"s00": stdio_server("s00", tools=10, page_size=100)}
    )
    config = workdir / f"{name}.yaml"
    settings = manifold_config(servers, page_size=100)
    if middleware is not None:
        overlay = MIDDLEWARES[middleware]
        for file_name, text in overlay.files.items():
            (workdir / file_name).write_text(text)
        settings = deep_merge(settings, materialize(overlay.on, workdir))
    config.write_text(yaml.safe_dump(settings))
    stats_path = workdir / f"{name}.prof"
    port = free_port()
    script = _PROFILED if profiled else _PLAIN
    argv = [sys.executable, "-c", script, str(stats_path), loop, "serve", "--config", str(config)]
    log_path = workdir / f"{name}.log"
    process = _start([*argv, "--port", str(port)], tree, log_path)
    spawned = Spawned(name, process, f"http://127.0.0.1:{port}/mcp", log_path, config, list(servers))
    try:
        await wait_servers_ready([spawned], 120)
        server = spawned.server_ids[0]
        target = CallTarget(name, spawned.url, ((f"{server}.echo", server),), None, ())
        factory = _CLIENTS[client]
        await run_calls(target, 16, duration=3600, max_calls=_WARMUP, warmup_calls=2, factory=factory)
        cpu = total_cpu([process.pid])
        await run_calls(target, 16, duration=3600, max_calls=calls, warmup_calls=2, factory=factory)
        cpu = (total_cpu([process.pid]) - cpu) / (calls + 2 * 16)
    finally:
        process.send_signal(signal.SIGINT)  # a clean stop: the profile is written on the way out
        process.wait(60)
    if not profiled:
        return cpu
    return int(pstats.Stats(str(stats_path)).total_calls)  # type: ignore[attr-defined]


async def _compare(
    base: Path,
    loop: str,
    calls: int,
    workdir: Path,
    client: str,
    kinds: Sequence[str],
    cpu_rounds: int,
    middleware: str | None,
) -> list[str]:
    fixture = spawn_http_fixture("h00", workdir, tools=10, page_size=100)
    lines: list[str] = []
    mw = f", {middleware} on" if middleware else ""
    try:
        await wait_listening([fixture], 60)
        requests = calls + _WARMUP + 2 * 16 * 2  # measured, warm-up, and each run's per-worker warm-up
        for kind in kinds:
            before = await _count(base, kind, fixture.url, workdir, loop, calls, client, True, middleware)
            after = await _count(REPO, kind, fixture.url, workdir, loop, calls, client, True, middleware)
            lines.append(
                f"{kind}-1 on {loop}, {client} client{mw}: Python calls {before:,.0f} -> {after:,.0f} "
                f"({100 * (after / before - 1):+.1f}%), {before / requests:.0f} -> {after / requests:.0f}"
                f" per tools/call"
            )
            if cpu_rounds:
                pairs: list[tuple[float, float]] = []
                for round_ in range(cpu_rounds):  # alternate which tree goes first
                    trees = (base, REPO) if round_ % 2 == 0 else (REPO, base)
                    cpu = {
                        tree: await _count(
                            tree, kind, fixture.url, workdir, loop, calls, client, False, middleware
                        )
                        for tree in trees
                    }
                    pairs.append((cpu[base], cpu[REPO]))
                ratio = statistics.median(after / before for before, after in pairs)
                lines.append(
                    f"{kind}-1 on {loop}, {client} client{mw}: CPU per call "
                    f"{statistics.median(b for b, _ in pairs) * 1e6:.0f} -> "
                    f"{statistics.median(a for _, a in pairs) * 1e6:.0f} µs (medians), paired ratio "
                    f"{ratio:.3f} over {cpu_rounds} rounds ({', '.join(f'{a / b:.2f}' for b, a in pairs)}); "
                    f"load {os.getloadavg()[0]:.1f}"
                )
    finally:
        stop_all([fixture])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.calls_ab", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--base", required=True, help="the revision to compare this tree against")
    parser.add_argument("--calls", type=int, default=2000, help="measured tools/call per Manifold")
    parser.add_argument("--loop", choices=("uvloop", "asyncio", "both"), default="both")
    parser.add_argument("--client", choices=tuple(_CLIENTS), default="handshake", help="the load's era")
    parser.add_argument("--kinds", default="http,stdio", help="http, stdio or both (comma-separated)")
    parser.add_argument("--cpu-rounds", type=int, default=0, help="paired CPU rounds per kind (0: none)")
    parser.add_argument("--middleware", choices=tuple(MIDDLEWARES), help="switched on in both Manifolds")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.kinds.split(",") if kind in ("http", "stdio")]
    workdir = Path(tempfile.mkdtemp(prefix="manifold-calls-ab-"))
    try:
        base = _export(args.base, workdir / "base")
        for loop in ("uvloop", "asyncio") if args.loop == "both" else (args.loop,):
            for line in anyio.run(
                _compare,
                base,
                loop,
                args.calls,
                workdir,
                args.client,
                kinds,
                args.cpu_rounds,
                args.middleware,
                backend_options={"use_uvloop": True},
            ):
                print(line, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
