"""What Manifold keeps and logs of a stdio server's stderr: bounded, whatever the server writes.

A server may write its stderr as fast as a pipe goes (100 MB in seconds). Manifold's log must not
grow with it, and reading it must cost little, so:

- the last ``kept`` lines are kept, each cut to ``line_bytes``, for ``/healthz`` and diagnostics;
- at most ``logged_per_minute`` lines a minute are logged; the rest are counted, and the count is
  logged once, as one line, when the next minute's first line comes (or the process stops).

Pure: lines and an explicit ``now`` in, log lines out. The transport does the reading and logging.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

__all__ = ["LINE_BYTES", "StderrTail"]

LINE_BYTES: Final = 1024  # of one stderr line, kept and logged; the rest is cut off
_WINDOW: Final = 60.0  # seconds: the "minute" of ``logged_per_minute``
_CUT: Final = "…"


class StderrTail:
    """The last lines of one server process's stderr, and which of them to log."""

    def __init__(self, *, kept: int, logged_per_minute: int, line_bytes: int = LINE_BYTES) -> None:
        self._kept: deque[bytes] = deque(maxlen=kept)
        self._per_minute = logged_per_minute
        self._line_bytes = line_bytes
        self._window_start: float | None = None
        self._logged = 0
        self._suppressed = 0

    def took(self, lines: Sequence[bytes], now: float, *, cut: Sequence[bool] = ()) -> list[str]:
        """Take ``lines`` (in order, at time ``now``); returns the log lines to write for them.

        ``cut[i]`` says that line ``i`` was longer than the reader kept (shown with a mark)."""
        shown = [
            line[: self._line_bytes] + (_CUT.encode() if i < len(cut) and cut[i] else b"")
            for i, line in enumerate(lines)
        ]
        if self._kept.maxlen:
            self._kept.extend(shown[-self._kept.maxlen :])
        out: list[str] = []
        if self._window_start is None or now - self._window_start >= _WINDOW:
            notice = self.flush()
            if notice is not None:
                out.append(notice)
            self._window_start, self._logged = now, 0
        allowed = max(0, min(len(shown), self._per_minute - self._logged))
        out.extend(_text(line) for line in shown[:allowed])
        self._logged += allowed
        self._suppressed += len(shown) - allowed
        return out

    def flush(self) -> str | None:
        """The count of lines not logged since it was last told, as a log line; None if none."""
        if not self._suppressed:
            return None
        count, self._suppressed = self._suppressed, 0
        return (
            f"({count} more line{'s' if count != 1 else ''} not logged: at most {self._per_minute} a minute,"
            " limits.stderr_lines_logged_per_minute)"
        )

    def last(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines kept (all of them by default), oldest first."""
        lines = list(self._kept)
        return [_text(line) for line in (lines if count is None else lines[-count:] if count else [])]


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")
