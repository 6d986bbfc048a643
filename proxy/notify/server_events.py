"""The one listener of every shared server connection: each thing it hears, to the part whose job it is.

Wired by the composition root once the parts exist (they need the connections it listens to):
lists to :class:`~proxy.views.catalogs.Catalogs` (and each client's own view, with ``per_client``
servers), states to :class:`~proxy.servers.connections.ServerHealth`, log lines to
:class:`~proxy.notify.server_logs.ServerLogs` (the policy decides who hears them), anything else a
server says unprompted to :class:`~proxy.notify.list_changes.Notices`, but a task's status, which goes
to the task's own session only (:class:`~proxy.tasks.relay.Tasks`).
"""

from __future__ import annotations

from typing import Any

from proxy.notify.list_changes import Notices
from proxy.notify.server_logs import ServerLogs
from proxy.outbound.health import ServerState
from proxy.protocol.jsonrpc import Message
from proxy.servers.connections import ServerHealth
from proxy.tasks.relay import Tasks
from proxy.views.catalogs import Catalogs
from proxy.views.per_client import PerClientCatalogs

__all__ = ["Heard"]


class Heard:
    """The one listener of every shared server connection: each thing it hears, to its part.
    Wired once the parts exist (they need the connections it listens to)."""

    _catalogs: Catalogs
    _health: ServerHealth
    _notices: Notices
    _logs: ServerLogs
    _per_client: PerClientCatalogs | None
    _tasks: Tasks

    def wire(
        self,
        catalogs: Catalogs,
        health: ServerHealth,
        notices: Notices,
        logs: ServerLogs,
        own: PerClientCatalogs | None,
        tasks: Tasks,
    ) -> None:
        self._catalogs, self._health, self._notices, self._logs = catalogs, health, notices, logs
        self._per_client, self._tasks = own, tasks

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        self._catalogs.listed(server_id, kind, items)
        if self._per_client is not None:
            self._per_client.shared_listed(server_id, kind, items)

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None:
        self._health.state_changed(server_id, state, reason)

    def server_notification(self, server_id: str, message: Message) -> None:
        if message["method"] == "notifications/message":
            self._logs.line(server_id, message)  # by policy: who may see the server
        elif message["method"] == "notifications/tasks/status":
            self._tasks.status(server_id, message)
        else:
            self._notices.server_notification(server_id, message)
