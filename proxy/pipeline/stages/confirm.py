"""The confirm stage: a tool call the policy says to confirm runs only once a person approves it.

It runs after authorize (a hidden or denied tool never gets here: it answers as missing or
denied), validation and rate limits (nobody is asked about a call that would fail anyway), and
last before the call is forwarded. How the calling user is asked depends on their client:

* handshake era, ``elicitation`` declared: a form-mode ``elicitation/create`` on the call's
  stream, waited for at most the rule's ``timeout``;
* 2026-07-28: the call is answered ``input_required`` with that question and a ``requestState``
  sealed for this call and caller (:mod:`proxy.pipeline.bridge.state`, under its own key); the retry's
  answer is read once (a replayed answer is refused) and the call goes on without Manifold's
  state and answers. A server's ``input_required`` state for an approved call is sealed again
  with the approval's mark (:func:`approval_mark`: the deciding rules and their options); a
  retry carrying a server's state goes on only with that mark, and only once (its digest is
  spent), so an approved call is not run again by replaying the server's state, nor is a state
  issued before a confirm rule applied (or was changed) good for skipping the question. A
  parked call's state names a call already running, approved when it started: passed on;
* a client that cannot be asked, and every refusal, get an ``isError`` result saying why
  (``_meta["dev.manifold/outcome"] = "not_confirmed"``, ``dev.manifold/confirmation`` = how).

Every question and answer is audited (who, what, how, when) and counted by outcome. A question
whose caller gives up (cancels while it waits; a 2026-07-28 caller not back by the deadline and
:data:`~proxy.enforce.confirm.unanswered.GRACE`) ends as ``abandoned``, once: audited, counted,
and shown on the approval page instead of a form.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import anyio
import orjson

from proxy.core.errors import InvalidRequestState, MethodNotFound, RemoteError
from proxy.enforce.access import Access, PinChange
from proxy.enforce.confirm.approvals import Approval, Approvals
from proxy.enforce.confirm.memory import Memory, RememberKey
from proxy.enforce.confirm.question import (
    Answer,
    Asked,
    Outcome,
    approval_question,
    outcome_of_action,
    question,
    read_answer,
    refusal_text,
    summarise_arguments,
    summary_of,
)
from proxy.enforce.confirm.unanswered import GRACE
from proxy.observe.metrics import Metrics
from proxy.pipeline.bridge.mrtr import boundary_of
from proxy.pipeline.bridge.state import RequestStates, arguments_digest
from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.pipeline.stages.authorize import AuditLog
from proxy.pipeline.stages.confirm_need import PIN_QUESTION, Need, approval_mark
from proxy.policy.model import Confirmation
from proxy.protocol import jsonrpc
from proxy.protocol.results import is_input_required

__all__ = ["QUESTION_KEY", "Confirm"]

logger = logging.getLogger("proxy.pipeline.stages.confirm")

QUESTION_KEY: Final = "manifold-confirm"  # the inputRequests key of Manifold's own question
CONFIRMATION_KEY: Final = "dev.manifold/confirmation"
RETRY_WAIT: Final = 10.0  # seconds a stateless retry waits for an approver before "come back"
PROGRESS_EVERY: Final = 10.0  # seconds between progress notifications while a call waits
ABANDON_WITHIN: Final = 2.0  # seconds to mark a given-up question so on the page (shielded)
_T = TypeVar("_T")
_ELICIT: Final = "elicitation/create"


def _pin_key(ctx: CallContext, change: PinChange) -> RememberKey:
    """An identity approved this new definition of the tool: asked once, whatever the arguments."""
    drift = change.drift
    return (ctx.caller.identity.key, "pin", drift.server, drift.original_name, (drift.new_hash,), "*", "")


class Confirm:
    def __init__(
        self,
        access: Access,
        states: RequestStates,
        memory: Memory,
        metrics: Metrics,
        audit: AuditLog | None,
        approvals: Approvals | None = None,
        *,
        forwarded: RequestStates | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._access = access
        self._states = states  # its own key: a confirm state never passes for a server's
        self._memory = memory
        self._metrics = metrics
        self._audit = audit
        self._approvals = approvals  # calls waiting for somebody else (approver: {role: r})
        self._forwarded = forwarded  # the states proxy.pipeline.bridge issues: a server's carries our mark
        self._clock = clock  # wall clock: a deadline sealed here may be checked by another replica

    def passes(self, ctx: CallContext) -> bool:
        """Nobody is to be asked about this call, whoever makes it: not a tool call, a dry run,
        or no confirm rule, drifted pin or guardrail question (the chain steps over this stage)."""
        if ctx.method != "tools/call" or ctx.subject is None or self._access.settings.dry_run:
            return True
        return ctx.guard_question is None and not self._access.asks

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if self.passes(ctx):  # also when run without the chain's link (in a span)
            return await call_next(ctx)
        decision = self._need(ctx)
        if decision is None:
            return await call_next(ctx)
        if ctx.caller.stateless and "requestState" in ctx.params:
            return await self._retried(ctx, decision, call_next)
        if self._remembered(ctx, decision, decision.confirm):
            self._settled(ctx, decision, "remembered", how="remembered")
            return await self._run(ctx, decision, call_next, ctx)
        if not summary_of(ctx.shown_arguments).complete:  # nobody approves what they cannot see
            return self._refused(ctx, decision, "too_large", how="none")
        if decision.confirm.approver_roles and self._approvals is not None:
            return await self._by_approver(ctx, decision, self._approvals, call_next)
        asked = self._asked(ctx, decision)
        params = question(asked, ctx.shown_arguments)
        if not ctx.caller.supports(_ELICIT, params):
            return self._refused(ctx, decision, "unavailable", how="none")
        if ctx.caller.stateless:
            return self._input_required(ctx, decision, params)
        try:
            answer = await self._ticking(
                ctx, "waiting for the user to approve", lambda: self._ask(ctx, decision.confirm, params)
            )
        except anyio.get_cancelled_exc_class():
            self._settled(ctx, decision, "abandoned", how="elicitation")  # the caller gave up
            raise
        return await self._answered(ctx, decision, answer, "elicitation", call_next)

    def _need(self, ctx: CallContext) -> Need | None:
        """Whether to ask, and what: a confirm decision, a drifted pin not yet approved by this
        identity, or both in one question."""
        assert ctx.subject is not None
        decision = self._access.decide(ctx.caller.identity, ctx.subject)
        change = self._access.pin_change(ctx.entry) if ctx.entry is not None else None
        if change is not None and self._memory.approved(_pin_key(ctx, change)):
            change = None
        if (guarded := ctx.guard_question) is not None:  # with any confirm rule's (guard stage)
            return Need(guarded.rule_ids, guarded.confirm, change)
        if decision.effect == "confirm" and decision.confirm is not None:
            return Need(decision.rule_ids, decision.confirm, change)
        if change is not None:
            return Need(("pins",), PIN_QUESTION, change)
        return None

    # ---- the two ways of asking -------------------------------------------------------

    async def _ask(self, ctx: CallContext, confirmation: Confirmation, params: dict[str, Any]) -> Answer:
        try:
            with anyio.fail_after(confirmation.timeout):
                result = await ctx.caller.request(_ELICIT, params)
        except TimeoutError:
            return Answer("timeout")
        except (RemoteError, MethodNotFound) as exc:
            logger.info("the client refused Manifold's question about %s: %s", ctx.name, exc)
            return Answer("cancelled")
        return read_answer(result, confirmation, stateless=False)

    def _input_required(self, ctx: CallContext, decision: Need, params: dict[str, Any]) -> Any:
        deadline = int(self._clock() + decision.confirm.timeout)
        question_id = f"{secrets.token_urlsafe(12)}:{approval_mark(decision)}:{deadline}"
        state = self._states.seal(boundary_of(ctx), "confirm", question_id)
        self._audit_line(ctx, decision, "asked", how="input_required")
        # Ended by the retry, which spends question_id; else, once due, as abandoned.
        self._unanswered(ctx, decision, deadline, question_id, how="input_required")
        return {
            "resultType": "input_required",
            "inputRequests": {QUESTION_KEY: {"method": _ELICIT, "params": params}},
            "requestState": state,
        }

    async def _retried(self, ctx: CallContext, decision: Need, call_next: Handler) -> Any:
        try:
            sealed = self._states.open(ctx.params["requestState"], boundary_of(ctx))
        except InvalidRequestState:
            return await self._continued(ctx, decision, call_next)
        parts = sealed.payload.split(":")  # [a, approval id | question id], rules' mark, deadline
        if (
            sealed.kind != "confirm"
            or len(parts) < 3
            or not hmac.compare_digest(parts[-2], approval_mark(decision))
        ):
            raise InvalidRequestState()  # not ours, or asked under rules since edited: ask again
        # "a": the caller's answer to the approval link; "w": a retry while the approver has not
        # decided yet. Neither spends anything: the approval is spent once decided (_decided).
        by_approver = parts[0] in ("a", "w") and len(parts) == 4
        if by_approver and self._approvals is None:
            raise InvalidRequestState()
        if not by_approver and not await self._spend(sealed.payload):
            raise InvalidRequestState()  # an answer replayed: each question is answered once
        deadline = int(parts[-1])
        responses = ctx.params.get("inputResponses")
        params = {k: v for k, v in ctx.params.items() if k not in ("inputResponses", "requestState")}
        forwarded = dataclasses.replace(ctx, params=params)
        if by_approver and self._approvals is not None:
            approval_id = parts[1]
            if parts[0] == "a":
                only_ours = isinstance(responses, dict) and set(responses) == {QUESTION_KEY}
                answer = responses.get(QUESTION_KEY) if only_ours and isinstance(responses, dict) else None
                if not isinstance(answer, dict) or answer.get("action") != "accept":
                    if not await self._spend(_ended(approval_id)):
                        raise InvalidRequestState()  # ended already: abandoned, or replayed
                    outcome = outcome_of_action(answer)
                    return self._refused(ctx, decision, outcome, how="approval_page")
            # Wait a while, not until the deadline: a client's request timeout (60 s in the SDKs)
            # or a dropped connection must not lose the decision. Still pending: come back.
            until = min(float(deadline), self._clock() + RETRY_WAIT)
            decided = await self._approvals.store.wait(approval_id, until)
            if decided is not None and decided.state == "pending" and self._clock() < deadline:
                waiting = f"w:{approval_id}:{approval_mark(decision)}:{deadline}"
                return {
                    "resultType": "input_required",
                    "requestState": self._states.seal(boundary_of(ctx), "confirm", waiting),
                }
            return await self._decided(ctx, decision, approval_id, decided, call_next, forwarded)
        if self._clock() > deadline:
            answer = Answer("timeout")
        elif not isinstance(responses, dict) or set(responses) != {QUESTION_KEY}:
            answer = Answer("invalid")
        else:
            answer = read_answer(responses[QUESTION_KEY], decision.confirm, stateless=True)
        return await self._answered(ctx, decision, answer, "input_required", call_next, forwarded=forwarded)

    async def _continued(self, ctx: CallContext, need: Need, call_next: Handler) -> Any:
        """A retry with a state Manifold issued after forwarding: a parked call's (the call runs
        already, started once approved) goes on; a server's only when sealed after an approval
        under the same rules (the mark), and once.

        Raises:
            InvalidRequestState: any other state, or a server's state used before.
        """
        if self._forwarded is None:
            raise InvalidRequestState()
        state = ctx.params["requestState"]
        sealed = self._forwarded.open(state, boundary_of(ctx))
        if sealed.kind == "parked":
            return await call_next(ctx)
        if sealed.kind != "server" or not hmac.compare_digest(sealed.approval, approval_mark(need)):
            raise InvalidRequestState()
        assert isinstance(state, str)
        if not await self._spend("s:" + hashlib.sha256(state.encode()).hexdigest()):
            raise InvalidRequestState()  # the same round replayed: the server would run it again
        return await self._run(ctx, need, call_next, ctx)

    async def _run(self, ctx: CallContext, need: Need, call_next: Handler, forwarded: CallContext) -> Any:
        """Forward an approved call; a server's state in its answer gets the approval's mark."""
        result = await call_next(forwarded)
        if self._forwarded is None or not ctx.caller.stateless or not is_input_required(result):
            return result
        state = result.get("requestState")
        if not isinstance(state, str):
            return result
        try:
            marked = self._forwarded.approved(state, boundary_of(ctx), approval_mark(need))
        except InvalidRequestState:
            return result  # not one of ours: the retry will be refused
        return {**result, "requestState": marked}

    def _unanswered(
        self,
        ctx: CallContext,
        need: Need,
        deadline: int,
        end_key: str,
        *,
        how: str,
        approval: str | None = None,
    ) -> None:
        """Note a question asked of a 2026-07-28 caller: unless a retry ends it first (spending
        ``end_key``), it ends as ``abandoned`` once due (:mod:`proxy.enforce.confirm.unanswered`)."""
        if self._approvals is None:
            return
        record = self._audit_record(ctx, need, "abandoned", how=how)
        approvals = self._approvals
        caller = ctx.caller.identity.name

        async def end() -> None:
            if not await self._spend(end_key):
                return  # a retry ended it
            if approval is not None:
                await approvals.store.decide(approval, "abandoned", caller, self._clock())
            self._metrics.confirmation("abandoned")
            if self._audit is not None:
                self._audit.write({**record, "ts": datetime.now(UTC).isoformat(timespec="milliseconds")})

        approvals.unanswered.note(deadline + GRACE, end)

    async def _spend(self, question_id: str) -> bool:
        # With approvals in Redis, spent questions are too: a replay on another replica is seen.
        if self._approvals is not None:
            return await self._approvals.store.spend(question_id)
        return self._memory.spend(question_id)

    # ---- somebody else approves, on Manifold's page ------------------------------------

    async def _by_approver(
        self, ctx: CallContext, need: Need, approvals: Approvals, call_next: Handler
    ) -> Any:
        confirmation = need.confirm
        identity = ctx.caller.identity
        # The same call asked again (a client that retries after its connection dropped) waits
        # on the approval already pending, rather than asking the approvers twice.
        call = orjson.dumps(
            [
                list(identity.key),
                ctx.server_id,
                ctx.name,
                arguments_digest(ctx.arguments),
                approval_mark(need),
            ]
        )
        approval = Approval.new(
            tool=ctx.name,
            server=ctx.server_id,
            caller=identity.name,
            caller_key=identity.key,
            roles=tuple(sorted(confirmation.approver_roles)),
            reason=confirmation.reason,
            summary=summarise_arguments(ctx.shown_arguments),
            deadline=self._clock() + confirmation.timeout,
            call=hashlib.sha256(call).hexdigest()[:32],
        )
        if not approvals.reachable:  # manifold stdio: nobody could open the link; say so now
            return self._refused(ctx, need, "no_approval_page", how="none")
        params = approval_question(approval, approvals.link(approval.id), confirmation.timeout)
        if not ctx.caller.supports(_ELICIT, params):
            return self._refused(ctx, need, "unavailable", how="none")
        approval = await approvals.store.put(approval)  # raises LimitExceeded
        params = approval_question(approval, approvals.link(approval.id), confirmation.timeout)
        roles = " or ".join(approval.roles)
        self._audit_line(ctx, need, "asked", how="approval_page")
        if ctx.caller.stateless:
            end = _ended(approval.id)  # by the retry, or as abandoned once due
            self._unanswered(
                ctx, need, int(approval.deadline), end, how="approval_page", approval=approval.id
            )
            payload = f"a:{approval.id}:{approval_mark(need)}:{int(approval.deadline)}"
            return {
                "resultType": "input_required",
                "inputRequests": {QUESTION_KEY: {"method": _ELICIT, "params": params}},
                "requestState": self._states.seal(boundary_of(ctx), "confirm", payload),
            }

        async def waited() -> Approval | Outcome:
            try:
                with anyio.fail_after(confirmation.timeout):
                    result = await ctx.caller.request(_ELICIT, params)
            except TimeoutError:
                return "timeout"
            except (RemoteError, MethodNotFound):
                return "cancelled"
            if not isinstance(result, dict) or result.get("action") != "accept":
                return outcome_of_action(result)
            decided = await approvals.store.wait(approval.id, approval.deadline)
            complete = {"elicitationId": approval.id}  # the out-of-band interaction is over
            ctx.caller.notify(jsonrpc.notification("notifications/elicitation/complete", complete))
            return decided if decided is not None else "timeout"

        try:
            waited_for = await self._ticking(
                ctx, f"waiting for someone with the role {roles} to approve", waited
            )
        except anyio.get_cancelled_exc_class():
            # The caller gave up: the question ends here, once, and the page says so (a decision
            # sent after this changes nothing). Bounded: a store that does not answer is left.
            with anyio.CancelScope(shield=True), anyio.move_on_after(ABANDON_WITHIN):
                await approvals.store.decide(approval.id, "abandoned", identity.name, self._clock())
            self._settled(ctx, need, "abandoned", how="approval_page")
            raise
        if isinstance(waited_for, str):
            return self._refused(ctx, need, waited_for, how="approval_page")
        return await self._decided(ctx, need, approval.id, waited_for, call_next, ctx)

    async def _decided(
        self,
        ctx: CallContext,
        need: Need,
        approval_id: str,
        decided: Approval | None,
        call_next: Handler,
        forwarded: CallContext,
    ) -> Any:
        """Run or refuse the call as the approver decided (``decided``: the record at the end of
        the wait). One approval runs one call: it is spent here, by its id, whichever era's call
        uses it; a stateless retry replayed after that is refused with -32602, a second
        handshake-era call waiting on the same approval is told it was used.

        Raises:
            InvalidRequestState: a stateless retry of an approval already used.
        """
        if ctx.caller.stateless and not await self._spend(_ended(approval_id)):
            raise InvalidRequestState()  # the question ended already: abandoned, or this is a replay
        if decided is None or decided.state == "pending":
            return self._refused(ctx, need, "timeout", how="approval_page")
        if decided.state == "abandoned":  # another call of the same request gave it up
            return self._refused(ctx, need, "abandoned", how="approval_page")
        if decided.state == "rejected":
            self._settled(ctx, need, "rejected", how="approval_page", approver=decided.decided_by)
            text = refusal_text(ctx.name, need.rule_ids, need.confirm, "rejected")
            text += f" ({decided.decided_by} rejected it.)"
            return tool_error(text, outcome="not_confirmed", meta={CONFIRMATION_KEY: "rejected"})
        if not await self._spend(f"a:{approval_id}"):
            if ctx.caller.stateless:
                raise InvalidRequestState()  # a retry replayed: its approval ran a call already
            return self._refused(ctx, need, "spent", how="approval_page")
        self._settled(ctx, need, "approved", how="approval_page", approver=decided.decided_by)
        return await self._run(ctx, need, call_next, forwarded)

    async def _ticking(self, ctx: CallContext, what: str, wait: Callable[[], Awaitable[_T]]) -> _T:
        """``wait()``, telling a handshake-era caller that gave a ``progressToken`` every
        ``PROGRESS_EVERY`` seconds that the call is still waiting (so that a client's request
        timeout that resets on progress does not end it). ``wait`` must not raise."""
        meta = ctx.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is None or ctx.caller.stateless:
            return await wait()
        done: list[_T] = []

        async def tick() -> None:
            for step in itertools.count():
                progress = {"progressToken": token, "progress": step, "message": what}
                ctx.caller.notify(jsonrpc.notification("notifications/progress", progress))
                await anyio.sleep(PROGRESS_EVERY)

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            done.append(await wait())
            tg.cancel_scope.cancel()
        return done[0]

    # ---- after the answer -------------------------------------------------------------

    async def _answered(
        self,
        ctx: CallContext,
        decision: Need,
        answer: Answer,
        how: str,
        call_next: Handler,
        *,
        forwarded: CallContext | None = None,
    ) -> Any:
        if answer.outcome != "accepted":
            return self._refused(ctx, decision, answer.outcome, how=how)
        if decision.change is not None:  # asked once per identity and new definition
            self._memory.remember(_pin_key(ctx, decision.change), minutes=None)
        if answer.remember != "none" and decision.rule_ids != ("pins",):
            key = self._remember_key(ctx, decision, decision.confirm, session=answer.remember == "session")
            minutes = decision.confirm.remember_minutes if answer.remember == "minutes" else None
            self._memory.remember(key, minutes=minutes)
        self._settled(ctx, decision, "accepted", how=how, remember=answer.remember)
        return await self._run(ctx, decision, call_next, forwarded or ctx)

    def _refused(self, ctx: CallContext, decision: Need, outcome: Outcome, *, how: str) -> Any:
        self._settled(ctx, decision, outcome, how=how)
        return tool_error(
            refusal_text(ctx.name, decision.rule_ids, decision.confirm, outcome),
            outcome="not_confirmed",
            meta={CONFIRMATION_KEY: outcome},
        )

    def _settled(
        self,
        ctx: CallContext,
        decision: Need,
        outcome: Outcome,
        *,
        how: str,
        remember: str = "none",
        approver: str | None = None,
    ) -> None:
        self._metrics.confirmation(outcome)
        self._audit_line(ctx, decision, outcome, how=how, remember=remember, approver=approver)

    # ---- helpers ----------------------------------------------------------------------

    def _asked(self, ctx: CallContext, need: Need) -> Asked:
        identity = ctx.caller.identity
        change = need.change.summary if need.change is not None else None
        return Asked(ctx.name, ctx.server_id, identity.name, need.confirm, ctx.caller.stateless, change)

    def _remembered(self, ctx: CallContext, decision: Need, confirmation: Confirmation) -> bool:
        # An approver's decision is never remembered, and a caller's own remembered "yes" must
        # not stand in for the approver a rule now asks for.
        if confirmation.approver_roles:
            return False
        return any(
            self._memory.approved(self._remember_key(ctx, decision, confirmation, session=session))
            for session in (False, True)
        )

    def _remember_key(
        self, ctx: CallContext, decision: Need, confirmation: Confirmation, *, session: bool = False
    ) -> RememberKey:
        assert ctx.subject is not None
        arguments = "*" if confirmation.remember_any_arguments else arguments_digest(ctx.arguments)
        scope = ctx.caller.session_id if session else ""
        rules, mark = decision.rule_ids, approval_mark(decision)  # an edited rule asks again
        return (ctx.caller.identity.key, scope, ctx.server_id, ctx.subject.name, rules, arguments, mark)

    def _audit_line(
        self,
        ctx: CallContext,
        decision: Need,
        outcome: str,
        *,
        how: str,
        remember: str = "none",
        approver: str | None = None,
    ) -> None:
        if self._audit is None:
            return
        self._audit.write(
            self._audit_record(ctx, decision, outcome, how=how, remember=remember, approver=approver)
        )

    def _audit_record(
        self,
        ctx: CallContext,
        decision: Need,
        outcome: str,
        *,
        how: str,
        remember: str = "none",
        approver: str | None = None,
    ) -> dict[str, Any]:
        identity = ctx.caller.identity
        return {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": "confirmation",
            "identity": identity.name,
            "source": identity.source,
            "issuer": identity.issuer,
            "subject": identity.subject,
            "approver": approver or (identity.name if outcome in ("accepted", "remembered") else None),
            "method": ctx.method,
            "name": ctx.name,
            "server": ctx.server_id,
            "rules": list(decision.rule_ids),
            "outcome": outcome,
            "how": how,
            "remember": remember,
            "arguments_digest": arguments_digest(ctx.arguments),
            **({"pin": _pin_record(decision.change)} if decision.change is not None else {}),
        }


def _ended(approval_id: str) -> str:
    """The key a stateless approval question is ended by, once: by its caller's retry, or as
    abandoned (:meth:`Confirm._unanswered`)."""
    return f"end:a:{approval_id}"


def _pin_record(change: PinChange) -> dict[str, str]:
    return {"old": change.drift.old_hash, "new": change.drift.new_hash, "change": change.summary}
