"""A child process with pipes that are ours alone: its end is seen from the process, not the pipes.

Why not ``anyio.open_process``: on asyncio its ``wait()`` returns only once every pipe to the child
has closed, and the pipes cannot be closed from outside. A server that exits leaving a grandchild
holding its stdout (``npx`` does, a shell script's background job does) would look alive for ever.
Here the child's exit is watched on a pidfd (Linux; elsewhere polled), the pipes are plain
non-blocking file descriptors that we read and write through the event loop, and we close them
when we choose, whoever else still holds the other end.

The child starts in a session (and process group) of its own, so that :meth:`Child.signal_group`
reaches what it spawned. A grandchild that calls ``setsid()`` itself leaves that group: no signal
of ours reaches it, but once our pipe ends are closed it cannot hold us up either.

Raises only ``OSError`` (starting) and ``anyio.ClosedResourceError`` (a pipe closed while waited
on); the transport maps them to ``ServerUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Final

import anyio

__all__ = ["Child"]

_READ_CHUNK: Final = 65536
_BUFFERED: Final = 4 * _READ_CHUNK  # unread bytes from one pipe before it is left unread a while
_POLL_EXIT: Final = 0.25  # seconds between looks at the child where no pidfd tells us of its exit
_POLL_STOP: Final = 0.01  # seconds between looks at a child being stopped (a short, bounded wait)


class _Inflow:
    """One pipe from the child, read by the event loop into a bounded buffer.

    The pipe is registered with the loop once, for as long as it is open, and a callback reads
    it when it is readable: a read that waits costs no ``epoll_ctl`` calls (``anyio.wait_readable``
    adds and removes the descriptor each time: two syscalls, one of them often failing, per
    message on the call path). Past :data:`_BUFFERED` unread bytes the pipe is left unread until
    the reader catches up, so a server that writes without pause is held back by its pipe, as it
    was when we read only on demand.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._chunks: list[bytes] = []
        self._size = 0
        self._ended = False  # the pipe's end, or an error reading it
        self._closed = False  # closed by us
        self._reading = True
        self._waiter: asyncio.Future[None] | None = None
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._chunks.append(data)
            self._size += len(data)
            if self._size >= _BUFFERED:
                self._pause()
        else:
            self._ended = True
            self._pause()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    async def read(self) -> bytes:
        while not self._chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._ended:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        if not self._reading and not self._ended and not self._closed:
            self._reading = True
            self._loop.add_reader(self._fd, self._readable)
        return data

    def close(self) -> None:
        """Forget the pipe (its descriptor is about to close); a waiting reader is woken."""
        self._closed = True
        self._pause()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Child:
    """One started process: its pid, its three pipes, and its exit."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None) -> None:
        """Start ``argv`` in a new session with stdin, stdout and stderr piped to us.

        Raises:
            OSError: it could not be started (no such file, not executable, bad cwd …).
        """
        self._popen = subprocess.Popen(  # the operator's configured command
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            bufsize=0,
            start_new_session=True,
        )
        self.pid = self._popen.pid
        self.exited = anyio.Event()
        self._files: dict[str, IO[bytes] | None] = {
            "stdin": self._popen.stdin,
            "stdout": self._popen.stdout,
            "stderr": self._popen.stderr,
        }
        for file in self._files.values():
            assert file is not None
            os.set_blocking(file.fileno(), False)
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or a kernel before 5.3
            self._pidfd = os.pidfd_open(self.pid)
        # Writes to stdin (see write): the lines no writer took yet, numbered in the order they
        # came; whether a task is writing; how far the numbered lines are written, or were lost.
        self._queue: list[tuple[int, bytes]] = []
        self._numbered = 0
        self._writing = False
        self._written = 0
        self._lost: tuple[int, OSError | anyio.ClosedResourceError] | None = None
        # Set when a write ends: waiters look again. asyncio's own event and sleep(0) below, not
        # anyio's: on this path (every request to a stdio server) anyio's look up the backend on
        # each use (sniffio), and this class is asyncio's already (add_reader, the pidfd).
        self._progress: asyncio.Event | None = None
        # What a writer took and has not written yet: the rest of it once a byte went out (it goes
        # out first on the next write, so that no line is cut in two), the number of its last
        # line, and the lines themselves while not a byte of them went out.
        self._inflows: dict[str, _Inflow] = {}  # stdout, stderr: what their pipes brought
        self._unsent: memoryview | None = None
        self._unsent_upto = 0
        self._untouched: list[tuple[int, bytes]] | None = None

    @property
    def returncode(self) -> int | None:
        """The exit code (``-N`` for signal N) once the process ended and was reaped."""
        return self._popen.returncode

    async def watch(self) -> None:
        """Reap the process when it exits, then set :attr:`exited`. Runs as a task of its own."""
        while self._popen.poll() is None:
            if self._pidfd is not None:
                await anyio.wait_readable(self._pidfd)
                if self._popen.poll() is None:  # readable but not yet reapable: only a moment
                    await anyio.sleep(0.01)
            else:
                await anyio.sleep(_POLL_EXIT)
        self.exited.set()

    async def reaped(self) -> None:
        """Until the process has exited and is reaped, by polling: usable while :meth:`watch`
        waits on the pidfd, and after it was cancelled (on shutdown it is, with everything else,
        and a stop that waited for its event would wait out every grace period)."""
        while self._popen.poll() is None:  # noqa: ASYNC110 - no event to wait on: watch() owns the pidfd
            await anyio.sleep(_POLL_STOP)
        self.exited.set()

    async def read(self, name: str) -> bytes:
        """What arrived on ``stdout`` or ``stderr`` since the last read, waiting for some if
        nothing did; ``b""`` at its end (every writer closed it).

        Raises:
            anyio.ClosedResourceError: we closed it (or are closing it), and what it had brought
                was read.
        """
        inflow = self._inflows.get(name)
        if inflow is None:  # the first read: _fd raises ClosedResourceError if it is closed already
            inflow = self._inflows[name] = _Inflow(asyncio.get_running_loop(), self._fd(name))
        return await inflow.read()

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` (whole lines) to stdin; writers may call at the same time.

        Lines go out in the order their writers called, and together when they meet: the first
        writer writes at once (no wait for company, so one request alone is not delayed), then
        holds the pipe for one more turn of the event loop; the lines of writers that came
        meanwhile go out in one write(2) (under load, requests become ready in the same turn).

        A line whose writer is cancelled before a byte of it went out is not written; once one
        did, the rest goes out first on the next write, so that no line on the pipe is ever cut
        in two. Back-pressure holds: no writer returns before the pipe took its line, so a server
        that stops reading stops its writers, and nothing is held but their waiting lines.

        Raises:
            anyio.ClosedResourceError: stdin is closed (by us).
            OSError: the process's end of the pipe is closed (EPIPE).
        """
        self._numbered += 1
        number = self._numbered
        entry = (number, data)
        self._queue.append(entry)
        try:
            while self._writing:  # another writer will take it
                if self._progress is None:
                    self._progress = asyncio.Event()
                await self._progress.wait()
                if self._written >= number:
                    return
                self._raise_if_lost(number)
            self._raise_if_lost(number)
            if self._written >= number:
                return
            self._writing = True
            try:
                await self._flush()
                await asyncio.sleep(0)  # company may come meanwhile: it goes out in one
                await self._flush()
            finally:
                self._writing = False
                self._wake()  # a waiter takes over what is left
        except BaseException:
            if entry in self._queue:  # its writer was cancelled before it was taken: not written
                self._queue.remove(entry)
            raise

    async def _flush(self) -> None:
        """Write what a cancelled writer left unsent, then every line queued, in one write."""
        if self._unsent is None and self._queue:
            taken, self._queue = self._queue, []
            data = taken[0][1] if len(taken) == 1 else b"".join(line for _, line in taken)
            self._unsent, self._unsent_upto, self._untouched = memoryview(data), taken[-1][0], taken
        if self._unsent is None:
            return
        try:
            while self._unsent:
                fd = self._fd("stdin")
                try:
                    written = os.write(fd, self._unsent)
                except BlockingIOError:
                    written = 0
                if written:
                    self._untouched = None
                    self._unsent = self._unsent[written:]
                if self._unsent:
                    await anyio.wait_writable(fd)
        except (OSError, anyio.ClosedResourceError) as exc:
            self._lost = (self._unsent_upto, exc)  # their writers raise it too
            self._unsent = self._untouched = None
            raise
        except BaseException:
            if self._untouched is not None:  # not a byte went out: back to the queue, in order
                self._queue[:0] = self._untouched
                self._unsent = self._untouched = None
            raise
        self._written = self._unsent_upto
        self._unsent = self._untouched = None
        self._wake()

    def _raise_if_lost(self, number: int) -> None:
        """Raise what failed the write that held line ``number``, if one did."""
        if self._lost is not None and number <= self._lost[0]:
            failure = self._lost[1]
            if isinstance(failure, OSError):
                raise OSError(failure.errno, failure.strerror)
            raise anyio.ClosedResourceError

    def _wake(self) -> None:
        if self._progress is not None:
            self._progress.set()
            self._progress = None

    def signal_group(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the process group; False if no process is left in it."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:  # the pgid now names a group that is not ours
            return False
        return True

    def close(self, name: str) -> None:
        """Close our end of one pipe; whoever waits on it gets ``ClosedResourceError``."""
        file = self._files.get(name)
        if file is not None:
            inflow = self._inflows.get(name)  # kept: a reader still gets what it had brought
            if inflow is not None:
                inflow.close()  # before the descriptor goes: the loop forgets it first
            self._files[name] = None
            anyio.notify_closing(file.fileno())
            file.close()

    def close_all(self) -> None:
        """Close every pipe and the pidfd; reap the process if it ended (it should have)."""
        for name in self._files:
            self.close(name)
        if self._pidfd is not None:
            with contextlib.suppress(RuntimeError):  # no event loop: nothing can wait on it
                anyio.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._popen.poll()

    def _fd(self, name: str) -> int:
        file = self._files[name]
        if file is None:
            raise anyio.ClosedResourceError
        return file.fileno()
