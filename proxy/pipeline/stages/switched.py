"""The switched-off stage: a tool an operator switched off (:mod:`proxy.enforce.overlays`) is
refused with a tool result saying so, by whom and until when. Present only with ``admin:``
configured, after Authorize (so the refusal is audited with the call)."""

from __future__ import annotations

from typing import Any

from proxy.enforce.overlays import Overlays
from proxy.pipeline.context import CallContext, Handler, tool_error

__all__ = ["SwitchedOff"]


class SwitchedOff:
    def __init__(self, overlays: Overlays) -> None:
        self._overlays = overlays

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.method == "tools/call":
            overlay = self._overlays.refusing(ctx.caller.identity, ctx.name)
            if overlay is not None:
                return tool_error(
                    f"{ctx.name!r} is {overlay.describe()}. Use another tool, or try again later.",
                    outcome="denied",
                )
        return await call_next(ctx)
