"""One message inspected: the text a direction selects, the built-in detectors over it as one
text, the guardrail rules' decision, and the redacted message when the decision redacts.

What each direction inspects (:data:`SELECTED`): a tool call's ``arguments``; a tool result's
``content`` and ``structuredContent``; a resource's ``contents``; a prompt's ``description``
and ``messages``; a sampling request's ``messages`` and ``systemPrompt``; its answer's
``content``; an elicitation request's ``message`` and ``requestedSchema``; a definition's name,
title, description, schemas and annotations. Everything selected is walked as text
(:mod:`proxy.guardrails.walk`) and scanned as one text, so an instruction or a secret spread
over several content blocks is still found.

A walk stopped by a bound reports the pseudo-detector ``inspection_limit``: rules choose what
"too big to inspect" does, like any finding (``detectors: [inspection_limit]``).

Pure (the detectors are): runs on the event loop or on a worker thread alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from proxy.guard.detect import BlockFinding, Finding, Scanner, redact
from proxy.guardrails.walk import Path, Texts, one_text, replace, texts
from proxy.policy.guardrail_engine import ALLOW, GuardDecision, GuardEngine, GuardSubject, _Candidate
from proxy.policy.guardrail_loader import LIMIT_DETECTOR
from proxy.policy.guardrails import Direction
from proxy.policy.model import Identity

__all__ = ["LIMIT_DETECTOR", "NOTHING", "SELECTED", "Inspection", "Inspector"]

SELECTED: Final[Mapping[Direction, tuple[str, ...]]] = {
    "tool_arguments": ("arguments",),
    "tool_results": ("content", "structuredContent"),
    "resource_contents": ("contents",),
    "prompt_messages": ("description", "messages"),
    "sampling_requests": ("messages", "systemPrompt"),
    "sampling_results": ("content",),
    "elicitation_requests": ("message", "requestedSchema"),
    "definitions": (
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "arguments",
        "uri",
        "uriTemplate",
        "annotations",
    ),
}
# Object keys are text a model reads where a peer chose them freely: argument names, schema
# property names. In results they are mostly structure (content blocks), so only values count.
_KEYS: Final = frozenset({"tool_arguments", "sampling_results", "definitions", "elicitation_requests"})
# Where MCP content blocks travel (their binary payloads are not text).
_CONTENT: Final = frozenset(
    {"tool_results", "resource_contents", "prompt_messages", "sampling_requests", "sampling_results"}
)
# What the detectors are told the text is (proxy.guard.detect.scanner.KINDS).
_KIND: Final[Mapping[Direction, str]] = {
    "tool_arguments": "text",
    "tool_results": "result",
    "resource_contents": "result",
    "prompt_messages": "result",
    "sampling_requests": "result",
    "sampling_results": "text",
    "elicitation_requests": "result",
    "definitions": "definition",
}


@dataclass(frozen=True, slots=True)
class Inspection:
    """What one inspection found and decided.

    ``edited`` is the message with the redactions made (None when nothing was redacted);
    ``detectors`` every detector that found something (with ``inspection_limit`` when a bound
    stopped the walk); ``findings`` per detector, how many.
    """

    decision: GuardDecision
    detectors: frozenset[str]
    findings: Mapping[str, int]
    truncated: str  # "" or why the walk stopped ("bytes", "depth")
    edited: Mapping[str, Any] | None = None
    shown: Mapping[str, Any] | None = None  # for a confirm: every finding redacted, to show a person


_NO_COUNTS: Final[Mapping[str, int]] = MappingProxyType({})
# Nothing found, no rule applies (most messages): one answer for all of them.
NOTHING: Final = Inspection(ALLOW, frozenset(), _NO_COUNTS, "")


class Inspector:
    """The detectors and the guardrail rules, for one policy and its settings."""

    def __init__(
        self,
        engine: GuardEngine,
        scanner: Scanner,
        *,
        decoding: Scanner | None = None,
        max_bytes: int,
        max_depth: int,
    ) -> None:
        self.engine = engine
        self._scanner = scanner
        self._decoding = decoding or scanner  # for rules that ask for one level of decoding
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.directions = engine.directions()

    def candidates(self, identity: Identity, subject: GuardSubject) -> tuple[_Candidate, ...]:
        """The rules that may apply (empty: nothing to inspect, so nothing is scanned)."""
        if subject.direction not in self.directions:
            return ()
        return self.engine.candidates(identity, subject)

    def selected(self, direction: Direction, message: Mapping[str, Any]) -> Texts:
        """The text ``direction`` selects in ``message``, within the bounds."""
        # Keys are text a model reads too (an argument named like an instruction); but the
        # selection's own top-level keys are ours, not the peer's: walk their values only.
        found = Texts()
        keys, content = direction in _KEYS, direction in _CONTENT
        for key in SELECTED[direction]:
            if key not in message:
                continue
            value = message[key]
            text = one_text(value) if content and self.max_depth > 1 else None
            if text is not None:  # one text block (most results): what the walk would find
                if not found.add(text, (key, 0, "text"), self.max_bytes):
                    break
                continue
            texts(
                value,
                max_chars=self.max_bytes,
                max_depth=self.max_depth,
                keys=keys,
                content=content,
                base=(key,),
                into=found,
            )
            if found.truncated:
                break
        return found

    def inspect(
        self,
        candidates: Sequence[_Candidate],
        subject: GuardSubject,
        message: Mapping[str, Any],
    ) -> Inspection:
        """Scan what ``subject.direction`` selects in ``message`` and decide."""
        selected = self.selected(subject.direction, message)
        scanner = self._scanner
        for candidate in candidates:  # a loop, not any(): no generator on the per-call path
            if candidate.compiled.rule.decode:
                scanner = self._decoding
                break
        found = scanner.scan_blocks(selected.blocks, kind=_KIND[subject.direction]) if selected.blocks else ()
        if not found and not selected.truncated:  # nothing found (most messages): nothing to count
            decision = self.engine.decide_among(candidates, subject, ())
            return NOTHING if decision is ALLOW else Inspection(decision, frozenset(), _NO_COUNTS, "")
        counts: dict[str, int] = {}
        for block_finding in found:
            name = block_finding.finding.detector
            counts[name] = counts.get(name, 0) + 1
        if selected.truncated:
            counts[LIMIT_DETECTOR] = counts.get(LIMIT_DETECTOR, 0) + 1
        detectors = frozenset(counts)
        decision = self.engine.decide_among(candidates, subject, detectors)
        edited = None
        if decision.redact and decision.effect in ("redact", "confirm"):
            edited = _redacted(message, selected, found, decision.redact)
        shown = None
        if decision.effect == "confirm":
            shown = _redacted(message, selected, found, frozenset(counts)) if found else message
        return Inspection(decision, detectors, counts, selected.why, edited, shown)


def _redacted(
    message: Mapping[str, Any], selected: Texts, found: Sequence[BlockFinding], names: frozenset[str]
) -> Mapping[str, Any]:
    by_block: dict[int, list[Finding]] = {}
    for block_finding in found:
        if block_finding.finding.detector in names:
            by_block.setdefault(block_finding.block, []).append(block_finding.finding)
    edits: dict[Path, str] = {}
    last = len(selected.blocks) - 1
    for index, findings in by_block.items():
        block = selected.blocks[index]
        text = redact(block, findings)
        if index == last and selected.cut is not None:
            text += selected.cut[len(block) :]  # the part past the bound, as it was
        edits[selected.paths[index]] = text
    edited: Mapping[str, Any] = replace(dict(message), edits)
    return edited
