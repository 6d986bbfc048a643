"""GCRA, the generic cell rate algorithm: a rate limit whose whole state is one float per bucket.

Pure: numbers in, numbers out; the caller passes ``now``. The exact semantics are written for
operators in ``policies/RATELIMITS.md``; in short, for a limit of one request every ``interval``
seconds with ``burst`` b:

* the state of a bucket is its TAT (theoretical arrival time); ``None`` is a fresh bucket, and a
  TAT in the past means the same as ``None``;
* a request of ``cost`` c (1 for a call) would move the TAT to ``max(tat, now) + c * interval``;
  it conforms when that new TAT is at most ``burst * interval`` ahead of ``now``;
* so a fresh bucket admits b requests at once, then one every ``interval``; a denied request
  changes nothing.

When several limits apply to one call, :func:`evaluate` checks all of them and commits only if all
conform, so a call denied by one limit spends nothing on the others. The Redis backend runs the
same arithmetic in Lua, operation for operation, so both backends give bit-identical answers for
the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["SLACK", "GcraResult", "LimitCheck", "LimitOutcome", "check", "evaluate"]

SLACK = 1e-6
"""Seconds by which a request may be early and still conform.

It absorbs floating-point rounding of TATs (which are absolute times, e.g. ~1.7e9 s on Redis), so
that "b at once" and "retry after exactly ``retry_after``" hold. It never adds up: an admitted
request still moves the TAT by a full interval.
"""


class GcraResult(NamedTuple):
    """The answer for one bucket.

    ``new_tat`` is the state to store (``None`` when denied: keep the old state).
    ``retry_after``: seconds until this request would conform (0 when allowed).
    ``remaining``: further cost-1 requests that would conform right now, after this one.
    ``reset_after``: seconds until the bucket is full again (its state is then as good as none).

    A named tuple (as :class:`LimitOutcome`), immutable like a frozen dataclass: both are made on
    every limited call, where a frozen dataclass costs several times as much to build.
    """

    allowed: bool
    new_tat: float | None
    retry_after: float
    remaining: int
    reset_after: float


@dataclass(frozen=True, slots=True)
class LimitCheck:
    """One bucket a call must pass: its storage key and its limit.

    ``rule_id`` only labels the check (messages, metrics); the key alone identifies the bucket.
    """

    key: str
    interval: float
    burst: int
    rule_id: str = ""


class LimitOutcome(NamedTuple):
    """The answer for all buckets of one call.

    When denied, ``denied_by`` is the check that conforms last and ``retry_after`` is when it
    does: after that delay the whole call conforms (absent other traffic), because waiting only
    ever helps the other checks too. ``remaining`` is the smallest and ``reset_after`` the largest
    over the checks. ``degraded`` means the backend could not be asked and its failure mode
    decided (then ``denied_by`` is ``None``).
    """

    allowed: bool
    denied_by: LimitCheck | None = None
    retry_after: float = 0.0
    remaining: int | None = None
    reset_after: float = 0.0
    degraded: bool = False


def check(tat: float | None, now: float, interval: float, burst: int, cost: float = 1.0) -> GcraResult:
    """Decide one request against one bucket.

    A ``cost`` above ``burst`` can never conform: it is denied with an infinite ``retry_after``.

    Raises:
        ValueError: ``interval`` or ``cost`` is not positive, or ``burst`` is below 1.
    """
    if not interval > 0 or not cost > 0 or burst < 1:
        raise ValueError(f"need interval > 0, cost > 0, burst >= 1 (got {interval}, {cost}, {burst})")
    base = now if tat is None or tat < now else tat
    new_tat = base + cost * interval
    capacity = burst * interval
    allow_at = new_tat - capacity
    if allow_at - now > SLACK:
        retry_after = math.inf if cost > burst else allow_at - now
        remaining = max(0, math.floor((capacity - (base - now) + SLACK) / interval))
        return GcraResult(False, None, retry_after, remaining, base - now)
    remaining = max(0, math.floor((capacity - (new_tat - now) + SLACK) / interval))
    return GcraResult(True, new_tat, 0.0, remaining, new_tat - now)


def evaluate(
    checks: Sequence[LimitCheck], tats: Mapping[str, float | None], now: float
) -> tuple[LimitOutcome, dict[str, float]]:
    """Decide one call against all its buckets: all conform, or nothing is spent.

    ``tats`` holds the stored state by key (missing = fresh). Returns the outcome and the states
    to store (empty when denied). A key listed twice is charged twice, as two calls in a row would.

    Raises:
        ValueError: a check has a non-positive interval or a burst below 1.
    """
    if len(checks) == 1:  # the common case, on every limited call: the loop below for one check
        limit = checks[0]
        tat = tats.get(limit.key)
        result = check(tat, now, limit.interval, limit.burst)
        if result.new_tat is None:
            stored = 0.0 if tat is None else max(0.0, tat - now)
            return LimitOutcome(False, limit, result.retry_after, 0, stored), {}
        reset = max(0.0, result.reset_after)
        return LimitOutcome(True, None, 0.0, result.remaining, reset), {limit.key: result.new_tat}
    pending: dict[str, float] = {}
    denied: LimitCheck | None = None
    retry_after = 0.0
    remaining: int | None = None
    reset_after = 0.0
    for limit in checks:
        tat = pending[limit.key] if limit.key in pending else tats.get(limit.key)
        result = check(tat, now, limit.interval, limit.burst)
        if result.new_tat is None:
            if denied is None or result.retry_after > retry_after:
                denied, retry_after = limit, result.retry_after
            continue
        pending[limit.key] = result.new_tat
        remaining = result.remaining if remaining is None else min(remaining, result.remaining)
        reset_after = max(reset_after, result.reset_after)
    if denied is None:
        return LimitOutcome(True, None, 0.0, remaining, reset_after), pending
    # Nothing is stored: every bucket stays as it was, and this call has nothing left right now.
    reset_after = 0.0
    for limit in checks:
        tat = tats.get(limit.key)
        if tat is not None:
            reset_after = max(reset_after, tat - now)
    return LimitOutcome(False, denied, retry_after, 0, reset_after), {}
