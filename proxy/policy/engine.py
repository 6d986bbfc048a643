"""Deciding: one identity, one subject (a tool, prompt, resource or server log level) in, one
:class:`Decision` out.

The semantics (Cedar's, in short):

* a rule applies when every condition of its ``match`` holds and its ``unless`` (if any) does
  not hold as a whole;
* any applicable ``deny`` rule → deny (forbid overrides permit);
* else any applicable ``allow`` rule → allow;
* else the policy's default;
* and when that says allow for a tool, any applicable ``confirm`` rule → confirm: allowed once a
  person approves the call. A confirm rule only tightens; it never allows what the rest denies.

A server's ``log_level`` differs in one way: only allow rules that name ``log_levels`` can allow
it, and when none applies it is denied, whatever the default.

Every applicable rule of the winning effect is named in the decision, sorted, so the result
never depends on the order rules were written or loaded in. The engine never raises to say no,
and never does I/O; enforcing (hiding a tool, refusing a call, logging a dry run) is the
caller's business.

Speed: :meth:`PolicyEngine.decide` runs for every item of every ``*/list`` and for every call.
The conditions are compiled once per rule by :mod:`proxy.policy.conditions` (the same checks
guardrail rules use): globs into one regular expression per kind, exact names into frozensets;
decisions for repeated (identity, subject) pairs come from a cache bounded in
entries and in the length of the names it keeps.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from proxy.catalog.merge import Entry
from proxy.policy.annotations import CAUTIOUS, EffectiveAnnotations
from proxy.policy.conditions import CACHE_SIZE, CACHED_NAME_MAX, all_of, where, who
from proxy.policy.model import (
    Confirmation,
    Decision,
    Identity,
    Kind,
    Match,
    Policy,
    RememberFor,
    RoleApprover,
    Rule,
)

__all__ = ["PolicyEngine", "Subject"]


@dataclass(frozen=True, slots=True)
class Subject:
    """What is being decided about.

    ``name`` is the tool's or prompt's *canonical* name (``prefix + separator + original``, never
    the shortened or derived spelling a client may be shown: :mod:`proxy.catalog.naming`), or
    the resource URI; with ``server_id`` it names one (server, original name), so a rule holds
    whatever a client calls the thing. For a ``log_level`` (the level a shared server logs at,
    which ``logging/setLevel`` changes for everyone) it is the server id. ``annotations`` are
    the tool's *effective* annotations (:mod:`proxy.policy.annotations`); a tool given without
    them is judged by the cautious defaults, never by nothing. The other kinds have none.
    """

    kind: Kind
    name: str
    server_id: str
    annotations: EffectiveAnnotations | None = None

    @classmethod
    def tool(cls, entry: Entry, annotations: EffectiveAnnotations) -> Subject:
        return cls("tool", entry.canonical, entry.server_id, annotations)

    @classmethod
    def prompt(cls, entry: Entry) -> Subject:
        return cls("prompt", entry.canonical, entry.server_id)

    @classmethod
    def resource(cls, uri: str, server_id: str) -> Subject:
        return cls("resource", uri, server_id)

    @classmethod
    def log_level(cls, server_id: str) -> Subject:
        """Changing the level server ``server_id``'s shared connection logs at."""
        return cls("log_level", server_id, server_id)


_Check = Callable[[Identity, Subject], bool]

_LEVELS_DEFAULT: Final = Decision(
    "deny", (), ("no rule naming log_levels allows it; a shared server's log level is denied by default",)
)


def _annotation_check(match: Match) -> _Check | None:
    wanted = match.annotations
    if wanted is None:
        return None
    wanted_values = {
        "read_only": wanted.readOnly,
        "destructive": wanted.destructive,
        "idempotent": wanted.idempotent,
        "open_world": wanted.openWorld,
    }
    given = {attribute: value for attribute, value in wanted_values.items() if value is not None}
    # attrgetter of several names returns a tuple, of one name the bare value.
    read = operator.attrgetter(*given)
    expected = tuple(given.values()) if len(given) > 1 else next(iter(given.values()))

    def check(identity: Identity, subject: Subject) -> bool:
        if subject.kind != "tool":
            return False
        effective = subject.annotations or CAUTIOUS  # unknown means "assume the worst"
        return bool(read(effective) == expected)

    return check


def _compile(match: Match) -> _Check:
    """One function checking every condition of ``match``, cheapest first: who asks, then where
    (:mod:`proxy.policy.conditions`, shared with guardrail rules), then the tool's annotations."""
    named = {
        "tool": match.tools,
        "prompt": match.prompts,
        "resource": match.resources,
        "log_level": match.log_levels,
    }
    checks: list[_Check] = who(match)
    checks += where(match, named)
    if (annotations := _annotation_check(match)) is not None:
        checks.append(annotations)
    return all_of(checks)


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    id: str
    sentence: str
    applies: _Check
    show: bool
    rule: Rule


def _compile_rule(rule: Rule) -> _CompiledRule:
    match = _compile(rule.match)
    if rule.unless is None:
        applies = match
    else:
        unless = _compile(rule.unless)

        def applies(identity: Identity, subject: Subject) -> bool:
            return match(identity, subject) and not unless(identity, subject)

    return _CompiledRule(rule.id, rule.sentence(), applies, rule.show, rule)


def _confirmation(rules: Iterable[Rule]) -> Confirmation:
    """Every applicable confirm rule's options, combined most cautiously (see Confirmation)."""
    reasons: list[str] = []
    timeouts: list[int] = []
    remembers: list[str] = []
    minutes: list[int] = []
    any_arguments = True
    roles: set[str] = set()
    for rule in rules:
        options = rule.options
        reason = options.reason or (rule.description.strip() if rule.description else "")
        if reason and reason not in reasons:
            reasons.append(reason)
        timeouts.append(options.timeout)
        any_arguments = any_arguments and options.remember_any_arguments
        if isinstance(options.remember, RememberFor):
            remembers.append("minutes")
            minutes.append(options.remember.minutes)
        else:
            remembers.append(options.remember)
        if isinstance(options.approver, RoleApprover):
            roles.add(options.approver.role)
    remember = "none" if "none" in remembers else ("minutes" if "minutes" in remembers else "session")
    return Confirmation(
        reasons=tuple(reasons),
        timeout=float(min(timeouts)),
        remember=remember,  # type: ignore[arg-type]
        remember_minutes=min(minutes) if remember == "minutes" else 0,
        remember_any_arguments=any_arguments and remember != "none",
        approver_roles=frozenset(roles),
    )


class PolicyEngine:
    """Decides with one :class:`Policy`, compiled once. Build a new engine when the policy changes."""

    __slots__ = ("_allows", "_cache", "_confirms", "_default", "_denies", "_level_allows", "policy")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        # Sorted by id, so the ids in a decision come out sorted without sorting per call.
        rules = sorted(policy.rules, key=lambda rule: rule.id)
        self._denies = tuple(_compile_rule(rule) for rule in rules if rule.effect == "deny")
        self._allows = tuple(_compile_rule(rule) for rule in rules if rule.effect == "allow")
        self._confirms = tuple(_compile_rule(rule) for rule in rules if rule.effect == "confirm")
        # A shared server's log level is allowed only by a rule written for it: neither the
        # default nor an allow rule naming no kind (written, maybe, before the kind existed)
        # lets one identity change what a shared server tells everyone. Deny rules apply as ever.
        self._level_allows = tuple(
            _compile_rule(rule)
            for rule in rules
            if rule.effect == "allow" and "log_level" in (rule.match.kinds or ())
        )
        self._default = Decision(policy.default, (), (f"no rule matched; default is {policy.default}",))
        self._cache: dict[tuple[Identity, Subject], Decision] = {}

    def decide(self, identity: Identity, subject: Subject) -> Decision:
        """The decision for ``identity`` on ``subject``. Pure: the same inputs, the same decision."""
        key = (identity, subject)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = self._evaluate(identity, subject)
        if (
            len(subject.name) + len(identity.name) + len(identity.issuer) + len(identity.subject)
            > CACHED_NAME_MAX
        ):
            return decision
        if len(self._cache) >= CACHE_SIZE:
            # Dropping everything is crude but O(1) amortised and keeps the hot path branch-free;
            # a working set larger than the cache just pays the (cheap) evaluation again.
            self._cache.clear()
        self._cache[key] = decision
        return decision

    @property
    def cached(self) -> int:
        """How many decisions the cache holds."""
        return len(self._cache)

    def _evaluate(self, identity: Identity, subject: Subject) -> Decision:
        decision = self._permits(identity, subject)
        if decision.effect != "allow" or subject.kind != "tool" or not self._confirms:
            return decision
        asking = [rule for rule in self._confirms if rule.applies(identity, subject)]
        if not asking:
            return decision
        return Decision(
            "confirm",
            tuple(rule.id for rule in asking),
            tuple(rule.sentence for rule in asking),
            confirm=_confirmation(rule.rule for rule in asking),
        )

    def _permits(self, identity: Identity, subject: Subject) -> Decision:
        levels = subject.kind == "log_level"
        for group in (self._denies, self._level_allows if levels else self._allows):
            deciding = [rule for rule in group if rule.applies(identity, subject)]
            if deciding:
                denied = group is self._denies
                return Decision(
                    "deny" if denied else "allow",
                    tuple(rule.id for rule in deciding),
                    tuple(rule.sentence for rule in deciding),
                    shown=denied and all(rule.show for rule in deciding),
                )
        return _LEVELS_DEFAULT if levels else self._default
