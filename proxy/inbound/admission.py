"""Which client connections Manifold serves, and the refusals it writes itself: pure arithmetic.

A connection is admitted when it opens, by how many are open then (``limits.max_connections``,
``limits.connection_reserve``)::

    open ≤ cap - reserve    SERVE        every path
    open ≤ cap              PROBES_ONLY  /healthz, /readyz and /metrics; anything else 503
    open ≤ cap + DRAINING   REFUSE       503 written straight away, then closed lingering
    open > cap + DRAINING   SHED         503 written straight away, then closed at once

The reserve is what keeps an orchestrator's probes answering while clients fill the rest. The
cap itself is lowered below the open-files limit (:func:`connection_cap`): past that limit the
event loop (libuv) accepts a connection only to close it unanswered, which every new client
sees as a broken server. Below it, a client is told 503 and when to come back.

:func:`refusal` builds the whole HTTP response for a refusal once, at start: the connection
layer writes it without an ASGI app, so its body is the JSON-RPC error the fault boundary
makes of the :class:`~proxy.core.errors.LimitExceeded` (naming the limit), with ``Connection: close``.

A refused connection is drained for a moment before it is closed (a close with unread bytes
resets the connection, which can destroy the answer), and holds a descriptor meanwhile: past
``DRAINING`` of those, a flood of connections is shed without the wait, so the refusals never
eat the descriptors kept for the servers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final

import orjson

from proxy.core.errors import LimitExceeded
from proxy.inbound.refusals import Refused, answer_of

__all__ = [
    "FILES_PER_SERVER",
    "FILES_SPARE",
    "RETRY_AFTER",
    "DRAINING",
    "Admission",
    "ConnectionBudget",
    "connection_cap",
    "refusal",
]

# Descriptors kept for everything but client connections: the listeners, the event loop, logs,
# worker threads' pipes, plus each server's pipes or pooled sockets.
FILES_SPARE: Final = 64
FILES_PER_SERVER: Final = 8
# Refused connections past the cap drained at once; half of FILES_SPARE.
DRAINING: Final = 32
# Seconds a refused client is asked to wait: idle connections are reaped within header_timeout,
# busy ones turn over far faster; clients back off on their own past that.
RETRY_AFTER: Final = 1


class Admission(enum.Enum):
    SERVE = "serve"
    PROBES_ONLY = "probes only"
    REFUSE = "refuse"
    SHED = "shed"


@dataclass(slots=True)
class ConnectionBudget:
    """Open client connections, counted, against a cap with a reserve for the probes."""

    cap: int
    reserve: int
    open: int = field(default=0)

    def __post_init__(self) -> None:
        # A cap lowered by the open-files limit keeps at least half of itself for clients.
        self.reserve = min(self.reserve, self.cap // 2)

    def opened(self) -> Admission:
        """Count one connection opened; what it may ask for (see the module docstring)."""
        self.open += 1
        if self.open <= self.cap - self.reserve:
            return Admission.SERVE
        if self.open <= self.cap:
            return Admission.PROBES_ONLY
        return Admission.REFUSE if self.open <= self.cap + DRAINING else Admission.SHED

    def closed(self) -> None:
        self.open -= 1


def connection_cap(max_connections: int, open_files: int | None, servers: int) -> int:
    """``max_connections``, lowered to what the open-files limit (soft RLIMIT_NOFILE; None:
    unlimited) leaves once the descriptors for ``servers`` and the rest are set aside. Never
    below 1: a process with no room at all still answers one client its 503."""
    if open_files is None:
        return max_connections
    room = open_files - FILES_SPARE - FILES_PER_SERVER * servers
    return max(1, min(max_connections, room))


def refusal(status: HTTPStatus, refused: LimitExceeded, *, retry_after: int | None = None) -> bytes:
    """The whole HTTP/1.1 response refusing a request or connection by ``refused``'s limit."""
    body = orjson.dumps(answer_of(Refused(refused, int(status))))
    head = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body
