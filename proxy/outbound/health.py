"""How a server connection is doing: its state, who hears of changes, and health from outcomes.

Health follows outcomes, not only the link: a connected server whose last
``failures_until_unready`` calls all failed at the transport (unreachable, closed, or an answer
that broke the protocol) is ``failing``: still served, so that one success makes it ``ready``
again, but not counted as up. What a caller can provoke on a healthy server does not count: a
tool's error, a JSON-RPC error the server answered, a timeout (a slow tool, a long argument) or an
answer past a size or depth limit (a big file asked for): else one client could take a
``required`` server, and with it the replica's ``/readyz``, out of service.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from typing import Any, Final, Protocol

from proxy.core.errors import LimitExceeded, ServerTimeout, ServerUnavailable
from proxy.protocol.jsonrpc import Message

__all__ = ["SERVING", "ConnectionListener", "Health", "LimitHook", "ServerState", "backoff_delay"]

logger = logging.getLogger("proxy.outbound.connection")

# Told of each limit a server's answer or list ran into (the refusal is counted by its name).
LimitHook = Callable[[LimitExceeded], None]


class ServerState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    FAILING = "failing"  # connected, but its last calls all failed at the transport
    BACKOFF = "backoff"


SERVING: Final = frozenset({ServerState.READY, ServerState.FAILING})


class ConnectionListener(Protocol):
    """What a connection tells whoever listens to it. Called synchronously; must not block."""

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None: ...

    def state_changed(self, server_id: str, state: ServerState, reason: str | None) -> None: ...

    def server_notification(self, server_id: str, message: Message) -> None:
        """A notification related to no request (a log line, resources/updated)."""
        ...


def backoff_delay(attempt: int, *, base: float = 0.5, cap: float = 30.0, jitter: float = 0.2) -> float:
    """Seconds to wait before restart number ``attempt`` (0-based), with ±``jitter`` spread."""
    delay: float = min(cap, base * 2**attempt)
    return delay * random.uniform(1 - jitter, 1 + jitter)


class Health:
    """One connection's state and reason, told to its listener as they change."""

    __slots__ = (
        "_failures",
        "_failures_until_unready",
        "_listener",
        "_on_limit",
        "reason",
        "server_id",
        "state",
    )

    def __init__(
        self,
        server_id: str,
        listener: ConnectionListener,
        *,
        failures_until_unready: int,
        on_limit: LimitHook | None,
    ) -> None:
        self.server_id = server_id
        self._listener = listener
        self._failures_until_unready = failures_until_unready
        self._on_limit = on_limit
        self._failures = 0  # calls failed at the transport in a row
        self.state = ServerState.STARTING
        self.reason: str | None = None

    @property
    def serving(self) -> bool:
        """Whether requests go out to the server (it is connected, whether or not they succeed)."""
        return self.state in SERVING

    def set(self, state: ServerState, reason: str | None) -> None:
        self.state, self.reason = state, reason
        self._listener.state_changed(self.server_id, state, reason)

    def connected(self) -> None:
        """A new connected lifetime begins: ``ready``, with no failures counted."""
        self._failures = 0
        self.set(ServerState.READY, None)

    def outcome(self, failure: ServerUnavailable | None) -> None:
        """Note how one call ended: ``failure`` at the transport, or None (answered)."""
        cause = failure.__cause__ if failure is not None else None
        if isinstance(cause, LimitExceeded) and self._on_limit is not None:
            self._on_limit(cause)  # a transport's refusal, counted here: transports hold no metrics
        if isinstance(failure, ServerTimeout) or isinstance(cause, LimitExceeded):
            return  # the caller's doing as much as the server's: no sign of health either way
        if failure is None:
            self._failures = 0
            if self.state is ServerState.FAILING:
                logger.info("server %s: a call succeeded; ready again", self.server_id)
                self.set(ServerState.READY, None)
            return
        self._failures += 1
        if self._failures >= self._failures_until_unready and self.state is ServerState.READY:
            reason = f"its last {self._failures} calls failed; the last: {failure.reason}"
            logger.warning("server %s: failing: %s", self.server_id, reason)
            self.set(ServerState.FAILING, reason)
