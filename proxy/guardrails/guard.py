"""Guardrails at run time: one message in, a :class:`Verdict` out, with the scanning kept off
the event loop when the message is big, the external hooks asked, and every finding counted and
audited (detector names and effects, never a value).

Used by the call pipeline's guard stage (:mod:`proxy.middleware.guard`), the list path
(definitions) and the relay of servers' own requests (sampling, elicitation). Nothing of it is
built, and nothing of the detectors imported, unless a policy has guardrail rules.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio
import anyio.to_thread
import orjson

from proxy.guardrails.hooks import Hook, HookAnswer, HookFailure, request_body
from proxy.guardrails.inspector import NOTHING, SELECTED, Inspection, Inspector
from proxy.guardrails.walk import one_text
from proxy.observe.metrics import Metrics
from proxy.policy.guardrail_engine import GuardDecision, GuardSubject
from proxy.policy.model import Confirmation, ConfirmOptions, Identity

__all__ = ["THREADS", "Guard", "Verdict"]

logger = logging.getLogger("proxy.guardrails")

THREADS: Final = 4  # scans of big messages at once on worker threads


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one message.

    ``effect``: ``allow``, ``audit`` (allowed, recorded), ``redact`` (send :attr:`message`, which
    is edited), ``confirm`` (ask first, with :attr:`confirm`), ``deny`` or ``quarantine``.
    ``message`` is the message to pass on (edited by redaction or a hook) — the original when
    nothing changed. ``reason`` names rules and detectors, never a matched value.
    """

    effect: str
    message: Mapping[str, Any]
    rule_ids: tuple[str, ...] = ()
    detectors: tuple[str, ...] = ()
    reason: str = ""
    confirm: Confirmation | None = None
    edited: bool = False
    truncated: str = ""
    hooks: tuple[tuple[str, str], ...] = field(default=())  # (hook, outcome)
    shown: Mapping[str, Any] | None = None  # for a confirm: the message with every finding redacted

    @property
    def blocked(self) -> bool:
        return self.effect in ("deny", "quarantine")


def _size(message: Mapping[str, Any], keys: tuple[str, ...]) -> int:
    """The JSON size of what ``keys`` select in ``message`` (each part encoded on its own: no
    dictionary of them built); one ASCII text block counts its length, unencoded."""
    size = 0
    for key in keys:
        if key in message:
            value = message[key]
            text = one_text(value)
            if text is not None and text.isascii():  # isascii: O(1), a flag of the string
                size += len(text)
                continue
            try:
                size += len(orjson.dumps(value))
            except (orjson.JSONEncodeError, TypeError):
                return 1 << 62  # unusual (an integer past 64 bits): scanned on a thread
    return size


class Guard:
    """The guardrails of one policy: its inspector and hooks, counted and audited."""

    def __init__(
        self,
        inspector: Inspector,
        hooks: Mapping[str, Hook],
        metrics: Metrics | None,
        *,
        in_thread_bytes: int,
        audit: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.inspector = inspector
        self.hooks = hooks
        self._metrics = metrics
        self._in_thread_bytes = in_thread_bytes
        self._threads = anyio.CapacityLimiter(THREADS)
        self._clock = clock
        self.audit = audit
        self.threaded = 0  # scans run on a worker thread (for tests)

    def observe(self, metrics: Metrics | None, audit: Callable[[dict[str, Any]], None] | None) -> None:
        """Count into ``metrics`` and write audit records with ``audit`` from now on."""
        self._metrics = metrics
        self.audit = audit

    def close(self) -> None:
        """Close the hooks' connections (a reload replaced this guard)."""
        for hook in self.hooks.values():
            hook.close()

    def inspects(self, identity: Identity, subject: GuardSubject) -> bool:
        """Whether any rule may apply (else the message is passed on untouched, unscanned)."""
        return bool(self.inspector.candidates(identity, subject))

    def inspect_now(
        self, identity: Identity, subject: GuardSubject, message: Mapping[str, Any]
    ) -> Verdict | None:
        """:meth:`check` without hooks or threads: for the list path, which is synchronous.
        None when there is nothing to do (as :meth:`check`)."""
        candidates = self.inspector.candidates(identity, subject)
        if not candidates:
            return None
        started = self._started()
        inspection = self.inspector.inspect(candidates, subject, message)
        return self._finish(identity, subject, message, inspection, started, ())

    async def check(
        self, identity: Identity, subject: GuardSubject, message: Mapping[str, Any]
    ) -> Verdict | None:
        """Inspect ``message`` as ``subject`` says; None when there is nothing to do: no rule
        applies (nothing scanned), or nothing was found and no rule asks a hook (the message
        passes as it is, as with an ``allow`` verdict, and nothing is audited).

        Never raises for what a detector or hook does: a hook that fails is taken per its
        ``failure`` mode; a detector that raises denies this message only (fail closed).
        """
        candidates = self.inspector.candidates(identity, subject)
        if not candidates:
            return None
        started = self._started()
        try:
            if _size(message, SELECTED[subject.direction]) > self._in_thread_bytes:
                self.threaded += 1
                inspection = await anyio.to_thread.run_sync(
                    self.inspector.inspect, candidates, subject, message, limiter=self._threads
                )
            else:
                inspection = self.inspector.inspect(candidates, subject, message)
        except Exception:
            logger.exception("guardrail inspection failed on %s %s; denied", subject.direction, subject.name)
            decision = GuardDecision(
                "deny", ("inspection_failed",), ("the guardrail inspection failed",), ("inspection_failed",)
            )
            inspection = Inspection(decision, frozenset(), {}, "")
        hooked: list[tuple[str, str]] = []
        if inspection.decision.hooks and inspection.decision.effect != "deny":
            inspection = await self._ask_hooks(identity, subject, message, inspection, hooked)
            if inspection.edited is not None and any(outcome == "redact" for _, outcome in hooked):
                # A hook's edits are inspected as what will be passed on: an edit must not bring
                # in what the rules refuse (the detectors' verdict applies to the final bytes).
                again = self.inspector.inspect(candidates, subject, inspection.edited)
                if again.decision.effect == "deny":
                    inspection = dataclasses.replace(again, edited=None)
        return self._finish(identity, subject, message, inspection, started, tuple(hooked))

    def _started(self) -> float | None:
        """When an inspection started, if a histogram is asked to tell how long it took."""
        return None if self._metrics is None else self._clock()

    async def _ask_hooks(
        self,
        identity: Identity,
        subject: GuardSubject,
        message: Mapping[str, Any],
        inspection: Inspection,
        hooked: list[tuple[str, str]],
    ) -> Inspection:
        decision = inspection.decision
        current = dict(inspection.edited if inspection.edited is not None else message)
        effect, rule_ids, reasons, detectors = (
            decision.effect,
            list(decision.rule_ids),
            list(decision.reasons),
            list(decision.detectors),
        )
        confirm = decision.confirm
        edited = inspection.edited is not None
        for rule_id, name in decision.hooks:
            hook = self.hooks.get(name)
            sent = {k: current[k] for k in SELECTED[subject.direction] if k in current}
            began = self._clock()
            answer: HookAnswer | None
            outcome: str
            try:
                if hook is None:
                    raise HookFailure("not configured (policy.guardrails.hooks)")
                answer = await hook.ask(
                    request_body(rule_id, identity, subject, sent, inspection.findings), sent
                )
                outcome = answer.decision
            except HookFailure as exc:
                open_ = hook is not None and hook.fails_open
                logger.warning(
                    "guardrail hook %r failed on %s %s: %s (failure: %s)",
                    name,
                    subject.direction,
                    subject.name,
                    exc,
                    "open" if open_ else "closed",
                )
                outcome, answer = "failed", None
                if not open_:
                    answer = HookAnswer("deny", f"the inspection service {name!r} gave no usable answer")
            if self._metrics is not None:
                self._metrics.guardrail_hook(name, outcome, self._clock() - began)
            hooked.append((name, outcome))
            if answer is None or answer.decision == "allow":
                continue
            sentence = f"{answer.decision} by inspection service {name!r} (guardrail rule {rule_id})"
            if answer.reason:
                sentence += f": {answer.reason}"
            if answer.decision == "deny":
                return Inspection(
                    GuardDecision("deny", (rule_id,), (sentence,), (f"hook:{name}",)),
                    inspection.detectors,
                    inspection.findings,
                    inspection.truncated,
                )
            if answer.decision == "redact" and answer.content is not None:
                current.update(answer.content)
                edited = True
                if effect in ("allow", "audit"):
                    effect, rule_ids, reasons, detectors = "redact", [rule_id], [sentence], [f"hook:{name}"]
            elif answer.decision == "confirm" and effect != "confirm":
                effect, rule_ids, reasons, detectors = "confirm", [rule_id], [sentence], [f"hook:{name}"]
                options = ConfirmOptions()
                confirm = Confirmation(reasons=(sentence,), timeout=float(options.timeout))
        folded = GuardDecision(
            effect,
            tuple(rule_ids),
            tuple(reasons),
            tuple(detectors),
            decision.redact,
            decision.hooks,
            confirm,
            decision.audited,
        )
        return Inspection(
            folded,
            inspection.detectors,
            inspection.findings,
            inspection.truncated,
            current if edited else None,
        )

    def _finish(
        self,
        identity: Identity,
        subject: GuardSubject,
        message: Mapping[str, Any],
        inspection: Inspection,
        started: float | None,
        hooked: tuple[tuple[str, str], ...],
    ) -> Verdict | None:
        decision = inspection.decision
        effect = decision.effect
        if self._metrics is not None:
            if started is not None:
                self._metrics.guardrail_inspection(subject.direction, self._clock() - started)
            for detector, count in inspection.findings.items():
                self._metrics.guardrail_finding(detector, subject.direction, effect, count)
        if inspection is NOTHING:  # nothing found, nothing to do (most messages)
            return None
        verdict = Verdict(
            effect,
            inspection.edited if inspection.edited is not None else message,
            decision.rule_ids,
            decision.detectors,
            decision.reason,
            decision.confirm,
            inspection.edited is not None,
            inspection.truncated,
            hooked,
            inspection.shown
            if inspection.shown is not None
            else (inspection.edited if inspection.edited is not None else message),
        )
        if self.audit is not None and (effect != "allow" or inspection.findings or hooked):
            self.audit(self._record(identity, subject, inspection, verdict))
        return verdict

    @staticmethod
    def _record(
        identity: Identity, subject: GuardSubject, inspection: Inspection, verdict: Verdict
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": "guardrail",
            "identity": identity.name,
            "roles": sorted(identity.roles),
            "source": identity.source,
            "issuer": identity.issuer,
            "subject": identity.subject,
            "direction": subject.direction,
            "server": subject.server_id,
            "name": subject.name,
            "effect": verdict.effect,
            "rules": list(verdict.rule_ids),
            "applied_rules": list(inspection.decision.audited),
            "detectors": dict(sorted(inspection.findings.items())),
            "reason": verdict.reason,
            "redacted": verdict.edited,
        }
        if subject.endpoint:
            record["endpoint"] = subject.endpoint
        if verdict.truncated:
            record["truncated"] = verdict.truncated
        if verdict.hooks:
            record["hooks"] = dict(verdict.hooks)
        return record
