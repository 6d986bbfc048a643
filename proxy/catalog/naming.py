"""How a server's item name becomes the namespaced name a client sees.

``render("github", "create_issue")`` is ``"github.create_issue"``; with an empty prefix the
original name passes through unchanged. Names longer than ``max_length`` (MCP clients commonly
cap tool names at 128 characters) are shortened deterministically: a readable head, then ``-``
and 8 hex characters of the SHA-256 of the *full* name. The head is a leading slice of the full
name, so the ``prefix + separator`` survives whenever it fits and a shortened name still shows
which server it belongs to.

Names are never parsed back: once shortened or disambiguated, a name cannot be split reliably
into prefix and original. The reverse lookup is a dict built by :mod:`proxy.catalog.merge`.

The **canonical** name (:meth:`NamingCodec.canonical`) is the full ``prefix + separator +
original`` before any shortening or disambiguation: what the policy and rate limits match, so a
rule written against ``github.create_issue`` holds whatever spelling a client is shown. The
``prefix + separator`` of a server is its **namespace** (:meth:`NamingCodec.namespace`): the
configuration keeps namespaces apart, and the merge keeps unprefixed servers out of them, so a
canonical name in a namespace always belongs to that namespace's server.

Everything here is pure and deterministic across processes (no ``hash()``, no counters), so
replicas that share a configuration agree on every name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

__all__ = ["MIN_MAX_LENGTH", "RESERVED_PREFIX", "NamingCodec"]

# Hex characters of the shortening suffix (32 bits: distinct long names stay distinct in practice,
# and merge catches the rest as collisions).
_SHORTEN_HEX: Final = 8
# Hex characters of the disambiguation suffix.
_DISAMBIGUATE_HEX: Final = 6

#: The prefix of Manifold's own tools (progressive discovery's ``manifold.search_tools`` …): the
#: configuration refuses it to servers, and the merge skips an unprefixed server's name in it.
RESERVED_PREFIX: Final = "manifold"

#: The smallest ``max_length`` that leaves a useful head in front of both suffixes.
MIN_MAX_LENGTH: Final = 16


def _hex(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:chars]


def _with_suffix(head: str, suffix: str, max_length: int) -> str:
    """``head + "-" + suffix``, cutting the head (never the suffix) to fit ``max_length``."""
    room = max_length - len(suffix) - 1
    return f"{head[:room]}-{suffix}"


@dataclass(frozen=True, slots=True)
class NamingCodec:
    """Turns (prefix, original name) into namespaced names; pure and deterministic.

    Attributes:
        separator: put between prefix and original name (``"."`` by default; ``"__"`` suits
            clients that reject dots).
        max_length: the longest name a client is shown, in characters.

    Raises:
        ValueError: ``max_length`` is below :data:`MIN_MAX_LENGTH`.
    """

    separator: str = "."
    max_length: int = 128

    def __post_init__(self) -> None:
        if self.max_length < MIN_MAX_LENGTH:
            raise ValueError(f"max_length must be at least {MIN_MAX_LENGTH}, got {self.max_length}")

    def namespace(self, prefix: str) -> str:
        """``prefix + separator``, the start of every name of a server with ``prefix``
        (``""`` for an unprefixed server, which has no namespace of its own)."""
        return f"{prefix}{self.separator}" if prefix else ""

    def canonical(self, prefix: str, original: str) -> str:
        """``prefix + separator + original`` (``original`` alone when ``prefix`` is empty), never
        shortened: the name the policy sees, whatever spelling a client is shown."""
        return f"{prefix}{self.separator}{original}" if prefix else original

    def render(self, prefix: str, original: str) -> str:
        """The namespaced name for ``original`` from a server with ``prefix``.

        The canonical name, shortened to ``max_length`` characters if needed (same input, same
        output).
        """
        full = self.canonical(prefix, original)
        if len(full) <= self.max_length:
            return full
        return _with_suffix(full, _hex(full, _SHORTEN_HEX), self.max_length)

    def disambiguate(self, name: str, server_id: str, original: str, *, attempt: int = 0) -> str:
        """An alternative to ``name`` for the item ``(server_id, original)`` that lost it.

        ``name + "-" + 6 hex`` of a hash of ``server_id`` and ``original``; the head is cut
        (never the hash) to respect ``max_length``. If that name is taken too, the caller asks
        again with ``attempt`` 1, 2, …, which is mixed into the hash, so every retry is a
        different but still deterministic name.
        """
        material = f"{server_id}\0{original}" if attempt == 0 else f"{server_id}\0{original}\0{attempt}"
        return _with_suffix(name, _hex(material, _DISAMBIGUATE_HEX), self.max_length)
