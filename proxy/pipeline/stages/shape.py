"""The shape stage: a tool override's argument shaping on the forwarded call, after authorization
(so an attempt to set a fixed argument is audited and counted) and before validation (which then
checks what the server will get against the server's own schema).

A caller that sets a fixed or hidden argument is refused with a tool result (``isError: true``,
outcome ``invalid_arguments``), never overwritten: :mod:`proxy.catalog.shaping` says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from proxy.catalog.shaping import ToolShape, shape_arguments
from proxy.config.model import ServerConfig
from proxy.enforce.access import tool_shapes
from proxy.pipeline.context import CallContext, Handler, tool_error

__all__ = ["Shape"]


class Shape:
    def __init__(self, shapes: Mapping[tuple[str, str], ToolShape]) -> None:
        # (server id, the server's own tool name) -> its override, for those that shape arguments
        self._shapes = {route: shape for route, shape in shapes.items() if shape.shapes_arguments}

    @classmethod
    def of(cls, servers: Mapping[str, ServerConfig]) -> Shape | None:
        """The stage for the configured overrides; None when none shapes arguments."""
        stage = cls(tool_shapes(servers))
        return stage if stage._shapes else None

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        entry = ctx.entry
        if ctx.method != "tools/call" or entry is None:
            return await call_next(ctx)
        shape = self._shapes.get((entry.server_id, entry.original_name))
        if shape is None:
            return await call_next(ctx)
        shaped = shape_arguments(ctx.arguments, shape)
        if isinstance(shaped, str):
            return tool_error(f"Invalid arguments for {ctx.name}: {shaped}", outcome="invalid_arguments")
        return await call_next(dataclasses.replace(ctx, params={**ctx.params, "arguments": shaped}))
