"""GCRA with an injected clock: transcripts of (time, answer), no real time anywhere."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from proxy.policy.gcra import SLACK, LimitCheck, LimitOutcome, check, evaluate

UNIX_NOW = 1_760_000_000.0  # TATs on Redis are this large: rounding must not show


def run(times: list[float], interval: float, burst: int) -> list[tuple[float, bool, float]]:
    """Feed requests at ``times`` through one bucket; return (time, allowed, retry_after)."""
    tat: float | None = None
    transcript = []
    for now in times:
        result = check(tat, now, interval, burst)
        if result.allowed:
            tat = result.new_tat
        transcript.append((now, result.allowed, result.retry_after))
    return transcript


def test_a_fresh_bucket_admits_burst_at_once_then_one_per_interval() -> None:
    assert run([0, 0, 0, 0, 0.5, 1.0, 1.0, 2.5, 3.0], interval=1.0, burst=3) == [
        (0, True, 0.0),
        (0, True, 0.0),
        (0, True, 0.0),
        (0, False, 1.0),
        (0.5, False, 0.5),
        (1.0, True, 0.0),
        (1.0, False, 1.0),
        (2.5, True, 0.0),
        (3.0, True, 0.0),
    ]


def test_burst_one_admits_exactly_one_request_per_interval() -> None:
    assert run([10, 10, 11, 11.999, 12], interval=1.0, burst=1) == [
        (10, True, 0.0),
        (10, False, 1.0),
        (11, True, 0.0),
        (11.999, False, pytest.approx(0.001)),
        (12, True, 0.0),
    ]


def test_a_fractional_rate_of_half_a_request_per_second_admits_one_every_two_seconds() -> None:
    assert run([0, 1, 2, 3, 4], interval=1 / 0.5, burst=1) == [
        (0, True, 0.0),
        (1, False, 1.0),
        (2, True, 0.0),
        (3, False, 1.0),
        (4, True, 0.0),
    ]


def test_waiting_exactly_retry_after_is_enough_and_a_bit_less_is_not() -> None:
    interval, burst = 1 / 3, 4  # not exact in binary
    tat = check(None, UNIX_NOW, interval, burst).new_tat
    for _ in range(burst - 1):
        tat = check(tat, UNIX_NOW, interval, burst).new_tat
    denied = check(tat, UNIX_NOW, interval, burst)
    assert not denied.allowed
    assert denied.retry_after == pytest.approx(interval, abs=1e-6)
    assert not check(tat, UNIX_NOW + denied.retry_after - 1e-5, interval, burst).allowed
    assert check(tat, UNIX_NOW + denied.retry_after, interval, burst).allowed


@pytest.mark.parametrize("start", [1000.0, UNIX_NOW])
def test_a_client_that_always_waits_retry_after_sustains_the_rate_to_float_precision(start: float) -> None:
    interval, burst, requests = 1 / 3, 5, 3000
    tat: float | None = None
    now = start
    admitted = 0
    while admitted < requests:
        result = check(tat, now, interval, burst)
        if result.allowed:
            tat, admitted = result.new_tat, admitted + 1
        else:
            now += result.retry_after
    # The first `burst` came at once; each later one an interval after the one before, give or
    # take the rounding of the additions (an ulp of the clock's magnitude per request).
    drift = requests * math.ulp(start + requests * interval)
    assert now - start == pytest.approx((requests - burst) * interval, abs=drift)


def test_retry_after_shrinks_as_time_passes_and_is_never_negative() -> None:
    tat = check(None, 0.0, 2.0, 1).new_tat
    waits = [check(tat, now / 10, 2.0, 1).retry_after for now in range(0, 25)]
    assert waits == sorted(waits, reverse=True)
    assert min(waits) == 0.0
    assert waits[0] == 2.0


def test_a_denied_request_spends_nothing() -> None:
    tat = check(None, 0.0, 1.0, 1).new_tat
    for _ in range(100):
        denied = check(tat, 0.5, 1.0, 1)
        assert (denied.allowed, denied.new_tat) == (False, None)
    assert check(tat, 1.0, 1.0, 1).allowed


def test_remaining_and_reset_after_describe_the_bucket_after_the_request() -> None:
    first = check(None, 0.0, 2.0, 3)
    assert (first.remaining, first.reset_after) == (2, 2.0)
    second = check(first.new_tat, 1.0, 2.0, 3)  # half an interval refilled: not yet a whole request
    assert (second.remaining, second.reset_after) == (1, 3.0)
    third = check(second.new_tat, 1.0, 2.0, 3)
    assert (third.allowed, third.remaining, third.reset_after) == (True, 0, 5.0)
    denied = check(third.new_tat, 1.0, 2.0, 3)
    assert (denied.allowed, denied.remaining, denied.reset_after, denied.retry_after) == (False, 0, 5.0, 1.0)


def test_an_old_tat_counts_as_a_full_bucket() -> None:
    assert check(5.0, 1000.0, 1.0, 3) == check(None, 1000.0, 1.0, 3)


def test_a_request_costing_more_than_the_burst_never_conforms() -> None:
    result = check(None, 0.0, 1.0, 2, cost=3)
    assert (result.allowed, result.retry_after) == (False, math.inf)
    assert check(None, 0.0, 1.0, 2, cost=2).allowed


@pytest.mark.parametrize(
    ("interval", "burst", "cost"), [(0.0, 1, 1.0), (-1.0, 1, 1.0), (1.0, 0, 1.0), (1.0, 1, 0)]
)
def test_nonsense_limits_are_a_programming_error(interval: float, burst: int, cost: float) -> None:
    with pytest.raises(ValueError, match="need interval"):
        check(None, 0.0, interval, burst, cost)


def test_slack_is_below_a_percent_of_the_shortest_interval() -> None:
    from proxy.policy.limits import MIN_INTERVAL

    assert SLACK <= MIN_INTERVAL / 100


# ------------------------------------------------------------------------------- several limits

A = LimitCheck("a", interval=1.0, burst=3, rule_id="A")
B = LimitCheck("b", interval=10.0, burst=1, rule_id="B")
C = LimitCheck("c", interval=1.0, burst=1, rule_id="C")


def test_every_limit_of_a_call_is_spent_when_all_conform() -> None:
    outcome, commit = evaluate([A, B], {}, 0.0)
    assert outcome == LimitOutcome(True, None, 0.0, remaining=0, reset_after=10.0)
    assert commit == {"a": 1.0, "b": 10.0}


def test_a_call_denied_by_one_limit_spends_nothing_on_the_others() -> None:
    outcome, commit = evaluate([A, B], {"a": 1.0, "b": 10.0}, 0.0)
    assert (outcome.allowed, outcome.denied_by, outcome.retry_after, commit) == (False, B, 10.0, {})
    assert outcome.reset_after == 10.0


def test_the_denial_names_the_limit_that_conforms_last() -> None:
    outcome, _ = evaluate([C, B, A], {"c": 0.5, "b": 10.0}, 0.0)
    assert (outcome.denied_by, outcome.retry_after) == (B, 10.0)
    outcome, _ = evaluate([C, A], {"c": 0.5}, 0.0)  # A conforms: only C is late
    assert (outcome.denied_by, outcome.retry_after) == (C, 0.5)


def test_buckets_with_different_keys_are_independent() -> None:
    tats: dict[str, float] = {}
    users = [LimitCheck(f"user={n}", 1.0, 1) for n in range(50)]
    for user in users:
        outcome, commit = evaluate([user], tats, 0.0)
        assert outcome.allowed
        tats.update(commit)
    assert all(not evaluate([user], tats, 0.5)[0].allowed for user in users)


def test_a_key_listed_twice_is_charged_twice() -> None:
    twice = LimitCheck("a", 1.0, 2)
    outcome, commit = evaluate([twice, twice], {}, 0.0)
    assert (outcome.allowed, commit) == (True, {"a": 2.0})
    outcome, commit = evaluate([twice, twice], {"a": 1.0}, 0.0)
    assert (outcome.allowed, commit) == (False, {})


def test_no_limits_allow_the_call_and_store_nothing() -> None:
    assert evaluate([], {}, 0.0) == (LimitOutcome(True, None, 0.0, None, 0.0), {})


@pytest.mark.parametrize("module", ["gcra.py", "limits.py"])
def test_the_pure_rate_limit_modules_import_no_io_and_no_clock(module: str) -> None:
    forbidden = {"anyio", "asyncio", "socket", "time", "redis", "cachetools", "subprocess", "logging"}
    source = Path(__file__).resolve().parents[2] / "proxy" / "policy" / module
    imported = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
    assert [name for name in imported if name.split(".")[0] in forbidden] == []
