"""Starting the admin API with ``manifold serve``: the service, its follower of the other
replicas, its HTTP app, and its own listener when ``admin.listen`` is given."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from proxy.admin.routes import PREFIX, AdminApi
from proxy.admin.service import Admin
from proxy.inbound.server import bind
from proxy.inbound.streamable_http import OriginPolicy
from proxy.observe.boundary import supervised

if TYPE_CHECKING:
    from proxy.app.gateway import Gateway
    from proxy.app.reloader import Reloader

__all__ = ["AdminParts", "admin_parts"]


@dataclass
class AdminParts:
    """What ``serve`` mounts: ``mounts`` (path prefix, ASGI app) on the main listener, or on
    ``sock`` alone when the admin API has its own. The console adds its own mount here."""

    admin: Admin
    api: AdminApi
    sock: socket.socket | None
    mounts: list[tuple[str, Any]] = field(default_factory=list)


@asynccontextmanager
async def admin_parts(gateway: Gateway, reloader: Reloader | None) -> AsyncIterator[AdminParts]:
    """The admin API of ``gateway`` (whose config has ``admin:``), following the other replicas
    while the block runs.

    Raises:
        OSError: ``admin.listen`` cannot be bound.
    """
    config = gateway.config
    settings = config.admin
    assert settings is not None
    listen = config.listen
    host = settings.listen.host if settings.listen is not None else listen.host
    origins = OriginPolicy(host, listen.allowed_origins, listen.allowed_hosts)
    sock = bind(settings.listen.host, settings.listen.port) if settings.listen is not None else None
    admin = Admin(gateway, reloader)
    api = AdminApi(admin, gateway.auth, origins)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervised, gateway.boundary, "admin replicas", admin.run)
            yield AdminParts(admin, api, sock, [(PREFIX, api)])
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await admin.aclose()
