"""The processes a benchmark runs (fixture servers, ``manifold serve``) and what /proc says about them.

CPU time and memory are read from ``/proc`` of the measured process itself, so the load
generator's own work never counts towards the figures of the process it drives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import yaml

from tests.fixtures.spawn import fixture_command, free_port

__all__ = [
    "LOOP_ENV",
    "REPO",
    "Spawned",
    "children_of",
    "cpu_seconds",
    "manifold_check",
    "poll_ready",
    "rss_bytes",
    "spawn_http_fixture",
    "spawn_manifold",
    "spawn_otlp_receiver",
    "stop_all",
    "total_cpu",
    "wait_listening",
    "wait_servers_ready",
    "write_config",
]

REPO: Final = Path(__file__).resolve().parents[1]
MANIFOLD: Final = (sys.executable, "-m", "proxy.cli")
# `--loop asyncio` (benchmarks.run): Manifold as if uvloop were not installed, so it runs on
# asyncio's own loop (proxy.cli.commands falls back to it); the load generator keeps uvloop.
LOOP_ENV: Final = "MANIFOLD_BENCH_LOOP"
_WITHOUT_UVLOOP: Final = (
    sys.executable,
    "-c",
    "import sys; sys.modules['uvloop'] = None; from proxy.cli.commands import main; "
    "raise SystemExit(main(sys.argv[1:]))",
)
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
_POLL: Final = 0.1


@dataclass
class Spawned:
    """A process we started; ``url`` is its MCP endpoint."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    config_path: Path | None = None
    server_ids: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _popen(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def spawn_http_fixture(
    name: str, workdir: Path, *, tools: int, page_size: int, json_response: bool = True
) -> Spawned:
    """The SDK fixture server on Streamable HTTP (``/mcp``), on a free loopback port."""
    port = free_port()
    argv = fixture_command(
        name,
        tools=tools,
        page_size=page_size,
        transport="streamable-http",
        port=port,
        json_response=json_response,
    )
    process = _popen(argv, workdir / f"fixture-{name}.log")
    return Spawned(name, process, f"http://127.0.0.1:{port}/mcp", workdir / f"fixture-{name}.log")


def spawn_otlp_receiver(workdir: Path) -> Spawned:
    """The tests' OTLP/HTTP receiver on a free loopback port, decoding every export and keeping
    nothing (``--mode discard``); its ``url`` is the base endpoint Manifold posts /v1/traces to."""
    port = free_port()
    receiver = REPO / "tests" / "fixtures" / "otlp_receiver.py"
    argv = [sys.executable, str(receiver), "--port", str(port), "--out", os.devnull, "--mode", "discard"]
    process = _popen(argv, workdir / "otlp-receiver.log")
    return Spawned("otlp", process, f"http://127.0.0.1:{port}", workdir / "otlp-receiver.log")


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def spawn_manifold(
    name: str, workdir: Path, config: dict[str, Any], *, wrapper: Sequence[str] = ()
) -> Spawned:
    """``manifold serve`` as a real process on a free loopback port, at the config's log level;
    ``wrapper`` is a command that runs it (``valgrind --tool=cachegrind``, say)."""
    port = free_port()
    home = workdir / f"manifold-{name}"  # relative paths in the config (pins, say) resolve here
    home.mkdir(exist_ok=True)
    config_path = write_config(home / "manifold.yaml", config)
    log_path = home / "manifold.log"
    launcher = _WITHOUT_UVLOOP if os.environ.get(LOOP_ENV) == "asyncio" else MANIFOLD
    argv = [*wrapper, *launcher, "serve", "--config", str(config_path), "--port", str(port)]
    process = _popen(argv, log_path)
    spawned = Spawned(name, process, f"http://127.0.0.1:{port}/mcp", log_path, config_path)
    spawned.server_ids = list(config.get("servers", {}))
    return spawned


_CHECK_MANY: Final = """
import contextlib, io, json, sys
from proxy.cli.commands import main
verdicts = {}
for path in sys.argv[1:]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", "--config", path])
    verdicts[path] = [code, err.getvalue()]
print(json.dumps(verdicts))
"""


def manifold_check(config_paths: Sequence[Path]) -> dict[Path, tuple[bool, str]]:
    """``manifold check`` on each config (one interpreter for all): accepted, or the first problem.

    Raises:
        RuntimeError: the checker itself failed.
    """
    if not config_paths:
        return {}
    result = subprocess.run(
        [sys.executable, "-c", _CHECK_MANY, *map(str, config_paths)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manifold check failed to run: {result.stderr.strip()[-500:]}")
    verdicts: dict[Path, tuple[bool, str]] = {}
    for path, (code, stderr) in json.loads(result.stdout.strip().splitlines()[-1]).items():
        lines = [line for line in stderr.splitlines() if line.strip() and "invalid config" not in line]
        first = lines[0] if lines else f"exit code {code}"
        verdicts[Path(path)] = (True, "") if code == 0 else (False, first.removeprefix(f"{path}: "))
    return verdicts


async def wait_listening(spawned: Iterable[Spawned], timeout: float) -> None:
    """Wait (bounded) until every process accepts TCP connections on its port.

    Raises:
        RuntimeError: a process exited first.
        TimeoutError: not all were listening within ``timeout``.
    """
    pending = list(spawned)
    with anyio.fail_after(timeout):
        while pending:
            still: list[Spawned] = []
            for item in pending:
                if item.process.poll() is not None:
                    raise RuntimeError(
                        f"{item.name} exited with {item.process.returncode}:\n{item.log_tail()}"
                    )
                port = int(item.url.rsplit(":", 1)[1].split("/", 1)[0])
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    still.append(item)
                else:
                    await stream.aclose()
            pending = still
            if pending:
                await anyio.sleep(_POLL)  # a port that is not open yet offers nothing to wait on


async def poll_ready(
    items: Iterable[Spawned], timeout: float, path: str, ready: Callable[[Spawned, dict[str, Any]], bool]
) -> None:
    """Wait (bounded) until ``ready(item, document)`` for each item, ``document`` being the JSON
    its ``GET path`` answers (``{}`` while it answers nothing or an error).

    Raises:
        RuntimeError: a process exited first.
        TimeoutError: not all were ready within ``timeout``.
    """
    pending = list(items)
    with anyio.fail_after(timeout):
        async with aiohttp.ClientSession() as http:
            while pending:
                still: list[Spawned] = []
                for item in pending:
                    if item.process.poll() is not None:
                        raise RuntimeError(
                            f"{item.name} exited with {item.process.returncode}:\n{item.log_tail()}"
                        )
                    try:
                        async with http.get(item.url.replace("/mcp", path)) as response:
                            document = await response.json() if response.status == 200 else {}
                    except (aiohttp.ClientError, ValueError):
                        document = {}
                    if not ready(item, document):
                        still.append(item)
                pending = still
                if pending:
                    await anyio.sleep(_POLL)


async def wait_servers_ready(manifolds: Iterable[Spawned], timeout: float) -> None:
    """Wait (bounded) until each Manifold's ``/healthz`` counts every configured server ready.

    Raises:
        RuntimeError: a Manifold exited first.
        TimeoutError: not all were ready within ``timeout``.
    """

    def ready(item: Spawned, health: dict[str, Any]) -> bool:
        # Counts, not ids: which server is in which state is for metrics.role only.
        counts = health.get("counts", {})
        return (
            bool(item.server_ids)
            and counts.get("ready", 0) >= len(item.server_ids)
            and (counts.get("total") == counts.get("ready"))
        )

    await poll_ready(manifolds, timeout, "/healthz", ready)


def stop_all(spawned: Iterable[Spawned], timeout: float = 10.0) -> None:
    """SIGTERM everything at once, then SIGKILL what has not exited within ``timeout`` (each reaped)."""
    items = [item for item in spawned if item.process.poll() is None]
    for item in items:
        item.process.send_signal(signal.SIGTERM)
    for item in items:
        try:
            item.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            item.process.kill()
            item.process.wait(timeout=5)


# ----------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def total_cpu(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (Manifold's stdio servers)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)
