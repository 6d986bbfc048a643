"""The router's task methods: ``tasks/*`` answered by :class:`~proxy.tasks.relay.Tasks`, and the
``tasks`` capability declared to a client that sees a server running tasks."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy.clients.session import InboundRequest
from proxy.core.errors import MethodNotFound
from proxy.policy import Identity
from proxy.protocol.jsonrpc import RequestId
from proxy.tasks import modern, modern_servers
from proxy.tasks.relay import TASK_METHODS, Tasks
from proxy.views.catalogs import Catalogs

__all__ = ["Tasks", "discovered_with_tasks", "task_methods", "task_servers"]  # Tasks: what a router is given

Method = Callable[[InboundRequest, dict[str, Any], RequestId], Awaitable[Any]]


def task_servers(view: Catalogs, identity: Identity, among: set[str]) -> set[str]:
    """Of the servers ``among``, those with a tool ``identity`` is shown in ``view`` (the catalog
    is scanned only while one of them is left to find)."""
    found: set[str] = set()
    if not among:
        return found
    for name in view.served.definitions:
        entry = view.tool(name)
        if entry is not None and entry.server_id in among - found and view.visible_definition(name, identity):
            found.add(entry.server_id)
            if found == among:
                break
    return found


def task_methods(
    tasks: Tasks | None,
    methods: Mapping[str, Method],
    endpoint: str,
    view: Callable[[Identity], Catalogs],
) -> dict[str, Method]:
    """What ``tasks`` adds to a router's method table on ``endpoint`` (nothing without it):
    ``tasks/*``, and ``initialize`` declaring the ``tasks`` capability where it applies."""
    if tasks is None:
        return {}
    initialize = methods["initialize"]

    async def initialized(inbound: InboundRequest, params: dict[str, Any], request_id: RequestId) -> Any:
        result = await initialize(inbound, params, request_id)
        running = tasks.running_tasks()  # usually none: then no catalog is looked at
        if not task_servers(view(inbound.identity), inbound.identity, running):
            return result
        return {**result, "capabilities": {**result["capabilities"], "tasks": tasks.CAPABILITY}}

    async def task(
        method: str, inbound: InboundRequest, params: dict[str, Any], request_id: RequestId
    ) -> Any:
        if inbound.stateless:  # the io.modelcontextprotocol/tasks extension
            return await modern_servers.request(tasks, inbound, endpoint, method, params)
        if method not in TASK_METHODS:
            raise MethodNotFound(f"method not found: {method}")
        return await tasks.request(inbound, endpoint, method, params)

    names = (*TASK_METHODS, *modern.MODERN_METHODS)
    table: dict[str, Method] = {method: functools.partial(task, method) for method in names}
    return {"initialize": initialized, **table}


def discovered_with_tasks(
    tasks: Tasks | None,
    discover: Callable[[], dict[str, Any]],
    view: Callable[[Identity], Catalogs],
) -> Callable[[InboundRequest], dict[str, Any]]:
    """``server/discover``'s result for a caller: declaring the tasks extension when a server
    running tasks has a tool the caller's identity is shown."""

    def discovered(inbound: InboundRequest) -> dict[str, Any]:
        result = discover()
        if tasks is None or not task_servers(view(inbound.identity), inbound.identity, tasks.running_tasks()):
            return result
        return modern.discovered(result)

    return discovered
