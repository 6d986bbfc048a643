"""Questions asked of a 2026-07-28 caller that may never come back for the answer.

A stateless caller is asked with ``input_required`` and is expected to retry with its answer (or,
for the approval page, to come back for the approver's decision). Nothing tells Manifold that it
gave up instead. So every such question is noted here with when it is *due*: its deadline and a
grace (:data:`GRACE`) for a retry under way. When a question comes due, its ``end`` runs: it ends
the question as ``abandoned`` unless a retry ended it first. Which of the two ended it is decided
by spending one key (the retry spends the same key), in Redis when the approvals are there, so
that with replicas the question still ends exactly once.

Bounded: at most :data:`MAX_UNANSWERED` questions are noted; past that a new one is not (it still
works; only its abandonment goes unrecorded), and that is logged once per :data:`LOG_EVERY`.
:meth:`Unanswered.run` is a task of the gateway's task group; an ``end`` that fails is logged and
the others still run.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from anyio.abc import TaskStatus

__all__ = ["GRACE", "MAX_UNANSWERED", "Ending", "Unanswered"]

logger = logging.getLogger("proxy.enforce.confirm.unanswered")

Ending = Callable[[], Awaitable[None]]

GRACE: Final = 5.0  # seconds past a question's deadline before its caller is taken to be gone
MAX_UNANSWERED: Final = 10_000
LOG_EVERY: Final = 60.0
_IDLE: Final = 60.0  # seconds the task sleeps when nothing is noted (woken by a new note)


class Unanswered:
    def __init__(self, *, total: int = MAX_UNANSWERED, clock: Callable[[], float] = time.time) -> None:
        self._total = total
        self._clock = clock  # wall clock: deadlines are sealed in states other replicas read
        self._due: list[tuple[float, int, Ending]] = []  # a heap
        self._order = itertools.count()
        self._wake = anyio.Event()
        self._full_logged_at: float | None = None

    def __len__(self) -> int:
        return len(self._due)

    def note(self, due: float, end: Ending) -> bool:
        """Run ``end`` at ``due`` (wall clock); False when too many are noted already."""
        if len(self._due) >= self._total:
            now = self._clock()
            if self._full_logged_at is None or now - self._full_logged_at >= LOG_EVERY:
                self._full_logged_at = now
                logger.warning(
                    "%d questions already wait for 2026-07-28 callers; a caller that never comes "
                    "back for this one will not be recorded as abandoned",
                    self._total,
                )
            return False
        heapq.heappush(self._due, (due, next(self._order), end))
        self._wake.set()
        return True

    def due(self, now: float) -> list[Ending]:
        """Take the endings due at ``now``, earliest first."""
        taken = []
        while self._due and self._due[0][0] <= now:
            taken.append(heapq.heappop(self._due)[2])
        return taken

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """End each question when it comes due, until cancelled."""
        task_status.started()
        while True:
            wait = min(_IDLE, self._due[0][0] - self._clock()) if self._due else _IDLE
            with anyio.move_on_after(max(0.0, wait)):
                await self._wake.wait()
            self._wake = anyio.Event()
            for end in self.due(self._clock()):
                try:
                    await end()
                except Exception:  # one store error must not end the others' endings
                    logger.exception("could not record an abandoned question")
