"""The requests a connection has sent and not yet had answered: one slot each, under our own ids.

Requests from every client session share one link, so each gets a fresh id from the
connection's own counter: clients that reuse JSON-RPC ids never receive each other's answers.
A slot holds the outcome its caller waits for (a bare future and a timer rather than an anyio
Event under ``move_on_after``: this wait is on every call, and the scope and event cost several
times more), the :class:`~proxy.outbound.relay.Relay` the request serves, and the client's own
progress token (the server sees our id as the token).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from proxy.core.errors import ServerProtocolError, ServerUnavailable
from proxy.outbound.relay import Relay
from proxy.protocol.jsonrpc import Message

__all__ = ["Pending", "Slot", "time_out"]

logger = logging.getLogger("proxy.outbound.connection")


@dataclass(slots=True)
class Slot:
    relay: Relay | None
    # Resolved once: False when answered or failed (see response, failure), True when timed out.
    outcome: asyncio.Future[bool]
    response: Message | None = None
    failure: ServerUnavailable | None = None
    progress_token: Any = None  # the client's own token, when the request carried one


class Pending:
    """The slots of one connection, by our request id."""

    __slots__ = ("_ids", "_slots", "server_id")

    def __init__(self, server_id: str) -> None:
        self.server_id = server_id
        self._ids = itertools.count(1)
        self._slots: dict[int, Slot] = {}

    def open(self, relay: Relay | None, loop: asyncio.AbstractEventLoop) -> tuple[int, Slot]:
        """A new id and its slot (kept until :meth:`close`)."""
        request_id = next(self._ids)
        slot = self._slots[request_id] = Slot(relay, loop.create_future())
        return request_id, slot

    def close(self, request_id: int) -> None:
        del self._slots[request_id]

    def get(self, request_id: object) -> Slot | None:
        return self._slots.get(request_id) if type(request_id) is int else None

    def relays(self) -> dict[int, Relay | None]:
        """Each request in flight's relay, by our id (whose request a server's request is about)."""
        return {our_id: slot.relay for our_id, slot in self._slots.items()}

    @property
    def in_flight(self) -> int:
        """Client requests sent and not yet answered; Manifold's own (lists, a listen stream) are
        not counted."""
        return sum(1 for slot in self._slots.values() if slot.relay is not None)

    def settle(
        self, request_id: Any, *, response: Message | None = None, failure: ServerUnavailable | None = None
    ) -> None:
        """Hand request ``request_id`` its outcome; a second outcome for it, or one for an id
        that is not waiting, is dropped."""
        slot = self.get(request_id)
        if slot is None or slot.outcome.done():
            logger.debug("server %s: dropped an answer to unknown id %r", self.server_id, request_id)
            return
        slot.response, slot.failure = response, failure
        slot.outcome.set_result(False)

    def fail_all(self, failure: ServerUnavailable) -> None:
        """Fail every request in flight that is still waiting with ``failure``: each with its own
        instance, since each waiter raises it (a shared one would gather every waiter's frames)."""
        for slot in self._slots.values():
            if not slot.outcome.done():
                slot.failure = _copy_of(failure)
                slot.outcome.set_result(False)


def time_out(outcome: asyncio.Future[bool]) -> None:
    if not outcome.done():
        outcome.set_result(True)


def _copy_of(failure: ServerUnavailable) -> ServerUnavailable:
    """A new instance saying what ``failure`` says (its cause left out: counted where it came)."""
    if type(failure) is ServerProtocolError:
        return ServerProtocolError(failure.server_id, failure.reason)
    if type(failure) is ServerUnavailable:
        return ServerUnavailable(failure.server_id, failure.reason)
    return failure
