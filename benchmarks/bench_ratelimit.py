"""What one rate-limit check costs: matching rules, the in-memory backend, and Redis.

Run from the repository root::

    .venv/bin/python benchmarks/bench_ratelimit.py [--seconds 2] [--count 200000] [--uvloop]

Every case stops after ``--count`` calls or ``--seconds`` seconds, whichever comes first. A "call"
is one ``hit`` for one tools/call (with 1 or 3 limits); "CPU µs" is this process' CPU time per
call, which is what counts against Manifold's budget (redis-server's own CPU is not included).
Redis runs as a private redis-server on a free loopback port, started and stopped here.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: proxy and tests

from proxy.policy.gcra import LimitCheck
from proxy.policy.limits import limit_checks, parse_limits
from proxy.ratelimit.memory import MemoryBackend
from proxy.ratelimit.redis import RedisBackend
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis


@dataclass
class Row:
    case: str
    calls: int
    wall: float
    cpu: float

    def show(self) -> str:
        per_call = self.wall / self.calls * 1e6
        return (
            f"{self.case:<44} {self.calls:>9} {per_call:>9.2f} {self.cpu / self.calls * 1e6:>9.2f}"
            f" {self.calls / self.wall:>12,.0f}"
        )


HEADER = f"{'case':<44} {'calls':>9} {'wall µs':>9} {'CPU µs':>9} {'calls/s':>12}"


async def measure(
    case: str, call: Callable[[int], Awaitable[object]], count: int, seconds: float, concurrency: int = 1
) -> Row:
    """Run ``call(i)`` until ``count`` calls or ``seconds`` pass, on ``concurrency`` tasks."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while done < count and time.perf_counter() < deadline:
            done += 1
            await call(done)

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return Row(case, done, time.perf_counter() - wall, time.process_time() - cpu)


def checks_for(users: int, limits: int) -> list[list[LimitCheck]]:
    shapes = [(1.0, 10), (2.0, 5), (60.0, 100)][:limits]
    return [
        [LimitCheck(f"r{n}:identity=user{u}", i, b) for n, (i, b) in enumerate(shapes)] for u in range(users)
    ]


async def bench_memory(count: int, seconds: float) -> list[Row]:
    rows = []
    for limits in (1, 3):
        backend = MemoryBackend()
        calls = checks_for(1000, limits)

        async def hit(
            i: int, backend: MemoryBackend = backend, calls: list[list[LimitCheck]] = calls
        ) -> None:
            await backend.hit(calls[i % 1000])

        rows.append(await measure(f"memory, {limits} limit(s), 1000 users", hit, count, seconds))
    return rows


async def bench_rules(count: int, seconds: float) -> list[Row]:
    entries: list[dict[str, object]] = [
        {"id": f"tool-{n}", "rate": "10/second", "per": ["identity"], "match": {"tools": [f"srv{n}.*"]}}
        for n in range(17)
    ]
    entries += [
        {"id": "per-user", "rate": "60/minute", "burst": 10, "per": ["identity"]},
        {"id": "contractors", "rate": "1/second", "per": ["identity", "tool"], "match": {"roles": ["c"]}},
        {"id": "global", "rate": "1000/second", "burst": 100, "per": []},
    ]
    rules = parse_limits(entries, "bench")
    roles = frozenset({"c", "staff"})

    async def match(i: int) -> None:
        limit_checks(rules, f"user{i % 100}", roles, "srv3", "srv3.create_issue", "tools/call")

    return [await measure("rules: limit_checks over 20 rules (5 apply)", match, count, seconds)]


async def bench_redis(count: int, seconds: float) -> list[Row]:
    if REDIS_SERVER is None:
        print("redis-server is not installed: Redis rows skipped", file=sys.stderr)
        return []
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        async with running_redis(Path(directory)) as server:
            from redis.asyncio import Redis

            client = Redis.from_url(server.url)
            try:
                backend = RedisBackend(client, timeout=1.0)
                for limits, concurrency in ((1, 1), (3, 1), (1, 32), (3, 32)):
                    calls = checks_for(1000, limits)

                    async def hit(i: int, calls: list[list[LimitCheck]] = calls) -> None:
                        outcome = await backend.hit(calls[i % 1000])
                        if outcome.degraded:
                            raise RuntimeError("Redis failed during the benchmark")

                    case = f"redis, {limits} limit(s), {concurrency} concurrent"
                    rows.append(await measure(case, hit, count, seconds, concurrency))
            finally:
                await client.aclose()
    return rows


def memory_footprint(buckets: int) -> float:
    """Bytes per bucket held by a full MemoryBackend."""
    tracemalloc.start()
    backend = MemoryBackend(maxsize=buckets)
    before = tracemalloc.get_traced_memory()[0]
    for n in range(buckets):
        backend.hit_now([LimitCheck(f"per-user-default:identity=user-{n:08d}", 60.0, 10)])
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / buckets


async def main(count: int, seconds: float) -> None:
    from redis.utils import HIREDIS_AVAILABLE

    parser = "hiredis" if HIREDIS_AVAILABLE else "pure Python"
    print(f"python {sys.version.split()[0]}, redis-py reply parser: {parser}")
    print(f"at most {count} calls or {seconds:g} s per case\n")
    print(HEADER)
    for bench in (bench_rules, bench_memory, bench_redis):
        for row in await bench(count, seconds):
            print(row.show(), flush=True)
    print(f"\nmemory backend: {memory_footprint(100_000):.0f} bytes per bucket (100k buckets, ~60-char keys)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="most calls per case")
    parser.add_argument("--seconds", type=float, default=2.0, help="most seconds per case")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (as uvicorn does when present)")
    args = parser.parse_args()
    anyio.run(main, args.count, args.seconds, backend_options={"use_uvloop": args.uvloop})
