"""Protocol revisions Manifold speaks, and how one is chosen."""

from __future__ import annotations

from typing import Final

__all__ = ["LATEST", "SUPPORTED", "negotiate"]

# Handshake-era revisions (initialize + sessions), oldest first.
SUPPORTED: Final[tuple[str, ...]] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST: Final = SUPPORTED[-1]


def negotiate(requested: object) -> str:
    """The revision a server answers ``initialize`` with: the client's if we speak it, else our latest.

    This is the spec's rule (lifecycle, version negotiation): the client decides whether it can
    live with a different answer.
    """
    return requested if isinstance(requested, str) and requested in SUPPORTED else LATEST
