"""The line writer: lines queued on the event loop, written by a worker thread in batches; a
stalled disk costs dropped lines (counted), never a blocked loop or unbounded memory."""

from __future__ import annotations

import logging
import threading
import time

import anyio
import pytest

from proxy.observe.line_writer import LineWriter

pytestmark = pytest.mark.anyio


class Disk:
    """An output whose writes can be held (a stalled disk) or made to fail (a full one)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.flushes = 0
        self.closed = False
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()  # a write has started
        self.error: OSError | None = None

    def write(self, data: bytes, /) -> int:
        self.entered.set()
        self.open.wait(timeout=30)
        if self.error is not None:
            raise self.error
        self.writes.append(data)
        return len(data)

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True


async def until(condition: object, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110 (thread progress: no event)
            await anyio.sleep(0.002)


async def test_lines_queued_during_a_write_go_out_together_in_one_write_and_one_flush() -> None:
    disk = Disk()
    writer = LineWriter(disk, what="test log", max_buffered=1 << 20)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        disk.open.clear()
        writer.put(b"first\n")
        await anyio.to_thread.run_sync(disk.entered.wait, 10)
        for n in range(100):
            assert writer.put(b"%d\n" % n)
        disk.open.set()
        await until(lambda: writer.batches == 2)
        tg.cancel_scope.cancel()
    assert disk.writes == [b"first\n", b"".join(b"%d\n" % n for n in range(100))]
    assert disk.flushes == 2
    assert disk.closed


async def test_lines_put_one_by_one_within_the_linger_go_out_in_one_write() -> None:
    disk = Disk()
    writer = LineWriter(disk, what="test log", max_buffered=1 << 20, linger=1.0)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        for n in range(20):
            assert writer.put(b"%d\n" % n)
            await anyio.sleep(0.001)  # the writer task runs between puts: it lingers
        await until(lambda: writer.batches == 1)
        await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert writer.batches == 1
    assert disk.writes == [b"".join(b"%d\n" % n for n in range(20))]


async def test_shutdown_does_not_wait_out_the_linger_and_writes_what_is_queued() -> None:
    disk = Disk()
    writer = LineWriter(disk, what="test log", max_buffered=1 << 20, linger=30.0)
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.put(b"last\n")
        await anyio.sleep(0.01)  # the writer is lingering
        tg.cancel_scope.cancel()
    assert time.perf_counter() - started < 5
    assert disk.writes == [b"last\n"]
    assert disk.closed


async def test_a_stalled_disk_drops_lines_past_the_bound_counts_them_and_never_blocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = Disk()
    refused: list[None] = []
    writer = LineWriter(disk, what="test log", max_buffered=1000, on_dropped=lambda: refused.append(None))
    line = b"x" * 99 + b"\n"
    with caplog.at_level(logging.WARNING, "proxy.observe.line_writer"):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            disk.open.clear()
            writer.put(line)
            await anyio.to_thread.run_sync(disk.entered.wait, 10)  # the writer thread is stuck
            started = time.perf_counter()
            kept = sum(writer.put(line) for _ in range(10_000))
            elapsed = time.perf_counter() - started
            assert kept == 10  # 1000 bytes of 100-byte lines queued; the rest dropped
            assert (writer.dropped, len(refused)) == (9_990, 9_990)
            disk.open.set()
            await until(lambda: writer.batches == 2)
            tg.cancel_scope.cancel()
    assert elapsed < 2  # 10 000 puts: microseconds each, whatever the disk does
    assert disk.writes == [line, line * 10]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "the test log is not keeping up (1000 bytes queued): lines are dropped until it does",
        "the test log writes again; 9990 lines were dropped",
    ]


async def test_a_line_larger_than_the_bound_is_taken_when_nothing_else_waits() -> None:
    disk = Disk()
    writer = LineWriter(disk, what="test log", max_buffered=10)
    assert writer.put(b"y" * 50 + b"\n")
    assert not writer.put(b"z\n")
    writer.drain()
    assert disk.writes == [b"y" * 50 + b"\n"]


@pytest.mark.slow
async def test_shutdown_writes_what_is_left_but_waits_for_a_stalled_disk_only_so_long() -> None:
    disk = Disk()
    writer = LineWriter(disk, what="test log", max_buffered=1 << 20, flush_seconds=0.5)
    started = time.perf_counter()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            disk.open.clear()
            writer.put(b"stuck\n")
            await anyio.to_thread.run_sync(disk.entered.wait, 10)
            writer.put(b"left\n")
            tg.cancel_scope.cancel()
    assert time.perf_counter() - started < 5  # the bound (0.5 s) with room for a busy machine
    assert not disk.closed  # the stuck write holds the file: it is not closed under it
    disk.open.set()  # the abandoned thread finishes; no harm done


async def test_a_failed_write_is_logged_and_counted_and_the_writer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = Disk()
    disk.error = OSError(28, "No space left on device")
    writer = LineWriter(disk, what="test log", max_buffered=1 << 20)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.put(b"lost\n")
        await until(lambda: writer.failed == 1)
        disk.error = None
        writer.put(b"kept\n")
        await until(lambda: writer.batches == 1)
        tg.cancel_scope.cancel()
    assert disk.writes == [b"kept\n"]
    assert "could not write 1 lines: [Errno 28] No space left on device" in caplog.text
