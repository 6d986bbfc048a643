"""Deciding what a guardrail does: who asks, what is inspected where, and which detectors found
something in, one :class:`GuardDecision` out.

The semantics, as for every policy rule (``policies/README.md``):

* a rule applies when every condition of its ``match`` holds and its ``unless`` does not hold
  as a whole; its ``detectors`` condition holds when a detector it names found something (a
  rule naming no detectors holds on any finding). Rules other than ``inspect`` apply only to
  content in which something was found;
* any applying ``deny`` rule → deny;
* else any applying ``quarantine`` → quarantine; else any ``confirm`` → confirm; else any
  ``redact`` → redact; else any ``audit`` → audit; else allow;
* ``redact`` is carried out for every detector an applying redact rule names, also when a
  confirm rule asks (the person approves the redacted call);
* ``inspect`` rules (external services) are listed in :attr:`GuardDecision.hooks`: the caller
  sends the content to each and folds the answers in (:meth:`GuardEngine.with_hook`).

A rule's ``match`` and ``unless`` are checked by the same compiled conditions as a policy rule's
(:mod:`proxy.policy.conditions`), plus ``endpoints`` and ``directions``. The winning rules are
named sorted, so order never matters. Pure: no I/O, never raises to say
no. The rules that could apply to a (who, where) pair are cached, so a call with nothing found
costs a dictionary look-up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from proxy.policy.conditions import CACHE_SIZE, CACHED_NAME_MAX, all_of, where, who
from proxy.policy.conditions import globs as glob_matcher
from proxy.policy.engine import _confirmation
from proxy.policy.guardrails import DIRECTIONS, Direction, GuardMatch, GuardRule
from proxy.policy.model import Confirmation, Identity

__all__ = ["RANK", "both_ask", "GuardDecision", "GuardEngine", "GuardSubject", "Outcome"]

Outcome: TypeAlias = Literal["allow", "audit", "redact", "confirm", "quarantine", "deny"]
RANK: Final[dict[str, int]] = {
    "allow": 0,
    "audit": 1,
    "redact": 2,
    "confirm": 3,
    "quarantine": 4,
    "deny": 5,
}


@dataclass(frozen=True, slots=True)
class GuardSubject:
    """Where content is inspected. ``kind`` and ``name`` are the tool's or prompt's canonical
    name or the resource's URI (empty for a server's own requests); ``endpoint`` is ``""`` for
    ``/mcp``."""

    direction: Direction
    server_id: str
    kind: Literal["tool", "prompt", "resource", ""] = ""
    name: str = ""
    endpoint: str = ""


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """What to do with one inspected message, and why.

    Attributes:
        effect: the strongest effect of the applying rules (``allow`` when none applies).
        rule_ids: the sorted ids of the rules of that effect (of every applying rule for audit).
        reasons: one sentence per deciding rule.
        detectors: the detectors those rules matched (sorted): what a denial names.
        redact: the detectors whose matches are replaced (redact rules that apply).
        hooks: ``(rule id, hook name)`` of every applying inspect rule.
        confirm: set exactly when the effect is ``confirm``.
        audited: every applying rule's id (for the audit record, whatever won).
    """

    effect: Outcome
    rule_ids: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    detectors: tuple[str, ...] = ()
    redact: frozenset[str] = frozenset()
    hooks: tuple[tuple[str, str], ...] = ()
    confirm: Confirmation | None = None
    audited: tuple[str, ...] = field(default=())

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


ALLOW: Final = GuardDecision("allow")

_Check = Callable[[Identity, GuardSubject], bool]


def _compile(match: GuardMatch) -> _Check:
    """One function checking every condition of ``match`` except ``detectors``: who asks and
    where as policy rules do (:mod:`proxy.policy.conditions`), and the endpoint and direction."""
    checks: list[_Check] = who(match)
    if match.endpoints is not None:
        endpoints = frozenset(match.endpoints)
        checks.append(lambda i, s: s.endpoint in endpoints)
    if match.directions is not None:
        directions = frozenset(match.directions)
        checks.append(lambda i, s: s.direction in directions)
    checks.extend(where(match, {"tool": match.tools, "prompt": match.prompts, "resource": match.resources}))
    return all_of(checks)


@dataclass(frozen=True, slots=True)
class _Compiled:
    rule: GuardRule
    applies: _Check  # every condition but the detectors (and an unless's detectors)
    detects: Callable[[str], bool]  # whether the rule is about this detector
    unless: _Check | None  # an unless naming detectors: its other conditions
    sentence: str


def _detects(globs: tuple[str, ...] | None) -> Callable[[str], bool]:
    if globs is None:
        return lambda name: True
    matcher = glob_matcher(globs)
    return lambda name: matcher(name) is not None


def _compile_rule(rule: GuardRule) -> _Compiled:
    match = _compile(rule.match)
    directions = rule.directions
    unless = None if rule.unless is None else _compile(rule.unless)
    # An unless naming detectors excepts those findings only (GuardEngine.candidates); one
    # naming none excepts the whole subject, here.
    whole = unless if rule.unless is not None and rule.unless.detectors is None else None

    def applies(i: Identity, s: GuardSubject) -> bool:
        return s.direction in directions and match(i, s) and (whole is None or not whole(i, s))

    per_detector = unless if whole is None else None
    return _Compiled(rule, applies, _detects(rule.match.detectors), per_detector, rule.sentence())


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A rule that applies to one (identity, subject), but for its detectors."""

    compiled: _Compiled
    excepted: Callable[[str], bool] | None  # detectors its unless excepts here, if any


class GuardEngine:
    """Decides with one set of guardrail rules, compiled once."""

    __slots__ = ("_cache", "_rules", "rules")

    def __init__(self, rules: Iterable[GuardRule]) -> None:
        self.rules = tuple(sorted(rules, key=lambda rule: rule.id))
        self._rules = tuple(_compile_rule(rule) for rule in self.rules)
        self._cache: dict[tuple[Identity, GuardSubject], tuple[_Candidate, ...]] = {}

    def directions(self) -> frozenset[Direction]:
        """Every direction some rule inspects (nothing else needs scanning)."""
        return frozenset(d for rule in self.rules for d in rule.directions)

    def candidates(self, identity: Identity, subject: GuardSubject) -> tuple[_Candidate, ...]:
        """The rules that may apply here, whatever is found (empty: nothing to inspect)."""
        key = (identity, subject)
        found = self._cache.get(key)
        if found is not None:
            return found
        candidates = []
        for compiled in self._rules:
            if not compiled.applies(identity, subject):
                continue
            excepted = None
            if compiled.unless is not None and compiled.unless(identity, subject):
                assert compiled.rule.unless is not None
                excepted = _detects(compiled.rule.unless.detectors)
            candidates.append(_Candidate(compiled, excepted))
        found = tuple(candidates)
        if len(subject.name) + len(identity.name) + len(identity.subject) <= CACHED_NAME_MAX:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = found
        return found

    def explain(
        self, identity: Identity, server_id: str, kind: str, name: str, endpoint: str = ""
    ) -> dict[str, list[dict[str, object]]]:
        """Which guardrail rules may apply to ``identity`` on this subject, per direction, and on
        what they act (``manifold explain``): ``{direction: [{rule, effect, detectors, hook}]}``."""
        report: dict[str, list[dict[str, object]]] = {}
        for direction in DIRECTIONS:
            subject = GuardSubject(direction, server_id, kind, name, endpoint)  # type: ignore[arg-type]
            for candidate in self.candidates(identity, subject):
                rule = candidate.compiled.rule
                report.setdefault(direction, []).append(
                    {
                        "rule": rule.id,
                        "effect": rule.effect,
                        "detectors": list(rule.match.detectors or ("*",)),
                        **({"hook": rule.hook} if rule.hook else {}),
                    }
                )
        return report

    def decide(self, identity: Identity, subject: GuardSubject, detectors: Collection[str]) -> GuardDecision:
        """The decision on content in which ``detectors`` found something (may be empty)."""
        return self.decide_among(self.candidates(identity, subject), subject, detectors)

    @staticmethod
    def decide_among(
        candidates: Iterable[_Candidate], subject: GuardSubject, detectors: Collection[str]
    ) -> GuardDecision:
        """:meth:`decide` over :meth:`candidates` already looked up."""
        if not detectors:  # nothing found (most messages): only an inspect rule on anything applies
            asked: list[tuple[str, str]] = []
            for candidate in candidates:  # a loop, not generators: this runs on every message
                rule = candidate.compiled.rule
                if rule.effect == "inspect" and rule.match.detectors is None and rule.hook is not None:
                    asked.append((rule.id, rule.hook))
            return GuardDecision("allow", hooks=tuple(asked)) if asked else ALLOW
        by_effect: dict[str, list[tuple[_Compiled, tuple[str, ...]]]] = {}
        hooks: list[tuple[str, str]] = []
        redact: set[str] = set()
        for candidate in candidates:
            compiled = candidate.compiled
            rule = compiled.rule
            hit = tuple(
                sorted(
                    d
                    for d in detectors
                    if compiled.detects(d) and (candidate.excepted is None or not candidate.excepted(d))
                )
            )
            if rule.effect == "inspect":
                if rule.match.detectors is None or hit:
                    assert rule.hook is not None
                    hooks.append((rule.id, rule.hook))
                continue
            if not hit:
                continue
            effect = rule.effect
            if effect == "redact":
                redact.update(hit)
            by_effect.setdefault(effect, []).append((compiled, hit))
        if not by_effect:
            return GuardDecision("allow", hooks=tuple(hooks)) if hooks else ALLOW
        winner = max(by_effect, key=RANK.__getitem__)
        deciding = by_effect[winner]
        audited = tuple(sorted(c.rule.id for group in by_effect.values() for c, _ in group))
        return GuardDecision(
            winner,  # type: ignore[arg-type]
            tuple(c.rule.id for c, _ in deciding),
            tuple(c.sentence for c, _ in deciding),
            tuple(sorted({d for _, hit in deciding for d in hit})),
            frozenset(redact),
            tuple(hooks),
            _confirmation(c.rule for c, _ in deciding) if winner == "confirm" else None,  # type: ignore[misc]
            audited,
        )


def both_ask(confirm: Confirmation, other: Confirmation) -> Confirmation:
    """A confirm rule's question and a guardrail's as one: every reason, the shorter timeout,
    remembered only as far as both let, and the approvers either names."""
    remembers = {confirm.remember, other.remember}
    remember = "none" if "none" in remembers else ("minutes" if "minutes" in remembers else "session")
    minutes = [c.remember_minutes for c in (confirm, other) if c.remember == "minutes"]
    return Confirmation(
        reasons=tuple(dict.fromkeys((*confirm.reasons, *other.reasons))),
        timeout=min(confirm.timeout, other.timeout),
        remember=remember,  # type: ignore[arg-type]
        remember_minutes=min(minutes) if remember == "minutes" else 0,
        remember_any_arguments=confirm.remember_any_arguments and other.remember_any_arguments,
        approver_roles=confirm.approver_roles | other.approver_roles,
    )
