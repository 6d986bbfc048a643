"""The peer (mcp-hub, benchmarks/peers.py) runs with the benchmark's servers and client, and its
answers are checked like Manifold's: a wrong one stops the run. Skipped where npm cannot install it."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from benchmarks.load import CallTarget, run_calls, wrong_answer_in
from benchmarks.peers import (
    LEGACY_SESSION,
    hub_tool,
    install_mcp_hub,
    open_legacy_sse,
    spawn_mcp_hub,
    wait_hubs_ready,
)
from benchmarks.plan import stdio_server
from benchmarks.procs import children_of, stop_all

pytestmark = pytest.mark.slow


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.anyio
async def test_calls_through_mcp_hub_are_answered_and_checked(tmp_path: Path) -> None:
    with anyio.fail_after(300):
        cli, version = await install_mcp_hub()
    if cli is None:
        pytest.skip(version)
    server = stdio_server("s00", tools=2, page_size=100)
    hub = spawn_mcp_hub(
        "mcp-hub-test", tmp_path, cli, {"s00": {"command": server["command"], "args": server["args"]}}
    )
    kids: list[int] = []
    try:
        with anyio.fail_after(60):
            await wait_hubs_ready([hub], 60)
        kids = children_of(hub.pid)
        assert len(kids) == 1  # the stdio server is the hub's own child
        sessions = [LEGACY_SESSION] * 2
        target = CallTarget("hub", hub.url, ((hub_tool("s00", "echo"), "s00"),), hub.pid, (), sessions)
        with anyio.fail_after(60):
            run = await run_calls(
                target, 2, duration=0.5, max_calls=40, warmup_calls=2, factory=open_legacy_sse
            )
        assert run.calls > 0
        assert run.manifold_cpu is not None

        # An answer from the wrong server (here: one named otherwise) voids the run.
        wrong = CallTarget("hub", hub.url, ((hub_tool("s00", "echo"), "s99"),), hub.pid, (), sessions)
        caught: BaseException | None = None
        with anyio.fail_after(60):
            try:
                await run_calls(wrong, 1, duration=0.5, max_calls=5, warmup_calls=1, factory=open_legacy_sse)
            except BaseException as exc:  # a task group may wrap it
                caught = exc
        assert caught is not None
        assert wrong_answer_in(caught) is not None
    finally:
        stop_all([hub])
    assert await anyio.to_thread.run_sync(_gone, kids, 10.0)  # the hub takes its server with it
