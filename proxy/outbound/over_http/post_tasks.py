"""The tasks that POST a link's requests, one per request: plain asyncio tasks, owned by a block.

An HTTP link POSTs each request from a task of its own (its answer may be a stream that outlives
``send``). anyio's ``TaskGroup.start_soon`` costs about 35 µs a task on this path (a task handle,
an event, a cancel scope and a name for each; ``benchmarks/README.md``), against about 4 µs for
``loop.create_task``: with one task per call, that was a tenth of Manifold's CPU per HTTP call.

:func:`post_tasks` keeps what the task group gave: every task ends inside the block that started
it (on exit, those still running are cancelled and awaited, bounded), and a task that raises (a
POST task turns every failure into a message, so that is a bug) cancels the block, whose exit then
raises that exception, as a task group would have (unwrapped: the link's callers expect their own
exceptions, see ``common.owned_task_group``). Cancelling one task (a request's own cancel scope
inside it) is the task's business, as before. The exit cancels with asyncio's own
``Task.cancel``, which an anyio shield inside the task would not hold off: a POST task has no
shielded cleanup (the session's DELETE runs in the link's own task), and one must not get any.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio

__all__ = ["PostTasks", "post_tasks"]

_CLOSE_WAIT: Final = 5.0  # seconds the exit waits for cancelled tasks to end


class PostTasks:
    """Starts tasks that belong to the :func:`post_tasks` block that made this."""

    def __init__(self, loop: asyncio.AbstractEventLoop, host: anyio.CancelScope) -> None:
        self._loop = loop
        self._host = host
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.crashed: BaseException | None = None

    def __len__(self) -> int:
        """Tasks still running."""
        return len(self._tasks)

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``func(*args)`` in a task of its own.

        Raises:
            RuntimeError: the block has ended.
        """
        if self._closed:
            raise RuntimeError("this link's POST tasks have ended")
        task = self._loop.create_task(func(*args))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        failure = task.exception()
        if failure is not None and self.crashed is None:
            self.crashed = failure
            self._host.cancel()

    async def close(self) -> None:
        """Cancel every task still running and wait (bounded, shielded) for them to end."""
        self._closed = True
        if not self._tasks:
            return
        running = list(self._tasks)
        for task in running:
            task.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT):
            await asyncio.wait(running)


@asynccontextmanager
async def post_tasks() -> AsyncIterator[PostTasks]:
    """A :class:`PostTasks` whose tasks all end with this block (see the module docstring).

    Raises:
        BaseException: what a task raised (the first), once every task has ended.
    """
    with anyio.CancelScope() as host:
        tasks = PostTasks(asyncio.get_running_loop(), host)
        try:
            yield tasks
        finally:
            await tasks.close()
    if tasks.crashed is not None:
        raise tasks.crashed
