"""The ratelimit stage: every limit that applies to a call must pass, after authorization
(a denied call spends no budget) and validation (neither does a malformed one).

A limited tool call becomes a tool result with ``isError: true`` naming the limit and when to
retry, with ``retryAfterSeconds`` in ``_meta``; other limited methods get JSON-RPC -32029.

Which buckets a call spends from depends only on the rules and on (identity, server, tool,
method): it is kept per such tuple for the rules in force (a reload brings new rules and an
empty cache), so a call matches the rules and builds its bucket keys once per caller and tool,
not every time.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.errors import RateLimited
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.policy.model import Identity
from proxy.ratelimit import LimitBackend, LimitCheck, LimitRule, denial_message, limit_checks, retry_meta

__all__ = ["RateLimit"]

_CACHED: Final = 4096  # (identity, server, tool, method) tuples kept; past it, the cache starts afresh


class RateLimit:
    def __init__(self, access: Access, backend: LimitBackend, metrics: Metrics) -> None:
        self._access = access
        self._backend = backend
        self._metrics = metrics
        self._rules: tuple[LimitRule, ...] = ()
        self._checks: dict[tuple[Identity, str | None, str | None, str], tuple[LimitCheck, ...]] = {}

    def passes(self, ctx: CallContext) -> bool:
        """No limit is loaded: nothing to count (the chain steps over this stage)."""
        return not self._access.limits

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        rules = self._access.limits
        if not rules:
            return await call_next(ctx)
        identity = ctx.caller.identity
        tool: str | None = None
        if ctx.method == "tools/call":
            # The canonical name, as the policy sees it: a shortened or derived spelling is one tool.
            tool = ctx.subject.name if ctx.subject is not None else ctx.name
        checks = self._checks_of(rules, identity, ctx.server_id, tool, ctx.method)
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

    def _checks_of(
        self,
        rules: tuple[LimitRule, ...],
        identity: Identity,
        server_id: str | None,
        tool: str | None,
        method: str,
    ) -> tuple[LimitCheck, ...]:
        if rules is not self._rules:
            self._rules, self._checks = rules, {}
        key = (identity, server_id, tool, method)
        checks = self._checks.get(key)
        if checks is None:
            if len(self._checks) >= _CACHED:
                self._checks.clear()
            found = limit_checks(
                rules, identity.name, identity.roles, server_id, tool, method, identity_key=identity.key
            )
            checks = self._checks[key] = tuple(found)
        return checks
