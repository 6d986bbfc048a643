"""``python -m benchmarks.calls_ab --base REV``: Python function calls per ``tools/call``, a revision
against this tree: a cost figure that the machine's load does not move.

On a shared, busy box, CPU per call moves by tens of percent between runs, more than a change on
the call path saves. The number of Python function calls Manifold makes per call moves far less
(only where timing decides how work is batched: a few percent on asyncio's loop, ~0 on uvloop's).
For ``http`` and ``stdio`` (one fixture server behind Manifold, as ``http-1`` and ``stdio-1``):
each Manifold runs under ``cProfile``, takes warm-up calls, then ``--calls`` echo calls at c=16;
it is stopped with SIGINT and the profile's exact call count is read. The base revision is
exported with ``git archive`` (``proxy/`` and ``tests/fixtures/``) into a temporary directory.

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
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import anyio
import yaml

from benchmarks.load import CallTarget, run_calls
from benchmarks.plan import http_server, manifold_config, stdio_server
from benchmarks.procs import REPO, Spawned, spawn_http_fixture, stop_all, wait_listening, wait_servers_ready
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


async def _count(tree: Path, kind: str, fixture_url: str, workdir: Path, loop: str, calls: int) -> int:
    """Python function calls Manifold at ``tree`` made, from its start to its stop."""
    name = f"{tree.name}-{kind}"
    servers = (
        {"h00": http_server(fixture_url)}
        if kind == "http"
        else {"s00": stdio_server("s00", tools=10, page_size=100)}
    )
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump(manifold_config(servers, page_size=100)))
    stats_path = workdir / f"{name}.prof"
    port = free_port()
    argv = [sys.executable, "-c", _PROFILED, str(stats_path), loop, "serve", "--config", str(config)]
    log_path = workdir / f"{name}.log"
    process = _start([*argv, "--port", str(port)], tree, log_path)
    spawned = Spawned(name, process, f"http://127.0.0.1:{port}/mcp", log_path, config, list(servers))
    try:
        await wait_servers_ready([spawned], 120)
        server = spawned.server_ids[0]
        target = CallTarget(name, spawned.url, ((f"{server}.echo", server),), None, ())
        await run_calls(target, 16, duration=3600, max_calls=_WARMUP, warmup_calls=2)
        await run_calls(target, 16, duration=3600, max_calls=calls, warmup_calls=2)
    finally:
        process.send_signal(signal.SIGINT)  # a clean stop: the profile is written on the way out
        process.wait(60)
    return int(pstats.Stats(str(stats_path)).total_calls)  # type: ignore[attr-defined]


async def _compare(base: Path, loop: str, calls: int, workdir: Path) -> list[str]:
    fixture = spawn_http_fixture("h00", workdir, tools=10, page_size=100)
    lines: list[str] = []
    try:
        await wait_listening([fixture], 60)
        requests = calls + _WARMUP + 2 * 16 * 2  # measured, warm-up, and each run's per-worker warm-up
        for kind in ("http", "stdio"):
            before = await _count(base, kind, fixture.url, workdir, loop, calls)
            after = await _count(REPO, kind, fixture.url, workdir, loop, calls)
            lines.append(
                f"{kind}-1 on {loop}: Python calls {before:,} -> {after:,} "
                f"({100 * (after / before - 1):+.1f}%), {(after - before) / requests:+.1f} per tools/call"
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
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="manifold-calls-ab-"))
    try:
        base = _export(args.base, workdir / "base")
        for loop in ("uvloop", "asyncio") if args.loop == "both" else (args.loop,):
            for line in anyio.run(
                _compare, base, loop, args.calls, workdir, backend_options={"use_uvloop": True}
            ):
                print(line, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
