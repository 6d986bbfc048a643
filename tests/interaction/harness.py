"""Run a real ``manifold`` process for end-to-end tests, and reach it with real clients."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
import yaml

from tests.fixtures.spawn import free_port
from tests.inbound.memory_server import INITIALIZE

REPO = Path(__file__).resolve().parents[2]
NPM_BIN = REPO / "tests" / "npm" / "node_modules" / ".bin"
MANIFOLD = [sys.executable, "-m", "proxy.cli"]
# Lets a test without credentials read each server's entry in /healthz (metrics.role "observer").
OBSERVER: dict[str, Any] = {"anonymous": {"roles": ["observer"]}}


@dataclass
class RunningManifold:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


async def wait_for_health(
    manifold: RunningManifold, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20
) -> dict[str, Any]:
    """Poll ``/healthz`` (bounded) until ``predicate`` holds; returns that health report.

    Per-server entries (``servers``) are shown only to an identity with ``metrics.role``: a
    config without credentials gives the anonymous identity that role (:data:`OBSERVER`)."""
    url = manifold.url.replace("/mcp", "/healthz")
    with anyio.fail_after(timeout):
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.get(url) as response:
                    health: dict[str, Any] = await response.json()
                if predicate(health):
                    return health
                await anyio.sleep(0.1)  # a restart with backoff has no event we can see from outside


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _spawn(args: list[str], log_path: Path, open_files: int | None = None) -> subprocess.Popen[bytes]:
    # prlimit rather than a preexec_fn: nothing runs between fork and exec in a threaded process.
    limit = [] if open_files is None else ["prlimit", f"--nofile={open_files}:{open_files}", "--"]
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [*limit, *MANIFOLD, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


@contextmanager
def _terminating(process: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


async def _wait_healthy(
    url: str, process: subprocess.Popen[bytes], log_path: Path, *, settled: bool = True
) -> None:
    with anyio.fail_after(30):
        async with aiohttp.ClientSession() as http:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"manifold exited with {process.returncode}; see {log_path}")
                try:
                    async with http.get(url) as response:
                        health = await response.json() if response.status == 200 else None
                    # Anyone may read how many servers are in each state; ids need metrics.role.
                    if health is not None and not (settled and _first_try(health["counts"])):
                        return
                except aiohttp.ClientConnectionError:
                    pass
                await anyio.sleep(0.05)  # polling a port that is not open yet: nothing to wait on


def _first_try(counts: dict[str, int]) -> bool:
    # Still connecting: a first attempt (or a restart's, which lasts as long and is as rare to
    # poll into as a server is quick to fail: backoff lasts longer than a failed attempt).
    return counts["starting"] > 0


@asynccontextmanager
async def running_manifold(
    tmp_path: Path,
    config: dict[str, Any],
    *,
    settled: bool = True,
    open_files: int | None = None,
    port: int | None = None,
    log_level: str = "info",
) -> AsyncIterator[RunningManifold]:
    """``manifold serve`` on a free loopback port; yields once ``/healthz`` answers and (with
    ``settled``) no server is still on its first attempt to connect: ``serve`` listens at once,
    so without waiting a test could meet a catalog that servers have not joined yet.

    ``open_files``: the process's open-files limit (RLIMIT_NOFILE, soft and hard alike), so that
    it cannot raise it at start. ``port``: listen there (a test that must name Manifold's URL in
    its config, or in another server's, picks it first with ``free_port``).
    """
    port = port if port is not None else free_port()
    config_path = write_config(tmp_path / "manifold.yaml", config)
    log_path = tmp_path / "manifold.log"
    process = _spawn(
        ["serve", "--config", str(config_path), "--port", str(port), "--log-level", log_level],
        log_path,
        open_files,
    )
    with _terminating(process):
        await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process, log_path, settled=settled)
        yield RunningManifold(f"http://127.0.0.1:{port}/mcp", process, log_path)


def fixture_server(name: str, **options: Any) -> dict[str, Any]:
    """Config entry for a stdio fixture server."""
    from tests.fixtures.spawn import fixture_command

    command = fixture_command(name, **options)
    return {"command": command[0], "args": command[1:]}


def everything_server() -> dict[str, Any]:
    return {"command": str(NPM_BIN / "mcp-server-everything"), "args": ["stdio"]}


async def post(
    http: aiohttp.ClientSession, url: str, body: bytes | dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """One raw POST to /mcp; returns status, headers and the decoded JSON body (or None)."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    all_headers.update(headers or {})
    async with http.post(url, data=data, headers=all_headers) as response:
        raw = await response.read()
        decoded = orjson.loads(raw) if raw and response.content_type == "application/json" else None
        return response.status, dict(response.headers), decoded


async def raw_session(http: aiohttp.ClientSession, url: str) -> str:
    """Initialize a session by hand; returns its Mcp-Session-Id."""
    status, headers, body = await post(http, url, INITIALIZE)
    assert status == 200, body
    session_id = headers["mcp-session-id"]
    status, _, _ = await post(
        http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"Mcp-Session-Id": session_id}
    )
    assert status == 202
    return session_id


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


# ---- the checks every hostile case ends with (issue #14) ------------------------------------


def rss_mib(process: subprocess.Popen[bytes]) -> float:
    """Resident memory of ``process`` now, in MiB (Linux /proc)."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {process.pid}")


def open_fds(process: subprocess.Popen[bytes]) -> int:
    """File descriptors ``process`` holds now (Linux /proc)."""
    return len(os.listdir(f"/proc/{process.pid}/fd"))


async def another_client_is_served(manifold: RunningManifold, tool: str, arguments: dict[str, Any]) -> None:
    """The checks after an attack: the process is alive, and a new client (a new session over a
    new connection) calls ``tool`` successfully within a bounded time."""
    assert manifold.process.poll() is None, (
        f"manifold exited with {manifold.process.returncode}:\n{manifold.log()[-3000:]}"
    )
    with anyio.fail_after(20):
        async with aiohttp.ClientSession() as http:
            session_id = await raw_session(http, manifold.url)
            status, _, body = await post(
                http,
                manifold.url,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                },
                {"Mcp-Session-Id": session_id},
            )
    assert status == 200, (status, body)
    assert body is not None, status
    assert "result" in body, body
    assert not body["result"].get("isError"), body


async def refusals(manifold: RunningManifold, limit: str) -> float:
    """``manifold_limit_refusals_total{limit=...}`` on /metrics now; 0 before the first refusal."""
    async with aiohttp.ClientSession() as http, http.get(manifold.url.replace("/mcp", "/metrics")) as got:
        text = await got.text()
    prefix = f'manifold_limit_refusals_total{{limit="{limit}"}} '
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


def names_the_limit(body: Any, limit: str) -> bool:
    """Whether a JSON-RPC error body (or a plain-text refusal) names ``limits.<limit>``."""
    return limit in (body if isinstance(body, str) else orjson.dumps(body).decode())


def prometheus_binary() -> str:
    """The Debian ``prometheus`` binary (``make test`` installs it): a failure in CI, else a skip."""
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (Debian package 'prometheus'); make test installs it")
        pytest.skip("prometheus is not installed: apt-get install prometheus")
    return found
