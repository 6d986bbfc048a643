"""Idle memory of ``manifold serve`` with the bench's ``stdio-K`` config (issue #34's RSS target).

Starts one Manifold with K stdio fixture servers, waits until ``/healthz`` counts all of them
ready, waits ``--settle`` seconds, reads VmRSS, stops it; ``--runs`` times, one at a time. With
``--importtime`` the serve runs under ``-X importtime`` and its import tree is printed
(cumulative microseconds, nesting shown by indentation) to find what an idle serve loads.

``--stub`` measures what a package's own unneeded imports cost in the serve, by running it with
that part replaced by a stand-in module (a measurement only; the product imports them plainly):
``uvicorn-cli`` (``uvicorn.main``: click, the reloader supervisors, multiprocessing),
``prometheus-exposition`` (``prometheus_client.exposition``: http.server, wsgiref, urllib.request),
``pydantic-plugins`` (``pydantic.plugin._loader``: importlib.metadata, email, zipfile); and
``uvloop`` (none: Manifold falls back to asyncio's own loop).

Run it under the bench lock::

    flock /tmp/manifold-bench.lock python -m benchmarks.idle_rss --servers 16 --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import anyio

from benchmarks.plan import manifold_config, stdio_server
from benchmarks.procs import REPO, Spawned, rss_bytes, stop_all, wait_servers_ready, write_config
from tests.fixtures.spawn import free_port

__all__ = ["idle_rss", "main"]

MIB: Final = 1024 * 1024
_IMPORT_LINE: Final = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)$")
# Stand-ins, each a module that answers any name it is asked for (nothing calls them while idle).
_STUBS: Final = {
    "uvicorn-cli": (
        "uvicorn.main",
        "from uvicorn.server import Server; return Server if n == 'Server' else None",
    ),
    "prometheus-exposition": ("prometheus_client.exposition", "return 'text/plain' if n.isupper() else None"),
    "pydantic-plugins": ("pydantic.plugin._loader", "return (lambda: ()) if n == 'get_plugins' else None"),
    "uvloop": ("uvloop", ""),  # absent: asyncio's own loop, as benchmarks.procs's LOOP_ENV
}
_LAUNCHER: Final = """
import sys, types
for name, body in {stubs!r}:
    if not body:
        sys.modules[name] = None
        continue
    stub = types.ModuleType(name)
    exec("def __getattr__(n):\\n    " + body, stub.__dict__)
    sys.modules[name] = stub
from proxy.cli.commands import main
raise SystemExit(main(sys.argv[1:]))
"""


def _spawn(workdir: Path, config: dict[str, object], stubs: list[str]) -> Spawned:
    port = free_port()
    config_path = write_config(workdir / "manifold.yaml", config)
    log_path = workdir / "manifold.log"
    launcher = _LAUNCHER.format(stubs=[_STUBS[s] for s in stubs])
    argv = [sys.executable, "-c", launcher, "serve", "--config", str(config_path), "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )
    spawned = Spawned("idle", process, f"http://127.0.0.1:{port}/mcp", log_path, config_path)
    spawned.server_ids = [str(server) for server in config["servers"]]  # type: ignore[attr-defined]
    return spawned


def idle_rss(
    servers: int, *, settle: float, importtime: bool = False, stubs: list[str] | None = None
) -> tuple[float, list[str]]:
    """One serve: RSS in MiB ``settle`` seconds after every server is ready, and (with
    ``importtime``) the top-level modules it imported, in import order."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        config = manifold_config(
            {f"s{i:02d}": stdio_server(f"s{i:02d}", tools=10, page_size=100) for i in range(servers)},
            page_size=100,
        )
        if importtime:
            os.environ["PYTHONPROFILEIMPORTTIME"] = "1"
        try:
            spawned = _spawn(workdir, config, stubs or [])
        finally:
            os.environ.pop("PYTHONPROFILEIMPORTTIME", None)
        try:
            anyio.run(wait_servers_ready, [spawned], 120.0)
            time.sleep(settle)
            rss = rss_bytes(spawned.pid) / MIB
        finally:
            stop_all([spawned])
        modules: list[str] = []
        if importtime:
            for line in spawned.log_path.read_text(errors="replace").splitlines():
                match = _IMPORT_LINE.match(line)
                if match:
                    modules.append(f"{int(match.group(2)):>8} {match.group(3)}{match.group(4)}")
        return rss, modules


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "idle RSS").splitlines()[0])
    parser.add_argument("--servers", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--importtime", action="store_true", help="print -X importtime's tree")
    parser.add_argument("--stub", action="append", choices=sorted(_STUBS), default=[])
    args = parser.parse_args()
    figures: list[float] = []
    for _ in range(args.runs):
        rss, modules = idle_rss(args.servers, settle=args.settle, importtime=args.importtime, stubs=args.stub)
        figures.append(rss)
        if modules:
            print("\n".join(modules))
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"stdio-{args.servers}{''.join(' -' + s for s in args.stub)}: "
        + ", ".join(f"{f:.1f}" for f in figures)
        + f" MiB (load {' '.join(load)})"
    )


if __name__ == "__main__":
    main()
