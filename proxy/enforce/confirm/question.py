"""The question Manifold asks before a ``confirm`` tool call runs, and how an answer is read. Pure.

The question is a form-mode ``elicitation/create``: its message says which tool on which server,
why the policy asks (the rules' reasons), and the arguments: every value passes the log
redaction (:func:`proxy.observe.logs.redact_value`: secret-looking field names masked, credentials in
text masked), so the summary never shows what a log line would hide, and a line whose value was
masked says so. Nothing else is left out: no value is cut, line breaks and control characters
become spaces (a value cannot forge a line of the question), and a run of four or more blanks is
shown as its count (``⟨250 blanks⟩``), so padding cannot push a command out of sight. A call
whose summary would not fit ``MAX_SUMMARY_CHARS`` is not offered for approval at all
(:attr:`Summary.complete` is false): nobody is asked to approve what they cannot see.
The form has one required boolean, ``approve``, and (when the rule lets an answer be remembered)
a ``remember`` choice. An answer counts as approval only when it is exactly that shape with
``approve: true``; anything else (another shape, extra fields, a huge body) is a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from proxy.enforce.confirm.approvals import Approval
from proxy.observe.logs import redact_value
from proxy.policy.model import Confirmation

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_SUMMARY_CHARS",
    "Answer",
    "Asked",
    "Outcome",
    "approval_question",
    "outcome_of_action",
    "read_answer",
    "refusal_text",
    "remember_choices",
    "summarise_arguments",
    "summary_of",
    "question",
    "Summary",
]

Outcome = Literal[
    "accepted",  # the person approved
    "remembered",  # an approval they asked Manifold to remember covered it
    "declined",
    "cancelled",
    "timeout",
    "invalid",  # the client's answer did not fit the question
    "unavailable",  # the client cannot be asked
    "approved",  # an approver approved it on the approval page
    "rejected",  # an approver rejected it there
    "spent",  # the approval was used already, by the same call asked twice
    "too_large",  # the arguments do not fit a question whole: nobody is asked
    "no_approval_page",  # an approver must decide, but nothing serves the approval page
    "abandoned",  # the caller gave up (cancelled the call, or went) before the question ended
]

MAX_ANSWER_BYTES: Final = 4096
MAX_SUMMARY_CHARS: Final = 8000
_BLANKS: Final = re.compile(r" {4,}")
_MASKED: Final = " (masked: Manifold does not show secrets)"
_NO: Final = "no"
_SESSION: Final = "for this session"


@dataclass(frozen=True, slots=True)
class Asked:
    """What the question is about."""

    tool: str  # the namespaced name the client called
    server_id: str
    identity: str
    confirmation: Confirmation
    stateless: bool  # a 2026-07-28 caller: no session to remember an answer for
    change: str | None = None  # a drifted pin: what changed in the tool's definition


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    remember: Literal["none", "session", "minutes"] = "none"


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    complete: bool  # every argument shown whole; False: too large to ask about
    size: int  # characters the whole summary takes


def summary_of(arguments: Mapping[str, Any]) -> Summary:
    """One line per argument, ``name: value``, redacted as logs are, never cut: when the whole
    does not fit :data:`MAX_SUMMARY_CHARS`, ``complete`` is false and the text says so."""
    lines: list[str] = []
    size = 0
    for name, value in arguments.items():
        shown = redact_value(str(name), value)
        text = shown if isinstance(shown, str) else orjson.dumps(shown, default=str).decode()
        line = f"{_visible(str(name))}: {_visible(text)}"
        if shown != value:
            line += _MASKED
        lines.append(line)
        size += len(line) + 1
        if size > MAX_SUMMARY_CHARS:
            break
    if size > MAX_SUMMARY_CHARS:
        text = (
            f"(too large to show whole: more than {MAX_SUMMARY_CHARS} characters in "
            f"{len(arguments)} arguments; not offered for approval)"
        )
        return Summary(text, False, size)
    return Summary("\n".join(lines) if lines else "(none)", True, size)


def summarise_arguments(arguments: Mapping[str, Any]) -> str:
    """The text of :func:`summary_of`."""
    return summary_of(arguments).text


def _visible(text: str) -> str:
    # One line per argument: a value's own line breaks and control characters must not forge
    # another line of the question ("approved by the administrator", say). Long runs of blanks
    # are counted, not shown: they would push the rest of a value out of view.
    printable = "".join(ch if ch.isprintable() else " " for ch in text)
    return _BLANKS.sub(lambda run: f" ⟨{len(run[0])} blanks⟩ ", printable)


def remember_choices(confirmation: Confirmation, *, stateless: bool) -> tuple[str, ...]:
    """The ``remember`` choices offered, ``("no", …)``; empty when nothing can be remembered."""
    if confirmation.remember == "minutes":
        return (_NO, f"for {confirmation.remember_minutes} minutes")
    if confirmation.remember == "session" and not stateless:
        return (_NO, _SESSION)
    return ()


def question(asked: Asked, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The ``elicitation/create`` params (form mode) asking to approve one call."""
    confirmation = asked.confirmation
    lines = [
        f"Manifold asks before this tool runs: {asked.tool!r} on server {asked.server_id!r}, "
        f"called by {asked.identity!r}.",
    ]
    if asked.change:
        lines.append(f"The tool changed since it was approved: {asked.change}")
    if confirmation.reason:
        lines.append(f"Why: {confirmation.reason}")
    lines.append("Arguments:")
    lines.append(summarise_arguments(arguments))
    choices = remember_choices(confirmation, stateless=asked.stateless)
    properties: dict[str, Any] = {
        "approve": {
            "type": "boolean",
            "title": "Run this call",
            "description": "Yes runs the tool with these arguments; no refuses it.",
            "default": False,
        }
    }
    if choices:
        scope = "this tool" if confirmation.remember_any_arguments else "this tool with these arguments"
        properties["remember"] = {
            "type": "string",
            "title": "Remember my answer",
            "description": f"Approve {scope} again without asking",
            "enum": list(choices),
            "default": _NO,
        }
    return {
        "mode": "form",
        "message": "\n".join(lines),
        "requestedSchema": {"type": "object", "properties": properties, "required": ["approve"]},
    }


def approval_question(approval: Approval, url: str, timeout: float) -> dict[str, Any]:
    """The ``elicitation/create`` params (URL mode) pointing the caller at the approval page."""
    roles = " or ".join(repr(role) for role in approval.roles)
    return {
        "mode": "url",
        "message": (
            f"Manifold needs someone with the role {roles} to approve this call of {approval.tool!r} "
            f"on server {approval.server!r}. Open the link, or pass it to them: they approve or reject "
            f"it there within {timeout:g} s, and the call waits."
        ),
        "url": url,
        "elicitationId": approval.id,
    }


def read_answer(result: object, confirmation: Confirmation, *, stateless: bool) -> Answer:
    """What an ``elicitation/create`` result says. Only exactly the asked shape approves."""
    if not isinstance(result, Mapping) or len(orjson.dumps(result, default=str)) > MAX_ANSWER_BYTES:
        return Answer("invalid")
    action = result.get("action")
    if action == "decline":
        return Answer("declined")
    if action == "cancel":
        return Answer("cancelled")
    if action != "accept":
        return Answer("invalid")
    content = result.get("content")
    choices = remember_choices(confirmation, stateless=stateless)
    allowed = {"approve", "remember"} if choices else {"approve"}
    if not isinstance(content, Mapping) or not set(content) <= allowed:
        return Answer("invalid")
    approve = content.get("approve")
    if not isinstance(approve, bool):
        return Answer("invalid")
    remember = content.get("remember", _NO)
    if remember not in (choices or (_NO,)):
        return Answer("invalid")
    if not approve:
        return Answer("declined")
    if remember == _NO:
        return Answer("accepted")
    return Answer("accepted", "session" if remember == _SESSION else "minutes")


_WHY: Final[dict[str, str]] = {
    "rejected": "the approver rejected it",
    "declined": "the user declined it",
    "cancelled": "the user dismissed the question without answering",
    "timeout": "nobody answered in time",
    "invalid": "the client's answer did not fit Manifold's question",
    "spent": "its approval was used by another call of the same request; call it again to ask anew",
    "abandoned": "the caller of the same request gave up waiting; call it again to ask anew",
}


def refusal_text(name: str, rule_ids: tuple[str, ...], confirmation: Confirmation, outcome: Outcome) -> str:
    """What the caller is told when a question about calling ``name`` ends without approval."""
    rules = ", ".join(rule_ids)
    if outcome == "unavailable" and rule_ids == ("pins",):
        return (
            f"Manifold asks the user before the first call of {name!r} since its server changed "
            "it (tool pins), but this client cannot be asked: it did not declare the elicitation "
            "capability (form mode). Call it from a client that supports elicitation, or ask an "
            "operator to review and accept the change (manifold pins accept)."
        )
    if outcome == "too_large":
        return (
            f"Manifold did not run {name!r}: the policy (rule {rules}) asks before it runs, and its "
            f"arguments are too large to show whole in the question (more than {MAX_SUMMARY_CHARS} "
            "characters); nobody is asked to approve what they cannot see. Call it with smaller "
            "arguments (split the work), or ask an operator to change the policy."
        )
    if outcome == "no_approval_page":
        roles = " or ".join(sorted(confirmation.approver_roles))
        return (
            f"Manifold did not run {name!r}: the policy (rule {rules}) needs someone with the role "
            f"{roles} to approve it on Manifold's approval page, but this Manifold serves no approval "
            "page (it runs as `manifold stdio`) and shares its approvals with no replica that does. "
            "Call it through a Manifold run with `manifold serve` (or give this one "
            "`rate_limits.backend: redis` and `policy.approvals_url` of a replica that serves the page), "
            "or ask an operator to change the policy."
        )
    if outcome == "unavailable":
        return (
            f"Manifold's policy needs the user to approve each call of {name!r} (rule {rules}: "
            f"{confirmation.reason or 'no reason given'}), but this client cannot be asked: it "
            "did not declare the elicitation capability (form mode). Call it from a client that "
            "supports elicitation, or ask an operator to change the policy."
        )
    timeout = f" (within {confirmation.timeout:g} s)" if outcome == "timeout" else ""
    asks = (
        "its server changed the tool since it was approved (tool pins)"
        if rule_ids == ("pins",)
        else f"the policy (rule {rules}) asks the user first"
    )
    return (
        f"Manifold did not run {name!r}: {asks}, and "
        f"{_WHY[outcome]}{timeout}. Do not retry unless the user asks for it."
    )


def outcome_of_action(answer: object) -> Outcome:
    """How a caller's answer to the approval link ended the question, when it did not accept."""
    action = answer.get("action") if isinstance(answer, dict) else None
    return "declined" if action == "decline" else "cancelled" if action == "cancel" else "invalid"
