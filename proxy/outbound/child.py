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

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Final

import anyio
import anyio.lowlevel

__all__ = ["Child"]

_READ_CHUNK: Final = 65536
_POLL_EXIT: Final = 0.25  # seconds between looks at the child where no pidfd tells us of its exit
_POLL_STOP: Final = 0.01  # seconds between looks at a child being stopped (a short, bounded wait)


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
        self._unsent: memoryview | None = None  # the rest of a line whose writer was cancelled

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
        """The next bytes on ``stdout`` or ``stderr``; ``b""`` at its end (every writer closed it).

        Raises:
            anyio.ClosedResourceError: we closed it (or are closing it).
        """
        waited = False
        while True:
            fd = self._fd(name)
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                waited = True
                continue
            except OSError:
                data = b""
            if not waited:  # a peer that writes without pause must not keep the loop to itself
                await anyio.lowlevel.checkpoint()
            return data

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` to stdin. One writer at a time (the caller holds a lock).

        If a writer is cancelled midway, what it left unwritten goes out first on the next call,
        so that no line on the pipe is ever cut in two.

        Raises:
            anyio.ClosedResourceError: stdin is closed (by us).
            OSError: the process's end of the pipe is closed (EPIPE).
        """
        if self._unsent is not None:
            await self._write_all(self._unsent, begun=True)
        await self._write_all(memoryview(data), begun=False)

    async def _write_all(self, view: memoryview, *, begun: bool) -> None:
        while view:
            fd = self._fd("stdin")
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                written = 0
            if written:
                begun = True
                view = view[written:]
            if view:
                self._unsent = view if begun else None
                await anyio.wait_writable(fd)
        self._unsent = None

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
