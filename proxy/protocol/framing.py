"""Newline-delimited JSON framing, as the stdio transport uses it."""

from __future__ import annotations

__all__ = ["LineBuffer", "LineTooLong"]


class LineTooLong(ValueError):
    """A peer sent more than ``max_line`` bytes without a newline."""


class LineBuffer:
    """Collects bytes and hands back complete lines (without the newline, blank lines dropped)."""

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._max_line = max_line

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every line it completed.

        Raises:
            LineTooLong: the unfinished line grew past ``max_line``; the buffer is cleared.
        """
        self._buffer += data
        if b"\n" not in data:
            if len(self._buffer) > self._max_line:
                self._buffer.clear()
                raise LineTooLong(f"a message line exceeded {self._max_line} bytes")
            return []
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        return [line for line in (bytes(raw).rstrip(b"\r") for raw in lines) if line.strip()]
