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

from proxy.core.errors import RemoteError, ServerProtocolError, ServerUnavailable
from proxy.outbound.relay import Relay
from proxy.protocol.jsonrpc import Message
from proxy.tracing import active
from proxy.tracing.active import ClientTrace

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
    trace: ClientTrace | None = None  # its span, when tracing is on and a client's request is traced
    task: str | None = None  # the server's task id a tasks/result waits on (its requests come on it)

    def tell(self, message: Message) -> None:
        """Pass a message about this request to its client (an event on its span, if traced)."""
        assert self.relay is not None
        self.relay.notify(message)
        if self.trace is not None:
            self.trace.event(message["method"])


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

    def close(self, request_id: int, failure: BaseException | None = None) -> None:
        """Forget the request; ``failure``: how its wait ended, if not with an answer (the
        request's span, if it has one, ends with it or with the answer)."""
        slot = self._slots.pop(request_id)
        if slot.trace is not None:
            if failure is None and slot.failure is None and slot.response is not None:
                error = slot.response.get("error")
                failure = RemoteError(self.server_id, error) if error is not None else None
                slot.trace.end(slot.response.get("result") if failure is None else None, failure)
            else:
                slot.trace.end(None, failure or slot.failure)

    def get(self, request_id: object) -> Slot | None:
        return self._slots.get(request_id) if type(request_id) is int else None

    def trace_of(self, related: object, relay: Relay) -> ClientTrace | None:
        """The span of the call a server's request is about: the one it names, else (over stdio a
        server cannot name it) the one :func:`~proxy.outbound.relay.relay_for` chose."""
        if active.tracer is None:
            return None
        slot = self.get(related) or next((s for s in self._slots.values() if s.relay is relay), None)
        return slot.trace if slot is not None else None

    def waiting_on(self, task: object) -> int | None:
        """Our id of a ``tasks/result`` waiting on the server's task ``task``: a server's request
        related to that task (elicitation, sampling) is about that request, whatever the wire says."""
        if not isinstance(task, str):
            return None
        return next((our_id for our_id, slot in self._slots.items() if slot.task == task), None)

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
