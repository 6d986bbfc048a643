"""What an OpenAPI server costs at the scale of a large real API (issue #35), on real processes
on loopback: GitHub's published document (npm ``@octokit/openapi``, about 1,200 operations,
13 MB) served by a ``manifold serve`` of its own.

1. **Load time**: from ``serve`` started to ``/healthz`` counting the server ready (the document
   read, parsed, its tools made, listed by the connection), against a Manifold with one stdio
   fixture server started the same way; ``--rounds`` restarts, the median.
2. **Memory**: each Manifold's ``VmRSS`` once ready; the difference is what the document costs.
3. **Listing**: a full ``tools/list`` drain through Manifold (every page), cold then warm.
4. **Search**: ``manifold.search_tools`` on an endpoint with progressive discovery (by words).

No call reaches an API here (the tools are listed and searched, not called): the base URL is a
closed port. Every wait is bounded; the whole run in ``--budget`` seconds. Hold
``flock /tmp/manifold-bench.lock`` around it on a shared machine.

    .venv/bin/python -m benchmarks.openapi_load [--rounds 3]
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
from benchmarks.load import McpClient
from benchmarks.plan import stdio_server
from benchmarks.procs import rss_bytes, spawn_manifold, stop_all, wait_servers_ready

REPO = Path(__file__).resolve().parents[1]
GITHUB = REPO / "tests/npm/node_modules/@octokit/openapi/generated/api.github.com.json"
QUERIES = ["create a comment on an issue", "list pull requests", "delete a repository webhook", "star a gist"]


def _configs() -> dict[str, dict[str, Any]]:
    github = {"url": "http://127.0.0.1:9", "openapi": {"document": str(GITHUB)}, "connect_timeout": 120}
    find = {"find": {"discovery": {"mode": "search", "semantic": "off"}}}
    return {
        "baseline": {"log_level": "warning", "servers": {"s": stdio_server("s", tools=10, page_size=100)}},
        "github": {"log_level": "warning", "servers": {"github": github}, "endpoints": find},
    }


async def _drain(url: str) -> tuple[int, int, float]:
    """(tools, pages, seconds) of one full tools/list on a new session."""
    client = McpClient(await open_raw(url))
    await client.initialize()
    started = time.perf_counter()
    tools = pages = 0
    cursor: str | None = None
    for request_id in range(1, 1000):
        result = await client.request(request_id, "tools/list", {"cursor": cursor} if cursor else {})
        tools, pages = tools + len(result["tools"]), pages + 1
        if (cursor := result.get("nextCursor")) is None:
            break
    seconds = time.perf_counter() - started
    await client.poster.aclose()
    return tools, pages, seconds


async def _searches(url: str, rounds: int) -> list[float]:
    client = McpClient(await open_raw(url))
    await client.initialize()
    spent: list[float] = []
    for i in range(rounds * len(QUERIES)):
        query = {"query": QUERIES[i % len(QUERIES)], "limit": 8}
        params = {"name": "manifold.search_tools", "arguments": query}
        started = time.perf_counter()
        result = await client.request(i + 1, "tools/call", params)
        spent.append(time.perf_counter() - started)
        if result.get("isError"):
            raise RuntimeError(f"search failed: {result}")
    await client.poster.aclose()
    return spent


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if not GITHUB.exists():
        raise SystemExit(f"{GITHUB} is missing: run make (npm ci in tests/npm) first")
    results: dict[str, Any] = {"document_bytes": GITHUB.stat().st_size, "rounds": args.rounds}
    ready: dict[str, list[float]] = {"baseline": [], "github": []}
    rss: dict[str, list[int]] = {"baseline": [], "github": []}
    with anyio.fail_after(args.budget), tempfile.TemporaryDirectory(prefix="manifold-openapi-") as tmp:
        workdir = Path(tmp)
        for round_number in range(args.rounds):
            for name, config in _configs().items():
                started = time.perf_counter()
                spawned = spawn_manifold(f"{name}-{round_number}", workdir, config)
                try:
                    await wait_servers_ready([spawned], timeout=180)
                    ready[name].append(time.perf_counter() - started)
                    rss[name].append(rss_bytes(spawned.process.pid))
                    if name == "github" and round_number == args.rounds - 1:
                        drains = [await _drain(spawned.url) for _ in range(4)]
                        results["tools"], results["pages"] = drains[0][0], drains[0][1]
                        results["list_cold_ms"] = round(drains[0][2] * 1000, 1)
                        results["list_warm_ms"] = round(statistics.median(d[2] for d in drains[1:]) * 1000, 1)
                        spent = await _searches(spawned.url.replace("/mcp", "/mcp/find"), 5)
                        results["search_ms_median"] = round(statistics.median(spent) * 1000, 2)
                finally:
                    stop_all([spawned])
    results["ready_s"] = {name: round(statistics.median(times), 2) for name, times in ready.items()}
    results["rss_mib"] = {name: round(statistics.median(v) / 2**20, 1) for name, v in rss.items()}
    results["document_rss_mib"] = round(results["rss_mib"]["github"] - results["rss_mib"]["baseline"], 1)
    sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=280)
    anyio.run(main, parser.parse_args())
