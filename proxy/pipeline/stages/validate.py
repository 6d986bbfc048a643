"""The validate stage: arguments against ``inputSchema`` before a call, ``structuredContent``
against ``outputSchema`` after it. Either failure is a tool result with ``isError: true``
listing what is wrong, so a model can correct itself; nothing non-conforming passes silently.

Nothing slow runs on the event loop:

* Small values are checked inline (the hot path: a few microseconds). Regular expressions
  (``pattern``, ``patternProperties``) run there too: RE2 runs them in time linear in the string
  (:mod:`proxy.policy.patterns`).
* Larger values (encoding past ``limits.validate_in_thread_bytes``) are checked on a worker thread,
  at most :data:`THREADS` at once. jsonschema is Python code, which lets the loop's thread run
  every few milliseconds.
* Any value against a schema holding a regular expression RE2 cannot run (a backreference, a
  lookaround: constructs only a backtracking engine runs) is checked in a worker process.
  Python's ``re`` backtracks (``^(a+)+(?!b)$`` takes seconds on 30 characters) and holds the
  GIL while it does, so a thread would freeze the loop all the same; a process can also be
  killed, so a grinding check ends at the deadline instead of keeping a worker busy. The cost
  is a round trip to the process (about a millisecond) for such tools, which are rare.

Each check is waited for at most :data:`CHECK_SECONDS`; past that the call is refused with a
problem saying so. A thread cannot be killed: one still running keeps its slot until it ends.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
import anyio.to_thread
import orjson

from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.policy import SchemaValidators
from proxy.policy.validation import Check, check_alone
from proxy.protocol.results import is_input_required

__all__ = ["CHECK_SECONDS", "PROCESSES", "THREADS", "Validate"]

THREADS: Final = 4
PROCESSES: Final = 2
CHECK_SECONDS: Final = 10.0
DEFAULT_IN_THREAD_BYTES: Final = 64 * 1024


class Validate:
    def __init__(
        self,
        validators: SchemaValidators,
        *,
        arguments: bool,
        results: bool,
        in_thread_bytes: int = DEFAULT_IN_THREAD_BYTES,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self._validators = validators
        self._arguments = arguments
        self._results = results
        self._in_thread_bytes = in_thread_bytes
        self._check_seconds = check_seconds
        self._threads = anyio.CapacityLimiter(THREADS)
        self._processes = anyio.CapacityLimiter(PROCESSES)
        self.threaded = 0
        """Checks sent to a worker thread so far (for tests and curiosity)."""
        self.in_process = 0
        """Checks sent to a worker process so far."""

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.method != "tools/call" or ctx.entry is None:
            return await call_next(ctx)
        if self._arguments:
            check = self._validators.arguments_check(ctx.entry)
            problems = [] if check is None else await self._run(check, ctx.arguments, ctx.name)
            if problems:
                listed = "\n".join(f"- {p}" for p in problems)
                return tool_error(f"Invalid arguments for {ctx.name}:\n{listed}", outcome="invalid_arguments")
        result = await call_next(ctx)
        if (
            self._results
            and isinstance(result, dict)
            and not result.get("isError")
            and not is_input_required(result)
        ):
            check = self._validators.result_check(ctx.entry)
            if check is None or "structuredContent" not in result:
                problems = self._validators.check_structured_content(ctx.entry, result)  # no schema run
            else:
                problems = await self._run(check, result["structuredContent"], ctx.name)
            if problems:
                return tool_error(
                    f"{ctx.name} returned a result that does not match its outputSchema, so Manifold "
                    "withheld it:\n" + "\n".join(f"- {p}" for p in problems),
                    outcome="invalid_result",
                )
        return result

    async def _run(self, check: Check, value: object, name: str) -> list[str]:
        if check.accepts_at_once(value):
            return []
        if not check.backtracks and _encoded_size(value) <= self._in_thread_bytes:
            # Inline, on the loop: nothing to wait for, so no deadline scope either (a scope
            # cannot stop code that never awaits, and one per call was a cost on every call).
            return check(value)
        with anyio.move_on_after(self._check_seconds):
            # A client's cancel or the deadline ends the wait at once: a process is killed, a
            # thread is abandoned (it finishes on its own, holding its slot until then).
            if check.backtracks:
                self.in_process += 1
                from anyio import to_process  # (and pickle) only once a schema needs it

                return await to_process.run_sync(
                    check_alone,
                    check.schema,
                    value,
                    check.what,
                    check.root,
                    cancellable=True,
                    limiter=self._processes,
                )
            self.threaded += 1
            return await anyio.to_thread.run_sync(check, value, limiter=self._threads, abandon_on_cancel=True)
        return [
            f"Manifold could not check this value against the {check.what} of {name} within "
            f"{self._check_seconds:g} s (the schema may hold a regular expression that backtracks)"
        ]


def _encoded_size(value: object) -> float:
    try:
        return len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # an integer past 64 bits, or nesting past orjson's depth
        return float("inf")  # unusual, so checked on a thread
