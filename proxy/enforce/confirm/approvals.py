"""Calls waiting for somebody else's approval (a confirm rule with ``approver: {role: r}``).

An :class:`Approval` is what the approval page shows and what the waiting call reads: the tool,
its server, who called it (name and identity key), the roles that may approve, the arguments
summary (already redacted), the reason, a deadline (wall clock, seconds) and the decision.

Bounded: a record is held until a minute after its deadline, and no more than
``limits.max_pending_approvals`` are held in all, nor more than 16 (or that limit, if lower) of
one caller; past either, a new one is refused (:class:`~proxy.core.errors.LimitExceeded`). The same
call asked again (same caller, tool, arguments and rules) while its approval is pending waits on
that approval instead of making another. Expiry is kept in deadline order.

Where they live: :class:`MemoryApprovals` (this process), or :class:`RedisApprovals` when the
rate limits use Redis (``rate_limits.backend: redis``), so that the page may be served by one
replica while the call waits on another. A decision is written once: the first of approve or
reject wins, atomically. Records expire with their deadline (plus a minute for the page to
still say what happened).

Ids are 192-bit random tokens: the page's URL is the capability to *see* the request; deciding
it needs an approver's credential (:mod:`proxy.inbound.approval_page`).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol
from urllib.parse import urlsplit

import anyio
import orjson
from cachetools import TTLCache

from proxy.config.model import Config
from proxy.config.ratelimit import HttpFloodLimit
from proxy.core.errors import LimitExceeded
from proxy.enforce.confirm.form_tokens import Approver, decision_token, page_token, read_decision_token
from proxy.enforce.confirm.memory import spend_once
from proxy.enforce.confirm.unanswered import Unanswered
from proxy.policy.model import Policy, RoleApprover

if TYPE_CHECKING:  # redis is imported only when the records live there
    from redis.asyncio import Redis

__all__ = [
    "Approval",
    "ApprovalStore",
    "Approvals",
    "MemoryApprovals",
    "RedisApprovals",
    "State",
    "approver_rules",
    "make_approvals",
]

# abandoned: the caller gave up (cancelled its call, or its connection went) before a decision.
State = Literal["pending", "approved", "rejected", "abandoned"]

_KEEP_AFTER: Final = 60.0  # seconds a decided or expired record stays readable
_POLL: Final = 0.2  # seconds between reads while waiting on Redis
_ID_BYTES: Final = 24
_MAX_ID: Final = 64
_MAX_SPENT: Final = 65536
PER_CALLER: Final = 16  # approvals one caller may have held at once (at most the total)


@dataclass(frozen=True, slots=True)
class Approval:
    id: str
    tool: str
    server: str
    caller: str  # the caller's name, as shown
    caller_key: tuple[str, str, str]  # who called, exactly: nobody approves their own call
    roles: tuple[str, ...]  # any of these may approve
    reason: str
    summary: str  # the arguments, redacted and bounded (proxy.enforce.confirm.question)
    deadline: float  # wall clock
    state: State = "pending"
    decided_by: str | None = None
    decided_at: float | None = None
    call: str = ""  # which call (caller, tool, arguments, rules): the same call asked again waits on it

    @classmethod
    def new(cls, **fields: Any) -> Approval:
        return cls(id=secrets.token_urlsafe(_ID_BYTES), **fields)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> Approval:
        data = orjson.loads(raw)
        data["caller_key"] = tuple(data["caller_key"])
        data["roles"] = tuple(data["roles"])
        return cls(**data)


def _refusal(mine: bool, per_caller: int, total: int) -> LimitExceeded:
    whose = "of this caller" if mine else "in all"
    return LimitExceeded(
        f"Manifold already holds {per_caller if mine else total} calls {whose} waiting for an "
        f"approver (at most {per_caller} per caller, {total} in all); each is held until a minute "
        "after its deadline",
        limit="max_pending_approvals",
        maximum=total,
        data={"per_caller": per_caller},
        said=True,
    )


class ApprovalStore(Protocol):
    async def put(self, approval: Approval) -> Approval:
        """Hold ``approval``, or return the pending one of the same call (``approval.call``).

        Raises:
            LimitExceeded: ``limits.max_pending_approvals``, in all or for this caller.
        """
        ...

    async def get(self, approval_id: str) -> Approval | None:
        """The record, while it is kept; None for an unknown or expired id."""
        ...

    async def decide(self, approval_id: str, state: State, by: str, at: float) -> Approval | None:
        """Write the decision if the record is still pending; returns the record as it now is
        (decided by somebody else first, possibly); None when unknown or expired."""
        ...

    async def wait(self, approval_id: str, deadline: float) -> Approval | None:
        """The record once decided, or as it is at ``deadline`` (wall clock)."""
        ...

    async def spend(self, approval_id: str) -> bool:
        """Mark the decision used by a retry: True the first time only."""
        ...

    async def listed(self, limit: int) -> list[Approval]:
        """At most ``limit`` records kept now (pending and decided), for the admin API."""
        ...

    async def aclose(self) -> None: ...


class MemoryApprovals:
    def __init__(
        self, *, total: int = 1_000, per_caller: int = PER_CALLER, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._total = total
        self._per_caller = min(per_caller, total)
        self._records: dict[str, Approval] = {}
        self._decided: dict[str, anyio.Event] = {}
        self._expiry: list[tuple[float, str]] = []  # a heap: (when the record goes, its id)
        self._held: Counter[tuple[str, str, str]] = Counter()
        self._calls: dict[str, str] = {}  # call -> the id of its latest record
        # Every question answered through input_required is spent here too: bounded, and kept
        # as long as a question may wait (MAX_CONFIRM_TIMEOUT) and a minute more.
        self._spent: TTLCache[str, bool] = TTLCache(_MAX_SPENT, 3600 + _KEEP_AFTER, timer=clock)

    def _prune(self) -> None:
        now = self._clock()
        while self._expiry and self._expiry[0][0] < now:
            _, gone = heapq.heappop(self._expiry)
            record = self._records.pop(gone)
            self._decided.pop(gone, None)
            self._held[record.caller_key] -= 1
            if not self._held[record.caller_key]:
                del self._held[record.caller_key]
            if self._calls.get(record.call) == gone:
                del self._calls[record.call]

    async def put(self, approval: Approval) -> Approval:
        self._prune()
        same = self._records.get(self._calls.get(approval.call, "")) if approval.call else None
        if same is not None and same.state == "pending" and same.deadline > self._clock():
            return same
        mine = self._held[approval.caller_key] >= self._per_caller
        if mine or len(self._records) >= self._total:
            raise _refusal(mine, self._per_caller, self._total)
        self._records[approval.id] = approval
        self._decided[approval.id] = anyio.Event()
        self._held[approval.caller_key] += 1
        heapq.heappush(self._expiry, (approval.deadline + _KEEP_AFTER, approval.id))
        if approval.call:
            self._calls[approval.call] = approval.id
        return approval

    async def listed(self, limit: int) -> list[Approval]:
        self._prune()
        return list(self._records.values())[:limit]

    async def get(self, approval_id: str) -> Approval | None:
        self._prune()
        return self._records.get(approval_id)

    async def decide(self, approval_id: str, state: State, by: str, at: float) -> Approval | None:
        approval = await self.get(approval_id)
        if approval is None or approval.state != "pending":
            return approval
        if at > approval.deadline and state != "abandoned":  # only the ending may come late
            return approval
        approval = self._records[approval_id] = replace(approval, state=state, decided_by=by, decided_at=at)
        self._decided[approval_id].set()
        return approval

    async def wait(self, approval_id: str, deadline: float) -> Approval | None:
        event = self._decided.get(approval_id)
        if event is not None:
            with anyio.move_on_after(max(0.0, deadline - self._clock())):
                await event.wait()
        return self._records.get(approval_id)

    async def spend(self, approval_id: str) -> bool:
        return spend_once(self._spent, approval_id)

    async def aclose(self) -> None:
        return None


# Atomically: write the decision only while the record is pending and not past its deadline
# (abandoned, the ending of a question nobody came back for, comes after it).
_DECIDE: Final = """
local raw = redis.call('GET', KEYS[1])
if not raw then return nil end
local record = cjson.decode(raw)
local late = ARGV[1] ~= 'abandoned' and tonumber(ARGV[3]) > record['deadline']
if record['state'] ~= 'pending' or late then return raw end
record['state'] = ARGV[1]
record['decided_by'] = ARGV[2]
record['decided_at'] = tonumber(ARGV[3])
local encoded = cjson.encode(record)
redis.call('SET', KEYS[1], encoded, 'KEEPTTL')
return encoded
"""


# Atomically: the pending record of the same call, else hold a new one within the limits. The
# held records are sorted sets scored by when each goes (in all, and per caller).
_PUT: Final = """
local now = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if KEYS[2] ~= '' then
  local same = redis.call('GET', KEYS[2])
  if same then
    local raw = redis.call('GET', ARGV[8] .. same)
    if raw then
      local record = cjson.decode(raw)
      if record['state'] == 'pending' and record['deadline'] > now then return {'same', raw} end
    end
  end
end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then return {'caller'} end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[7]) then return {'total'} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
if KEYS[2] ~= '' then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3]) end
return {'new'}
"""


class RedisApprovals:
    """The records in Redis (``<prefix>approval:<id>``), so any replica serves the page and any
    waits. A call waiting on another replica's decision reads the record every 200 ms."""

    def __init__(
        self,
        client: Redis,
        *,
        key_prefix: str,
        total: int = 1_000,
        per_caller: int = PER_CALLER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = client
        self._prefix = key_prefix
        self._clock = clock
        self._total = total
        self._per_caller = min(per_caller, total)
        self._decide = client.register_script(_DECIDE)
        self._put = client.register_script(_PUT)

    def _key(self, approval_id: str) -> str:
        return f"{self._prefix}approval:{approval_id}"

    def _ttl_ms(self, approval: Approval) -> int:
        return max(1, math.ceil((approval.deadline + _KEEP_AFTER - self._clock()) * 1000))

    async def put(self, approval: Approval) -> Approval:
        caller = hashlib.sha256(orjson.dumps(approval.caller_key)).hexdigest()[:32]
        keys = [
            self._key(approval.id),
            f"{self._prefix}approval-call:{approval.call}" if approval.call else "",
            f"{self._prefix}approvals-of:{caller}",
            f"{self._prefix}approvals-held",
        ]
        goes = approval.deadline + _KEEP_AFTER
        args: list[str | bytes | int | float] = [
            approval.id,
            approval.encode(),
            self._ttl_ms(approval),
            self._clock(),
            goes,
            self._per_caller,
            self._total,
            self._key(""),
        ]
        answer = await self._put(keys=keys, args=args)
        verdict = answer[0].decode() if isinstance(answer[0], bytes) else str(answer[0])
        if verdict == "same":
            return Approval.decode(answer[1])
        if verdict in ("caller", "total"):
            raise _refusal(verdict == "caller", self._per_caller, self._total)
        return approval

    async def listed(self, limit: int) -> list[Approval]:
        found: list[Approval] = []
        async for key in self._redis.scan_iter(match=self._key("*"), count=100):
            if len(found) >= limit:
                break
            raw = await self._redis.get(key)
            if raw is not None:
                found.append(Approval.decode(raw))
        return found

    async def get(self, approval_id: str) -> Approval | None:
        if len(approval_id) > _MAX_ID:
            return None
        raw = await self._redis.get(self._key(approval_id))
        return Approval.decode(raw) if raw is not None else None

    async def decide(self, approval_id: str, state: State, by: str, at: float) -> Approval | None:
        if len(approval_id) > _MAX_ID:
            return None
        raw = await self._decide(keys=[self._key(approval_id)], args=[state, by, at])
        return Approval.decode(raw) if raw is not None else None

    async def wait(self, approval_id: str, deadline: float) -> Approval | None:
        from redis.exceptions import RedisError

        while True:
            try:
                approval = await self.get(approval_id)
            except RedisError:
                approval = None  # a blip: read again, until the deadline
            else:
                if approval is None or approval.state != "pending":
                    return approval
            left = deadline - self._clock()
            if left <= 0:
                return approval
            await anyio.sleep(min(_POLL, left))

    async def spend(self, approval_id: str) -> bool:
        return bool(await self._redis.set(f"{self._key(approval_id)}:spent", b"1", nx=True, ex=3600 + 60))

    async def aclose(self) -> None:
        await self._redis.aclose()


def make_approvals(config: Config, key: bytes) -> Approvals:
    """Approvals in Redis when the rate limits use it, else in memory; links to where the
    operator says Manifold is reached (``policy.approvals_url``), else to the listener."""
    limits = config.rate_limits
    store: ApprovalStore
    total = config.limits.max_pending_approvals
    if limits.backend == "redis":
        from redis.asyncio import Redis

        client = Redis.from_url(limits.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
        store = RedisApprovals(client, key_prefix=limits.key_prefix, total=total)
    else:
        store = MemoryApprovals(total=total)
    base = config.policy.approvals_url
    if base is None:
        host = config.listen.host
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        base = f"http://{host}:{config.listen.port}"
    # Another replica may serve the page only if they share the records and the link says where.
    elsewhere = limits.backend == "redis" and config.policy.approvals_url is not None
    return Approvals(store, base_url=base, key=key, served_elsewhere=elsewhere, flood=limits.http)


def approver_rules(policy: Policy | None) -> list[str]:
    """The ids of the confirm rules that ask somebody else (``approver: {role: r}``)."""
    if policy is None:
        return []
    return [
        rule.id
        for rule in policy.rules
        if rule.confirm is not None and isinstance(rule.confirm.approver, RoleApprover)
    ]


class Approvals:
    """The store, the page's address, and the page's anti-forgery tokens.

    ``reachable``: whether somebody can open the page at all: this process serves it (``manifold
    serve``: :func:`proxy.inbound.approval_page.approval_routes` says so), or another replica
    shares the records and ``policy.approvals_url`` points there. Under ``manifold stdio`` alone
    nothing serves it, and a call waiting for an approver would only wait out its timeout.
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        base_url: str,
        key: bytes,
        served_elsewhere: bool = False,
        flood: HttpFloodLimit | None = None,
    ) -> None:
        self.store = store
        self._base = base_url.rstrip("/")
        self._key = key
        self._served = served_elsewhere
        self.flood = flood  # rate_limits.http: also bounds the page's decisions (credential guesses)
        self.unanswered = Unanswered()  # 2026-07-28 questions whose caller may never come back

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of the page's links: where approvers' browsers post from."""
        parts = urlsplit(self._base)
        return f"{parts.scheme}://{parts.netloc}".lower()

    @property
    def reachable(self) -> bool:
        return self._served

    def serving(self) -> None:
        """This process serves the page (its HTTP routes were built)."""
        self._served = True

    def link(self, approval_id: str) -> str:
        return f"{self._base}/approvals/{approval_id}"

    def token(self, approval_id: str) -> str:
        """The first form's token (anybody who opens the link has it).

        See :mod:`proxy.enforce.confirm.form_tokens`."""
        return page_token(self._key, approval_id)

    def token_ok(self, approval_id: str, token: str) -> bool:
        return hmac.compare_digest(self.token(approval_id), token)

    def decision_token(self, approval_id: str, approver: Approver, *, now: float) -> str:
        """The second form's token: ``approver`` (authenticated, holding a role) may decide."""
        return decision_token(self._key, approval_id, approver, now=now)

    def approver(self, approval_id: str, token: str, *, now: float) -> Approver | None:
        """Who a decision token lets decide ``approval_id`` now; None: forged, stale, elsewhere."""
        return read_decision_token(self._key, approval_id, token, now=now)
