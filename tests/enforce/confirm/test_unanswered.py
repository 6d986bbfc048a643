"""Questions a 2026-07-28 caller may never come back for: each ends when due, once, in order;
the notes are bounded; one ending that fails does not stop the others."""

from __future__ import annotations

import anyio
import pytest

from proxy.enforce.confirm.unanswered import Unanswered

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_endings_come_due_in_order_and_only_once() -> None:
    clock = Clock()
    notes = Unanswered(clock=clock)
    ended: list[str] = []

    def ending(name: str):  # type: ignore[no-untyped-def]
        async def end() -> None:
            ended.append(name)

        return end

    notes.note(1010.0, ending("b"))
    notes.note(1005.0, ending("a"))
    notes.note(1020.0, ending("c"))
    assert notes.due(1004.0) == []
    due = notes.due(1010.0)
    assert len(due) == 2
    assert notes.due(1010.0) == []
    assert len(notes) == 1


def test_past_the_bound_a_question_is_not_noted(caplog: pytest.LogCaptureFixture) -> None:
    notes = Unanswered(total=2, clock=Clock())

    async def end() -> None:
        return None

    assert notes.note(1.0, end)
    assert notes.note(2.0, end)
    assert not notes.note(3.0, end)
    assert not notes.note(4.0, end)
    assert len(notes) == 2
    assert len([r for r in caplog.records if "will not be recorded as abandoned" in r.getMessage()]) == 1


async def test_the_task_runs_what_is_due_and_a_failing_ending_stops_no_other() -> None:
    clock = Clock()
    notes = Unanswered(clock=clock)
    ended = anyio.Event()

    async def fails() -> None:
        raise ConnectionError("the store is away")

    async def works() -> None:
        ended.set()

    async with anyio.create_task_group() as tg:
        await tg.start(notes.run)
        notes.note(clock.now - 1, fails)
        notes.note(clock.now - 1, works)
        with anyio.fail_after(5):
            await ended.wait()
        tg.cancel_scope.cancel()
    assert len(notes) == 0
