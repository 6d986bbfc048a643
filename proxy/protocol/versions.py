"""Protocol revisions Manifold speaks, and how one is chosen.

Two eras. The handshake revisions (2024-11-05 … 2025-11-25) begin with ``initialize`` and live
in a session. The stateless ones (2026-07-28 on) are stateless: every request names its revision
in ``params._meta``, and a revision Manifold does not serve is refused, never negotiated.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "at_least",
    "ADVERTISED",
    "HANDSHAKE",
    "LATEST",
    "LATEST_STATELESS",
    "STATELESS",
    "SUPPORTED",
    "is_stateless",
    "negotiate",
]

# Handshake-era revisions (initialize + sessions), oldest first.
SUPPORTED: Final[tuple[str, ...]] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
HANDSHAKE: Final = SUPPORTED
LATEST: Final = SUPPORTED[-1]
# Stateless revisions, served per request, oldest first.
STATELESS: Final[tuple[str, ...]] = ("2026-07-28",)
LATEST_STATELESS: Final = STATELESS[-1]
# What server/discover lists and an unsupported-version error names (the same list in both,
# as a client checks one against the other): stateless first, then the handshake revisions, newest
# first, so that a dual-era client learns it may also fall back to initialize.
ADVERTISED: Final[tuple[str, ...]] = (*reversed(STATELESS), *reversed(HANDSHAKE))


def is_stateless(version: object) -> bool:
    """Whether ``version`` is a stateless revision Manifold serves."""
    return isinstance(version, str) and version in STATELESS


def negotiate(requested: object) -> str:
    """The revision a server answers ``initialize`` with: the client's if we speak it, else our latest.

    This is the spec's rule (lifecycle, version negotiation): the client decides whether it can
    live with a different answer. ``initialize`` never selects a stateless revision.
    """
    return requested if isinstance(requested, str) and requested in SUPPORTED else LATEST


def at_least(version: object, revision: str) -> bool:
    """Whether ``version`` is a revision Manifold knows that is ``revision`` or later.

    By position in Manifold's own list of revisions, never by comparing the strings: an unknown
    value is no revision at all.
    """
    known = (*SUPPORTED, *STATELESS)
    return isinstance(version, str) and version in known and known.index(version) >= known.index(revision)
