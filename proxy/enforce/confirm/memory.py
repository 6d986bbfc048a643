"""What Manifold remembers about confirmations: approvals a person asked to be remembered, and the
questions already answered through ``input_required`` (each answer counts once).

An approval is remembered under ``(identity key, session or "", server id, canonical tool name,
deciding rule ids, arguments digest or "*", options digest)``:

* the identity's *key* (source, issuer, subject), never its name, which two issuers may share;
* the session for "for this session" (so another session of the same person is asked again),
  none for "for N minutes";
* the rule ids and a digest of their options (:func:`proxy.pipeline.stages.confirm_need.approval_mark`), so
  a new confirm rule, or one edited (its reason, timeout, remembering, approver), asks again;
* the arguments digest unless the rule says ``remember_any_arguments: true``.

Kept in this process, bounded in entries; the clock is injected (monotonic seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from cachetools import TTLCache

from proxy.policy.model import IdentityKey

__all__ = ["Memory", "RememberKey", "spend_once"]

RememberKey = tuple[IdentityKey, str, str, str, tuple[str, ...], str, str]

_MAX_REMEMBERED: Final = 65536
_MAX_SPENT: Final = 65536
_SESSION_LIFETIME: Final = 24 * 3600.0  # a "for this session" approval outlives no session longer
_SPENT_LIFETIME: Final = 3600.0  # the longest a question may wait (MAX_CONFIRM_TIMEOUT)


class Memory:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._approved: dict[RememberKey, float] = {}  # -> when it stops counting
        self._spent: TTLCache[str, bool] = TTLCache(_MAX_SPENT, _SPENT_LIFETIME, timer=clock)

    def approved(self, key: RememberKey) -> bool:
        until = self._approved.get(key)
        if until is None:
            return False
        if until <= self._clock():
            del self._approved[key]
            return False
        return True

    def remember(self, key: RememberKey, *, minutes: int | None) -> None:
        """Approve ``key`` for ``minutes``, or (None) for its session."""
        if len(self._approved) >= _MAX_REMEMBERED:
            now = self._clock()
            self._approved = {k: until for k, until in self._approved.items() if until > now}
            if len(self._approved) >= _MAX_REMEMBERED:
                self._approved.pop(next(iter(self._approved)))  # the oldest: asked again, no harm
        lifetime = minutes * 60.0 if minutes is not None else _SESSION_LIFETIME
        self._approved[key] = self._clock() + lifetime

    def spend(self, question_id: str) -> bool:
        """Mark a question answered; False when it was answered already (a replayed answer)."""
        return spend_once(self._spent, question_id)


def spend_once(spent: TTLCache[str, bool], key: str) -> bool:
    """Mark ``key`` spent; False when it was spent already, or when ``spent`` is full of keys
    still live: forgetting one would let its answer be replayed, so nothing is let through."""
    if key in spent:
        return False
    if len(spent) >= spent.maxsize:
        spent.expire()
        if len(spent) >= spent.maxsize:
            return False
    spent[key] = True
    return True
