"""A link's POST tasks: cheap asyncio tasks that still all end with the block that owns them."""

from __future__ import annotations

import anyio
import pytest

from proxy.outbound.over_http.post_tasks import post_tasks

pytestmark = pytest.mark.anyio


async def test_tasks_run_and_those_still_running_at_the_end_are_cancelled_and_awaited() -> None:
    events: list[str] = []
    started = anyio.Event()

    async def quick(tag: str) -> None:
        events.append(tag)

    async def forever() -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            events.append("forever ended")

    with anyio.fail_after(5):
        async with post_tasks() as tasks:
            tasks.start_soon(quick, "a")
            tasks.start_soon(forever)
            await started.wait()
            assert events == ["a"]
            assert len(tasks) == 1
        assert events == ["a", "forever ended"]  # ended before the block's exit returned
        assert len(tasks) == 0


async def test_a_task_that_raises_cancels_the_block_whose_exit_raises_it_unwrapped() -> None:
    async def broken() -> None:
        raise LookupError("a bug in a POST task")

    reached_the_end = False

    async def owner() -> None:
        nonlocal reached_the_end
        async with post_tasks() as tasks:
            tasks.start_soon(broken)
            await anyio.sleep_forever()  # cancelled by the failure
            reached_the_end = True

    with anyio.fail_after(5), pytest.raises(LookupError, match="a bug in a POST task"):
        await owner()
    assert not reached_the_end


async def test_no_task_starts_once_the_block_has_ended() -> None:
    async def nothing() -> None:
        return None

    async with post_tasks() as tasks:
        pass
    with pytest.raises(RuntimeError, match="ended"):
        tasks.start_soon(nothing)


async def test_cancelling_the_owner_ends_its_tasks_too() -> None:
    ended = anyio.Event()
    started = anyio.Event()

    async def forever() -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            ended.set()

    with anyio.fail_after(5):
        with anyio.CancelScope() as outer:
            async with post_tasks() as tasks:
                tasks.start_soon(forever)
                await started.wait()
                outer.cancel()
                await anyio.sleep_forever()
        assert ended.is_set()


async def test_a_request_cancelled_by_its_own_scope_ends_alone() -> None:
    scope = anyio.CancelScope()
    finished: list[str] = []
    started = anyio.Event()
    both = anyio.Event()

    def finish(tag: str) -> None:
        finished.append(tag)
        if len(finished) == 2:
            both.set()

    async def request() -> None:
        with scope:
            started.set()
            await anyio.sleep_forever()
        finish("request" if scope.cancelled_caught else "?")

    async def other() -> None:
        await anyio.sleep(0.05)
        finish("other")

    with anyio.fail_after(5):
        async with post_tasks() as tasks:
            tasks.start_soon(request)
            tasks.start_soon(other)
            await started.wait()
            scope.cancel()
            await both.wait()  # the other task was not cancelled with it
    assert sorted(finished) == ["other", "request"]
