"""Where a server's question outside any call waits for a 2026-07-28 caller to come and answer it.

A handshake-era server behind a ``per_client`` connection may ask its client something before
any call (the filesystem server asks ``roots/list`` right after ``initialize``). A session can be
asked then, on its standalone stream; a 2026-07-28 caller can be asked only inside one of its own
requests (``input_required``). So the identity's connection has a :class:`Doorway` as its default
relay: the question waits there (``hold`` seconds at most, then the server gets an error) until
a call of the identity goes out through :class:`Doorstep`, which hands the question to that call
(its :class:`~proxy.pipeline.bridge.parking.ParkedCall`, so the client answers it in an
``input_required`` round) and sends the call only once the server has every answer it asked
for (at most its request timeout). A server may still apply what it was told in its own time
(the filesystem server checks its new roots on disk first): one started with no directories of
its own refuses a call that overtakes that, rather than serving it from its defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from proxy.core.errors import MethodNotFound
from proxy.outbound.connection import ServerConnection
from proxy.outbound.relay import Relay
from proxy.protocol.jsonrpc import Message

__all__ = ["Doorstep", "Doorway"]


class Doorway:
    """The default relay of one identity's connection (a :class:`~proxy.outbound.relay.Relay`)."""

    def __init__(
        self, name: str, capabilities: Mapping[str, Any], *, hold: float, standing: Relay | None = None
    ) -> None:
        """``standing``: a client that can be asked at any time (a session's standalone stream):
        questions go to it at once, and only their answers are waited for."""
        self._name = name
        self._capabilities = capabilities
        self._hold = hold
        self._standing = standing
        self._callers: list[Relay] = [] if standing is None else [standing]  # the latest last
        self._arrived = anyio.Event()  # a call came: replaced once none is left
        if standing is not None:
            self._arrived.set()
        # Its first call went out: what the server asked while starting was answered (or given
        # up on), and later calls need not wait for the server's questions, which are theirs.
        self.settled = False

    # ---- Relay ---------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._name if self._standing is None else self._standing.session_id

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return self._capabilities

    @property
    def log_level(self) -> str | None:
        return None if self._standing is None else self._standing.log_level

    @property
    def asleep(self) -> bool:
        return False

    def notify(self, message: Message) -> None:
        if self._callers:
            self._callers[-1].notify(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        """Hold the server's question for the identity's next call, and ask it through that call.

        Raises:
            MethodNotFound: no call of the identity came within ``hold`` seconds.
            RemoteError, MissingCapability…: as the call's relay raises them.
        """
        with anyio.move_on_after(self._hold):
            await self._arrived.wait()
        if not self._callers:
            raise MethodNotFound(
                f"Manifold asks a 2026-07-28 client {method} only during one of its calls, "
                f"and none came within {self._hold:g}s"
            )
        return await self._callers[-1].request(method, params)

    # ---- the calls that come through -----------------------------------------------------

    def enter(self, caller: Relay) -> None:
        self._callers.append(caller)
        self._arrived.set()

    def leave(self, caller: Relay) -> None:
        self._callers.remove(caller)
        if not self._callers:  # never with a standing client
            self._arrived = anyio.Event()


class Doorstep:
    """An identity's connection as the parking bridge sees it
    (:class:`proxy.pipeline.bridge.parking.Connection`):
    a call goes out only once the questions the server asked before it are answered."""

    def __init__(self, connection: ServerConnection, doorway: Doorway) -> None:
        self.server_id = connection.server_id
        self._connection = connection
        self._doorway = doorway

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        relay: Relay | None = None,
    ) -> Any:
        """Raises: as :meth:`ServerConnection.request`."""
        if relay is None:
            return await self._connection.request(method, params, timeout=timeout)
        self._doorway.enter(relay)
        try:
            if not self._doorway.settled:
                await self._connection.answered(self._connection.request_timeout)
                self._doorway.settled = True
            return await self._connection.request(method, params, timeout=timeout, relay=relay)
        finally:
            self._doorway.leave(relay)
