"""Server-Sent Events: an incremental decoder and an encoder (WHATWG event-stream rules)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent", "encode_event"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes as they arrive; get complete events back.

    ``last_event_id`` follows the spec: it persists across events until an ``id`` field
    changes it, which is what a client sends as ``Last-Event-ID`` when it reconnects.
    """

    def __init__(self, max_event_size: int = 16 * 1024 * 1024) -> None:
        self._pending = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event_size
        self._at_start = True
        self.last_event_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Raises: ValueError when one event grows past ``max_event_size``."""
        self._pending += chunk
        if self._at_start:
            # The stream may begin with one UTF-8 BOM, which is not part of the first field name.
            if len(self._pending) < len(_BOM) and _BOM.startswith(self._pending):
                return []  # maybe the first bytes of a BOM: wait for the rest
            self._pending = self._pending.removeprefix(_BOM)
            self._at_start = False
        events: list[SSEEvent] = []
        while True:
            cut = _line_end(self._pending)
            if cut is None:
                break
            end, after = cut
            line = self._pending[:end].decode("utf-8", errors="replace")
            self._pending = self._pending[after:]
            event = self._line(line)
            if event is not None:
                events.append(event)
        if len(self._pending) + self._size > self._max:
            raise ValueError(f"an SSE event exceeded {self._max} bytes")
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._size += len(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
            self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():  # "²".isdigit() is True too
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event, event_id, retry = self._data, self._event, self._id, self._retry
        self._data, self._event, self._id, self._retry, self._size = [], "", None, None, 0
        if not data and event_id is None and retry is None:
            return None
        return SSEEvent(data="\n".join(data), event=event or "message", id=event_id, retry=retry)


_BOM = b"\xef\xbb\xbf"


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first line ends (CRLF, LF or CR), and where the next begins."""
    lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, lf + 1
    if cr + 1 == len(buffer):
        return None  # a CR at the end may be the first half of CRLF: wait for more
    return (cr, cr + 2) if buffer[cr + 1 : cr + 2] == b"\n" else (cr, cr + 1)


def encode_event(
    data: bytes | str, *, event_id: str | None = None, event: str | None = None, retry: int | None = None
) -> bytes:
    """One event; ``data`` may span lines (each becomes its own ``data:`` field)."""
    text = data.decode() if isinstance(data, bytes) else data
    parts: list[str] = []
    if event_id is not None:
        parts.append(f"id: {event_id}\n")
    if event is not None:
        parts.append(f"event: {event}\n")
    if retry is not None:
        parts.append(f"retry: {retry}\n")
    parts.extend(f"data: {line}\n" for line in text.split("\n"))
    parts.append("\n")
    return "".join(parts).encode()
