"""Newline-delimited JSON framing, as the stdio transports use it."""

from __future__ import annotations

from proxy.errors import MessageTooLarge

__all__ = ["LineBuffer", "LineTooLong"]


class LineTooLong(MessageTooLarge):
    """A peer sent more than ``max_line`` bytes without a newline."""


class LineBuffer:
    """Collects bytes and hands back complete lines (without the newline, blank lines dropped).

    A line longer than ``max_line`` is never held whole: its bytes are dropped as they come, up to
    its newline, and a :class:`LineTooLong` stands in its place among the lines, so the lines
    around it are kept and the peer's fault can be answered in order.
    """

    def __init__(self, max_line: int = 16 * 1024 * 1024, *, limit: str = "max_server_message_bytes") -> None:
        self._buffer = bytearray()
        self._max_line = max_line
        self._limit = limit  # the config field that set max_line, named in the refusal
        self._discarding = False  # inside an overlong line, until its newline

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """Add ``data``; return every line it completed, and a :class:`LineTooLong` for each line
        that grew past ``max_line`` (reported once, when it does)."""
        out: list[bytes | LineTooLong] = []
        if self._discarding:
            cut = data.find(b"\n")
            if cut == -1:
                return out
            data, self._discarding = data[cut + 1 :], False
        self._buffer += data
        if b"\n" in data:
            *lines, rest = self._buffer.split(b"\n")
            self._buffer = bytearray(rest)
            for raw in lines:
                line = bytes(raw[:-1] if raw.endswith(b"\r") else raw)  # one CR: CRLF endings
                if len(line) > self._max_line:
                    out.append(self._too_long())
                elif line.strip():
                    out.append(line)
        if len(self._buffer) > self._max_line + 1:  # + 1: a CR that may turn out to end the line
            self._buffer.clear()
            self._discarding = True
            out.append(self._too_long())
        return out

    def rest(self) -> bytes | None:
        """The unfinished line the stream ended with, if there is one worth reading (a peer may
        leave out the last newline); the buffer is emptied."""
        line = bytes(self._buffer).strip()
        self._buffer.clear()
        return None if self._discarding or not line else line

    def _too_long(self) -> LineTooLong:
        return LineTooLong("a message line", limit=self._limit, maximum=self._max_line)
