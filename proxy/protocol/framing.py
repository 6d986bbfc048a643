"""Newline-delimited JSON framing, as the stdio transports use it."""

from __future__ import annotations

from proxy.core.errors import MessageTooLarge

__all__ = ["LineBuffer", "LineTooLong"]


class LineTooLong(MessageTooLarge):
    """A peer sent more than ``max_line`` bytes without a newline.

    ``head`` and ``tail`` are the line's first and last bytes, where the buffer was asked to keep
    them (``keep``): enough to read a message's id from, never the whole line.
    """

    head: bytes = b""
    tail: bytes = b""


class LineBuffer:
    """Collects bytes and hands back complete lines (without the newline, blank lines dropped).

    A line longer than ``max_line`` is never held whole: its bytes are dropped as they come, up to
    its newline, and a :class:`LineTooLong` stands in its place among the lines, so the lines
    around it are kept and the peer's fault can be answered in order.

    With ``keep`` > 0 the refusal also carries the overlong line's first and last ``keep`` bytes,
    and so comes when the line ends (its newline), not when it first grows too long: the id of
    an answer may be its last member (the TypeScript SDK writes ``{"result":…,"id":7}``).
    """

    def __init__(
        self, max_line: int = 16 * 1024 * 1024, *, limit: str = "max_server_message_bytes", keep: int = 0
    ) -> None:
        self._buffer = bytearray()
        self._max_line = max_line
        self._limit = limit  # the config field that set max_line, named in the refusal
        self._discarding = False  # inside an overlong line, until its newline
        self._keep = keep
        self._head = b""  # of the overlong line being discarded (keep > 0 only)
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """Add ``data``; return every line it completed, and a :class:`LineTooLong` for each line
        that grew past ``max_line`` (reported once: when it does, or with ``keep`` when it ends)."""
        out: list[bytes | LineTooLong] = []
        if self._discarding:
            cut = data.find(b"\n")
            if self._keep:
                end = len(data) if cut == -1 else cut
                # One byte more than kept: a CR before the newline is not the line's.
                self._tail = (self._tail + data[max(0, end - self._keep - 1) : end])[-self._keep - 1 :]
            if cut == -1:
                return out
            if self._keep:
                out.append(self._too_long(self._head, self._tail.removesuffix(b"\r")[-self._keep :]))
            data, self._discarding = data[cut + 1 :], False
        self._buffer += data
        if b"\n" in data:
            *lines, rest = self._buffer.split(b"\n")
            self._buffer = bytearray(rest)
            for raw in lines:
                line = bytes(raw[:-1] if raw.endswith(b"\r") else raw)  # one CR: CRLF endings
                if len(line) > self._max_line:
                    out.append(self._too_long(line[: self._keep], line[-self._keep :] if self._keep else b""))
                elif line.strip():
                    out.append(line)
        if len(self._buffer) > self._max_line + 1:  # + 1: a CR that may turn out to end the line
            if self._keep:
                self._head = bytes(self._buffer[: self._keep])
                self._tail = bytes(self._buffer[-self._keep - 1 :])
            else:
                out.append(self._too_long())
            self._buffer.clear()
            self._discarding = True
        return out

    def rest(self) -> bytes | None:
        """The unfinished line the stream ended with, if there is one worth reading (a peer may
        leave out the last newline); the buffer is emptied."""
        line = bytes(self._buffer).strip()
        self._buffer.clear()
        return None if self._discarding or not line else line

    def _too_long(self, head: bytes = b"", tail: bytes = b"") -> LineTooLong:
        refused = LineTooLong("a message line", limit=self._limit, maximum=self._max_line)
        refused.head, refused.tail = head, tail
        return refused
