"""Server-Sent Events: an incremental decoder and an encoder (WHATWG event-stream rules)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.errors import MessageTooLarge

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
        self._pending = bytearray()
        self._scanned = 0  # how much of _pending holds no line end
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event_size
        self._at_start = True
        self.last_event_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Raises: MessageTooLarge when one event grows past ``max_event_size`` (the stream is then
        unusable: its next event would start in the middle of this one)."""
        buffer = self._pending
        buffer += chunk
        if self._at_start:
            # The stream may begin with one UTF-8 BOM, which is not part of the first field name.
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                return []  # maybe the first bytes of a BOM: wait for the rest
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
            self._at_start = False
        # Linear in the bytes fed, whatever their shape: every byte is searched once (the search
        # resumes where the last one stopped), and lines are cut out of the buffer by position.
        events: list[SSEEvent] = []
        start = 0
        lf = buffer.find(b"\n", self._scanned)
        cr = buffer.find(b"\r", self._scanned)
        while lf != -1 or cr != -1:
            if cr == -1 or (lf != -1 and lf < cr):
                end, after = lf, lf + 1
            elif cr + 1 == len(buffer):
                break  # a CR at the end may be the first half of CRLF: wait for more
            else:
                end, after = cr, cr + 2 if buffer[cr + 1] == _LF else cr + 1
            event = self._line(buffer[start:end].decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
            start = after
            if lf != -1 and lf < start:
                lf = buffer.find(b"\n", start)
            if cr != -1 and cr < start:
                cr = buffer.find(b"\r", start)
        del buffer[:start]  # O(1) at the front of a bytearray
        # Everything left is an unfinished line: searched already, up to a CR left waiting.
        self._scanned = len(buffer) if cr == -1 else cr - start
        if len(buffer) + self._size > self._max:
            raise self._too_large()
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            # The lines are joined with a newline each: counted too, or a stream of empty data
            # lines would grow an event without bound.
            self._size += len(value) + (1 if self._data else 0)
            self._data.append(value)
            if self._size > self._max:  # a chunk may hold a whole event, past the check in feed
                raise self._too_large()
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
            self.last_event_id = value
        # "²".isdigit() is True too; and int() refuses more than 4300 digits with a ValueError.
        elif name == "retry" and value.isascii() and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            self._retry = int(value)
        return None

    def _too_large(self) -> MessageTooLarge:
        return MessageTooLarge("an SSE event", limit="max_server_message_bytes", maximum=self._max)

    def _dispatch(self) -> SSEEvent | None:
        data, event, event_id, retry = self._data, self._event, self._id, self._retry
        self._data, self._event, self._id, self._retry, self._size = [], "", None, None, 0
        if not data and event_id is None and retry is None:
            return None
        return SSEEvent(data="\n".join(data), event=event or "message", id=event_id, retry=retry)


_BOM = b"\xef\xbb\xbf"
_LF = ord("\n")
_MAX_RETRY_DIGITS = 9  # over 11 days in milliseconds: a longer one is ignored, as a malformed one is


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
