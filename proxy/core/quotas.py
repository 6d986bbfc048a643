"""How many distinct things one owner may hold at once: a count per owner, refused past a limit.

Pure bookkeeping, no I/O. An owner is whatever the caller keys by (a session id, an identity);
a thing is what it holds (a stream id, a subscription object). Holding the same thing twice
(a client reconnecting to a stream it already follows, before the old connection is noticed
gone) counts once, so a takeover is never refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from proxy.core.errors import LimitExceeded

__all__ = ["Quota"]


class Quota:
    """At most ``maximum`` distinct things per owner; past it :class:`LimitExceeded` names
    ``limits.<limit>`` and says ``refusal`` (what was refused, and what the peer can do)."""

    __slots__ = ("_held", "_refusal", "_said", "limit", "maximum")

    def __init__(self, limit: str, maximum: int, refusal: str, *, said: bool = False) -> None:
        self.limit = limit
        self.maximum = maximum
        self._refusal = refusal
        self._said = said  # the refusal gives the maximum itself (it is not the field's value)
        self._held: dict[Hashable, Counter[Hashable]] = {}

    def held(self, owner: Hashable) -> int:
        """How many distinct things ``owner`` holds now."""
        return len(self._held.get(owner, ()))

    def owners(self) -> int:
        return len(self._held)

    def take(self, owner: Hashable, thing: Hashable) -> None:
        """Count ``thing`` as held by ``owner`` until :meth:`give_back`.

        Raises:
            LimitExceeded: ``owner`` holds ``maximum`` other things already.
        """
        things = self._held.get(owner)
        if things is None:
            things = self._held[owner] = Counter()
        elif thing not in things and len(things) >= self.maximum:
            raise LimitExceeded(self._refusal, limit=self.limit, maximum=self.maximum, said=self._said)
        things[thing] += 1

    def give_back(self, owner: Hashable, thing: Hashable) -> None:
        things = self._held.get(owner)
        if things is None or thing not in things:
            return
        things[thing] -= 1
        if things[thing] <= 0:
            del things[thing]
        if not things:
            del self._held[owner]

    @contextmanager
    def hold(self, owner: Hashable, thing: Hashable) -> Iterator[None]:
        """Hold ``thing`` for the block.

        Raises:
            LimitExceeded: on entry, as :meth:`take`.
        """
        self.take(owner, thing)
        try:
            yield
        finally:
            self.give_back(owner, thing)
