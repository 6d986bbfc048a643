"""The ratelimit stage: every limit that applies to a call must pass, after authorization
(a denied call spends no budget) and validation (neither does a malformed one).

A limited tool call becomes a tool result with ``isError: true`` naming the limit and when to
retry, with ``retryAfterSeconds`` in ``_meta``; other limited methods get JSON-RPC -32029.
"""

from __future__ import annotations

from typing import Any

from proxy.core.errors import RateLimited
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.ratelimit import LimitBackend, denial_message, limit_checks, retry_meta

__all__ = ["RateLimit"]


class RateLimit:
    def __init__(self, access: Access, backend: LimitBackend, metrics: Metrics) -> None:
        self._access = access
        self._backend = backend
        self._metrics = metrics

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        rules = self._access.limits
        if not rules:
            return await call_next(ctx)
        identity = ctx.caller.identity
        tool: str | None = None
        if ctx.method == "tools/call":
            # The canonical name, as the policy sees it: a shortened or derived spelling is one tool.
            tool = ctx.subject.name if ctx.subject is not None else ctx.name
        checks = limit_checks(
            rules, identity.name, identity.roles, ctx.server_id, tool, ctx.method, identity_key=identity.key
        )
        if not checks:
            return await call_next(ctx)
        outcome = await self._backend.hit(checks)
        if outcome.allowed:
            return await call_next(ctx)
        rule = self._access.limit(outcome.denied_by.rule_id) if outcome.denied_by is not None else None
        self._metrics.rate_limited(rule.id if rule is not None else None)
        message = denial_message(rule, outcome.retry_after)
        meta = retry_meta(outcome.retry_after)
        if ctx.method == "tools/call":
            return tool_error(message, outcome="rate_limited", meta=meta)
        raise RateLimited(message, data=meta)
