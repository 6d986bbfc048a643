"""Child's stdin writes against real processes: concurrent lines in order and whole, coalesced
into one write(2) when they meet, held back by a server that stops reading, and failed (never
left waiting) by one that closed its stdin."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from proxy.outbound.over_stdio.child import _BUFFERED, _READ_CHUNK, Child

pytestmark = pytest.mark.anyio

# Copies stdin to stdout once told to (SIGUSR1), and not a byte before: a server that stops reading.
WAIT_THEN_ECHO = """\
import signal, sys
signal.signal(signal.SIGUSR1, lambda *_: None)
sys.stdout.buffer.write(b"ready\\n"); sys.stdout.buffer.flush()
signal.pause()
sys.stdout.buffer.write(sys.stdin.buffer.read()); sys.stdout.buffer.flush()
"""
ECHO = "import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read())\n"
ECHO_LINES = (
    "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line); sys.stdout.flush()\n"
)
# Reads nothing, and closes its stdin when told to (SIGUSR1).
CLOSE_STDIN_LATER = """\
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda *_: os.close(0))
sys.stdout.buffer.write(b"ready\\n"); sys.stdout.buffer.flush()
while True:
    signal.pause()
"""
BIG = b"x" * (512 * 1024) + b"\n"  # more than a pipe holds: its writer waits for the reader
HELD = 0.3  # seconds a held writer is watched to stay held


@asynccontextmanager
async def started(source: str) -> AsyncIterator[Child]:
    process = Child([sys.executable, "-c", source], env=dict(os.environ), cwd=None)
    try:
        yield process
    finally:
        process.signal_group(signal.SIGKILL)
        with anyio.fail_after(5):
            await process.reaped()
        process.close_all()


async def read_until(process: Child, wanted: bytes) -> bytes:
    got = b""
    while wanted not in got:
        chunk = await process.read("stdout")
        assert chunk, got
        got += chunk
    return got


async def read_all(process: Child) -> bytes:
    got = b""
    while chunk := await process.read("stdout"):
        got += chunk
    return got


@pytest.mark.slow
async def test_lines_written_at_the_same_moment_go_out_whole_in_order_and_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[int] = []
    real_write = os.write

    def counted(fd: int, data: bytes | memoryview) -> int:
        writes.append(fd)
        return real_write(fd, data)

    lines = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n for n in range(50)]
    with anyio.fail_after(10):
        async with started(ECHO) as process:
            stdin = process._fd("stdin")
            monkeypatch.setattr(os, "write", counted)  # the module calls os.write
            async with anyio.create_task_group() as tg:
                for line in lines:  # all ready in the same turn of the loop, in this order
                    tg.start_soon(process.write, line)
            monkeypatch.undo()
            process.close("stdin")
            assert await read_all(process) == b"".join(lines)
    # The first went out alone and at once; the 49 that came meanwhile went out together.
    assert writes.count(stdin) == 2


@pytest.mark.slow
async def test_a_lone_line_is_written_before_its_writer_yields() -> None:
    # No waiting for company: at one request at a time, a line is on the pipe at once.
    with anyio.fail_after(10):
        async with started(ECHO) as process:
            async with anyio.create_task_group() as tg:
                tg.start_soon(process.write, b"alone\n")
                await anyio.lowlevel.checkpoint()  # the writer ran one step: its write(2)
                tg.cancel_scope.cancel()  # cancelled in its turn-long wait for company
            process.close("stdin")
            assert await read_all(process) == b"alone\n"


@pytest.mark.slow
async def test_a_server_that_stops_reading_holds_its_writers_and_a_cancelled_waiter_writes_nothing() -> None:
    async with started(WAIT_THEN_ECHO) as process:
        with anyio.fail_after(10):
            await read_until(process, b"ready\n")
        done: list[bytes] = []

        async def write(line: bytes) -> None:
            await process.write(line)
            done.append(line)

        async with anyio.create_task_group() as tg:
            tg.start_soon(write, BIG)
            tg.start_soon(write, b"second\n")
            third, third_ended = anyio.CancelScope(), anyio.Event()
            tg.start_soon(_cancellable, process, b"third\n", third, third_ended)
            await anyio.sleep(HELD)
            assert done == []  # back-pressure: nobody returned while the pipe was full
            third.cancel()  # waiting, not yet taken: its line is not written
            await third_ended.wait()
            process.signal_group(signal.SIGUSR1)  # the server reads again
        assert done == [BIG, b"second\n"]
        process.close("stdin")
        with anyio.fail_after(10):
            assert await read_all(process) == BIG + b"second\n"


async def _cancellable(process: Child, line: bytes, scope: anyio.CancelScope, ended: anyio.Event) -> None:
    try:
        with scope:
            await process.write(line)
    finally:
        ended.set()


@pytest.mark.slow
async def test_a_writer_cancelled_midway_leaves_no_cut_line() -> None:
    async with started(WAIT_THEN_ECHO) as process:
        with anyio.fail_after(10):
            await read_until(process, b"ready\n")
        with anyio.move_on_after(HELD) as held:
            await process.write(BIG)  # begins, then waits for a reader that does not read
        assert held.cancelled_caught
        async with anyio.create_task_group() as tg:
            tg.start_soon(process.write, b"next\n")  # the rest of BIG goes out before it
            await anyio.lowlevel.checkpoint()
            process.signal_group(signal.SIGUSR1)
        process.close("stdin")
        with anyio.fail_after(10):
            assert await read_all(process) == BIG + b"next\n"


@pytest.mark.slow
async def test_a_server_that_closes_its_stdin_while_writers_wait_fails_every_one_of_them() -> None:
    async with started(CLOSE_STDIN_LATER) as process:
        with anyio.fail_after(10):
            await read_until(process, b"ready\n")
        failures: list[BaseException] = []

        async def write(line: bytes) -> None:
            try:
                await process.write(line)
            except OSError as exc:
                failures.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                # The first fills the pipe and waits; the others wait to go out together after it.
                for line in (BIG, b"second\n", b"third\n"):
                    tg.start_soon(write, line)
                await anyio.sleep(HELD)
                assert failures == []
                process.signal_group(signal.SIGUSR1)
        assert len(failures) == 3  # nobody told "written" of a line that never went out
        assert len({id(f) for f in failures}) == 3  # each writer raises its own
        for line in (b"fourth\n", b"fifth\n"):  # and later writers as well
            with pytest.raises(BrokenPipeError):
                await process.write(line)


# ---- reads ------------------------------------------------------------------------------------

# Writes 4 MiB to stdout as fast as the pipe takes it, then "done" on stderr.
FLOOD = """\
import sys
sys.stdout.buffer.write(b"y" * (4 * 1024 * 1024)); sys.stdout.buffer.flush()
sys.stderr.write("done\\n"); sys.stderr.flush()
"""


@pytest.mark.slow
async def test_a_server_that_writes_without_pause_is_held_back_by_an_unread_pipe() -> None:
    """Nothing is read for a while: what is buffered stays bounded and the server's write waits."""
    async with started(FLOOD) as process:
        assert await process.read("stdout")  # the pipe is now watched by the loop
        with anyio.move_on_after(HELD):
            await process.read("stderr")  # the flood cannot have finished: its writes are held
            pytest.fail("the server wrote 4 MiB while nobody read its stdout")
        inflow = process._inflows["stdout"]
        assert inflow._size <= _BUFFERED + _READ_CHUNK
        total = 0
        with anyio.fail_after(10):
            while total < 4 * 1024 * 1024 - _READ_CHUNK:
                chunk = await process.read("stdout")
                assert chunk
                total += len(chunk)
            assert await read_until_stderr(process) == b"done\n"


async def read_until_stderr(process: Child) -> bytes:
    got = b""
    while not got.endswith(b"\n"):
        chunk = await process.read("stderr")
        assert chunk, got
        got += chunk
    return got


@pytest.mark.slow
async def test_the_end_of_a_pipe_reads_as_empty_and_stays_so() -> None:
    async with started("import sys; sys.stdout.buffer.write(b'bye\\n')") as process:
        assert await read_until(process, b"bye\n") == b"bye\n"
        with anyio.fail_after(5):
            assert await process.read("stdout") == b""
            assert await process.read("stdout") == b""


@pytest.mark.slow
async def test_a_pipe_closed_by_us_wakes_its_reader_with_closed_resource_error() -> None:
    async with started(WAIT_THEN_ECHO) as process:
        await read_until(process, b"ready\n")

        async def close_soon() -> None:
            await anyio.sleep(0.1)
            process.close("stdout")

        async with anyio.create_task_group() as tg:
            tg.start_soon(close_soon)
            with anyio.fail_after(5), pytest.raises(anyio.ClosedResourceError):
                await process.read("stdout")
        with pytest.raises(anyio.ClosedResourceError):
            await process.read("stdout")


@pytest.mark.slow
async def test_what_arrived_before_we_closed_a_pipe_is_still_read() -> None:
    async with started(
        "import sys; sys.stdout.buffer.write(b'last words\\n'); sys.stdout.flush()"
    ) as process:
        assert await process.read("stdout")  # registers the pipe; the rest may come later
        await anyio.sleep(0.2)  # the loop reads what is left into the buffer
        process._inflows["stdout"]._chunks.append(b"kept\n")  # as if it had just arrived
        process.close("stdout")
        assert await process.read("stdout") == b"kept\n"
        with pytest.raises(anyio.ClosedResourceError):
            await process.read("stdout")


@pytest.mark.slow
async def test_a_pipe_is_registered_with_the_loop_once_for_many_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``anyio.wait_readable`` added and removed the descriptor for every read that waited."""
    loop = asyncio.get_running_loop()
    added: list[int] = []
    real = loop.add_reader

    def add_reader(fd: int, callback: Any, *args: Any) -> None:
        added.append(fd)
        real(fd, callback, *args)

    monkeypatch.setattr(loop, "add_reader", add_reader)
    async with started(ECHO_LINES) as process:
        for i in range(50):
            await process.write(b"line %d\n" % i)
            await read_until(process, b"line %d\n" % i)
    assert len(added) == 1
