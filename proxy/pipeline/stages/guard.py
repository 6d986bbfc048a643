"""The guard stage: guardrail rules read what a call carries, both ways (``proxy.guardrails``).

* ``tools/call``: the arguments before they leave (``tool_arguments``), the result before the
  client sees it (``tool_results``);
* ``resources/read``: the contents (``resource_contents``); ``prompts/get``: the messages
  (``prompt_messages``);
* a server's ``sampling/createMessage`` and ``elicitation/create`` about the call, before the
  client is asked (``sampling_requests``, ``elicitation_requests``), and the client's sampling
  answer before the server has it (``sampling_results``): the call's caller is wrapped
  (:class:`GuardedRequest`) when a rule reads those directions. A refusal is -32030 to the side
  that sent it.

Effects: a denied tool call or result becomes an ``isError`` result naming the rules and the
detectors (never the matched value), with ``_meta["dev.manifold/outcome"] = "denied"``; a denied
prompt or resource is JSON-RPC -32030. A redaction replaces each match with
``[REDACTED:<detector>]`` in what is passed on; edited arguments must still fit the tool's
``inputSchema`` and an edited ``structuredContent`` its ``outputSchema``, else the call (the
result) is refused saying so. A ``confirm`` is handed to the confirm stage, which asks the
person with the rules and detectors named. ``audit`` passes everything on and records it.

It sits after validation (nothing is inspected for a call that is refused anyway; a result it
redacts is validated again by that stage on its way out) and before rate limits and confirm.
With no guardrail rule in the policy it passes every call straight on. ``dry_run`` records what
would be done and does nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from proxy.clients.session import InboundRequest
from proxy.core.errors import GuardrailDenied
from proxy.enforce.access import Access
from proxy.pipeline.context import CallContext, Caller, GuardQuestion, Handler, tool_error
from proxy.policy import SchemaValidators
from proxy.policy.guardrail_engine import GuardSubject, both_ask
from proxy.protocol.results import is_input_required

__all__ = ["GUARDRAIL_KEY", "Guard", "Guardable", "GuardedRequest", "asked_checked"]

GUARDRAIL_KEY: Final = "dev.manifold/guardrail"
_DIRECTION: Final = {"resources/read": "resource_contents", "prompts/get": "prompt_messages"}
_KIND: Final = {"tools/call": "tool", "resources/read": "resource", "prompts/get": "prompt"}


class Guard:
    def __init__(self, access: Access, validators: SchemaValidators) -> None:
        self._access = access
        self._validators = validators

    def passes(self, ctx: CallContext) -> bool:
        """No guardrail rule is loaded, or the method carries nothing they read (the chain steps
        over this stage)."""
        return self._access.guard is None or ctx.method not in _KIND

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        guard = self._access.guard
        if guard is None or ctx.method not in _KIND:
            return await call_next(ctx)
        identity = ctx.caller.identity
        name = ctx.subject.name if ctx.subject is not None else ctx.name
        kind = _KIND[ctx.method]
        enforce = not self._access.settings.dry_run
        directions = guard.inspector.directions  # a direction no rule reads is not looked at
        asked = None
        if not directions.isdisjoint(_ASKED):
            # The server's own requests about this call (sampling, elicitation) and the client's
            # answers pass through the guardrails too, on their way either side.
            asked = _Asked(self._access, ctx.server_id, kind, name, ctx.endpoint)
            if type(ctx.caller) is InboundRequest:  # asked as requests (handshake-era clients)
                caller = GuardedRequest(ctx.caller.session, ctx.caller.stream, asked)
                ctx = dataclasses.replace(ctx, caller=caller)
            elif isinstance(ctx.caller, Guardable):  # a caller that asks elsewhere (a held task's)
                ctx = dataclasses.replace(ctx, caller=ctx.caller.guarded(asked))
            if isinstance(ctx.params.get("inputResponses"), Mapping):  # a 2026-07-28 retry's answers
                ctx = dataclasses.replace(ctx, params=await asked.responses(identity, ctx.params))
        if ctx.method == "tools/call" and "tool_arguments" in directions:
            subject = GuardSubject("tool_arguments", ctx.server_id, kind, name, ctx.endpoint)  # type: ignore[arg-type]
            verdict = await guard.check(identity, subject, ctx.params)
            if verdict is not None and enforce:
                if verdict.blocked:
                    return _denied(f"Manifold's guardrails refused this call to {ctx.name}", verdict)
                if verdict.edited:
                    problems = self._arguments_problems(ctx, verdict.message.get("arguments"))
                    if problems:
                        return tool_error(
                            f"Manifold's guardrails edited the arguments of {ctx.name} ({verdict.reason}), "
                            "and the edited arguments no longer fit its inputSchema, so the call was "
                            "refused:\n" + "\n".join(f"- {p}" for p in problems),
                            outcome="denied",
                            meta=_meta(verdict),
                        )
                    ctx = dataclasses.replace(ctx, params=verdict.message)
                if verdict.effect == "confirm" and verdict.confirm is not None:
                    ctx = dataclasses.replace(ctx, guard_question=self._question(ctx, verdict))
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        if is_input_required(result):
            return result if asked is None else await asked.requests(identity, result)
        direction = "tool_results" if ctx.method == "tools/call" else _DIRECTION[ctx.method]
        if direction not in directions:
            return result
        subject = GuardSubject(direction, ctx.server_id, kind, name, ctx.endpoint)  # type: ignore[arg-type]
        verdict = await guard.check(identity, subject, result)
        if verdict is None or not enforce:
            return result
        if verdict.blocked or verdict.effect == "confirm":  # (no rule asks about a result)
            what = {"tools/call": "the result of", "resources/read": "the contents of"}.get(
                ctx.method, "the messages of"
            )
            return _denied(f"Manifold's guardrails withheld {what} {ctx.name}", verdict, call=ctx.method)
        if verdict.edited:
            edited = dict(verdict.message)
            if ctx.method == "tools/call" and "structuredContent" in edited:
                problems = self._result_problems(ctx, edited)
                if problems:
                    return _denied(
                        f"Manifold's guardrails redacted the result of {ctx.name}, and the redacted "
                        "structuredContent no longer fits its outputSchema ("
                        + "; ".join(problems)[:500]
                        + "), so it was withheld",
                        verdict,
                        call=ctx.method,
                    )
            return edited
        return result

    def _question(self, ctx: CallContext, verdict: Any) -> GuardQuestion:
        """What the confirm stage asks: this guardrail's question, joined with a confirm rule's
        when one applies too (one question, the most cautious of the two), showing the arguments
        with every finding redacted."""
        rule_ids, confirm = verdict.rule_ids, verdict.confirm
        if ctx.subject is not None:
            decision = self._access.decide(ctx.caller.identity, ctx.subject)
            if decision.effect == "confirm" and decision.confirm is not None:
                rule_ids = tuple(sorted({*decision.rule_ids, *rule_ids}))
                confirm = both_ask(decision.confirm, confirm)
        shown = verdict.shown.get("arguments") if verdict.shown is not None else None
        return GuardQuestion(rule_ids, confirm, shown if isinstance(shown, Mapping) else ctx.arguments)

    def _arguments_problems(self, ctx: CallContext, arguments: object) -> list[str]:
        if not isinstance(arguments, Mapping):
            return ["the arguments are not an object"]
        if ctx.entry is None:
            return []
        check = self._validators.arguments_check(ctx.entry)
        return [] if check is None else check(arguments)

    def _result_problems(self, ctx: CallContext, result: Mapping[str, Any]) -> list[str]:
        if ctx.entry is None:
            return []
        check = self._validators.result_check(ctx.entry)
        if check is None:
            return self._validators.check_structured_content(ctx.entry, result)
        return check(result["structuredContent"])


_ASKED: Final = frozenset({"sampling_requests", "sampling_results", "elicitation_requests"})
_ASKING: Final = {"sampling/createMessage": "sampling_requests", "elicitation/create": "elicitation_requests"}


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a server's request is about: the call it came with."""

    access: Access
    server_id: str
    kind: str
    name: str
    endpoint: str

    async def check(self, identity: Any, direction: str, message: Mapping[str, Any]) -> Mapping[str, Any]:
        """``message`` as it may pass (redacted, edited), or GuardrailDenied."""
        guard = self.access.guard
        if guard is None:
            return message
        subject = GuardSubject(direction, self.server_id, self.kind, self.name, self.endpoint)  # type: ignore[arg-type]
        verdict = await guard.check(identity, subject, message)
        if verdict is None or self.access.settings.dry_run:
            return message
        if verdict.blocked or verdict.effect == "confirm":
            what = {
                "sampling_requests": "a sampling request from",
                "elicitation_requests": "an elicitation request from",
            }.get(direction, "the client's answer to a sampling request of")
            _denied(
                f"Manifold's guardrails refused {what} server {self.server_id!r}", verdict, call=direction
            )
        return verdict.message

    async def requests(self, identity: Any, result: dict[str, Any]) -> dict[str, Any]:
        """An ``input_required`` result with each sampling/elicitation request in it inspected."""
        requests = result.get("inputRequests")
        if not isinstance(requests, Mapping):
            return result
        checked: dict[str, Any] = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, Mapping) else None
            direction = _ASKING.get(method) if isinstance(method, str) else None
            params = request.get("params") if isinstance(request, Mapping) else None
            if direction is not None and isinstance(params, Mapping):
                request = {**request, "params": dict(await self.check(identity, direction, params))}
            checked[key] = request
        return {**result, "inputRequests": checked}

    async def responses(self, identity: Any, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """A retry's params with each sampling answer in ``inputResponses`` inspected (a
        sampling answer is the one with ``model`` and ``content``)."""
        answers = params["inputResponses"]
        checked: dict[str, Any] = {}
        for key, answer in answers.items():
            if isinstance(answer, Mapping) and "model" in answer and "content" in answer:
                answer = dict(await self.check(identity, "sampling_results", answer))
            checked[key] = answer
        return {**params, "inputResponses": checked}


@dataclass(frozen=True, slots=True)
class GuardedRequest(InboundRequest):
    """A client's request whose server's requests (sampling, elicitation) and the client's
    answers are inspected on the way: refused (-32030 to whoever sent it), redacted or passed."""

    asked: _Asked | None = None

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        send = functools.partial(InboundRequest.request, self)
        return await asked_checked(self.asked, self.session.identity, method, params, send)


@runtime_checkable
class Guardable(Protocol):
    """A caller that is not a client's own request but asks a client for a call all the same (a
    gateway-held task's: :mod:`proxy.tasks.held`): the guard stage hands it the call's checks."""

    def guarded(self, asked: _Asked) -> Caller: ...


async def asked_checked(
    asked: _Asked | None,
    identity: Any,
    method: str,
    params: dict[str, Any] | None,
    send: Callable[[str, dict[str, Any] | None], Awaitable[Any]],
) -> Any:
    """A server's ``method`` asked of the client through ``send``: a sampling or elicitation
    request inspected before it is sent (refused: GuardrailDenied, -32030 to the server; or
    redacted), and the client's sampling answer before the server has it."""
    direction = _ASKING.get(method)
    if asked is None or direction is None:
        return await send(method, params)
    params = dict(await asked.check(identity, direction, params or {}))
    result = await send(method, params)
    if method == "sampling/createMessage" and isinstance(result, dict):
        result = dict(await asked.check(identity, "sampling_results", result))
    return result


def _meta(verdict: Any) -> dict[str, Any]:
    return {GUARDRAIL_KEY: {"rules": list(verdict.rule_ids), "detectors": list(verdict.detectors)}}


def _denied(what: str, verdict: Any, *, call: str = "tools/call") -> Any:
    found = ", ".join(verdict.detectors) or "its inspection"
    text = f"{what}: {verdict.reason} (found: {found}). The matched content is not shown."
    if call == "tools/call":
        return tool_error(text, outcome="denied", meta=_meta(verdict))
    raise GuardrailDenied(text, data={"rules": list(verdict.rule_ids), "detectors": list(verdict.detectors)})
