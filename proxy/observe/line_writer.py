"""Lines appended to a file (or stdout) from a worker thread, in batches, so a slow or stalled
disk never holds up the event loop. The audit log writes through one.

* :meth:`LineWriter.put` only queues (on the event loop, never blocking). :meth:`LineWriter.run`,
  a task of the gateway's task group, waits :data:`LINGER_SECONDS` after a batch's first line
  for more to join it, then hands everything queued to a worker thread as one ``write`` and one
  ``flush``; what arrives meanwhile is the next batch. A hand-off to a thread costs more than a
  whole ``tools/call`` (~180,000 instructions against ~570,000, counted by valgrind), so one
  per line was the audit log's whole cost at one call at a time; lingering shares it among every
  line of those 50 ms, and an idle gateway still writes a line within them.
* The queue is bounded (``max_buffered`` bytes). When the disk does not keep up and the queue is
  full, a line is **dropped**: counted (``on_dropped``), warned about once per stall, and
  reported by number once writing resumes. The alternatives were worse: blocking would freeze
  every client's calls behind the disk, and an unbounded queue would let a stalled disk take
  all memory. A line larger than the bound is taken only when the queue is empty, so memory
  stays within the bound plus one line (plus the batch being written).
* A failed write (disk full, file gone) is logged and its lines counted in ``failed``; the
  writer goes on with the next batch.
* On shutdown :meth:`run` writes what is left, waiting at most ``flush_seconds``: a disk stalled
  for good loses the rest rather than keeping the process from exiting. A thread cannot be
  killed; one stuck in ``write`` is abandoned, and a lock keeps writes from interleaving.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final, Protocol

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

__all__ = ["FLUSH_SECONDS", "LINGER_SECONDS", "LineWriter", "Output"]

FLUSH_SECONDS: Final = 2.0
LINGER_SECONDS: Final = 0.05  # how late a queued line may be handed to the writing thread

logger = logging.getLogger("proxy.observe.line_writer")


class Output(Protocol):
    """What lines go to: a binary file, ``sys.stdout.buffer``, or a fake in tests."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class LineWriter:
    def __init__(
        self,
        out: Output,
        *,
        what: str,
        max_buffered: int,
        on_dropped: Callable[[], None] = lambda: None,
        close_out: bool = True,
        flush_seconds: float = FLUSH_SECONDS,
        linger: float = LINGER_SECONDS,
    ) -> None:
        self._out = out
        self._what = what
        self._max_buffered = max_buffered
        self._on_dropped = on_dropped
        self._close_out = close_out
        self._flush_seconds = flush_seconds
        self._linger = linger
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._wake = anyio.Event()
        self._lock = threading.Lock()  # one write at a time, even with an abandoned thread
        # The writing thread takes the queue itself: a cancellation before it starts leaves the
        # lines queued for the final flush, and one during its write leaves them to that write.
        self._queue_lock = threading.Lock()
        self._stalled = False
        self._dropped_in_stall = 0
        self.dropped = 0
        """Lines dropped so far because the queue was full."""
        self.failed = 0
        """Lines lost so far because their write failed."""
        self.batches = 0
        """Batches written so far (one ``write`` and one ``flush`` each)."""

    def put(self, line: bytes) -> bool:
        """Queue ``line`` (with its newline) for writing; ``False``: dropped, the queue is full.

        Never blocks: call it on the event loop.
        """
        with self._queue_lock:
            full = bool(self._pending) and self._pending_bytes + len(line) > self._max_buffered
            if not full:
                self._pending.append(line)
                self._pending_bytes += len(line)
        if not full:
            self._wake.set()
            return True
        self.dropped += 1
        self._on_dropped()
        if not self._stalled:
            self._stalled = True
            logger.warning(
                "the %s is not keeping up (%d bytes queued): lines are dropped until it does",
                self._what,
                self._max_buffered,
            )
        self._dropped_in_stall += 1
        return False

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write batches until cancelled, then what is left within ``flush_seconds``; close the file."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                if self._linger > 0:
                    await anyio.sleep(self._linger)  # the lines of the next moments join this batch
                self._wake = anyio.Event()
                await self._write_pending()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._flush_seconds):
                await self._write_pending()
            self.close()

    def drain(self) -> None:
        """Write what is queued on this thread, blocking until the disk has it: for tests and
        for code that runs without an event loop, never while serving."""
        self._report(*self._write_queued())

    def close(self) -> None:
        """Close the file (never stdout). Lines queued after this are never written."""
        if self._close_out and self._lock.acquire(blocking=False):  # else a stuck write holds it
            try:
                self._out.close()
            finally:
                self._lock.release()
        self._close_out = False

    async def _write_pending(self) -> None:
        self._report(*await anyio.to_thread.run_sync(self._write_queued, abandon_on_cancel=True))

    def _write_queued(self) -> tuple[int, Exception | None]:
        """On a worker thread: everything queued, in one write and one flush."""
        with self._lock:
            with self._queue_lock:
                batch, self._pending, self._pending_bytes = self._pending, [], 0
            if not batch:
                return 0, None
            try:
                self._out.write(b"".join(batch))
                self._out.flush()
            except (OSError, ValueError) as exc:  # ValueError: the file was closed meanwhile
                return len(batch), exc
        return len(batch), None

    def _report(self, lines: int, error: Exception | None) -> None:
        if lines == 0:
            return
        if error is not None:
            self.failed += lines
            logger.error("the %s could not write %d lines: %s", self._what, lines, error)
            return
        self.batches += 1
        if self._stalled:
            logger.warning("the %s writes again; %d lines were dropped", self._what, self._dropped_in_stall)
            self._stalled, self._dropped_in_stall = False, 0
