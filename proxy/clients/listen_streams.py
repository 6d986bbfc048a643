"""Open ``subscriptions/listen`` streams (revision 2026-07-28), for any inbound transport.

:class:`Listens` is the fan-out to every stream: :class:`proxy.notify.list_changes.Notices` publishes each
change once, and every open :class:`Subscription` whose filter wants it queues it. A
subscription never blocks the publisher: its queue is bounded, a repeat of a notification still
unread is dropped (it says nothing new), and a client too slow to drain even that loses the
stream (logged; ending it without a response tells the client to listen again and re-fetch,
which is all a longer queue could have told it).

A transport serves one listen request like this (the HTTP one is
:func:`proxy.inbound.listen_sse.stream_sse`; stdio writes the same messages as lines, and
cancels the block on ``notifications/cancelled`` for the listen request's id)::

    requested = Filter.parse(params)        # InvalidParams: answer the request with the error
    async with endpoint.listen(caller, request_id, requested) as subscription:
        await pump(subscription, write)     # ack, tagged notifications, the final response

Ending: the client goes away (the transport cancels the block: nothing more is written), the
server shuts down (:meth:`Listens.end_all`, or the transport being cancelled from outside:
:func:`completion` is written last), or the client is too slow (the stream just stops).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.subscriptions import Filter, acknowledgement, completion, event_key, tagged

__all__ = ["Ending", "Listens", "Subscription", "pump"]

logger = logging.getLogger("proxy.clients.listen_streams")

BUFFERED: Final = 256  # distinct notifications a stream may hold unread before it is ended


class Ending(enum.Enum):
    GRACEFUL = "graceful"  # the server ended it: the listen request gets its response
    OVERFLOW = "overflow"  # the client read too slowly: the stream just stops


class Subscription:
    """One open listen stream: the messages its transport writes, in order (see :meth:`next`)."""

    def __init__(
        self,
        subscription_id: RequestId,
        identity: Identity,
        honoured: Filter,
        buffer: int,
        endpoint: str = "",
    ) -> None:
        self.id = subscription_id
        self.endpoint = endpoint  # it hears of list changes of this endpoint's view only
        self.identity = identity  # who may read what is decided per update, with today's policy
        self.filter = honoured  # narrowed by the gateway, if at all, before the acknowledgement
        self.ending: Ending | None = None
        self.lost = anyio.Event()  # set on overflow: a writer stuck on a slow client is abandoned
        self._sink: MemoryObjectSendStream[Message]
        self._queue: MemoryObjectReceiveStream[Message]
        self._sink, self._queue = anyio.create_memory_object_stream[Message](buffer)
        self._unread: set[tuple[str, object]] = set()
        self._acknowledged = False
        self._completed = False

    def offer(self, message: Message) -> None:
        """Queue a notification if the filter wants it; never blocks."""
        if self.ending is not None or not self.filter.wants(message):
            return
        key = event_key(message)
        if key in self._unread:
            return
        try:
            self._sink.send_nowait(message)
        except anyio.WouldBlock:
            logger.warning(
                "listen stream %r: the client left %d notifications unread; ending the stream",
                self.id,
                len(self._unread),
            )
            self._end(Ending.OVERFLOW)
            self.lost.set()
        else:
            self._unread.add(key)

    def end(self) -> None:
        """End the stream gracefully: what is queued is still written, then the response."""
        self._end(Ending.GRACEFUL)

    def _end(self, ending: Ending) -> None:
        if self.ending is None:
            self.ending = ending
            self._sink.close()

    async def next(self, wait: float = math.inf) -> Message | None:
        """The next message to write: the acknowledgement first, then the notifications tagged
        with this stream's id, then (after a graceful end) the listen request's response.
        ``None`` after ``wait`` seconds without one.

        Raises:
            anyio.EndOfStream: nothing more will come.
        """
        if not self._acknowledged:
            self._acknowledged = True
            return acknowledgement(self.id, self.filter)
        if self.ending is Ending.OVERFLOW or self._completed:
            raise anyio.EndOfStream
        with anyio.move_on_after(wait):
            try:
                message = await self._queue.receive()
            except anyio.EndOfStream:
                if self.ending is not Ending.GRACEFUL:
                    raise
                self._completed = True
                return completion(self.id)
            self._unread.discard(event_key(message))
            return tagged(message, self.id)
        return None

    @property
    def completed(self) -> bool:
        """Whether the listen request's response was handed out (nothing follows it)."""
        return self._completed

    def close(self) -> None:
        self._end(Ending.GRACEFUL)
        self._queue.close()


class Listens:
    """Every open listen stream of this process, and the one place changes are fanned out."""

    def __init__(self, buffer: int = BUFFERED) -> None:
        self._buffer = buffer
        # Keyed by the object, not the listen id: two clients may both have a listen with id 1.
        self._open: dict[int, Subscription] = {}

    def __len__(self) -> int:
        return len(self._open)

    def open(
        self, subscription_id: RequestId, identity: Identity, honoured: Filter, endpoint: str = ""
    ) -> Subscription:
        """Register a stream; it hears every change published from now on."""
        subscription = Subscription(subscription_id, identity, honoured, self._buffer, endpoint)
        self._open[id(subscription)] = subscription
        return subscription

    def close(self, subscription: Subscription) -> None:
        """Forget a stream (its transport is done with it)."""
        self._open.pop(id(subscription), None)
        subscription.close()

    def publish(self, message: Message, allowed: Callable[[Subscription], bool] | None = None) -> None:
        """Offer a notification to every open stream whose filter wants it and that ``allowed``
        (asked only then: it may cost a policy decision) lets have it."""
        for subscription in list(self._open.values()):
            if subscription.filter.wants(message) and (allowed is None or allowed(subscription)):
                subscription.offer(message)

    def watching(
        self, uri: str, *, besides: object = None, where: Callable[[Subscription], bool] | None = None
    ) -> bool:
        """Whether an open stream other than ``besides`` (and, given ``where``, one it picks)
        watches ``uri`` (downstream interest)."""
        return any(
            uri in s.filter.uris and (where is None or where(s))
            for s in self._open.values()
            if s is not besides
        )

    def end_all(self) -> None:
        """End every stream gracefully (shutdown): each gets its response, then closes."""
        for subscription in list(self._open.values()):
            subscription.end()


async def pump(subscription: Subscription, write: Callable[[Message], Awaitable[None]]) -> None:
    """Write every message of ``subscription`` until it ends (a transport without keep-alives:
    stdio). Cancel the caller to stop at once (the client cancelled: nothing more is written)."""
    while True:
        try:
            message = await subscription.next()
        except anyio.EndOfStream:
            return
        if message is not None:
            await write(message)
