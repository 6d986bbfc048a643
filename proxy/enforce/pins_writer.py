"""The pins file saved off the event loop: the latest pins, written by one task on a worker thread.

Saving pins is a write, an ``fsync`` and a rename (:func:`~proxy.config.policy_files.save_pins`): on a
slow disk tens of milliseconds, on a stalled one forever. :class:`Access` only asks for a save
(:meth:`PinsWriter.save`, which returns at once); :meth:`PinsWriter.run`, a task of the gateway's
task group, does the writing:

* **Coalesced.** It waits :data:`SETTLE_SECONDS` after the first request, so a burst (servers
  listing their tools one after another at start, a server re-listing) writes once; requests
  arriving during a write are written together after it.
* **The last state wins, one write at a time.** Only the latest pins are kept, and the writing
  thread takes them itself under a lock: a write abandoned at shutdown finishes before the final
  one starts, and nothing requested is lost to a cancellation before its thread ran.
* **Nothing asked for is forgotten meanwhile.** :meth:`PinsWriter.unwritten` gives the pins not
  yet on disk, which :class:`~proxy.enforce.access.Access` lays under what it reads back from the file
  (the file wins where both have a key: ``manifold pins accept`` may have changed it), so a
  re-listing before the write does not pin a changed tool afresh.
* **Failures stay here.** A failed write is logged; the pins stay in memory, and the next change
  writes them all.
* **The approved definitions too.** :meth:`PinsWriter.save_definitions` has the definitions kept
  beside the pins (:mod:`proxy.enforce.pin_definitions`) written the same way, after the pins.
* **Bounded shutdown.** What is pending is written within :data:`FLUSH_SECONDS`; a stalled disk
  loses it rather than keeping the process from exiting (the pins are re-derived next start).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Final

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from proxy.config.policy_files import save_pins
from proxy.enforce.pin_definitions import definitions_path, save_definitions

__all__ = ["FLUSH_SECONDS", "SETTLE_SECONDS", "PinsWriter"]

SETTLE_SECONDS: Final = 0.1
FLUSH_SECONDS: Final = 2.0

logger = logging.getLogger("proxy.enforce.pins_writer")

Save = Callable[[str, Mapping[str, str]], None]


class PinsWriter:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        save: Save = save_pins,
        settle_seconds: float = SETTLE_SECONDS,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self._path = os.fspath(path)
        self._save = save
        self._settle_seconds = settle_seconds
        self._flush_seconds = flush_seconds
        self._latest: dict[str, str] | None = None
        self._writing: dict[str, str] | None = None
        self._latest_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one write at a time, even with an abandoned thread
        self._definitions: dict[str, str] | None = None  # pending, for definitions_path(path)
        self._wake = anyio.Event()
        self.writes = 0
        """Files written so far."""

    def save(self, pins: Mapping[str, str]) -> None:
        """Have ``pins`` written soon (replacing any not yet written). Never blocks."""
        with self._latest_lock:
            self._latest = dict(pins)
        self._wake.set()

    def save_definitions(self, stored: Mapping[str, str]) -> None:
        """Have the approved definitions written soon (replacing any not yet written)."""
        with self._latest_lock:
            self._definitions = dict(stored)
        self._wake.set()

    def unwritten(self) -> dict[str, str]:
        """The pins asked for and not yet on disk (waiting, or being written); ``{}`` when none."""
        with self._latest_lock:
            return {**(self._writing or {}), **(self._latest or {})}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write the latest pins whenever asked, until cancelled; then what is pending, bounded."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                await anyio.sleep(self._settle_seconds)
                self._wake = anyio.Event()
                await self._write()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._flush_seconds):
                await self._write()

    async def _write(self) -> None:
        written = await anyio.to_thread.run_sync(self._write_latest, abandon_on_cancel=True)
        self.writes += written

    def _write_latest(self) -> int:
        """On a worker thread: the latest pins and definitions, if pending; how many files were
        written."""
        return self._write_pins() + self._write_definitions()

    def _write_definitions(self) -> int:
        with self._write_lock:
            with self._latest_lock:
                stored, self._definitions = self._definitions, None
            if stored is None:
                return 0
            target = definitions_path(self._path)
            try:
                save_definitions(target, stored)
            except OSError as exc:
                logger.error("cannot save the pinned definitions %s (kept in memory): %s", target, exc)
                with self._latest_lock:
                    if self._definitions is None:
                        self._definitions = stored
                return 0
            return 1

    def _write_pins(self) -> int:
        with self._write_lock:
            with self._latest_lock:
                pins, self._latest = self._latest, None
                self._writing = pins
            if pins is None:
                return 0
            try:
                self._save(self._path, pins)
            except OSError as exc:
                logger.error("cannot save the pins file %s (kept in memory): %s", self._path, exc)
                with self._latest_lock:
                    if self._latest is None:  # pending again, unless a newer state came meanwhile
                        self._latest = pins
                return 0
            finally:
                with self._latest_lock:
                    self._writing = None
            return 1
