"""Guardrail rules: the part of the policy language that reads what flows (issue #29).

A guardrail rule reads like every other rule (``policies/README.md``): an ``id``, an ``effect``,
a ``match`` and an optional ``unless``. Its match adds two conditions to the familiar ones:

* ``directions``: where the content is inspected (:data:`DIRECTIONS`): a tool call's
  arguments on their way to the server, its result on its way back, a resource's contents, a
  prompt's messages, a server's sampling and elicitation requests and the client's sampling
  answers, and the definitions servers list;
* ``detectors``: globs over the names of the built-in detectors that found something
  (``aws_access_key``, ``secret.*``, ``prompt_injection`` …).

Effects (:data:`GuardEffect`): ``deny`` (refuse the call or withhold the result), ``redact``
(replace each match with ``[REDACTED:<detector>]``), ``confirm`` (ask a person, tool-call
arguments only), ``quarantine`` (definitions only: hidden until an operator accepts it),
``audit`` (record only) and ``inspect`` (send the content to an external inspection service,
``hook: <name>``, whose answer decides).

Pure: parsed data in, frozen models out.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from proxy.policy.model import ConfirmOptions, Globs, Names, Omittable

__all__ = [
    "DEFINITIONS",
    "DIRECTIONS",
    "EFFECT_DIRECTIONS",
    "Direction",
    "GuardEffect",
    "GuardMatch",
    "GuardRule",
]

Direction: TypeAlias = Literal[
    "tool_arguments",  # client -> server: a tools/call's arguments
    "tool_results",  # server -> client: content and structuredContent
    "resource_contents",  # server -> client: resources/read
    "prompt_messages",  # server -> client: prompts/get
    "sampling_requests",  # server -> client: sampling/createMessage
    "sampling_results",  # client -> server: the answer to it
    "elicitation_requests",  # server -> client: elicitation/create
    "definitions",  # server -> client: tools, prompts, resources as listed
]
DIRECTIONS: Final[tuple[Direction, ...]] = (
    "tool_arguments",
    "tool_results",
    "resource_contents",
    "prompt_messages",
    "sampling_requests",
    "sampling_results",
    "elicitation_requests",
    "definitions",
)
DEFINITIONS: Final = "definitions"

GuardEffect: TypeAlias = Literal["deny", "redact", "confirm", "quarantine", "audit", "inspect"]

# Where each effect means something. A rule naming no directions applies to all of these.
EFFECT_DIRECTIONS: Final[dict[str, frozenset[Direction]]] = {
    "deny": frozenset(d for d in DIRECTIONS if d != "definitions"),
    "redact": frozenset(d for d in DIRECTIONS if d != "definitions"),
    "confirm": frozenset({"tool_arguments"}),
    "quarantine": frozenset({"definitions"}),
    "audit": frozenset(DIRECTIONS),
    "inspect": frozenset(d for d in DIRECTIONS if d != "definitions"),
}

_RULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_HOOK_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GuardMatch(_Model):
    """When a guardrail rule applies: every condition given must hold; a list holds when any
    element does. ``tools``/``prompts``/``resources`` are globs over canonical names (URIs for
    resources), as in policy rules; ``endpoints`` names the endpoints (``""`` is ``/mcp``)."""

    identities: Omittable[Names] = None
    roles: Omittable[Names] = None
    sources: Omittable[Names] = None
    issuers: Omittable[Names] = None
    authenticated: Omittable[StrictBool] = None
    endpoints: Omittable[Annotated[tuple[StrictStr, ...], Field(min_length=1)]] = None
    servers: Omittable[Names] = None
    tools: Omittable[Globs] = None
    prompts: Omittable[Globs] = None
    resources: Omittable[Globs] = None
    directions: Omittable[Annotated[tuple[Direction, ...], Field(min_length=1)]] = None
    detectors: Omittable[Globs] = None

    @property
    def names_identity(self) -> bool:
        """Whether a condition is about who asks (definitions are judged once, for everyone)."""
        fields = (self.identities, self.roles, self.sources, self.issuers, self.authenticated)
        return any(value is not None for value in fields) or self.endpoints is not None


class GuardRule(_Model):
    """One guardrail rule (see the module docstring)."""

    id: Annotated[StrictStr, Field(pattern=_RULE_ID, max_length=128)]
    effect: GuardEffect
    description: Omittable[StrictStr] = None
    match: GuardMatch
    unless: Omittable[GuardMatch] = None
    hook: Omittable[Annotated[StrictStr, Field(pattern=_HOOK_NAME, max_length=64)]] = None
    decode: StrictBool = False  # also inspect one level of URL/base64/\\u-escape decoding
    confirm: Omittable[ConfirmOptions] = None

    @model_validator(mode="after")
    def _coherent(self) -> GuardRule:
        if (self.hook is None) != (self.effect != "inspect"):
            raise ValueError("'hook' names the inspection service of an 'inspect' rule, and only there")
        if self.confirm is not None and self.effect != "confirm":
            raise ValueError("'confirm' options only apply to rules with effect: confirm")
        wanted = self.match.directions
        allowed = EFFECT_DIRECTIONS[self.effect]
        if wanted is not None:
            wrong = [d for d in wanted if d not in allowed]
            if wrong:
                raise ValueError(
                    f"effect {self.effect!r} does not apply to direction {wrong[0]!r} "
                    f"(it applies to: {', '.join(d for d in DIRECTIONS if d in allowed)})"
                )
        if wanted is not None and DEFINITIONS in wanted and self._names_identity:
            raise ValueError(
                "definitions are judged once for everyone: a rule for 'definitions' cannot name "
                "identities, roles, sources, issuers, authenticated or endpoints"
            )
        return self

    @property
    def _names_identity(self) -> bool:
        return self.match.names_identity or (self.unless is not None and self.unless.names_identity)

    @property
    def directions(self) -> frozenset[Direction]:
        """The directions the rule applies to: those it names, else every one its effect fits
        (but never definitions for a rule about who asks: they are judged once, for everyone)."""
        named = self.match.directions
        if named is not None:
            return frozenset(named)
        allowed = EFFECT_DIRECTIONS[self.effect]
        return allowed - {DEFINITIONS} if self._names_identity else allowed

    @property
    def options(self) -> ConfirmOptions:
        """A confirm rule's options (the defaults when it gives none)."""
        return self.confirm if self.confirm is not None else ConfirmOptions()

    def sentence(self) -> str:
        """Why, in one line: ``redacted by guardrail rule x: …``."""
        verb = {
            "deny": "denied",
            "redact": "redacted",
            "confirm": "to be confirmed",
            "quarantine": "quarantined",
            "audit": "audited",
            "inspect": "inspected",
        }[self.effect]
        text = f"{verb} by guardrail rule {self.id}"
        described = self.description.strip() if self.description else ""
        return f"{text}: {described}" if described else text
