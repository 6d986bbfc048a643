"""The call pipeline's stages, each in a span of its own while it decides.

A stage's span covers the stage's own work: it ends when the stage hands the call on
(``call_next``), or when the stage answers itself (a denial, a rate limit, a refused
confirmation: the span then carries ``error.type`` with that outcome). So ``confirm``'s span is
the wait for a person's approval, and the server's time is in the CLIENT span, not in every
stage's. Stages are wrapped only when tracing is on (:func:`traced`).
"""

from __future__ import annotations

from typing import Any, Final

from proxy.pipeline.context import OUTCOME_KEY, CallContext, Handler, Stage, outcome_of
from proxy.tracing import active

__all__ = ["STAGE_NAMES", "Traced", "traced"]

# The span name of each stage class (proxy.pipeline.order); a stage not named here is not wrapped.
STAGE_NAMES: Final = {
    "Authorize": "policy",
    "Shape": "shape",
    "Validate": "validate",
    "Guard": "guardrails",
    "RateLimit": "rate_limit",
    "Confirm": "confirm",
    "SignInStage": "sign_in",
}


def _answered(result: Any) -> str | None:
    """Why the stage answered the call itself, if it did (its ``_meta`` says)."""
    if isinstance(result, dict) and result.get("isError") is True:
        meta = result.get("_meta")
        ours = meta.get(OUTCOME_KEY) if isinstance(meta, dict) else None
        return ours if isinstance(ours, str) else "tool_error"
    return None


class Traced:
    def __init__(self, stage: Stage, name: str) -> None:
        self._stage = stage
        self.name = name

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        current = active.CURRENT.get()
        if current is None or not current.recording:  # most calls, at a low sampling ratio
            return await self._stage(ctx, call_next)
        span = current.stage(self.name)
        handed_on = False

        async def onward(passed: CallContext) -> Any:
            nonlocal handed_on
            if not handed_on:
                handed_on = True
                span.end()
            return await call_next(passed)

        try:
            result = await self._stage(ctx, onward)
        except BaseException as exc:
            if not handed_on:
                span.end(outcome_of(exc))
            raise
        if not handed_on:
            span.end(_answered(result))
        return result


def traced(stages: list[Stage]) -> list[Stage]:
    """``stages`` with each named one wrapped in its span (unchanged when tracing is off)."""
    if active.tracer is None:
        return stages
    return [
        Traced(stage, name) if (name := STAGE_NAMES.get(type(stage).__name__)) is not None else stage
        for stage in stages
    ]
