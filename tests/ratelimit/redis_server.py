"""A private redis-server for tests and benchmarks: loopback only, no persistence, its own directory.

The server can be stopped and started again on the same port, to test what replicas do while
Redis is gone and after it is back.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

__all__ = ["REDIS_SERVER", "RedisServer", "running_redis"]

REDIS_SERVER: str | None = shutil.which("redis-server") or (
    "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
)
_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.01


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _answers_ping(port: int) -> bool:
    try:
        stream = await anyio.connect_tcp("127.0.0.1", port)
    except OSError:
        return False
    async with stream:
        try:
            await stream.send(b"PING\r\n")
            return (await stream.receive()).startswith(b"+PONG")
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
            return False


class RedisServer:
    """One redis-server process at a time on a fixed loopback port."""

    def __init__(self, directory: Path, executable: str) -> None:
        self.directory = directory
        self.executable = executable
        self.port = _free_port()
        self._process: anyio.abc.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start the server and return once it answers PING (at most 10 s).

        Raises:
            RuntimeError: the process exited before it answered.
            TimeoutError: it did not answer in time.
        """
        command = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self._process = process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # Polling the port is the one wait with no event to wait for.
        with anyio.fail_after(_START_TIMEOUT):
            while not await _answers_ping(self.port):
                if process.returncode is not None:
                    raise RuntimeError(f"redis-server exited with {process.returncode}; see redis.log")
                await anyio.sleep(_POLL_INTERVAL)

    async def stop(self) -> None:
        """SIGTERM, SIGKILL after 5 s; always reaped. Does nothing if not running."""
        process, self._process = self._process, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with anyio.move_on_after(_STOP_TIMEOUT):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
            await process.aclose()


@asynccontextmanager
async def running_redis(directory: Path) -> AsyncIterator[RedisServer]:
    """A started :class:`RedisServer` in ``directory``, stopped on exit.

    Raises:
        RuntimeError: redis-server is not installed, or exited at start.
    """
    if REDIS_SERVER is None:
        raise RuntimeError("redis-server is not installed")
    server = RedisServer(directory, REDIS_SERVER)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
