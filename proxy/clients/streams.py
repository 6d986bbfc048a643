"""SSE streams to a client that survive a dropped connection.

Each stream keeps its recent events under ids ``<stream>.<seq>``, unique within the session, so
a client that lost the connection can come back with ``Last-Event-ID`` and get what it missed,
on that stream only. A stream has at most one live follower: a newer connection takes over from
an older one, so no message is delivered twice.

What is kept is bounded by bytes, not by events (``limits.replay_buffer_bytes``): the newest
events whose encoded sizes, plus a little bookkeeping each, fit in the budget; older ones are
dropped first. An event larger than the whole budget is held only until a follower has written
it or the next event arrives, so it reaches a live client but is never replayed. A client that
resumes after events it missed were dropped gets the ones still kept, as it would after any gap
(the ids say what it missed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from proxy.protocol.sse import encode_event

__all__ = ["EVENT_OVERHEAD", "REPLAY_BYTES", "EventStream", "parse_event_id"]

REPLAY_BYTES: Final = 1024 * 1024  # the default of limits.replay_buffer_bytes
# What keeping one event costs besides its payload (a tuple, an int, a bytes header): counted so
# that a budget full of tiny events costs about what it says, not several times more.
EVENT_OVERHEAD: Final = 100

# A follower's writer gets each event's id and its JSON payload, and frames it as its
# transport needs (an SSE event on HTTP, a line on stdio).
Write = Callable[[str, bytes], Awaitable[None]]


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``"<stream>.<seq>"`` -> (stream, seq), or None for an id Manifold did not issue."""
    stream, _, seq = value.rpartition(".")
    return (stream, int(seq)) if stream and seq.isdigit() else None


class EventStream:
    def __init__(self, stream_id: str, budget: int = REPLAY_BYTES) -> None:
        self.id = stream_id
        self.closed = False
        self.delivered = 0  # the last sequence number a follower wrote
        self._budget = budget
        # Consecutive sequence numbers, oldest first: event ``seq`` is at ``seq - first``.
        self._events: deque[tuple[int, bytes]] = deque()
        self._kept = 0  # bytes the kept events cost, as the budget counts them
        self._seq = 0
        self._changed = anyio.Event()
        self._follower = 0

    @property
    def pending(self) -> bool:
        """Whether events wait that no follower has written yet."""
        return self.delivered < self._seq

    @property
    def kept_bytes(self) -> int:
        """What the events kept for replay cost, as the budget counts them."""
        return self._kept

    def kept(self) -> list[int]:
        """The sequence numbers of the events kept, oldest first."""
        return [seq for seq, _ in self._events]

    def push(self, message: Message) -> None:
        """Append one message, dropping the oldest kept ones past the budget; never blocks."""
        self._seq += 1
        data = jsonrpc.encode(message)
        self._events.append((self._seq, data))
        self._kept += len(data) + EVENT_OVERHEAD
        # The newest event stays even alone over budget: a live follower has yet to write it.
        while self._kept > self._budget and len(self._events) > 1:
            self._drop_oldest()
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def priming(self, retry_ms: int) -> bytes:
        """The event that opens a stream: an id to resume from, no data (MCP 2025-11-25)."""
        return encode_event("", event_id=f"{self.id}.{self._seq}", retry=retry_ms)

    async def follow(self, after: int, write: Write) -> None:
        """Write every kept event after sequence ``after``, live, until the stream closes.

        Returns early when a newer follower takes over.
        """
        self._follower += 1
        me = self._follower
        self._wake()  # an older follower, if any, sees it lost the stream and stops
        cursor = after
        while me == self._follower:
            changed = self._changed
            while (event := self._next_after(cursor)) is not None:
                if me != self._follower:
                    return
                seq, data = event
                await write(f"{self.id}.{seq}", data)
                cursor = self.delivered = seq
                self._written(seq)
            if self.closed:  # and nothing after the cursor is kept: nothing more will come
                return
            await changed.wait()

    def _next_after(self, cursor: int) -> tuple[int, bytes] | None:
        """The oldest kept event after ``cursor`` (O(1): sequence numbers are consecutive)."""
        if not self._events:
            return None
        index = max(0, cursor + 1 - self._events[0][0])
        return self._events[index] if index < len(self._events) else None

    def _written(self, seq: int) -> None:
        """A follower wrote event ``seq``: if it is the lone event over budget, let it go."""
        if self._kept > self._budget and len(self._events) == 1 and self._events[0][0] == seq:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, data = self._events.popleft()
        self._kept -= len(data) + EVENT_OVERHEAD

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
