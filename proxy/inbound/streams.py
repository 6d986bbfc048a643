"""SSE streams to a client that survive a dropped connection.

Each stream keeps its recent events (bounded) under ids ``<stream>.<seq>``, unique within the
session, so a client that lost the connection can come back with ``Last-Event-ID`` and get
what it missed, on that stream only. A stream has at most one live follower: a newer
connection takes over from an older one, so no message is delivered twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message
from proxy.protocol.sse import encode_event

__all__ = ["EventStream", "parse_event_id"]

_KEEP: Final = 128  # events kept per stream for replay

# A follower's writer gets each event's id and its JSON payload, and frames it as its
# transport needs (an SSE event on HTTP, a line on stdio).
Write = Callable[[str, bytes], Awaitable[None]]


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``"<stream>.<seq>"`` -> (stream, seq), or None for an id Manifold did not issue."""
    stream, _, seq = value.rpartition(".")
    return (stream, int(seq)) if stream and seq.isdigit() else None


class EventStream:
    def __init__(self, stream_id: str, keep: int = _KEEP) -> None:
        self.id = stream_id
        self.closed = False
        self.delivered = 0  # the last sequence number a follower wrote
        self._events: deque[tuple[int, bytes]] = deque(maxlen=keep)
        self._seq = 0
        self._changed = anyio.Event()
        self._follower = 0

    @property
    def pending(self) -> bool:
        """Whether events wait that no follower has written yet."""
        return self.delivered < self._seq

    def push(self, message: Message) -> None:
        """Append one message; never blocks."""
        self._seq += 1
        self._events.append((self._seq, jsonrpc.encode(message)))
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def priming(self, retry_ms: int) -> bytes:
        """The event that opens a stream: an id to resume from, no data (MCP 2025-11-25)."""
        return encode_event("", event_id=f"{self.id}.{self._seq}", retry=retry_ms)

    async def follow(self, after: int, write: Write) -> None:
        """Write every event after sequence ``after``, live, until the stream closes.

        Returns early when a newer follower takes over.
        """
        self._follower += 1
        me = self._follower
        self._wake()  # an older follower, if any, sees it lost the stream and stops
        cursor = after
        while me == self._follower:
            changed = self._changed
            for seq, data in [event for event in self._events if event[0] > cursor]:
                if me != self._follower:
                    return
                await write(f"{self.id}.{seq}", data)
                cursor = self.delivered = seq
            if self.closed and cursor >= self._seq:
                return
            await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
