"""The pins writer: saves asked for on the event loop, written by one task on a worker thread;
a burst writes once, never two writes at once, the last state wins, shutdown is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest

from proxy.config.policy_files import load_pins
from proxy.enforce.pin_definitions import Definitions, definitions_path
from proxy.enforce.pins_writer import PinsWriter

pytestmark = pytest.mark.anyio


class SlowDisk:
    """A save that takes its time (or stalls until opened), recording what it wrote and how many
    ran at once."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.saved: list[dict[str, str]] = []
        self.running = 0
        self.most_at_once = 0
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()
        self.lock = threading.Lock()
        self.error: OSError | None = None

    def __call__(self, path: str, pins: Mapping[str, str]) -> None:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        self.entered.set()
        try:
            self.open.wait(timeout=30)
            time.sleep(self.seconds)
            if self.error is not None:
                raise self.error
            self.saved.append(dict(pins))
        finally:
            with self.lock:
                self.running -= 1


async def until(condition: object, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110 (thread progress: no event)
            await anyio.sleep(0.005)


async def test_a_burst_of_changes_is_written_once_with_the_last_state(tmp_path: Path) -> None:
    path = tmp_path / "pins" / "pins.json"
    writer = PinsWriter(path, settle_seconds=0.05)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        for n in range(100):
            writer.save({f"gh/tool{i}": f"sha256:{i}" for i in range(n + 1)})
        await until(lambda: writer.writes == 1)
        await anyio.sleep(0.2)  # nothing more comes of the burst
        tg.cancel_scope.cancel()
    assert writer.writes == 1
    assert load_pins(path) == {f"gh/tool{i}": f"sha256:{i}" for i in range(100)}


@pytest.mark.slow
async def test_changes_during_a_slow_write_wait_for_it_and_the_last_one_wins() -> None:
    disk = SlowDisk(seconds=0.05)
    writer = PinsWriter("pins.json", save=disk, settle_seconds=0)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        for n in range(20):
            writer.save({"gh/t": f"sha256:{n}"})
            await anyio.sleep(0.02)
        await until(lambda: disk.saved and disk.saved[-1] == {"gh/t": "sha256:19"})
        tg.cancel_scope.cancel()
    assert disk.most_at_once == 1
    assert 2 <= len(disk.saved) < 20  # coalesced: fewer writes than changes
    assert disk.saved[-1] == {"gh/t": "sha256:19"}


async def test_shutdown_writes_what_is_pending() -> None:
    disk = SlowDisk()
    writer = PinsWriter("pins.json", save=disk, settle_seconds=60)  # only shutdown will write
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.save({"gh/t": "sha256:1"})
        await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert disk.saved == [{"gh/t": "sha256:1"}]


@pytest.mark.slow
async def test_shutdown_waits_for_a_stalled_disk_only_so_long_and_never_writes_twice_at_once() -> None:
    disk = SlowDisk()
    disk.open.clear()
    writer = PinsWriter("pins.json", save=disk, settle_seconds=0, flush_seconds=0.3)
    started = time.perf_counter()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            writer.save({"gh/t": "sha256:1"})
            await anyio.to_thread.run_sync(disk.entered.wait, 10)  # stuck in its write
            writer.save({"gh/t": "sha256:2"})
            tg.cancel_scope.cancel()
    assert time.perf_counter() - started < 5  # the bound (0.3 s) with room for a busy machine
    disk.open.set()  # the abandoned write ends; the final one, queued behind its lock, follows
    await until(lambda: len(disk.saved) == 2)
    assert disk.saved == [{"gh/t": "sha256:1"}, {"gh/t": "sha256:2"}]
    assert disk.most_at_once == 1


async def test_a_failed_write_is_logged_and_the_next_change_is_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = SlowDisk()
    disk.error = OSError(28, "No space left on device")
    writer = PinsWriter("pins.json", save=disk, settle_seconds=0)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.save({"gh/t": "sha256:1"})
        await until(lambda: "cannot save the pins file" in caplog.text)
        # Still told as unwritten: a re-listing must not re-pin the tool from what it says now.
        assert writer.unwritten() == {"gh/t": "sha256:1"}
        disk.error = None
        writer.save({"gh/t": "sha256:1", "gh/u": "sha256:2"})
        await until(lambda: writer.writes == 1)
        tg.cancel_scope.cancel()
    assert disk.saved == [{"gh/t": "sha256:1", "gh/u": "sha256:2"}]
    assert "No space left on device" in caplog.text


async def test_pins_not_yet_on_disk_are_told_until_they_are_written() -> None:
    disk = SlowDisk()
    disk.open.clear()
    writer = PinsWriter("pins.json", save=disk, settle_seconds=0)
    assert writer.unwritten() == {}
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.save({"gh/t": "sha256:1"})
        await anyio.to_thread.run_sync(disk.entered.wait, 10)  # being written
        writer.save({"gh/u": "sha256:2"})  # waiting
        assert writer.unwritten() == {"gh/t": "sha256:1", "gh/u": "sha256:2"}
        disk.open.set()
        await until(lambda: writer.writes == 2)
        assert writer.unwritten() == {}
        tg.cancel_scope.cancel()


async def test_the_approved_definitions_are_written_beside_the_pins_off_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "pins" / "pins.json"
    writer = PinsWriter(path, settle_seconds=0.01)
    beside = Definitions(definitions_path(path))
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        writer.save({"s/t": "sha256:" + "0" * 64})
        writer.save_definitions({"s/t": '{"fields":{"description":"d"},"hash":"sha256:x"}'})
        await until(lambda: Path(definitions_path(path)).exists() and path.exists())
        tg.cancel_scope.cancel()
    beside.load()
    assert set(beside.stored) == {"s/t"}
    assert writer.writes == 2
