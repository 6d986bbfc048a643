"""``manifold``: serve, stdio, check, tools, explain, pins, keygen, credentials, admin.

Exit codes: 0 success; 1 a server is not ready (``tools``); 2 bad usage or bad config.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import resource
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from proxy import __version__
from proxy.app.gateway import Gateway
from proxy.app.reloader import Reloader
from proxy.config.loading import load_config
from proxy.config.model import Config
from proxy.core.errors import ConfigError
from proxy.core.redaction import remember_key_digests, url_secrets
from proxy.observe.logs import remember_secrets, setup_logging
from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.tracing import Running, TracingUnavailable, started

if TYPE_CHECKING:
    from proxy.admin.wiring import AdminParts

__all__ = ["main"]

logger = logging.getLogger("proxy.cli.commands")


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
    stdio = add("stdio", "Serve one client over stdin/stdout (for desktop clients that spawn Manifold).")
    stdio.add_argument(
        "--endpoint", help="serve this configured endpoint's view (default: the whole catalog)"
    )
    check = add("check", "Validate the config and exit: 0 when valid, 2 with the problems listed otherwise.")
    check.add_argument(
        "--online",
        action="store_true",
        help="also fetch each OAuth authorization server's metadata and keys, and say what was found",
    )
    tools = add("tools", "Start every server, print the merged tool catalog and each server's state.")
    tools.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    _identity_options(tools, required=False)
    explain = add(
        "explain", "Print the policy decision for one identity and one tool, prompt, resource or log level."
    )
    _identity_options(explain, required=True)
    subject = explain.add_mutually_exclusive_group(required=True)
    subject.add_argument("--tool", help="a namespaced tool name, e.g. github.delete_repo")
    subject.add_argument("--prompt", help="a namespaced prompt name")
    subject.add_argument("--resource", help="a resource URI")
    subject.add_argument("--log-level-of", metavar="SERVER", help="changing this shared server's log level")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.add_argument(
        "--live",
        action="store_true",
        help="start the servers and decide from the live catalog, even for a name the config resolves",
    )
    pins = add("pins", "Tool pins: accept changed or quarantined tool definitions (policy.pins, guardrails).")
    pins.add_argument(
        "action", choices=["accept"], help="accept the drifted and quarantined definitions into the pins file"
    )
    pins.add_argument("--tool", action="append", help="only this namespaced tool (repeatable; default: all)")
    from proxy.cli.admin import add_parser as add_admin
    from proxy.cli.credentials import add_parser as add_credentials

    add_credentials(commands)
    add_admin(commands)
    keygen = commands.add_parser("keygen", help="Generate an API key and the form to store in auth.api_keys.")
    keygen.add_argument("--name", default="client", help="the identity name for the config snippet")
    keygen.add_argument("--role", action="append", help="a role for the config snippet (repeatable)")
    return parser


def _identity_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--identity", required=required, help="judge as this identity name")
    parser.add_argument("--role", action="append", help="a role of that identity (repeatable)")
    sources = ["api_key", "jwt", "oauth", "stdio", "anonymous"]
    parser.add_argument("--source", default="api_key", choices=sources, help="how it signed in")
    parser.add_argument("--issuer", default="", help="the issuer that vouches for it (a JWT's iss)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        return _keygen(args)
    if args.command == "admin":  # a client of a running Manifold's API: no config read
        from proxy.cli.admin import run as run_admin

        return run_admin(args)
    if args.command == "credentials" and args.action == "keygen":
        from proxy.cli.credentials import keygen

        return keygen()
    try:
        config = load_config(args.config)
        remember_secrets(_configured_secrets(config))
        remember_key_digests(_key_digests(config))
        if args.command == "check":
            return _check(config, args.config, online=args.online)
    except ConfigError as exc:
        print(f"manifold: invalid config\n{exc}", file=sys.stderr)
        return 2
    setup_logging(
        args.log_level or config.log_level, config.logging.format, access_log=config.logging.access_log
    )
    config = _with_flags(config, args)
    if args.command in ("serve", "stdio"):
        _raise_open_files_limit()
    try:
        code: int = anyio.run(_runner(args.command), config, args, backend_options=_loop_options())
    except KeyboardInterrupt:
        return 130
    except TracingUnavailable as exc:
        print(f"manifold: {exc}", file=sys.stderr)
        return 2
    return code


def _loop_options() -> dict[str, bool]:
    """uvloop when it is installed (the ``uvloop`` extra, in the container image): a faster event
    loop than asyncio's own (measured on the call path, issue #20); asyncio's own otherwise, so
    Manifold runs where uvloop does not (Windows, other Pythons)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {"use_uvloop": False}
    return {"use_uvloop": True}


def _runner(command: str) -> Callable[[Config, argparse.Namespace], Awaitable[int]]:
    """The coroutine function that runs ``command`` (the others' modules are not imported)."""
    if command == "serve":
        return _serve
    if command == "stdio":
        return _stdio
    if command == "credentials":
        from proxy.cli.credentials import run

        return run
    from proxy.cli import inspection as inspect

    runners = {"tools": inspect.tools, "explain": inspect.explain, "pins": inspect.pins_accept}
    return runners[command]


def _with_flags(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with what the command line overrides (``serve --host/--port``)."""
    if args.command != "serve":
        return config
    listen = config.listen.model_copy(
        update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    )
    return config.model_copy(update={"listen": listen})


def _reloads(
    config: Config, args: argparse.Namespace
) -> tuple[Callable[[], Config], Callable[[str], Config]]:
    """What a config reload reads: the file again (bounded), or a config given as text (the admin
    API), with the command line's overrides; the secrets of every config read stay redacted (a
    removed server's may still be in a log)."""
    secrets = set(_configured_secrets(config))
    digests = set(_key_digests(config))

    def taken(fresh: Config) -> Config:
        fresh = _with_flags(fresh, args)
        secrets.update(_configured_secrets(fresh))
        remember_secrets(secrets)
        digests.update(_key_digests(fresh))
        remember_key_digests(digests)
        return fresh

    def load() -> Config:
        from proxy.app.reloader import MAX_CONFIG_BYTES

        return taken(load_config(args.config, max_bytes=MAX_CONFIG_BYTES))

    def parse(text: str) -> Config:
        from proxy.config.loading import config_from_text

        return taken(config_from_text(text, "<admin reload>", beside=args.config))

    return load, parse


def _configured_secrets(config: Config) -> list[str]:
    """The values no log line, error or report may print verbatim: every server's header and env
    values (a header's credential also without its ``Bearer``/``Basic`` word), the credentials
    and query values of server URLs and of the Redis URL, and the session-signing secret."""
    values: list[str] = []
    for server in config.servers.values():
        values += server.resolved_env().values()
        for value in server.resolved_headers().values():
            values += [value, value.partition(" ")[2]]
        if server.url is not None:
            values += url_secrets(server.url)
    values += url_secrets(config.rate_limits.redis_url)
    if config.sessions.secret is not None:
        values.append(config.sessions.secret.get_secret_value())
    if config.credentials.key is not None:
        values.append(config.credentials.key.get_secret_value())
    if config.credentials.redis_url is not None:
        values += url_secrets(config.credentials.redis_url)
    for api_key in config.auth.api_keys:  # a key read from the environment is known in clear
        kind, _, variable = api_key.key.partition(":")
        if kind == "env" and (value := os.environ.get(variable, "").strip()):
            values.append(value)
    return values


def _key_digests(config: Config) -> list[bytes]:
    """The digests of the API keys the config holds hashed (``sha256:…``): a key arriving in a
    tool's arguments is recognised by its digest (:func:`proxy.core.redaction.remember_key_digests`)."""
    found: list[bytes] = []
    for api_key in config.auth.api_keys:
        kind, _, rest = api_key.key.partition(":")
        if kind == "sha256":
            try:
                found.append(bytes.fromhex(rest))
            except ValueError:
                continue  # refused by the key table, with its reason
    return found


_OPEN_FILES_WANTED = 65536  # connections, server pipes and sockets: far above max_connections


def _raise_open_files_limit() -> None:
    """Raise the soft RLIMIT_NOFILE toward the hard one (often 1024 soft / 524288 hard), so that
    the connection cap, not the descriptor table, is what refuses a client."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, _OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:  # a container may forbid it: keep going, say so
            logger.warning("could not raise the open-files limit from %d to %d: %s", soft, wanted, exc)
            return
        logger.debug("open-files limit raised from %d to %d", soft, wanted)


def _check(config: Config, path: str, *, online: bool = False) -> int:
    """Everything ``serve`` would refuse, without starting anything; with ``online``, what each
    OAuth authorization server publishes (exit 2 when one cannot be used).

    Raises:
        ConfigError: the config, a policy file or an API key reference is invalid.
    """
    from proxy.auth.authenticator import Authenticator
    from proxy.credentials.wiring import check_modes
    from proxy.enforce.access import Access

    access = Access(config.policy, {s.id: s for s in config.enabled_servers()})
    # Each of these stops at its own problems; the command lists every one's.
    steps: list[Callable[[], object]] = [
        access.load,
        functools.partial(Authenticator.from_settings, config.auth, os.environ),
        functools.partial(check_modes, config),
        functools.partial(_check_documents, config),
    ]
    stopped: list[str] = []
    for step in steps:
        try:
            step()
        except ConfigError as exc:
            stopped.append(str(exc))
    if stopped:
        raise ConfigError("\n".join(stopped))
    from proxy.inbound.observers import warnings

    found = [*config.auth.warnings(config.listen.host), *warnings(config)]
    if config.auth.oauth is not None:
        from proxy.auth.scope_roles import granted_roles, unmapped_scope_warnings

        rules = access.engine.policy.rules if access.engine is not None else ()
        found += unmapped_scope_warnings(config.auth.oauth, granted_roles(rules, config.metrics.role))
    for warning in found:
        print(f"warning: {warning}", file=sys.stderr)
    servers = ", ".join(config.servers) or "none"
    policy = f", policy: {', '.join(config.policy.files)}" if config.policy.files else ""
    if online and config.auth.oauth is not None:
        from proxy.auth.discovery import check_servers

        problems = anyio.run(check_servers, config.auth.oauth)
        if problems:
            print(f"manifold: OAuth is not usable\n{problems}", file=sys.stderr)
            return 2
    print(f"{path}: OK ({len(config.servers)} servers: {servers}{policy})")
    return 0


def _check_documents(config: Config) -> None:
    """Every problem of each OpenAPI server's document (a file, or a URL fetched as serving
    fetches it: Manifold's own HTTP client, the same bounds).

    Raises:
        ConfigError: listing them, per server.
    """
    found: list[str] = []
    for server in config.enabled_servers():
        source = server.openapi
        if source is None:
            continue
        from proxy.core.errors import ServerUnavailable
        from proxy.openapi.validation import problems
        from proxy.outbound.over_openapi.source import read_document

        where = f"servers.{server.id}.openapi.document"
        try:
            document = anyio.run(read_document, server.id, source, server.connect_timeout)
        except ServerUnavailable as exc:
            found.append(f"{where}: {exc.reason.removeprefix('its OpenAPI document ')}")
            continue
        found += [f"{where}: {problem}" for problem in problems(document, source)]
    if found:
        raise ConfigError("\n".join(found))


def _keygen(args: argparse.Namespace) -> int:
    from proxy.auth.apikeys import generate_api_key

    key, stored = generate_api_key()
    roles = ", ".join(args.role or ())
    print(f"API key (give it to the client; it is not stored anywhere): {key}")
    print("config:")
    print(f'  auth:\n    api_keys:\n      - {{name: {args.name}, key: "{stored}", roles: [{roles}]}}')
    return 0


async def _until_signal(
    scope: anyio.CancelScope, gateway: Gateway | None = None, reloader: Reloader | None = None
) -> None:
    """SIGINT/SIGTERM stop; SIGHUP re-reads the config file, the policy files and pins."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGHUP and gateway is not None:
                # One list_changed per kind for the config and the policy together.
                with gateway.notices.held():
                    if reloader is not None:
                        logger.info("received SIGHUP; reloading the config")
                        await reloader.reload("SIGHUP")
                    logger.info("received SIGHUP; reloading the policy and pins")
                    gateway.reload_policy()
                continue
            if signum == signal.SIGHUP:
                continue
            logger.info("received %s; shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


def _reloader(
    gateway: Gateway, config: Config, args: argparse.Namespace, tg: anyio.abc.TaskGroup
) -> Reloader:
    """The config's reloader (SIGHUP), and its watcher of the file started in ``tg``."""
    from proxy.observe.boundary import supervised

    load, parse = _reloads(config, args)
    reloader = Reloader(gateway, load, args.config, parse=parse)
    tg.start_soon(supervised, gateway.boundary, "config watcher", reloader.watch)
    return reloader


async def _admin(gateway: Gateway, reloader: Reloader, tg: anyio.abc.TaskGroup) -> AdminParts:
    """The admin API (``admin:``), running in ``tg`` until it is cancelled."""
    from proxy.admin.wiring import admin_parts
    from proxy.console.live import console_mount

    async def run(*, task_status: anyio.abc.TaskStatus[AdminParts]) -> None:
        async with admin_parts(gateway, reloader) as made:
            made.mounts.append(console_mount(made.admin))  # the web console at /admin/, after the API
            task_status.started(made)
            await anyio.sleep_forever()

    parts: AdminParts = await tg.start(run)
    return parts


@asynccontextmanager
async def _traced(config: Config) -> AsyncIterator[Running | None]:
    """Tracing on for the block when the config or the OTEL_* variables say so (proxy.tracing);
    before the gateway is built, whose call pipeline wraps its stages in spans only then."""
    with started(config.tracing, os.environ) as running:
        yield running


async def _serve(config: Config, args: argparse.Namespace) -> int:
    from proxy.inbound.observers import warnings
    from proxy.inbound.server import bind, serve

    for warning in warnings(config):
        logger.warning("%s", warning)
    metrics_port = config.metrics.port if config.metrics.enabled else None
    try:
        sock = bind(config.listen.host, config.listen.port)
        metrics_sock = bind(config.listen.host, metrics_port) if metrics_port is not None else None
    except OSError as exc:
        logger.error("cannot listen on %s: %s", config.listen.host, exc.strerror)
        return 2
    host, port = sock.getsockname()[:2]
    # Listening at once: /healthz answers while servers connect, /readyz waits for the required
    # ones, and a server that connects later joins the catalog (clients hear list_changed).
    async with (
        _traced(config) as traced,
        anyio.create_task_group() as tg,
        Gateway(config).running(wait_for="none") as gateway,
    ):
        if traced is not None:
            traced.count_drops(gateway.metrics.trace_spans_dropped)
        reloader = _reloader(gateway, config, args, tg)
        tg.start_soon(_until_signal, tg.cancel_scope, gateway, reloader)
        try:
            admin = await _admin(gateway, reloader, tg) if config.admin is not None else None
        except OSError as exc:
            logger.error("cannot listen for the admin API: %s", exc.strerror or exc)
            tg.cancel_scope.cancel()
            return 2
        await tg.start(
            functools.partial(
                serve,
                endpoints=gateway.endpoints,
                mounts=admin.mounts if admin is not None else (),
                mounts_sock=admin.sock if admin is not None else None,
            ),
            gateway.inbound,
            sock,
            metrics_sock,
        )
        shown = f"[{host}]" if ":" in host else host
        logger.info("Manifold %s listening on http://%s:%d/mcp", __version__, shown, port)
        for name in gateway.endpoints:
            logger.info("endpoint %s at http://%s:%d/mcp/%s", name, shown, port, name)
        await anyio.sleep_forever()
    return 0


async def _stdin_lines(max_line: int) -> AsyncIterator[bytes | LineTooLong]:
    """The client's lines on stdin, each bounded as an HTTP body is (``limits.max_request_bytes``):
    a longer one is dropped as it arrives (never held whole), logged, and stood in for by its
    refusal, which the stdio transport answers."""
    async for line in bounded_lines(anyio.wrap_file(sys.stdin.buffer).read1, max_line):
        yield line


async def bounded_lines(
    read: Callable[[int], Awaitable[bytes]], max_line: int
) -> AsyncIterator[bytes | LineTooLong]:
    """Lines from ``read`` (returns b"" at the end), at most ``max_line`` bytes each; a longer
    one is dropped and a :class:`LineTooLong` stands in its place."""
    lines = LineBuffer(max_line, limit="max_request_bytes")
    while chunk := await read(65536):
        for line in lines.feed(chunk):
            if isinstance(line, LineTooLong):
                logger.warning("stdin: dropped a line from the client: %s", line)
            yield line
    if (last := lines.rest()) is not None:
        yield last


def _for_one_client(gateway: Gateway) -> Gateway:
    gateway.connections.for_one_client()
    return gateway


async def _stdio(config: Config, args: argparse.Namespace) -> int:
    from proxy.enforce.confirm.approvals import approver_rules
    from proxy.inbound.stdio import serve_stdio

    name = args.endpoint or ""
    if name and name not in config.endpoints:
        known = ", ".join(sorted(config.endpoints)) or "none is configured"
        logger.error("--endpoint %r is not a configured endpoint (%s)", name[:80], known)
        return 2

    stdout = anyio.wrap_file(sys.stdout.buffer)

    async def write(data: bytes) -> None:
        await stdout.write(data)
        await stdout.flush()

    # Unlike serve, every server's first attempt is waited for: a stdio client (a desktop app) has
    # no /readyz to ask, lists tools as soon as it has initialized, and not every one re-lists on
    # list_changed. Its start-up is paid once per launch, not by other clients.
    # Its shared servers start for its one client, with that client's capabilities, once its first
    # request says what they are (proxy.inbound.stdio). Tracing is on before the gateway is built.
    async with (
        _traced(config) as traced,
        anyio.create_task_group() as tg,
        _for_one_client(Gateway(config)).running(wait_for="all") as gateway,
    ):
        if traced is not None:
            traced.count_drops(gateway.metrics.trace_spans_dropped)
        reloader = _reloader(gateway, config, args, tg)
        tg.start_soon(_until_signal, tg.cancel_scope, gateway, reloader)
        inbound = gateway.endpoints[name] if name else gateway.inbound
        if not gateway.approvals.reachable and (
            asking := approver_rules(gateway.access.engine.policy if gateway.access.engine else None)
        ):
            logger.warning(
                "confirm rules %s need an approver on the approval page, which manifold stdio does not "
                "serve (and no replica shares approvals: rate_limits.backend redis + policy.approvals_url): "
                "their calls are refused at once",
                ", ".join(asking),
            )
        if not inbound.admits(gateway.auth.stdio_identity):
            logger.error("the stdio identity may not use endpoint %r (its roles)", name)
            tg.cancel_scope.cancel()
            return 2
        lines = _stdin_lines(config.limits.max_request_bytes)
        await serve_stdio(inbound, lines, write, client_arrived=gateway.connections.client_arrived)
        tg.cancel_scope.cancel()
    return 0
