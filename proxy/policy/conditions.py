"""The conditions every rule of the policy language shares, compiled once: who asks
(``identities``, ``roles``, ``sources``, ``issuers``, ``authenticated``), on which server
(``servers``) and about what (globs over the canonical names of tools, prompts and resources, and
of log levels for policy rules).

Policy rules (:class:`proxy.policy.engine.PolicyEngine`) and guardrail rules
(:class:`proxy.policy.guardrail_engine.GuardEngine`) decide with these same checks, so a
``match`` means the same in both, and a fix to one is a fix to the other. Each engine adds the
conditions only it has (a tool's annotations; a guardrail's endpoints and directions).

A condition given holds when any element of its list does; a rule's conditions hold when every
one given does (:func:`all_of`). A glob is ``fnmatch``'s, case-sensitive, anchored at both ends;
the globs of one condition become one regular expression.

Pure.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Protocol, TypeVar

from proxy.policy.model import Identity

__all__ = ["CACHE_SIZE", "CACHED_NAME_MAX", "Check", "Named", "Who", "all_of", "globs", "where", "who"]

CACHE_SIZE: Final = 4096
"""Decisions an engine keeps per (identity, subject) before it starts afresh."""
# Names (a client's resource URI above all) longer than this are decided afresh every time, so a
# cache holds at most CACHE_SIZE * CACHED_NAME_MAX characters of them (a few MiB), not 4096 URIs
# of 4 MiB each; real names are far shorter, and deciding is cheap.
CACHED_NAME_MAX: Final = 1024


class Named(Protocol):
    """What the shared conditions read of a subject: its kind, its name and its server."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def server_id(self) -> str: ...


class Who(Protocol):
    """The conditions of a ``match`` that every rule has (``None``: not given)."""

    @property
    def identities(self) -> tuple[str, ...] | None: ...

    @property
    def roles(self) -> tuple[str, ...] | None: ...

    @property
    def sources(self) -> tuple[str, ...] | None: ...

    @property
    def issuers(self) -> tuple[str, ...] | None: ...

    @property
    def authenticated(self) -> bool | None: ...

    @property
    def servers(self) -> tuple[str, ...] | None: ...


S = TypeVar("S", bound=Named)
Check = Callable[[Identity, S], bool]


def globs(patterns: Iterable[str]) -> Callable[[str], re.Match[str] | None]:
    """One matcher for any of ``patterns`` (``fnmatch`` globs) over a whole name."""
    # fnmatch.translate anchors the end and is case-sensitive; re.match anchors the start.
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in patterns)).match


def who(match: Who) -> list[Check[S]]:
    """Checks of who asks, cheapest first (attribute reads and set look-ups)."""
    checks: list[Check[S]] = []
    if match.authenticated is not None:
        authenticated = match.authenticated
        checks.append(lambda identity, subject: identity.authenticated == authenticated)
    if match.sources is not None:
        sources = frozenset(match.sources)
        checks.append(lambda identity, subject: identity.source in sources)
    if match.issuers is not None:
        issuers = frozenset(match.issuers)
        checks.append(lambda identity, subject: identity.issuer in issuers)
    if match.identities is not None:
        names = frozenset(match.identities)
        checks.append(lambda identity, subject: identity.name in names)
    if match.roles is not None:
        roles = frozenset(match.roles)
        checks.append(lambda identity, subject: not roles.isdisjoint(identity.roles))
    return checks


def where(match: Who, named: Mapping[str, Sequence[str] | None]) -> list[Check[S]]:
    """Checks of the server and the name: ``named`` maps each kind of subject to the globs the
    match gives for it. When any kind has globs, the match is limited to those kinds: a rule
    naming only ``tools`` never applies to a prompt."""
    checks: list[Check[S]] = []
    if match.servers is not None:
        servers = frozenset(match.servers)
        checks.append(lambda identity, subject: subject.server_id in servers)
    by_kind = {kind: globs(patterns) for kind, patterns in named.items() if patterns is not None}
    if by_kind:

        def kind_named(identity: Identity, subject: S) -> bool:
            matcher = by_kind.get(subject.kind)
            return matcher is not None and matcher(subject.name) is not None

        checks.append(kind_named)
    return checks


def all_of(checks: Sequence[Check[S]]) -> Check[S]:
    """One check that holds when every one of ``checks`` does (in their order)."""
    if not checks:
        return lambda identity, subject: True
    if len(checks) == 1:
        return checks[0]
    every = tuple(checks)

    def all_hold(identity: Identity, subject: S) -> bool:
        # A plain loop: all() over a generator costs several times more on this hot path.
        for check in every:  # noqa: SIM110
            if not check(identity, subject):
                return False
        return True

    return all_hold
