"""What the confirm stage (:mod:`proxy.pipeline.stages.confirm`) asks a person to approve
(:class:`Need`), and the mark an approval, a remembered answer or an open question is tied to
(:func:`approval_mark`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

import orjson

from proxy.enforce.access import PinChange
from proxy.policy.model import DEFAULT_CONFIRM_TIMEOUT, Confirmation

__all__ = ["PIN_QUESTION", "Need", "approval_mark"]

# pins.mode confirm, for a tool no confirm rule asks about: the change is the reason.
PIN_QUESTION: Final = Confirmation(
    reasons=("Its server changed this tool since it was approved; check the change before it runs.",),
    timeout=DEFAULT_CONFIRM_TIMEOUT,
)


@dataclass(frozen=True, slots=True)
class Need:
    """What the person is asked to approve: the deciding rules (``("pins",)`` for a drifted pin
    alone), how, and the pin change to show, if any."""

    rule_ids: tuple[str, ...]
    confirm: Confirmation
    change: PinChange | None = None


def approval_mark(need: Need) -> str:
    """A digest of what decided to ask: the rules, their combined options, the pin change. An
    approval given under one policy is not good under another (a rule edited to ask an approver,
    to stop remembering, …)."""
    confirm = need.confirm
    facts = [
        list(need.rule_ids),
        list(confirm.reasons),
        confirm.timeout,
        confirm.remember,
        confirm.remember_minutes,
        confirm.remember_any_arguments,
        sorted(confirm.approver_roles),
        need.change.drift.new_hash if need.change is not None else None,
    ]
    return hashlib.sha256(orjson.dumps(facts)).hexdigest()[:32]
