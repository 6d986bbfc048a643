"""``manifold``: serve, stdio, check, tools.

Exit codes: 0 success; 1 a server is not ready (``tools``); 2 bad usage or bad config.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import orjson

from proxy import __version__
from proxy.catalog.merge import Collision
from proxy.config import Config, load_config
from proxy.errors import ConfigError

__all__ = ["main"]

logger = logging.getLogger("proxy.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="manifold", description="One MCP endpoint in front of many MCP servers."
    )
    parser.add_argument("--version", action="version", version=f"manifold {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--config", "-c", required=True, help="YAML or JSON config (or a Claude Desktop mcpServers file)"
        )
        sub.add_argument(
            "--log-level", help="debug, info, warning or error (default: the config's log_level)"
        )
        return sub

    serve = add("serve", "Serve Streamable HTTP at http://HOST:PORT/mcp.")
    serve.add_argument("--host", help="bind address (overrides listen.host)")
    serve.add_argument("--port", type=int, help="port (overrides listen.port; 0 picks a free one)")
    add("stdio", "Serve one client over stdin/stdout (for desktop clients that spawn Manifold).")
    add("check", "Validate the config and exit: 0 when valid, 2 with the problems listed otherwise.")
    tools = add("tools", "Start every server, print the merged tool catalog and each server's state.")
    tools.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"manifold: invalid config\n{exc}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level or config.log_level)
    if args.command == "check":
        servers = ", ".join(config.servers) or "none"
        print(f"{args.config}: OK ({len(config.servers)} servers: {servers})")
        return 0
    if args.command == "serve":
        listen = config.listen.model_copy(
            update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        )
        config = config.model_copy(update={"listen": listen})
    runners = {"serve": _serve, "stdio": _stdio, "tools": _tools}
    try:
        code: int = anyio.run(runners[args.command], config, args, backend_options={"use_uvloop": True})
    except KeyboardInterrupt:
        return 130
    return code


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,  # stdout may be the MCP channel (manifold stdio)
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def _until_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logger.info("received %s; shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


async def _serve(config: Config, _: argparse.Namespace) -> int:
    from proxy.app import Gateway
    from proxy.inbound.http import bind, serve

    try:
        sock = bind(config.listen.host, config.listen.port)
    except OSError as exc:
        logger.error("cannot listen on %s:%d: %s", config.listen.host, config.listen.port, exc.strerror)
        return 2
    host, port = sock.getsockname()[:2]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_until_signal, tg.cancel_scope)
        async with Gateway(config).running() as gateway:
            await tg.start(serve, gateway, sock)
            shown = f"[{host}]" if ":" in host else host
            logger.info("Manifold %s listening on http://%s:%d/mcp", __version__, shown, port)
            await anyio.sleep_forever()
    return 0


async def _stdin_lines() -> AsyncIterator[bytes]:
    stdin = anyio.wrap_file(sys.stdin.buffer)
    while line := await stdin.readline():
        yield line


async def _stdio(config: Config, _: argparse.Namespace) -> int:
    from proxy.app import Gateway
    from proxy.inbound.stdio import serve_stdio

    stdout = anyio.wrap_file(sys.stdout.buffer)

    async def write(data: bytes) -> None:
        await stdout.write(data)
        await stdout.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_until_signal, tg.cancel_scope)
        async with Gateway(config).running() as gateway:
            await serve_stdio(gateway, _stdin_lines(), write)
        tg.cancel_scope.cancel()
    return 0


async def _tools(config: Config, args: argparse.Namespace) -> int:
    from proxy.app import Gateway

    async with Gateway(config).running() as gateway:
        catalog = gateway.tools
        counts = Counter(entry.server_id for entry in catalog.entries)
        servers = {
            sid: {"state": conn.state.value, "reason": conn.reason, "tools": counts[sid]}
            for sid, conn in gateway.connections.items()
        }
        rows = [
            {
                "name": e.name,
                "server": e.server_id,
                "original_name": e.original_name,
                "annotations": dict(e.definition.get("annotations") or {}),
            }
            for e in catalog.entries
        ]
        collisions = list(catalog.collisions)
    not_ready = [sid for sid, s in servers.items() if s["state"] != "ready"]
    if args.json:
        report = {
            "tools": rows,
            "servers": servers,
            "collisions": [
                {"name": c.name, "first": c.first, "second": c.second, "renamed_to": c.renamed_to}
                for c in collisions
            ],
        }
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_table(rows, servers, collisions)
    return 1 if not_ready else 0


def _print_table(
    rows: list[dict[str, Any]], servers: dict[str, dict[str, Any]], collisions: list[Collision]
) -> None:
    def hints(annotations: dict[str, Any]) -> str:
        return ",".join(
            f"{k.removesuffix('Hint')}={str(v).lower()}" for k, v in annotations.items() if k.endswith("Hint")
        )

    table = [("NAME", "SERVER", "ORIGINAL NAME", "ANNOTATIONS")]
    table += [(r["name"], r["server"], r["original_name"], hints(r["annotations"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3])
    print()
    for sid, state in servers.items():
        why = f" ({state['reason']})" if state["reason"] else ""
        print(f"server {sid}: {state['state']}{why}, {state['tools']} tools")
    for collision in collisions:
        print(f"collision: {collision.describe()}")


if __name__ == "__main__":
    raise SystemExit(main())
