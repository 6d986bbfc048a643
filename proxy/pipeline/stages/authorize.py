"""The authorize stage: the policy decides each forwarded request, and the audit log records it.

One stage does both because an audit record needs the decision *and* how the call ended.
Denied tool calls become a tool result with ``isError: true`` and a message a model can act
on; a denied prompt or resource looks like one that does not exist (leaking nothing).
In ``dry_run`` a would-be denial is logged and audited, and the call goes ahead.
A record names the caller's identity and, under ``credentials``, which of its own credentials
the server was reached with (the server's ``credentials.mode``; left out: the shared ones),
never a value.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

import anyio
import orjson
from anyio.abc import TaskStatus

from proxy.config.policy import AuditSettings
from proxy.core.errors import HiddenByPolicy, ResourceNotFound
from proxy.enforce.access import Access
from proxy.observe.line_writer import LineWriter
from proxy.observe.logs import redact_arguments
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import CallContext, Handler, outcome_of, tool_error
from proxy.tracing import active as tracing

__all__ = ["AuditLog", "Authorize"]

logger = logging.getLogger("proxy.pipeline.stages.authorize")

DEFAULT_BUFFER_BYTES: Final = 4 * 1024 * 1024
RECENT_KEPT: Final = 1000  # the last records kept in memory, for the admin API's audit view


class AuditLog:
    """JSON lines, one per decision: to a file (appended) or to stdout (``-``).

    A record is encoded here, on the event loop, and queued; :meth:`run` (a task of the
    gateway's task group) writes the queue from a worker thread in batches. A disk that does not
    keep up loses records rather than stalling calls: past ``buffer_bytes`` queued, a record is
    dropped, counted (``on_dropped``) and warned about (:mod:`proxy.observe.line_writer`).

    Raises:
        OSError: the file cannot be opened for appending (at start: the operator's to fix).
    """

    def __init__(
        self,
        settings: AuditSettings,
        *,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        on_dropped: Callable[[], None] = lambda: None,
    ) -> None:
        self.include_arguments = settings.include_arguments
        assert settings.path is not None
        stdout = settings.path == "-"
        out: IO[bytes] = sys.stdout.buffer if stdout else open(settings.path, "ab")  # noqa: SIM115
        # The admin API's view, kept as the lines written: bytes are not tracked by the garbage
        # collector, where a thousand live dicts (and their lists) were walked by every collection.
        self._recent: deque[bytes] = deque(maxlen=RECENT_KEPT)
        self.lines = LineWriter(
            out, what="audit log", max_buffered=buffer_bytes, on_dropped=on_dropped, close_out=not stdout
        )

    def write(self, record: dict[str, Any]) -> None:
        """Queue ``record``; never blocks (it may be dropped: see the class docstring). While a
        request is traced, its ``trace_id`` and ``span_id`` go in the record."""
        if (ids := tracing.ids()) is not None:
            record["trace_id"], record["span_id"] = ids
        line = orjson.dumps(record) + b"\n"
        self._recent.append(line)
        self.lines.put(line)

    def recent(self) -> list[dict[str, Any]]:
        """The last :data:`RECENT_KEPT` records, oldest first (for the admin API)."""
        return [orjson.loads(line) for line in self._recent]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write records until cancelled; then what is left, for a bounded time, and close."""
        await self.lines.run(task_status=task_status)

    def close(self) -> None:
        self.lines.close()


class Authorize:
    def __init__(
        self,
        access: Access,
        audit: AuditLog | None,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.perf_counter,
        credential_modes: Mapping[str, str] | None = None,  # server id -> credentials.mode
    ) -> None:
        self._credential_modes = credential_modes or {}
        self._access = access
        self._audit = audit
        self._metrics = metrics
        self._clock = clock

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.subject is None:
            return await call_next(ctx)
        identity = ctx.caller.identity
        decision = self._access.decide(identity, ctx.subject)
        enforced = decision.enforced_effect(self._access.settings.dry_run)
        self._metrics.policy_decision(decision.effect, decision.rule_ids[0] if decision.rule_ids else None)
        started = self._clock()
        outcome = "denied"
        try:
            if enforced == "deny":
                if ctx.method != "tools/call" or not decision.shown:
                    if ctx.subject.kind == "resource":
                        raise ResourceNotFound.of(ctx.name)
                    raise HiddenByPolicy(f"unknown {ctx.subject.kind}: {ctx.name}")
                return tool_error(
                    f"Manifold's policy does not let {identity.name!r} call {ctx.name!r}: {decision.reason}. "
                    "Use another tool, or ask an operator to change the policy.",
                    outcome="denied",
                )
            if decision.effect == "deny":
                logger.warning(
                    "dry run: would deny %s %s to %s: %s",
                    ctx.method,
                    ctx.name,
                    identity.name,
                    decision.reason,
                )
            result = await call_next(ctx)
            outcome = outcome_of(result)
            return result
        except BaseException as exc:
            outcome = outcome_of(exc) if enforced != "deny" else "denied"
            raise
        finally:
            if self._audit is not None:
                self._audit.write(self._record(ctx, decision.effect, enforced, decision, outcome, started))

    def _record(
        self, ctx: CallContext, effect: str, enforced: str, decision: Any, outcome: str, started: float
    ) -> dict[str, Any]:
        assert ctx.subject is not None
        identity = ctx.caller.identity
        record: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "identity": identity.name,
            "roles": sorted(identity.roles),
            "source": identity.source,
            "issuer": identity.issuer,  # with source and subject: who exactly (names are not unique)
            "subject": identity.subject,
            "method": ctx.method,
            "name": ctx.name,
            "server": ctx.server_id,
            "effect": effect,
            "enforced": enforced,
            "rules": list(decision.rule_ids),
            "reason": decision.reason,
            "outcome": outcome,
            "latency_ms": round((self._clock() - started) * 1000, 3),
        }
        if (mode := self._credential_modes.get(ctx.server_id, "shared")) != "shared":
            record["credentials"] = mode  # the identity's own credentials reached the server
        if ctx.endpoint:  # a configured endpoint's name, not the whole catalog's /mcp
            record["endpoint"] = ctx.endpoint
        if ctx.subject.name != ctx.name:  # a shortened or derived spelling: what the policy matched
            record["canonical_name"] = ctx.subject.name
        if ctx.subject.annotations is not None:
            record["annotations"] = {
                **ctx.subject.annotations.hints(),
                "source": ctx.subject.annotations.source,
            }
        if self._audit is not None and self._audit.include_arguments:
            record["arguments"] = redact_arguments(ctx.arguments)  # as logs redact them
        return record
