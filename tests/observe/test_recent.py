"""Recent measurements: per-server rate, error rate and latency quantiles over a window, from a
bounded ring; refusals kept newest last, bounded."""

from __future__ import annotations

from proxy.observe.recent import RecentCalls, RecentRefusals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_stats_count_only_the_window_and_give_nearest_rank_quantiles() -> None:
    clock = Clock()
    recent = RecentCalls(clock=clock)
    recent.record("gh", True, 5.0)  # outside the window by the time stats are asked
    clock.now = 200.0
    for n in range(1, 101):
        recent.record("gh", n % 10 != 0, n / 1000)
    stats = recent.stats("gh", window=60.0, slices=6)
    assert (stats.calls, stats.errors) == (100, 10)
    assert stats.error_rate == 0.1
    assert stats.p50_ms == 50.0
    assert stats.p99_ms == 99.0
    assert sum(stats.series) == 100
    assert stats.series[-1] == 100
    assert recent.stats("nobody").calls == 0
    assert recent.stats("nobody").p50_ms is None


def test_each_ring_is_bounded() -> None:
    recent = RecentCalls(kept=10, clock=Clock())
    for _ in range(100):
        recent.record("gh", True, 0.001)
    assert recent.stats("gh").calls == 10


def test_refusals_are_kept_newest_last_and_bounded() -> None:
    refusals = RecentRefusals(kept=3, clock=Clock())
    for limit in ("a", "b", "c", "d"):
        refusals.record(limit)
    assert [r.limit for r in refusals] == ["b", "c", "d"]
