"""What tool search costs a running gateway: resident memory, and the first search's wait.

Runs a real ``manifold serve`` three times over the same catalog (the SDK fixture server with 1,000
tools) — discovery off; discovery on with ``semantic: off``; discovery on with the model — and in
each makes one ``tools/list`` or ``search_tools`` call (which builds the view's index off the event
loop; the model was loaded and the vectors embedded when the catalog arrived), then 20 more, waits
for the process to settle and reads its resident set (``VmRSS``). The differences are the figures:
the lexical index, and the model on top of it. Hold ``flock /tmp/manifold-bench.lock`` around it::

    python -m benchmarks.discovery.cost
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from tests.interaction.harness import fixture_server, post, raw_session, rss_mib, running_manifold

TOOLS = 1000
SEARCH = {"name": "manifold.search_tools", "arguments": {"query": "echo the arguments back", "limit": 5}}


async def measure(discovery: dict[str, Any]) -> tuple[float, float]:
    """(RSS in MiB once settled, seconds of the first search or list)."""
    config = {"discovery": discovery, "servers": {"fx": fixture_server("fx", tools=TOOLS, page_size=500)}}
    with tempfile.TemporaryDirectory() as scratch:
        async with running_manifold(Path(scratch), config) as manifold, aiohttp.ClientSession() as http:
            session = {"Mcp-Session-Id": await raw_session(http, manifold.url)}
            searching = discovery.get("mode", "off") != "off"
            message = (
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": SEARCH}
                if searching
                else {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            )
            started = time.perf_counter()
            status, _, body = await post(http, manifold.url, message, session)
            first = time.perf_counter() - started
            assert status == 200, body
            for _ in range(20):  # a bounded count of searches, as a client would make
                await post(http, manifold.url, message, session)
            await anyio.sleep(2)  # settle: the benchmark measures idle memory, not a peak
            return rss_mib(manifold.process), first


async def main() -> None:
    off, _ = await measure({"mode": "off"})
    lexical, lexical_first = await measure({"mode": "search", "semantic": "off"})
    hybrid, hybrid_first = await measure({"mode": "search"})
    print(f"{TOOLS} tools behind Manifold, idle RSS after 21 searches (MiB):")
    print(f"  discovery off:               {off:.1f}")
    print(
        f"  discovery on, lexical only:  {lexical:.1f}  (+{lexical - off:.1f}; "
        f"first search {lexical_first:.2f} s)"
    )
    print(
        f"  discovery on, with the model: {hybrid:.1f}  (+{hybrid - lexical:.1f} for the model and vectors;"
    )
    print(f"                                first search {hybrid_first:.2f} s: the view's index build)")


if __name__ == "__main__":
    anyio.run(main)
