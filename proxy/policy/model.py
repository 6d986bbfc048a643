"""The policy's data: who asks (:class:`Identity`), what rules say (:class:`Rule`), what came out
(:class:`Decision`), and how far a server's annotations are believed (:class:`ServerTrust`).

Everything here is frozen. The rule models are the policy language itself (``policies/README.md``
describes it for operators; :mod:`proxy.policy.loader` turns files into them and words the
errors); :mod:`proxy.policy.engine` compiles them and decides.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    model_validator,
)

from proxy.core.identity import ANONYMOUS, Identity, IdentityKey
from proxy.policy.limits import LimitRule

__all__ = [
    "ANONYMOUS",
    "HINT_NAMES",
    "AnnotationMatch",
    "Approver",
    "Confirmation",
    "ConfirmOptions",
    "Decision",
    "Effect",
    "Identity",
    "IdentityKey",
    "Kind",
    "Match",
    "Policy",
    "PolicyDocument",
    "Rule",
    "ServerTrust",
    "glob_problem",
]

Effect: TypeAlias = Literal["allow", "deny", "confirm"]
Default: TypeAlias = Literal["allow", "deny"]  # what a document may fall back to
Kind: TypeAlias = Literal["tool", "prompt", "resource", "log_level"]
HintName: TypeAlias = Literal["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]
HINT_NAMES: Final[tuple[HintName, ...]] = (
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
)

_RULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What a ``confirm`` decision asks for: who must approve, with what words, for how long.

    Combined from every applicable confirm rule, most cautiously: their reasons together, the
    shortest timeout, remembering only as far as every rule lets, and another person's approval
    (``approver_roles``, any of them) when any rule asks for one.
    """

    reasons: tuple[str, ...]
    timeout: float  # seconds the caller may wait for an answer
    remember: Literal["none", "session", "minutes"] = "none"
    remember_minutes: int = 0
    remember_any_arguments: bool = False  # remembered for the tool, whatever the arguments
    approver_roles: frozenset[str] = frozenset()  # empty: the calling user approves

    @property
    def reason(self) -> str:
        return " ".join(self.reasons)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one identity and one subject, and why.

    Attributes:
        effect: ``"allow"``, ``"deny"`` or ``"confirm"`` (allowed once a person approves).
        rule_ids: sorted ids of the rules that decided it: every matching deny rule when
            denied, every matching confirm rule when it asks, else every matching allow rule;
            empty when the document default decided.
        reasons: one sentence per deciding rule (or one for the default), for logs, audit
            records and the message a denied client reads.
    """

    effect: Effect
    rule_ids: tuple[str, ...]
    reasons: tuple[str, ...]
    # A deny whose every deciding rule says ``show: true``: listed, but calls are refused with
    # a message the model can act on. Any other deny hides the subject entirely.
    shown: bool = False
    confirm: Confirmation | None = None  # set exactly when the effect is "confirm"

    @property
    def visible(self) -> bool:
        """Whether lists show the subject (allowed, asked about, or denied by ``show: true`` rules
        only)."""
        return self.effect != "deny" or self.shown

    @property
    def allowed(self) -> bool:
        return self.effect == "allow"

    @property
    def by_default(self) -> bool:
        """True when no rule matched and the document default decided."""
        return not self.rule_ids

    @property
    def reason(self) -> str:
        """The reasons as one line."""
        return "; ".join(self.reasons)

    def enforced_effect(self, dry_run: bool) -> Effect:
        """What the caller should do: the effect, except that a dry run never denies nor asks.

        In a dry run the caller still logs :attr:`effect` ("would deny"), which is the point.
        """
        return "allow" if dry_run else self.effect


# --- the language -------------------------------------------------------------------------------


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` is not a usable glob, or None when it is.

    Globs are fnmatch-style and case-sensitive: ``*`` (any run, dots and slashes included),
    ``?`` (one character), ``[abc]``, ``[!abc]``. fnmatch reads an unclosed ``[`` as a literal,
    which silently matches nothing the author meant, so it is an error here.
    """
    if not glob:
        return "a glob must not be empty"
    index = 0
    while index < len(glob):
        if glob[index] == "[":
            end = index + 1
            if end < len(glob) and glob[end] == "!":
                end += 1
            if end < len(glob) and glob[end] == "]":
                end += 1  # a leading ']' is a member of the set, as in fnmatch
            end = glob.find("]", end)
            if end < 0:
                return f"unclosed '[' at position {index} (write '[[]' for a literal '[') (got {glob!r})"
            index = end
        index += 1
    try:
        re.compile(fnmatch.translate(glob))
    except re.error as exc:
        return f"not a valid glob: {exc} (got {glob!r})"
    return None


def _checked_glob(glob: str) -> str:
    problem = glob_problem(glob)
    if problem is not None:
        raise ValueError(problem)
    return glob


def _non_empty(values: tuple[str, ...]) -> tuple[str, ...]:
    if not values:
        raise ValueError(
            "must not be empty: an empty list matches nothing (leave the field out to match any)"
        )
    return values


def _given(value: Any) -> Any:
    # YAML reads `roles:` with nothing after it as null. Taken as "no condition", that would
    # silently widen a rule to everyone, so an explicit null is an error, never "left out".
    if value is None:
        raise ValueError("is empty (null): give a value, or leave the field out")
    return value


_T = TypeVar("_T")
Omittable = Annotated[_T | None, BeforeValidator(_given)]
"""A field that may be left out, but not given as null."""

Name = Annotated[StrictStr, Field(min_length=1)]
Glob = Annotated[StrictStr, AfterValidator(_checked_glob)]
Names = Annotated[tuple[Name, ...], AfterValidator(_non_empty)]
Globs = Annotated[tuple[Glob, ...], AfterValidator(_non_empty)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AnnotationMatch(_Model):
    """Conditions on a tool's *effective* annotations; every one given must be equal."""

    readOnly: Omittable[StrictBool] = None
    destructive: Omittable[StrictBool] = None
    idempotent: Omittable[StrictBool] = None
    openWorld: Omittable[StrictBool] = None

    @model_validator(mode="after")
    def _not_empty(self) -> AnnotationMatch:
        if (self.readOnly, self.destructive, self.idempotent, self.openWorld) == (None, None, None, None):
            raise ValueError("give at least one of readOnly, destructive, idempotent, openWorld")
        return self


class Match(_Model):
    """When a rule applies: every condition given must hold; a list holds when any element does.

    ``tools``, ``prompts``, ``resources`` and ``log_levels`` also say which kinds of subject the
    rule is about: a rule naming only ``tools`` never applies to a prompt. A rule naming none of
    them applies to tools, prompts and resources, and (deny rules only) to log levels: a server's
    log level is allowed only by an allow rule that names ``log_levels``
    (:meth:`proxy.policy.engine.PolicyEngine.decide`).
    """

    identities: Omittable[Names] = None
    roles: Omittable[Names] = None
    sources: Omittable[Names] = None
    issuers: Omittable[Names] = None
    authenticated: Omittable[StrictBool] = None
    servers: Omittable[Names] = None
    tools: Omittable[Globs] = None
    prompts: Omittable[Globs] = None
    resources: Omittable[Globs] = None
    log_levels: Omittable[Globs] = None  # server ids whose shared log level may be changed
    annotations: Omittable[AnnotationMatch] = None

    @property
    def kinds(self) -> frozenset[Kind] | None:
        """The kinds this match is limited to, or None for every kind."""
        named: set[Kind] = set()
        if self.tools is not None:
            named.add("tool")
        if self.prompts is not None:
            named.add("prompt")
        if self.resources is not None:
            named.add("resource")
        if self.log_levels is not None:
            named.add("log_level")
        return frozenset(named) or None

    @model_validator(mode="after")
    def _annotations_need_tools(self) -> Match:
        # Annotations exist on tools only: with only prompts/resources named, the rule is dead.
        if self.annotations is not None and self.kinds is not None and "tool" not in self.kinds:
            raise ValueError(
                "'annotations' only apply to tools, but this match names only prompts/resources/log_levels"
            )
        return self


MAX_CONFIRM_TIMEOUT: Final = 3600
DEFAULT_CONFIRM_TIMEOUT: Final = 120
MAX_REMEMBER_MINUTES: Final = 24 * 60


class RoleApprover(_Model):
    """Somebody else approves: an identity holding ``role`` (on Manifold's approval page)."""

    role: Name


Approver: TypeAlias = Literal["self"] | RoleApprover


class RememberFor(_Model):
    minutes: Annotated[int, Field(strict=True, ge=1, le=MAX_REMEMBER_MINUTES)]


def _approver(value: Any) -> Any:
    # Checked by hand, so a mistake reads as one sentence, not as one error per union member.
    if value == "self" or isinstance(value, RoleApprover):
        return value
    role = value.get("role") if isinstance(value, dict) and set(value) == {"role"} else None
    if not isinstance(role, str) or not role:
        raise ValueError(f"must be 'self' or {{role: <a role>}} (got {value!r})")
    return RoleApprover(role=role)


def _remember(value: Any) -> Any:
    if value in ("none", "session") or isinstance(value, RememberFor):
        return value
    minutes = value.get("minutes") if isinstance(value, dict) and set(value) == {"minutes"} else None
    if type(minutes) is not int or not 1 <= minutes <= MAX_REMEMBER_MINUTES:
        raise ValueError(
            f"must be 'none', 'session' or {{minutes: <1..{MAX_REMEMBER_MINUTES}>}} (got {value!r})"
        )
    return RememberFor(minutes=minutes)


class ConfirmOptions(_Model):
    """How a ``confirm`` rule asks (``policies/README.md``, "Asking before a call")."""

    reason: Omittable[Annotated[StrictStr, Field(min_length=1, max_length=500)]] = None
    approver: Annotated[Approver, BeforeValidator(_approver)] = "self"
    timeout: Annotated[int, Field(strict=True, ge=1, le=MAX_CONFIRM_TIMEOUT)] = DEFAULT_CONFIRM_TIMEOUT
    remember: Annotated[Literal["none", "session"] | RememberFor, BeforeValidator(_remember)] = "none"
    remember_any_arguments: StrictBool = False


class Rule(_Model):
    """One rule: an id, an effect, and when it applies (``match`` and not ``unless``).

    A ``confirm`` rule applies to tool calls only, and only tightens: a call it matches is still
    decided by the deny and allow rules and the default; when that says allow, a person must
    approve the call first (``options``). It never lets anybody call what they otherwise could not.
    """

    id: Annotated[StrictStr, Field(pattern=_RULE_ID, max_length=128)]
    effect: Effect
    description: Omittable[StrictStr] = None
    match: Match
    unless: Omittable[Match] = None
    show: StrictBool = False  # deny rules only: keep the subject listed, refuse the call
    confirm: Omittable[ConfirmOptions] = None  # confirm rules only

    @model_validator(mode="after")
    def _show_only_denies(self) -> Rule:
        if self.show and self.effect != "deny":
            raise ValueError("'show' only applies to deny rules (an allowed subject is listed anyway)")
        if self.confirm is not None and self.effect != "confirm":
            raise ValueError("'confirm' options only apply to rules with effect: confirm")
        if self.effect == "confirm" and self.match.kinds is not None and self.match.kinds != {"tool"}:
            raise ValueError(
                "a confirm rule asks before tool calls only: name 'tools' (or no kind), "
                "not prompts/resources/log_levels"
            )
        return self

    @property
    def options(self) -> ConfirmOptions:
        """A confirm rule's options (the defaults when it gives none)."""
        return self.confirm if self.confirm is not None else ConfirmOptions()

    def sentence(self) -> str:
        """Why a decision went this way, e.g. ``denied by rule x: contractors may not …``."""
        verb = {"deny": "denied", "allow": "allowed", "confirm": "to be confirmed"}[self.effect]
        text = f"{verb} by rule {self.id}"
        return (
            f"{text}: {self.description.strip()}" if self.description and self.description.strip() else text
        )


class PolicyDocument(_Model):
    """One policy file. ``default`` may be left out when another file loaded with it sets it."""

    version: Literal[1]
    default: Omittable[Default] = None
    rules: tuple[Rule, ...] = ()
    limits: tuple[Any, ...] = ()  # rate limits: parsed by proxy.policy.limits (policies/RATELIMITS.md)
    guardrails: Any = None  # parsed by proxy.policy.guardrail_loader (docs/reference/guardrails.md)


@dataclass(frozen=True, slots=True)
class Policy:
    """Every loaded rule and the one default: what :class:`~proxy.policy.engine.PolicyEngine` runs.

    Build it with :func:`proxy.config.policy_files.load_policy` (or directly, in tests).

    Raises:
        ValueError: two rules share an id (the loader reports that as a ConfigError first).
    """

    default: Default
    rules: tuple[Rule, ...]
    limits: tuple[LimitRule, ...] = ()
    # A proxy.policy.guardrail_loader.Guardrails, or None: no guardrails section in any file.
    # (Typed loosely: the guardrail language builds on this module, so this one cannot name it.)
    guardrails: Any = None

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)


# --- trust in a server's annotations (a section of the server config) -------------------------


class ServerTrust(_Model):
    """How far a server's tool annotations are believed.

    ``trusted: false`` (the default) ignores what the server declares and assumes the spec's
    most cautious values. ``annotations`` lets the operator set hints per tool, by the server's
    own (original) tool name, whatever the server says::

        trusted: false
        annotations:
          list_issues: {readOnlyHint: true}
          delete_repo: {destructiveHint: true, idempotentHint: true}
    """

    trusted: StrictBool = False
    annotations: dict[Name, dict[HintName, StrictBool]] = Field(default_factory=dict)

    def override_for(self, original_name: str) -> dict[str, bool] | None:
        """The operator's hints for one tool (a copy), or None."""
        found = self.annotations.get(original_name)
        if found is None:
            return None
        hints: dict[str, bool] = dict(found.items())
        return hints
