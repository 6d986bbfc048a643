"""Session churn leaves nothing behind but bounded holders: N sessions opened and ended (DELETE,
idle expiry, eviction) leave the registry empty and the memory of ended ids at its bound.

Count-based, not timed: the clocks are fakes, and every holder is measured by its length."""

from __future__ import annotations

import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.clients.revocations import EndedIds, Revocations
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.core.keys import derive_key
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.views.catalogs import Catalogs

pytestmark = pytest.mark.anyio

CYCLES = 3000
BOUND = 500


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_sessions_opened_and_ended_leave_only_the_bounded_memory_of_ended_ids() -> None:
    wall = Clock(1_000_000.0)
    ended = EndedIds(BOUND, clock=wall)
    registry = Sessions(
        SessionTokens(derive_key(b"k" * 32, "session"), lifetime=3600.0, clock=wall),
        Metrics(process_metrics=False),
        idle_timeout=60,
        max_sessions=50,
        max_per_identity=20,
        revocations=Revocations(ended, clock=wall),
        clock=Clock(0.0),
    )
    for n in range(CYCLES):
        identity = Identity(f"user{n % 97}", frozenset(), "jwt", issuer="https://id.example")
        session = registry.fresh("http", identity)
        session.protocol_version = "2025-11-25"
        await registry.admit(session)
        if n % 10:  # nine in ten DELETE; the rest walk away and are evicted to make room
            await registry.end(session)
        wall.now += 0.1
    assert len(registry) <= 50
    assert len(ended) == BOUND
    for session in list(registry):
        await registry.end(session)
    assert len(registry) == 0
    assert registry._by_identity == {}
    assert registry._expires == {}
    assert registry._by_nonce == {}
    assert len(ended) == BOUND


async def test_pages_cut_for_many_identities_stay_within_the_byte_bound_of_the_page_cache() -> None:
    servers = {"a": ServerConfig(id="a", command="x", transport="stdio", prefix="a")}
    catalogs = Catalogs(
        {"a": "a"},
        codec=NamingCodec(".", 64),
        cursors=CursorCodec(b"k" * 32),
        access=Access(PolicySettings(), servers),
        metrics=Metrics(process_metrics=False),
        page_size=100,
        hints={},
        private=False,
        on_change=lambda kind: None,
    )
    big = "x" * 2000
    catalogs.listed(
        "a", "tools", [{"name": f"t{i}", "description": big, "inputSchema": {}} for i in range(300)]
    )
    for n in range(CYCLES // 10):  # each identity lists its first page: one cached page each
        catalogs.page("tools", None, Identity(f"user{n}", frozenset(), "jwt", issuer="https://id.example"))
    assert catalogs.cached_page_bytes() <= catalogs.max_page_bytes
    assert catalogs.cached_page_bytes() > catalogs.max_page_bytes // 2  # it is used, not emptied
