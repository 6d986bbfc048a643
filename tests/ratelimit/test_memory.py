"""The in-process backend: the GCRA answers, a bounded map, and buckets that vanish when idle."""

from __future__ import annotations

import pytest

from proxy.config.ratelimit import RateLimitSettings
from proxy.policy.gcra import LimitCheck
from proxy.ratelimit import LimitBackend, open_backend
from proxy.ratelimit.memory import MemoryBackend
from tests.ratelimit.clock import FakeClock

pytestmark = pytest.mark.anyio

PER_SECOND = LimitCheck("alice", interval=1.0, burst=2, rule_id="per-user")
HOURLY = LimitCheck("global", interval=3600.0, burst=3, rule_id="global")


async def test_a_bucket_admits_its_burst_then_refills_on_the_injected_clock(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    answers = [(await backend.hit([PER_SECOND])).allowed for _ in range(3)]
    assert answers == [True, True, False]
    clock.advance(1.0)
    assert (await backend.hit([PER_SECOND])).allowed
    assert not (await backend.hit([PER_SECOND])).allowed


async def test_a_call_denied_by_one_limit_spends_nothing_on_the_other(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    tight = LimitCheck("tight", interval=10.0, burst=1, rule_id="tight")
    assert (await backend.hit([PER_SECOND, tight])).allowed
    before = backend.tat("alice")
    denied = await backend.hit([PER_SECOND, tight])
    assert (denied.allowed, denied.denied_by, denied.retry_after) == (False, tight, 10.0)
    assert backend.tat("alice") == before
    assert (await backend.hit([PER_SECOND])).allowed  # alice's second request is still there


async def test_an_explicit_now_is_used_instead_of_the_clock(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    assert (await backend.hit([PER_SECOND], now=clock.now)).remaining == 1
    assert backend.tat("alice") == clock.now + 1.0


async def test_an_idle_bucket_disappears_when_it_is_full_again(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    await backend.hit([HOURLY])
    await backend.hit([HOURLY])
    assert backend.tat("global") == clock.now + 7200.0
    clock.advance(7199.0)
    assert backend.tat("global") is not None
    clock.advance(1.0)
    assert backend.tat("global") is None
    await backend.hit([PER_SECOND])  # a write sweeps expired entries out
    assert len(backend) == 1


async def test_the_map_never_holds_more_than_maxsize_buckets(clock: FakeClock) -> None:
    backend = MemoryBackend(maxsize=3, clock=clock)
    for user in range(10):
        assert (await backend.hit([LimitCheck(f"user={user}", 60.0, 1)])).allowed
        assert len(backend) <= 3
    assert backend.maxsize == 3
    # The least recently used buckets were dropped: full again, never stricter than configured.
    assert (await backend.hit([LimitCheck("user=0", 60.0, 1)])).allowed
    assert not (await backend.hit([LimitCheck("user=9", 60.0, 1)])).allowed


async def test_many_keys_are_independent(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    users = [LimitCheck(f"user={n}", 1.0, 1) for n in range(1000)]
    assert all([(await backend.hit([user])).allowed for user in users])
    assert not any([(await backend.hit([user])).allowed for user in users])
    assert len(backend) == 1000


async def test_nonsense_limits_raise_instead_of_answering(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="need interval"):
        await MemoryBackend(clock=clock).hit([LimitCheck("k", 0.0, 1)])
    with pytest.raises(ValueError, match="maxsize"):
        MemoryBackend(maxsize=0)


async def test_open_backend_gives_the_memory_backend_by_default() -> None:
    async with open_backend(RateLimitSettings()) as backend:
        assert isinstance(backend, MemoryBackend)
        protocol: LimitBackend = backend
        assert (await protocol.hit([])).allowed
