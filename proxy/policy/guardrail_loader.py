"""The ``guardrails:`` section of a policy document in, a :class:`Guardrails` out, or a
ConfigError whose every line names the file, the rule and the field.

A section::

    guardrails:
      patterns: {ticket: "TCK-[0-9]{6}"}     # custom detectors (RE2): custom:ticket
      words: {codenames: [bluebird, osprey]}  # word lists: custom:codenames
      allowed_hosts: [docs.example.com]       # links/images may carry data only to these
      rules:
        - id: no-keys-out
          effect: redact
          match: {directions: [tool_arguments], detectors: ["*_key", "*_token"]}

Several files combine (:func:`combine_guardrails`): rules are gathered (ids unique across the
files, and across the policy rules too), patterns and word lists merged (one name, one
definition), allowed hosts joined. Detector names are checked: a rule naming a detector that does
not exist would silently never apply.

Pure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from proxy.core.documents import show_value
from proxy.core.errors import ConfigError
from proxy.guard.detect import Scanner
from proxy.policy.guardrails import GuardRule

__all__ = [
    "BUILT_IN_DETECTORS",
    "LIMIT_DETECTOR",
    "Guardrails",
    "GuardrailsSection",
    "combine_guardrails",
    "parse_guardrails",
]

# Every detector name a rule may name: the built-in detectors' and the pseudo-detector
# ``inspection_limit`` (a walk stopped by a bound). Custom ones are ``custom:<name>``.
LIMIT_DETECTOR: Final = "inspection_limit"
BUILT_IN_DETECTORS: Final = Scanner.DETECTORS | {LIMIT_DETECTOR}

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Word = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class GuardrailsSection(BaseModel):
    """One document's ``guardrails:`` mapping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patterns: dict[
        Annotated[str, Field(pattern=_NAME, max_length=64)],
        Annotated[StrictStr, Field(min_length=1, max_length=4096)],
    ] = Field(default_factory=dict)
    words: dict[
        Annotated[str, Field(pattern=_NAME, max_length=64)],
        Annotated[tuple[Word, ...], Field(min_length=1, max_length=10_000)],
    ] = Field(default_factory=dict)
    allowed_hosts: tuple[Annotated[StrictStr, Field(min_length=1, max_length=253)], ...] = ()
    rules: tuple[GuardRule, ...] = ()


@dataclass(frozen=True, slots=True)
class Guardrails:
    """Every loaded guardrail rule and the detectors' own settings from the policy."""

    rules: tuple[GuardRule, ...] = ()
    patterns: Mapping[str, str] = field(default_factory=dict)
    words: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allowed_hosts: tuple[str, ...] = ()

    @property
    def custom(self) -> frozenset[str]:
        """The custom detectors' names (``custom:<name>``)."""
        return frozenset(f"custom:{name}" for name in (*self.patterns, *self.words))

    def hooks(self) -> frozenset[str]:
        """Every hook a rule names."""
        return frozenset(rule.hook for rule in self.rules if rule.hook is not None)


def parse_guardrails(data: Any, source: str) -> GuardrailsSection:
    """Validate one document's ``guardrails:`` value.

    Raises:
        ConfigError: one line per problem.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: guardrails: must be a mapping with rules (and patterns, words, allowed_hosts) "
            f"(got {show_value(data)})"
        )
    try:
        return GuardrailsSection.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_describe(error, source, data) for error in exc.errors())) from None


def _describe(error: Any, source: str, data: Mapping[str, Any]) -> str:
    loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
    else:
        message = (
            str(error["msg"]).replace("Input should be", "must be") + f" (got {show_value(error['input'])})"
        )
    where = "guardrails"
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        rules = data.get("rules")
        index = loc[1]
        rule = rules[index] if isinstance(rules, list) and index < len(rules) else None
        rule_id = rule.get("id") if isinstance(rule, Mapping) else None
        where += f".rules[{index}]" + (f" (id {rule_id!r})" if isinstance(rule_id, str) and rule_id else "")
        loc = loc[2:]
    rest = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    return f"{source}: {where}: {rest}: {message}" if rest else f"{source}: {where}: {message}"


def combine_guardrails(
    sections: Iterable[tuple[str, GuardrailsSection]],
    *,
    known_detectors: frozenset[str],
    policy_rule_ids: Mapping[str, str] | None = None,
) -> Guardrails:
    """One :class:`Guardrails` from every document's section.

    ``known_detectors``: the built-in detectors' names (custom ones are added from the
    sections); ``policy_rule_ids``: the policy rules' ids and their files (an id names one rule).

    Raises:
        ConfigError: a duplicate rule id or custom detector, or a detectors glob matching no
            detector.
    """
    problems: list[str] = []
    owners: dict[str, str] = dict(policy_rule_ids or {})
    rules: list[GuardRule] = []
    patterns: dict[str, str] = {}
    words: dict[str, tuple[str, ...]] = {}
    hosts: list[str] = []
    gathered = list(sections)
    for source, section in gathered:
        for name, pattern in section.patterns.items():
            if name in patterns or name in words:
                problems.append(
                    f"{source}: guardrails.patterns.{name}: custom detector {name!r} is defined twice"
                )
            patterns[name] = pattern
        for name, listed in section.words.items():
            if name in patterns or name in words:
                problems.append(
                    f"{source}: guardrails.words.{name}: custom detector {name!r} is defined twice"
                )
            words[name] = listed
        hosts.extend(h for h in section.allowed_hosts if h not in hosts)
    known = known_detectors | frozenset(f"custom:{name}" for name in (*patterns, *words))
    for source, section in gathered:
        for index, rule in enumerate(section.rules):
            where = f"{source}: guardrails.rules[{index}] (id {rule.id!r})"
            if rule.id in owners:
                problems.append(f"{where}: id: already used by a rule in {owners[rule.id]}")
                continue
            owners[rule.id] = source
            for part in ("match", "unless"):
                match = getattr(rule, part)
                for position, glob in enumerate(match.detectors or () if match is not None else ()):
                    if not any(fnmatch.fnmatchcase(name, glob) for name in known):
                        problems.append(
                            f"{where}: {part}.detectors[{position}]: {glob!r} matches no detector "
                            f"(built in: {', '.join(sorted(known_detectors))}; custom ones are "
                            "'custom:<name>' of guardrails.patterns and guardrails.words)"
                        )
            rules.append(rule)
    if problems:
        raise ConfigError("\n".join(problems))
    return Guardrails(tuple(rules), patterns, words, tuple(hosts))
