"""The guard stage: guardrail rules read what a call carries, both ways (``proxy.guardrails``).

* ``tools/call``: the arguments before they leave (``tool_arguments``), the result before the
  client sees it (``tool_results``);
* ``resources/read``: the contents (``resource_contents``); ``prompts/get``: the messages
  (``prompt_messages``).

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
from collections.abc import Mapping
from typing import Any, Final

from proxy.access import Access
from proxy.errors import GuardrailDenied
from proxy.pipeline import CallContext, GuardQuestion, Handler, tool_error
from proxy.policy import SchemaValidators
from proxy.protocol.results import is_input_required

__all__ = ["GUARDRAIL_KEY", "Guard"]

GUARDRAIL_KEY: Final = "dev.manifold/guardrail"
_DIRECTION: Final = {"resources/read": "resource_contents", "prompts/get": "prompt_messages"}
_KIND: Final = {"tools/call": "tool", "resources/read": "resource", "prompts/get": "prompt"}


class Guard:
    def __init__(self, access: Access, validators: SchemaValidators) -> None:
        self._access = access
        self._validators = validators

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        guard = self._access.guard
        if guard is None or ctx.method not in _KIND:
            return await call_next(ctx)
        from proxy.guardrails.engine import GuardSubject  # loaded with the guard: cheap now

        identity = ctx.caller.identity
        name = ctx.subject.name if ctx.subject is not None else ctx.name
        kind = _KIND[ctx.method]
        enforce = not self._access.settings.dry_run
        if ctx.method == "tools/call":
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
                    shown = verdict.shown.get("arguments") if verdict.shown is not None else None
                    question = GuardQuestion(
                        verdict.rule_ids,
                        verdict.confirm,
                        shown if isinstance(shown, Mapping) else ctx.arguments,
                    )
                    ctx = dataclasses.replace(ctx, guard_question=question)
        result = await call_next(ctx)
        if not isinstance(result, dict) or is_input_required(result):
            return result
        direction = "tool_results" if ctx.method == "tools/call" else _DIRECTION[ctx.method]
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


def _meta(verdict: Any) -> dict[str, Any]:
    return {GUARDRAIL_KEY: {"rules": list(verdict.rule_ids), "detectors": list(verdict.detectors)}}


def _denied(what: str, verdict: Any, *, call: str = "tools/call") -> Any:
    found = ", ".join(verdict.detectors) or "its inspection"
    text = f"{what}: {verdict.reason} (found: {found}). The matched content is not shown."
    if call == "tools/call":
        return tool_error(text, outcome="denied", meta=_meta(verdict))
    raise GuardrailDenied(text, data={"rules": list(verdict.rule_ids), "detectors": list(verdict.detectors)})
