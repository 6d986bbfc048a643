"""The ratelimit stage: calls within every applicable limit go on; a limited tool call is answered
with the limit and when to retry, a limited other request is refused with -32029."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from proxy.core.errors import RATE_LIMITED, RateLimited, ServerUnavailable
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import tool_error
from proxy.pipeline.stages.ratelimit import RateLimit
from proxy.policy.model import Identity
from proxy.ratelimit import LimitCheck, LimitOutcome, MemoryBackend
from tests.pipeline.stages.contexts import (
    BOB,
    POLICY,
    Recorder,
    access_for,
    call_context,
    identity_of,
    sample,
    served_tools,
    tool_context,
)

pytestmark = pytest.mark.anyio

REJECTIONS = "manifold_rate_limit_rejections_total"
LIMITED = (
    "Rate limit 'per-user' exceeded (1/minute, burst 2); retry in 60.0 s.",
    {"dev.manifold/outcome": "rate_limited", "retryAfterSeconds": 60.0},
)


class Clock:
    """The limiter's clock: stands still unless a test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Limiter:
    def __init__(self, access: Access) -> None:
        self.clock = Clock()
        self.backend = MemoryBackend(clock=self.clock)
        self.metrics = Metrics(process_metrics=False)
        self.stage = RateLimit(access, self.backend, self.metrics)

    def rejections(self, limit: str) -> float | None:
        return sample(self.metrics.registry, REJECTIONS, limit=limit)


@pytest.fixture
def limiter(tmp_path: Path) -> Limiter:
    return Limiter(access_for(tmp_path))


async def test_calls_within_the_burst_go_on_and_the_next_is_answered_with_the_limit(limiter: Limiter) -> None:
    call_next = Recorder()
    ctx = call_context()

    first = await limiter.stage(ctx, call_next)
    second = await limiter.stage(ctx, call_next)
    third = await limiter.stage(ctx, call_next)

    assert (first, second) == (call_next.result, call_next.result)
    assert third == tool_error(LIMITED[0], outcome="rate_limited", meta={"retryAfterSeconds": 60.0})
    assert third["_meta"] == LIMITED[1]
    assert call_next.seen == [ctx, ctx]
    assert limiter.rejections("per-user") == 1.0


async def test_the_bucket_refills_at_the_rate(limiter: Limiter) -> None:
    call_next = Recorder()
    for _ in range(3):
        await limiter.stage(call_context(), call_next)

    limiter.clock.now += 60.0

    assert await limiter.stage(call_context(), call_next) is call_next.result
    assert len(call_next.seen) == 3


async def test_each_identity_spends_its_own_bucket(limiter: Limiter) -> None:
    call_next = Recorder()
    for _ in range(3):
        await limiter.stage(call_context(), call_next)

    assert await limiter.stage(call_context(identity=BOB), call_next) is call_next.result
    assert [identity_of(ctx).name for ctx in call_next.seen] == ["alice", "alice", "bob"]


async def test_an_alice_of_another_issuer_or_source_has_her_own_bucket(limiter: Limiter) -> None:
    # The same name and roles as ALICE (an API key), but other principals: spending ALICE's
    # budget must not spend theirs, nor theirs hers.
    call_next = Recorder()
    for _ in range(2):
        await limiter.stage(call_context(), call_next)  # ALICE's bucket is now empty
    others = [
        Identity("alice", frozenset({"reader"}), "jwt", issuer="https://a.example"),
        Identity("alice", frozenset({"reader"}), "jwt", issuer="https://b.example"),
    ]
    for other in others:
        for _ in range(2):
            assert await limiter.stage(call_context(identity=other), call_next) is call_next.result
    limited = await limiter.stage(call_context(), call_next)
    assert limited is not call_next.result
    assert len(call_next.seen) == 6


async def test_a_limited_request_other_than_a_tool_call_is_refused_with_the_limit_and_the_wait(
    limiter: Limiter,
) -> None:
    call_next = Recorder({"contents": []})
    ctx = call_context(method="resources/read", name="file:///docs/guide.md")
    await limiter.stage(ctx, call_next)
    await limiter.stage(ctx, call_next)

    with pytest.raises(RateLimited) as raised:
        await limiter.stage(ctx, call_next)

    assert (raised.value.code, raised.value.message, raised.value.data) == (
        RATE_LIMITED,
        LIMITED[0],
        {"retryAfterSeconds": 60.0},
    )
    assert len(call_next.seen) == 2
    assert limiter.rejections("per-user") == 1.0


@pytest.mark.parametrize(
    ("method", "server_id"),
    [("prompts/get", "gh"), ("tools/call", "other")],
    ids=["a method the limit does not count", "a server the limit does not match"],
)
async def test_requests_no_limit_applies_to_are_never_limited(
    limiter: Limiter, method: str, server_id: str
) -> None:
    call_next = Recorder()
    for _ in range(5):
        assert (
            await limiter.stage(call_context(method=method, server_id=server_id), call_next)
            is call_next.result
        )

    assert len(call_next.seen) == 5
    assert len(limiter.backend) == 0


async def test_without_limits_in_the_policy_every_call_goes_on(tmp_path: Path) -> None:
    limiter = Limiter(access_for(tmp_path, "version: 1\ndefault: allow\n"))
    call_next = Recorder()

    for _ in range(5):
        await limiter.stage(call_context(), call_next)

    assert len(call_next.seen) == 5
    assert len(limiter.backend) == 0


async def test_an_exception_from_the_call_propagates_unchanged(limiter: Limiter) -> None:
    error = ServerUnavailable("gh", "the process exited with code 1")

    with pytest.raises(ServerUnavailable) as raised:
        await limiter.stage(call_context(), Recorder(raises=error))

    assert raised.value is error


class Unavailable:
    """A limit store that is down and fails closed: every call is denied, by no limit."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def hit(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        self.asked.append([check.key for check in checks])
        return LimitOutcome(allowed=False, retry_after=1.25, degraded=True)

    async def buckets(self, limit: int = 1000) -> list[tuple[str, float]]:
        raise ConnectionError("down")

    async def aclose(self) -> None:
        return None


async def test_a_denial_by_an_unreachable_store_says_so_and_is_counted_as_unavailable(tmp_path: Path) -> None:
    metrics = Metrics(process_metrics=False)
    store = Unavailable()
    call_next = Recorder()

    result = await RateLimit(access_for(tmp_path), store, metrics)(call_context(), call_next)

    assert result == tool_error(
        "Rate limiting is unavailable right now; retry in 1.3 s.",
        outcome="rate_limited",
        meta={"retryAfterSeconds": 1.25},
    )
    assert store.asked == [["per-user:identity=api_key,,alice"]]
    assert call_next.seen == []
    assert sample(metrics.registry, REJECTIONS, limit="unavailable") == 1.0


PER_TOOL = """\
version: 1
default: allow
limits:
  - id: issue-reads
    rate: 1/minute
    burst: 1
    per: [tool]
    match: {tools: ["gh.get_issue"]}
    methods: [tools/call]
"""


async def test_a_limit_on_a_tool_counts_every_spelling_a_client_is_shown_in_one_bucket(
    tmp_path: Path,
) -> None:
    # The server lists get_issue twice: the second is served under a derived name. A client that
    # alternates spellings must neither escape a limit written against gh.get_issue nor get a
    # second bucket: limits, like the policy, see the canonical name.
    access = access_for(tmp_path, PER_TOOL)
    limiter = Limiter(access)
    served = served_tools(access, [{"name": "get_issue"}, {"name": "get_issue"}])
    first, derived = (entry.name for entry in served.catalog.entries)
    assert derived != first == "gh.get_issue"
    call_next = Recorder()

    assert await limiter.stage(tool_context(served, first), call_next) is call_next.result
    answer = await limiter.stage(tool_context(served, derived), call_next)

    assert answer["_meta"]["dev.manifold/outcome"] == "rate_limited"
    assert limiter.rejections("issue-reads") == 1.0


async def test_a_reloaded_policy_limits_with_its_own_rules_not_the_ones_seen_before(tmp_path: Path) -> None:
    # The stage keeps each caller's buckets per rules in force: a reload must not leave it
    # spending from the old rules' buckets (or from none when the old rules had no limits).
    elsewhere = "  - {id: elsewhere, rate: 1/minute, burst: 1, per: [], match: {servers: [other]}}\n"
    access = access_for(tmp_path, "version: 1\ndefault: allow\nlimits:\n" + elsewhere)
    limiter = Limiter(access)
    call_next = Recorder()
    for _ in range(3):
        assert await limiter.stage(call_context(), call_next) is call_next.result
    strict = "version: 1\ndefault: allow\nlimits:\n  - {id: one, rate: 1/minute, burst: 1, per: [identity]}\n"
    (tmp_path / "policy.yaml").write_text(strict)
    assert access.reload()

    assert await limiter.stage(call_context(), call_next) is call_next.result
    limited = await limiter.stage(call_context(), call_next)
    assert limited is not call_next.result
    assert "Rate limit 'one' exceeded" in limited["content"][0]["text"]
    assert limiter.backend.tat("one:identity=api_key,,alice") is not None


async def test_many_callers_each_keep_their_own_bucket_past_the_stage_s_cache_bound(limiter: Limiter) -> None:
    # A client inventing identities must not make the stage hold them all, nor make one
    # identity's calls spend another's budget when the cache starts afresh.
    call_next = Recorder()
    callers = [Identity(f"user{n}", frozenset({"reader"}), "api_key") for n in range(5000)]
    for caller in callers:
        assert await limiter.stage(call_context(identity=caller), call_next) is call_next.result
    assert len(limiter.stage._checks) <= 4096
    for caller in callers[:3]:  # each has one call left of its burst of 2, then is limited
        assert await limiter.stage(call_context(identity=caller), call_next) is call_next.result
        assert await limiter.stage(call_context(identity=caller), call_next) is not call_next.result


async def test_the_chain_steps_over_the_stage_exactly_while_no_limit_is_loaded(tmp_path: Path) -> None:
    access = access_for(tmp_path, "version: 1\ndefault: allow\n")
    stage = RateLimit(access, MemoryBackend(), Metrics(process_metrics=False))
    ctx = tool_context(served_tools(access), "gh.get_issue")
    assert stage.passes(ctx)
    (tmp_path / "policy.yaml").write_text(POLICY)  # a reload brings a limit: counted from now on
    assert access.reload()
    assert not stage.passes(ctx)
