"""Who is asking: an :class:`Identity` as authentication established it, and its key.

Everything kept per identity (sessions, buckets, signed ids, cursors, parked calls, per_client
connections, credentials) is keyed on :attr:`Identity.key`. Pure data; the policy matches on
it (:mod:`proxy.policy.model` re-exports it as part of the policy's data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = ["ANONYMOUS", "Identity", "IdentityKey"]

IdentityKey: TypeAlias = tuple[str, str, str]
"""``(source, issuer, subject)``: who an identity is, as everything kept per identity is keyed."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking, as authentication established it (data only: checking it is not ours).

    ``source`` says how: ``"api_key"``, ``"jwt"``, ``"oauth"`` (an OAuth access token for this
    resource), ``"stdio"`` (the local user who started Manifold), or ``"anonymous"`` (nobody
    proved anything). ``issuer`` says who vouches for it (a JWT's or OAuth token's ``iss``; ``""``
    for the other sources, which Manifold's own config vouches for) and
    ``subject`` who it is to that issuer (a JWT's ``sub``; an API key's configured name; the
    configured name for stdio and anonymous). Left out, ``subject`` is ``name``.

    ``name`` and ``roles`` are what policy matches and logs show; they are not unique: two
    issuers may both have an ``alice``, and a token may be named like an API key. So everything
    Manifold keeps *per identity* (sessions, rate-limit buckets, signed ids, cursors, parked
    calls) is keyed on :attr:`key`, never on the name.

    Equality and the hash cover every field (roles too): an identity keys the engine's decision
    cache, where two role sets of one principal decide differently.
    """

    name: str
    roles: frozenset[str]
    source: str
    issuer: str = ""
    subject: str = ""

    def __post_init__(self) -> None:
        # Identities key the engine's decision cache: a plain set here would make them unhashable.
        # (frozenset() of a frozenset returns it unchanged, so this costs nothing when typed right.)
        object.__setattr__(self, "roles", frozenset(self.roles))
        if not self.subject:
            object.__setattr__(self, "subject", self.name)

    @property
    def key(self) -> IdentityKey:
        """``(source, issuer, subject)``: what is kept per identity is kept under this."""
        return (self.source, self.issuer, self.subject)

    @property
    def authenticated(self) -> bool:
        """True unless the source is ``"anonymous"``."""
        return self.source != "anonymous"


ANONYMOUS: Final = Identity(name="anonymous", roles=frozenset(), source="anonymous")
