"""Config reload: a changed config file (polled) or SIGHUP re-reads the whole config, and the
servers and endpoints it changes are changed on the running gateway.

Deciding is :func:`proxy.config.reload_plan.diff` (pure); this module reads the file, refuses what
cannot be used, and carries the plan out:

- A file that cannot be read whole (not a regular file, larger than :data:`MAX_CONFIG_BYTES`),
  that does not parse or validate, or that names a stdio server whose command cannot be found,
  is refused with one log line naming the problem; nothing of the config in force changes.
- Everything that can fail is done before anything changes: connections for new servers are
  made (not started) and endpoint views built first.
- A removed server's connections stop (its shared one, every client's own one); requests in
  flight on them fail at once with -32000 naming the server as removed, and the resource
  subscriptions sessions held at it are let go. A changed server is removed and added anew.
- The catalogs are merged once for the whole reload, so a client hears one ``list_changed``
  per kind that changed (a server added later lists when it connects, as at start).
- Settings outside ``servers`` and ``endpoints`` keep their old value and are logged as needing
  a restart.

Each reload is counted (``manifold_config_reloads_total{outcome}``) and logged with what changed.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Literal

import anyio
import anyio.to_thread

from proxy.config.model import Config, ServerConfig
from proxy.config.reload_plan import Plan, diff
from proxy.core.errors import ConfigError
from proxy.core.files import Stamp, stamps
from proxy.enforce.access import renames
from proxy.outbound.connection import ServerConnection
from proxy.views.endpoints import views_of

if TYPE_CHECKING:
    from proxy.app.gateway import Gateway

__all__ = ["MAX_CONFIG_BYTES", "Outcome", "Reloader"]

logger = logging.getLogger("proxy.app.reloader")

MAX_CONFIG_BYTES: Final = 4 * 1024 * 1024  # a config file bigger than this is refused, never read whole
_WATCH_INTERVAL: Final = 1.0  # seconds between looks at the file's stamp
# Longest a reload holds list changes for the servers it started to list (each also bounded by
# its connect timeout); one slower joins later, and its clients hear of it then.
_FIRST_LIST_WAIT: Final = 10.0

Outcome = Literal["applied", "unchanged", "refused"]

REMOVED: Final = "it was removed from the config"
RESTARTED: Final = "it was restarted with new settings (a config reload)"


class Reloader:
    """Reloads the gateway's config from ``path`` (``load`` reads and validates it)."""

    def __init__(
        self,
        gateway: Gateway,
        load: Callable[[], Config],
        path: str,
        *,
        parse: Callable[[str], Config] | None = None,  # a config given as text, read as the file is
    ) -> None:
        self._gateway = gateway
        self._load = load
        self._parse = parse
        self._path = path
        self._lock = anyio.Lock()  # one reload at a time: a SIGHUP while the watcher reloads waits
        self._seen: tuple[Stamp, ...] = stamps([path])

    async def watch(self) -> None:
        """Reload when the file changes. A change is applied once the file has kept the same
        stamp for one look (an editor writing it in steps, a file flipped back and forth: at
        most one reload per :data:`_WATCH_INTERVAL`, of the file as it settled)."""
        pending: tuple[Stamp, ...] | None = None
        while True:
            await anyio.sleep(_WATCH_INTERVAL)
            now = stamps([self._path])
            if now == self._seen:
                pending = None
                continue
            if now != pending:  # still moving: look again before reading it
                pending = now
                continue
            self._seen, pending = now, None
            await self.reload("the config file changed")

    async def read(self, text: str | None = None) -> Config:
        """The config file as it is now, or ``text`` read as the file would be (off the event
        loop), for a plan shown before it is applied (the admin API).

        Raises:
            ConfigError: the file or text is not a valid config (or no text can be read here).
        """
        if text is None:
            return await anyio.to_thread.run_sync(self._load)
        parse = self._parse
        if parse is None:
            raise ConfigError("this Manifold reads its config from its file only")
        return await anyio.to_thread.run_sync(lambda: parse(text))

    async def reload(self, why: str, new: Config | None = None) -> Outcome:
        """Re-read the config (or take ``new``, a config the admin API was given) and apply what
        changed; a bad file is refused (logged, counted) and the config in force stays whole."""
        async with self._lock:
            self._seen = stamps([self._path])
            try:
                outcome = await self._reload(why, new)
            except Exception as exc:  # a surprise of ours: logged and counted; it must not end Manifold
                self._gateway.boundary.caught(exc, "task", "config reload")
                outcome = "refused"
        self._gateway.metrics.config_reload(outcome)
        return outcome

    async def _reload(self, why: str, new: Config | None) -> Outcome:
        gateway = self._gateway
        if new is None:
            try:
                new = await self.read()  # parsing a big file: off the loop
            except ConfigError as exc:
                logger.error("config reload (%s) refused, the config in force stays:\n%s", why, exc)
                return "refused"
        old = gateway.config
        plan = diff(old, new, per_client_ready=gateway.per_client_catalogs is not None)
        if plan.needs_restart or plan.held_back:
            logger.warning("config reload (%s): %s", why, plan.describe())
        if not plan.changes_anything:
            logger.info("config reload (%s): no server or endpoint changed", why)
            return "unchanged"
        # Clients hear one list_changed per kind (and endpoint) for the whole reload: what the
        # servers it starts list on their first attempt is told with what it removed.
        with gateway.notices.held():
            try:
                started = self._apply(plan, old, new)
            except ConfigError as exc:
                logger.error("config reload (%s) refused, the config in force stays:\n%s", why, exc)
                return "refused"
            for connection in started:
                with anyio.move_on_after(min(connection.connect_timeout, _FIRST_LIST_WAIT)):
                    await connection.first_attempt_done.wait()
        logger.info("config reloaded (%s): %s", why, plan.describe())
        return "applied"

    def _apply(self, plan: Plan, old: Config, new: Config) -> list[ServerConnection]:
        """Carry ``plan`` out; the connections it started.

        Raises:
            ConfigError: a new server cannot be built; nothing was changed.
        """
        gateway = self._gateway
        config = plan.in_force(old, new)
        servers = {s.id: s for s in config.enabled_servers()}
        starting = [servers[sid] for sid in (*plan.restart, *plan.add)]
        problems = [problem for server in starting if (problem := _unbuildable(server)) is not None]
        if problems:
            raise ConfigError("\n".join(problems))
        prepared: dict[str, ServerConnection] = {
            server.id: gateway.connections.prepare(server) for server in starting
        }
        views = views_of(config)
        # Nothing below refuses: the new config is in force from here.
        gateway.access.servers_changed(servers)
        gateway.tasks.servers_changed(servers)  # which tools are held as tasks
        gateway.prefixes.clear()
        gateway.prefixes.update({sid: s.prefix for sid, s in servers.items()})
        gateway.renames.clear()
        gateway.renames.update(renames(servers))
        for sid in plan.remove:
            gateway.connections.remove(sid, REMOVED)
            gateway.metrics.server_up(sid, False)
            self._let_go(sid)
        for sid in plan.restart:
            gateway.connections.remove(sid, RESTARTED)
        for server in starting:
            gateway.connections.add(server, prepared[server.id])
        anew = (*plan.endpoints_added, *plan.endpoints_changed)
        for name in (*plan.endpoints_removed, *plan.endpoints_changed):
            gateway.views.retire(name)
        for name in config.endpoints:
            if name not in anew:
                gateway.views.replace(name, views[name][2])
        gateway.config = config
        gateway.logs.endpoints_changed(config.endpoints)
        gateway.catalogs.servers_changed()
        if gateway.per_client_catalogs is not None:
            gateway.per_client_catalogs.servers_changed()
        for name in plan.endpoints_removed:
            del gateway.endpoints[name]
        if anew:
            only = config.model_copy(update={"endpoints": {n: config.endpoints[n] for n in anew}})
            gateway.endpoints.update(gateway.make_endpoints(only))
        return list(prepared.values())

    def _let_go(self, server_id: str) -> None:
        """The resource subscriptions sessions held at a removed server: nothing will tell of
        them again, and its connection is gone (nothing to unsubscribe at)."""
        for session in self._gateway.sessions:
            for uri in [uri for uri, sid in session.subscriptions.items() if sid == server_id]:
                del session.subscriptions[uri]


def _unbuildable(server: ServerConfig) -> str | None:
    """Why a connection to ``server`` cannot even start (its command is not found, its working
    directory is missing), or None."""
    where = f"servers.{server.id}"
    if server.cwd is not None and not os.path.isdir(server.cwd):
        return f"{where}.cwd: {server.cwd!r} is not a directory"
    if server.kind != "stdio" or server.command is None:
        return None
    path = server.resolved_env().get("PATH", os.environ.get("PATH"))
    command = server.command
    if os.sep in command:
        command = os.path.join(server.cwd or os.getcwd(), command)
    if shutil.which(command, path=path) is None:
        return f"{where}.command: {server.command!r} is not an executable file found on PATH"
    return None
