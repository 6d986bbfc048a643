"""Our session with one client: what it negotiated, and what we still have to tell it."""

from __future__ import annotations

import logging
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["ClientSession", "new_session_id"]

logger = logging.getLogger("proxy.inbound.session")

_OUTBOX_LIMIT: Final = 256


def new_session_id() -> str:
    """A cryptographically random id of visible ASCII, as the transport spec requires."""
    return secrets.token_urlsafe(32)


@dataclass(eq=False)
class ClientSession:
    id: str
    transport: str  # "http" | "stdio"
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False
    last_seen: float = 0.0
    in_flight: dict[RequestId, anyio.CancelScope] = field(default_factory=dict)
    _outbox: deque[Message] = field(default_factory=lambda: deque(maxlen=_OUTBOX_LIMIT))
    _wakeup: anyio.Event = field(default_factory=anyio.Event)

    def notify(self, message: Message) -> None:
        """Queue a notification for the client; never blocks (the oldest is dropped when full)."""
        if self._outbox and self._outbox[-1] == message:
            return  # a second identical list_changed in a row tells the client nothing new
        if len(self._outbox) == _OUTBOX_LIMIT:
            logger.warning("session %s: outbox full; dropped the oldest notification", self.id[:8])
        self._outbox.append(message)
        self._wakeup.set()

    async def next_notification(self) -> Message:
        """Wait for the next queued notification (for the one stream that delivers them)."""
        while not self._outbox:
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
        return self._outbox.popleft()
