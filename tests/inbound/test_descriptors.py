"""Accepting near the open-files limit: failed accepts are one warning per interval, and a real
asyncio loop at EMFILE (a subprocess under a lowered RLIMIT_NOFILE) logs them so."""

from __future__ import annotations

import asyncio
import errno
import logging
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from proxy.inbound.descriptors import AcceptFailures

EMFILE = OSError(errno.EMFILE, "Too many open files")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _context(exc: BaseException) -> dict[str, Any]:
    return {"message": "socket.accept() out of system resource", "exception": exc}


def test_failed_accepts_are_one_warning_per_interval_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    failures = AcceptFailures(every=10.0, clock=clock)
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.WARNING, logger="proxy.inbound.connections"):
            for _ in range(2048):  # asyncio's batch once: every attempt fails
                failures(loop, _context(EMFILE))
            clock.now = 9.9
            failures(loop, _context(EMFILE))
            clock.now = 10.0
            failures(loop, _context(EMFILE))
    finally:
        loop.close()
    lines = [r for r in caplog.records if r.name == "proxy.inbound.connections"]
    assert [r.failed_accepts for r in lines] == [1, 2049]  # type: ignore[attr-defined]
    assert all(r.exc_info is None for r in lines)  # no traceback
    assert "Too many open files" in lines[0].getMessage()
    assert failures.total == 2050


def test_anything_else_goes_to_the_handler_that_was_there() -> None:
    seen: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        failures = AcceptFailures()
        failures.install(loop)
        failures.install(loop)  # twice: still one layer
        other = {"message": "Task exception was never retrieved", "exception": ValueError()}
        refused = _context(OSError(errno.ECONNREFUSED, "refused"))  # not about resources
        loop.call_exception_handler(other)
        loop.call_exception_handler(refused)
        loop.call_exception_handler(_context(EMFILE))
    finally:
        loop.close()
    assert seen == [other, refused]


# A listener on asyncio's own loop, as `manifold serve` runs it without uvloop: the open-files
# limit is lowered to 64, descriptors are taken up to it, then 300 clients connect. The loop hits
# EMFILE over and over; the log must say so in one line (per 10 s), not one traceback per try.
_AT_THE_LIMIT = textwrap.dedent(
    """
    import asyncio, logging, os, socket, sys
    sys.modules["uvloop"] = None
    from proxy.inbound.descriptors import ACCEPT_BATCH, AcceptFailures
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s %(message)s")

    async def main():
        loop = asyncio.get_running_loop()
        AcceptFailures().install(loop)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, backlog=ACCEPT_BATCH)
        port = server.sockets[0].getsockname()[1]
        hog = []
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        for fd in hog[-40:]:  # room for the clients' sockets, none for the server's accepts
            os.close(fd)
        clients = []
        for _ in range(30):
            c = socket.socket(); c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            clients.append(c)
        try:  # and take what is left, before the loop runs again
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        await asyncio.sleep(2.5)  # the loop retries accepting every second: three rounds
        print("END", flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_a_real_asyncio_loop_at_emfile_logs_one_line_per_interval() -> None:
    done = subprocess.run(
        ["prlimit", "--nofile=64:64", "--", sys.executable, "-c", _AT_THE_LIMIT],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "END", done.stdout
    warnings = [line for line in lines if "accept() failed" in line]
    assert len(warnings) == 1, done.stdout
    assert "Too many open files" in warnings[0]
    assert "Traceback" not in done.stdout + done.stderr
