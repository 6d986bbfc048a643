"""Accepting connections near the open-files limit: never in bulk, and quietly when it fails.

The connection cap (:func:`proxy.inbound.admission.connection_cap`) is the open-files limit less
a reserve, so that a client past the cap is told 503 with ``Retry-After`` while descriptors are
left to tell it. Two things could still reach the kernel's limit (EMFILE), and this module
closes both:

* **Accepting in bulk.** asyncio's event loop accepts up to its ``backlog`` argument's number of
  connections each time the listener is readable, before any of them reaches the connection
  layer that would refuse and close it; uvicorn passes its listen backlog (2048) there, so one
  burst took every descriptor at once. Manifold gives the loop :data:`ACCEPT_BATCH` instead, and
  sets the kernel's listen queue back to :data:`LISTEN_BACKLOG` once the server has started
  (:func:`relisten`), so a burst waits in the kernel rather than in our descriptor table.
* **A flood of log lines.** When accept() fails anyway (descriptors held by other things: server
  pipes, per-client connections, files), asyncio pauses accepting for a second, but first logs
  an error with a traceback for every remaining attempt of the batch, and schedules a restart
  for each: 8,000 lines in 5 s in issue #27. :class:`AcceptFailures` (a loop exception handler)
  turns those into one warning per :data:`LOG_EVERY` seconds, with the count.

uvloop (the ``uvloop`` extra) accepts on its own terms: libuv keeps a spare descriptor and, at
the limit, accepts and closes the excess without logging; the cap still applies before that.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

__all__ = ["ACCEPT_BATCH", "LISTEN_BACKLOG", "LOG_EVERY", "AcceptFailures", "relisten"]

logger = logging.getLogger("proxy.inbound.connections")

ACCEPT_BATCH: Final = 8  # connections asyncio accepts per readiness of a listener
LISTEN_BACKLOG: Final = 2048  # connections the kernel queues for us
LOG_EVERY: Final = 10.0  # seconds between two warnings about failed accepts
_OUT_OF_RESOURCES: Final = "socket.accept() out of system resource"  # asyncio's message
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

Handler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def relisten(sockets: Iterable[socket.socket]) -> None:
    """Give each listening socket the kernel queue :data:`LISTEN_BACKLOG` again (asyncio set it
    to :data:`ACCEPT_BATCH` when it started serving, along with its batch)."""
    for sock in sockets:
        sock.listen(LISTEN_BACKLOG)


class AcceptFailures:
    """A loop exception handler: accept() failures for want of descriptors or memory become one
    warning per ``every`` seconds (how many, since when; no traceback); anything else goes to
    the handler that was there before (asyncio's default: logged with its traceback)."""

    def __init__(self, *, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self._every = every
        self._clock = clock
        self._previous: Handler | None = None
        self._failed = 0  # since the last warning
        self._warned_at: float | None = None
        self.total = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handle ``loop``'s exceptions from now on (idempotent)."""
        current = loop.get_exception_handler()
        if current is self:
            return
        self._previous = current
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if context.get("message") == _OUT_OF_RESOURCES and getattr(exc, "errno", None) in _EXHAUSTED:
            self.failed(exc)
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def failed(self, exc: BaseException | None) -> None:
        """Count one failed accept; warn if none was warned about within ``every`` seconds."""
        self.total += 1
        self._failed += 1
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < self._every:
            return
        first = self._warned_at is None
        self._warned_at, count, self._failed = now, self._failed, 0
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "out of resources"
        logger.warning(
            "accept() failed %d time(s)%s: %s; new connections wait in the listen queue and accepting "
            "resumes within a second. Raise the open-files limit (ulimit -n) or lower "
            "limits.max_connections; at most one such line every %g s",
            count,
            "" if first else f" in the last {self._every:g} s",
            reason,
            self._every,
            extra={"failed_accepts": count, "limit": "max_connections"},
        )
