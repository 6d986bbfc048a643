"""``python -m benchmarks.churn_memory [--cycles N]``: what holds memory per ended session.

One Manifold in this process (the gateway and its HTTP server, on loopback) fronts one stdio
fixture server shared by everyone and one ``per_client``; a client opens a session on a new
connection, calls both, and ends it (DELETE), or, one time in ``--abandon-every``, walks away
without a word, as a client that reopens after an error does. ``tracemalloc`` snapshots after a
warm-up and after each batch of cycles are compared, grouped by the line that allocated: what
grows with the cycles is printed, with the count of each bounded holder. Bounded in cycles and
in time; everything started is stopped before it returns.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio

from benchmarks.plan import manifold_config, stdio_server
from benchmarks.soak_traffic import Caller, Tally
from proxy.app.gateway import Gateway
from proxy.config.loading import config_from_mapping
from proxy.inbound.server import bind, serve

__all__ = ["holders", "main"]

_FRAMES: Final = 8
_SHOWN: Final = 15
_SECONDS: Final = 600.0  # the whole run, whatever the counts


def holders(gateway: Gateway) -> dict[str, int]:
    """How many entries each per-session, per-identity or per-id holder has now."""
    revocations: Any = gateway.revocations
    ended = getattr(revocations, "_ended", None)
    return {
        "sessions": len(gateway.sessions),
        "ended ids (revocations)": len(ended) if ended is not None else -1,
        "per_client connections": len(gateway.connections._per_client),
        "per_client catalogs": (
            len(gateway.per_client_catalogs._per_client) if gateway.per_client_catalogs is not None else 0
        ),
        "listen streams": len(gateway.listens),
    }


async def churn(cycles: int, batches: int, abandon_every: int, own_every: int, say: Any) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="manifold-churn-"))
    servers = {
        "shared": stdio_server("shared", tools=3, page_size=100),
        "own": {**stdio_server("own", tools=3, page_size=100), "session_mode": "per_client"},
    }
    data = manifold_config(servers, page_size=100, overlay={"log_level": "warning"})
    config = config_from_mapping(data, source=str(workdir / "m.yaml"))
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    gateway = Gateway(config)
    tally = Tally(clock=time.monotonic)
    deadline = time.monotonic() + _SECONDS
    number = 0

    async def cycle() -> None:
        nonlocal number
        number += 1
        caller = Caller(url, tally, 30.0, f"c{number}")
        try:
            if await caller.open_session():
                await caller.echo("shared")
                if own_every and number % own_every == 0:
                    await caller.echo("own")  # starts a process for this session
                if abandon_every and number % abandon_every == 0:
                    return  # walked away: the session stays until idle_timeout (or evicted)
                await caller.delete_session()
        finally:
            await caller.drop_connection()

    async with anyio.create_task_group() as tg, gateway.running(wait_for="all"):
        await tg.start(functools.partial(serve, endpoints=gateway.endpoints), gateway.inbound, sock, None)
        for _ in range(cycles):  # warm-up: caches, imports, first-time allocations
            await cycle()
        gc.collect()
        tracemalloc.start(_FRAMES)
        first = tracemalloc.take_snapshot()
        say(f"warm: {holders(gateway)}, traced {tracemalloc.get_traced_memory()[0] / 1024:.0f} KiB")
        for batch in range(1, batches + 1):
            for _ in range(cycles):
                if time.monotonic() > deadline:
                    break
                await cycle()
            gc.collect()
            now = tracemalloc.take_snapshot()
            grown = now.compare_to(first, "traceback")
            total = sum(stat.size_diff for stat in grown)
            say(
                f"after {batch * cycles} more cycles: {total / 1024:+.0f} KiB traced, "
                f"{tally.ok} ok, {sum(tally.errors.values())} errors; {holders(gateway)}"
            )
            if True:
                for stat in grown[:_SHOWN]:
                    if stat.size_diff <= 0:
                        continue
                    say(f"  {stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks")
                    for line in stat.traceback.format(limit=_FRAMES)[-8:]:
                        say(f"      {line}")
        tracemalloc.stop()
        tg.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=300, help="session cycles per batch (and warm-up)")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--abandon-every", type=int, default=10, help="0: every session is DELETEd")
    parser.add_argument("--own-every", type=int, default=5, help="sessions that call the per_client server")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, flush=True)

    anyio.run(churn, args.cycles, args.batches, args.abandon_every, args.own_every, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
