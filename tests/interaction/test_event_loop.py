"""The event loop: uvloop when it is installed, asyncio's own when it is not (``proxy.cli.commands``).

Each test runs the real ``manifold serve`` in its own interpreter, once with uvloop importable and
once with it made unimportable (as on a platform that has none), lists tools through it, and
reads back which loop served.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures.spawn import free_port

from .harness import (
    RunningManifold,
    _terminating,
    _wait_healthy,
    fixture_server,
    write_config,
)
from .test_lazy_imports import _spawn, list_tools

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# Serve; at exit write the class of the loop that ran it. With "block", uvloop cannot be imported.
_SERVE = """
import asyncio, sys
if sys.argv[2] == "block":
    sys.modules["uvloop"] = None  # import uvloop -> ImportError, as where it is not installed
loops = []
real = asyncio.BaseEventLoop.run_forever
def run_forever(self):
    loops.append(type(self).__module__)
    return real(self)
asyncio.BaseEventLoop.run_forever = run_forever
try:
    import uvloop
    real_uv = uvloop.Loop.run_forever
    def run_forever_uv(self):
        loops.append(type(self).__module__)
        return real_uv(self)
    uvloop.Loop.run_forever = run_forever_uv
except ImportError:
    pass
from proxy.cli.commands import main
code = main(sys.argv[3:])
with open(sys.argv[1], "w") as out:
    out.write(" ".join(loops))
sys.exit(code)
"""


async def _serve_and_list(tmp_path: Path, mode: str) -> str:
    port = free_port()
    config_path = write_config(tmp_path / "manifold.yaml", {"servers": {"one": fixture_server("one")}})
    log_path, loop_path = tmp_path / "manifold.log", tmp_path / "loop.txt"
    argv = [sys.executable, "-c", _SERVE, str(loop_path), mode]
    process = _spawn([*argv, "serve", "--config", str(config_path), "--port", str(port)], log_path)
    manifold = RunningManifold(f"http://127.0.0.1:{port}/mcp", process, log_path)
    with _terminating(process):
        await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process, log_path)
        async with aiohttp.ClientSession() as http:
            assert "one.echo" in await list_tools(http, manifold.url, {})
    assert process.returncode == 0, manifold.log()
    return loop_path.read_text()


async def test_without_uvloop_manifold_serves_on_asyncios_own_loop(tmp_path: Path) -> None:
    assert set((await _serve_and_list(tmp_path, "block")).split()) == {"asyncio.unix_events"}


async def test_with_uvloop_installed_manifold_serves_on_it(tmp_path: Path) -> None:
    assert set((await _serve_and_list(tmp_path, "allow")).split()) == {"uvloop"}
