"""The metrics stage, outermost after the errors boundary: every tool call is counted by
server, tool and outcome, and timed, however it ends (denied, limited, failed or cancelled)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proxy.observe.metrics import Metrics, Outcome
from proxy.pipeline.context import CallContext, Handler, outcome_of
from proxy.tracing import active as tracing

__all__ = ["Measure"]


class Measure:
    def __init__(self, metrics: Metrics, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._metrics = metrics
        self._clock = clock

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        started = self._clock()
        outcome: Outcome = "error"
        try:
            result = await call_next(ctx)
            outcome = outcome_of(result)
            return result
        except BaseException as exc:
            outcome = outcome_of(exc)
            raise
        finally:
            identity = ctx.caller.identity.name
            traced = tracing.CURRENT.get() if tracing.tracer is not None else None
            exemplar = traced.exemplar if traced is not None else None
            self._metrics.tool_call(
                ctx.server_id, ctx.name, outcome, self._clock() - started, identity, exemplar
            )
            self._metrics.endpoint_call(ctx.endpoint, outcome)
