"""Peers: another MCP aggregator measured in the same run, with the same client and the same servers.

**mcp-hub** (npm, the version pinned in ``benchmarks/peers/package.json`` and its lock) is installed
by the run itself, ``npm ci`` into ``benchmarks/peers/node_modules`` the first time (skipped, with
the reason in the report, when ``npm`` is missing or the install fails). One hub per shape, as for
Manifold: ``mcp-hub-stdio-K`` spawns K stdio fixture servers, ``mcp-hub-http-K`` reaches the first K
HTTP fixtures. Its tools are ``<server>__<tool>``; every echo is checked like Manifold's.

mcp-hub 4.2.1 serves MCP at ``/mcp`` with the HTTP+SSE transport of 2024-11-05 (``GET /mcp`` opens an
event stream whose first event names ``/messages?sessionId=…``; each message is POSTed there,
answered ``202``, and its response arrives on the stream): :class:`LegacySsePoster` speaks it over
two keep-alive connections per worker, one session each. Its home, data and state folders are the
run's workdir, and its marketplace cache is seeded so that it never fetches its registry from the
internet (every byte of a run stays on loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import orjson

from benchmarks.clients import HttpError, HttpPoster, RawPoster, Reply
from benchmarks.load import PROTOCOL_VERSION, WrongAnswer, decode_reply
from benchmarks.procs import REPO, Spawned, poll_ready
from tests.fixtures.spawn import free_port

__all__ = [
    "HUB_PREFIX",
    "LEGACY_SESSION",
    "PEER_DIR",
    "LegacySsePoster",
    "ensure_mcp_hub",
    "hub_tool",
    "install_mcp_hub",
    "open_legacy_sse",
    "spawn_mcp_hub",
    "wait_hubs_ready",
]

PEER_DIR: Final = REPO / "benchmarks" / "peers"
HUB_PREFIX: Final = "mcp-hub-"
LEGACY_SESSION: Final = "legacy-sse"  # the poster opens its own session; the load's id is ignored
_HUB_CLI: Final = PEER_DIR / "node_modules" / "mcp-hub" / "dist" / "cli.js"
_INSTALL_SECONDS: Final = 300
_EVENT_END: Final = b"\n\n"


def _pinned_version() -> str:
    return str(json.loads((PEER_DIR / "package.json").read_text())["dependencies"]["mcp-hub"])


def ensure_mcp_hub() -> tuple[Path | None, str]:
    """mcp-hub's CLI, installed with ``npm ci`` if it is not yet (blocking: run it in a thread).

    Returns ``(cli, version)``, or ``(None, why not)``.
    """
    pinned = _pinned_version()
    installed = _HUB_CLI.parents[1] / "package.json"
    if installed.exists() and json.loads(installed.read_text()).get("version") == pinned:
        return _HUB_CLI, pinned
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        return None, "mcp-hub: skipped, node/npm not installed"
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=PEER_DIR,
            capture_output=True,
            text=True,
            timeout=_INSTALL_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"mcp-hub: skipped, npm ci failed ({exc})"
    if done.returncode != 0 or not _HUB_CLI.exists():
        return None, f"mcp-hub: skipped, npm ci failed: {done.stderr.strip()[-300:]}"
    return _HUB_CLI, pinned


def hub_tool(server: str, tool: str) -> str:
    """What mcp-hub calls ``server``'s ``tool``."""
    return f"{server}__{tool}"


def _seed_marketplace(data_home: Path) -> None:
    """A fresh marketplace cache, so the hub does not fetch its registry from the internet."""
    cache = data_home / "mcp-hub" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    registry = {"version": "offline", "generatedAt": 0, "totalServers": 1, "servers": [{"id": "none"}]}
    seeded = {"registry": registry, "lastFetchedAt": int(time.time() * 1000), "serverDocumentation": {}}
    (cache / "registry.json").write_text(json.dumps(seeded))


def spawn_mcp_hub(name: str, workdir: Path, cli: Path, servers: dict[str, dict[str, Any]]) -> Spawned:
    """``mcp-hub --port P --config …`` as a real process on a free port; ``servers`` in its format
    (``command``/``args`` or ``url``)."""
    home = workdir / name
    home.mkdir(exist_ok=True)
    config_path = home / "mcp-hub.json"
    config_path.write_text(json.dumps({"mcpServers": servers}))
    for sub in ("data", "state", "config"):
        (home / sub).mkdir(exist_ok=True)
    _seed_marketplace(home / "data")
    port = free_port()
    log_path = home / "mcp-hub.log"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    node = shutil.which("node") or "node"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [node, str(cli), "--port", str(port), "--config", str(config_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=home,
            env=env,
        )
    spawned = Spawned(name, process, f"http://127.0.0.1:{port}/mcp", log_path, config_path)
    spawned.server_ids = list(servers)
    return spawned


async def wait_hubs_ready(hubs: list[Spawned], timeout: float) -> None:
    """Wait (bounded) until each hub's ``/api/health`` says every server is connected.

    Raises:
        RuntimeError: a hub exited first.
        TimeoutError: not all were ready within ``timeout``.
    """

    def ready(hub: Spawned, health: dict[str, Any]) -> bool:
        servers = health.get("servers", [])
        return set(hub.server_ids) <= {s.get("name") for s in servers if s.get("status") == "connected"}

    await poll_ready(hubs, timeout, "/api/health", ready)


class LegacySsePoster:
    """One 2024-11-05 HTTP+SSE session: an event stream for answers, a keep-alive POST connection.

    Requests are answered in order on the stream (one in flight per poster, as the load does);
    an answer is returned as if it had been an HTTP 200 JSON body, so the same checks apply.
    """

    def __init__(self, stream: asyncio.StreamReader, closer: asyncio.StreamWriter, poster: RawPoster) -> None:
        self._stream = stream
        self._closer = closer
        self._poster = poster

    async def _event(self) -> tuple[str, bytes]:
        block = await self._stream.readuntil(_EVENT_END)
        event, data = "message", b""
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip().decode("latin-1")
            elif line.startswith(b"data:"):
                data += line[5:].removeprefix(b" ")
        return event, data

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        accepted = await self._poster.post(body)
        if accepted.status != 202:
            return accepted  # an error: the caller's check names it
        request_id = orjson.loads(body).get("id")
        if request_id is None:
            return accepted
        while True:
            event, data = await self._event()
            if event != "message":
                continue
            message = orjson.loads(data)
            if isinstance(message, dict) and message.get("id") == request_id and "method" not in message:
                return Reply(200, "application/json", LEGACY_SESSION, data)

    async def aclose(self) -> None:
        await self._poster.aclose()
        self._closer.close()
        with contextlib.suppress(OSError):
            await self._closer.wait_closed()


async def open_legacy_sse(url: str) -> HttpPoster:
    """A :class:`LegacySsePoster` on ``url`` (the ``GET`` endpoint), its session initialized.

    Raises:
        OSError, HttpError: cannot connect, or the stream did not start as the transport says.
        WrongAnswer: ``initialize`` was refused.
    """
    base = url.rsplit("/", 1)[0]
    host_port = base.split("//", 1)[1]
    host, port = host_port.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
    post_writer: asyncio.StreamWriter | None = None
    try:
        # HTTP/1.0: the stream comes unchunked, and ends when the connection does.
        path = "/" + url.split("//", 1)[1].split("/", 1)[1]
        get = f"GET {path} HTTP/1.0\r\nHost: {host_port}\r\nAccept: text/event-stream\r\n\r\n"
        writer.write(get.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0] or b"text/event-stream" not in head.lower():
            raise HttpError(f"GET {url}: not an event stream: {head[:200]!r}")
        post_reader, post_writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
        placeholder = LegacySsePoster(reader, writer, RawPoster(url, post_reader, post_writer))
        event, data = await placeholder._event()
        if event != "endpoint":
            raise HttpError(f"GET {url}: the first event is {event!r}, not 'endpoint'")
        messages = RawPoster(base + data.decode("latin-1"), post_reader, post_writer)
        poster = LegacySsePoster(reader, writer, messages)
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "manifold-bench", "version": "0"},
        }
        init = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        decode_reply(await poster.post(init), 0)
        done = await poster.post(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        if done.status != 202:
            raise WrongAnswer(f"notifications/initialized: HTTP {done.status}, expected 202")
    except BaseException:
        writer.close()
        if post_writer is not None:
            post_writer.close()
        raise
    return poster


async def install_mcp_hub() -> tuple[Path | None, str]:
    """:func:`ensure_mcp_hub` off the event loop."""
    return await anyio.to_thread.run_sync(ensure_mcp_hub)
