"""The validate stage: arguments against ``inputSchema`` before a call, ``structuredContent``
against ``outputSchema`` after it. Either failure is a tool result with ``isError: true``
listing what is wrong, so a model can correct itself; nothing non-conforming passes silently.
"""

from __future__ import annotations

from typing import Any

from proxy.pipeline import CallContext, Handler, tool_error
from proxy.policy import SchemaValidators
from proxy.protocol.results import is_input_required

__all__ = ["Validate"]


class Validate:
    def __init__(self, validators: SchemaValidators, *, arguments: bool, results: bool) -> None:
        self._validators = validators
        self._arguments = arguments
        self._results = results

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.method != "tools/call" or ctx.entry is None:
            return await call_next(ctx)
        if self._arguments:
            problems = self._validators.check_arguments(ctx.entry, ctx.arguments)
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
            problems = self._validators.check_structured_content(ctx.entry, result)
            if problems:
                return tool_error(
                    f"{ctx.name} returned a result that does not match its outputSchema, so Manifold "
                    "withheld it:\n" + "\n".join(f"- {p}" for p in problems),
                    outcome="invalid_result",
                )
        return result
