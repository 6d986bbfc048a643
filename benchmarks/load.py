"""The load generator: MCP sessions over a lean HTTP client, closed-loop ``tools/call`` load,
``tools/list`` drains and session floods, each bounded in count and in time.

Every answer is checked: an ``echo`` result must carry the arguments of its own request and come
from the server the call was routed to, and a list must hold exactly the expected names in order.
A wrong answer raises :class:`WrongAnswer`, which ends the whole run.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import orjson

from benchmarks.clients import HttpPoster, PosterFactory, Reply, open_raw
from benchmarks.procs import total_cpu

__all__ = [
    "CallRun",
    "CallTarget",
    "McpClient",
    "WrongAnswer",
    "check_echo",
    "decode_reply",
    "drain_tools",
    "open_sessions",
    "percentile",
    "run_calls",
    "wrong_answer_in",
]

PROTOCOL_VERSION: Final = "2025-11-25"
_INITIALIZE: Final = {
    "protocolVersion": PROTOCOL_VERSION,
    "capabilities": {},
    "clientInfo": {"name": "manifold-bench", "version": "0"},
}
_INITIALIZED: Final = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


class WrongAnswer(AssertionError):
    """A response that is not the right answer to its request: the run is invalid."""


def wrong_answer_in(exc: BaseException) -> WrongAnswer | None:
    """The :class:`WrongAnswer` in ``exc``, which a task group may have wrapped in a group."""
    if isinstance(exc, WrongAnswer):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := wrong_answer_in(inner)) is not None:
                return found
    return None


def decode_reply(reply: Reply, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to ``request_id`` in an HTTP answer (a JSON body or an SSE stream).

    Raises:
        WrongAnswer: not HTTP 200, or no response with that id in the body.
    """
    if reply.status != 200:
        raise WrongAnswer(f"request {request_id}: HTTP {reply.status}: {reply.body[:300]!r}")
    if reply.content_type == "application/json":
        message = orjson.loads(reply.body)
        if isinstance(message, dict) and message.get("id") == request_id:
            return message
    elif reply.content_type == "text/event-stream":
        for line in reply.body.splitlines():
            if line.startswith(b"data:"):
                message = orjson.loads(line[5:])
                if isinstance(message, dict) and message.get("id") == request_id and "method" not in message:
                    return message
    raise WrongAnswer(f"request {request_id}: no response with that id in {reply.body[:300]!r}")


def check_echo(reply: Reply, request_id: int, server: str, arguments: dict[str, Any]) -> None:
    """Check that ``reply`` is ``server``'s echo of exactly ``arguments``.

    Raises:
        WrongAnswer: anything else (an error, another request's answer, the wrong server).
    """
    message = decode_reply(reply, request_id)
    try:
        result = message["result"]
        echoed = orjson.loads(result["content"][0]["text"])
    except (KeyError, IndexError, TypeError, orjson.JSONDecodeError) as exc:
        raise WrongAnswer(f"request {request_id}: not an echo result ({exc!r}): {message!r:.300}") from None
    if result.get("isError") or echoed != {"server": server, "tool": "echo", "arguments": arguments}:
        raise WrongAnswer(
            f"request {request_id}: expected {server}'s echo of {arguments!r}, got {message!r:.300}"
        )


@dataclass
class McpClient:
    """One MCP session over one keep-alive connection."""

    poster: HttpPoster
    session_id: str | None = None

    async def initialize(self) -> str:
        """Start a new session on this connection; returns its id.

        Raises:
            WrongAnswer: the server did not accept it.
        """
        body = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INITIALIZE})
        reply = await self.poster.post(body)
        decode_reply(reply, 0)
        if reply.session_id is None:
            raise WrongAnswer("initialize: no Mcp-Session-Id in the answer")
        done = await self.poster.post(_INITIALIZED, reply.session_id)
        if done.status != 202:
            raise WrongAnswer(f"notifications/initialized: HTTP {done.status}, expected 202")
        self.session_id = reply.session_id
        return reply.session_id

    async def request(self, request_id: int, method: str, params: dict[str, Any] | None) -> Any:
        """The result of one request.

        Raises:
            WrongAnswer: an error response, or no answer to this request.
        """
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        answer = decode_reply(await self.poster.post(orjson.dumps(message), self.session_id), request_id)
        if "result" not in answer:
            raise WrongAnswer(f"{method}: {answer.get('error')!r}")
        return answer["result"]


@dataclass(frozen=True)
class CallTarget:
    """Somewhere to send ``tools/call`` load: an MCP endpoint and the echo tools behind it."""

    name: str
    url: str
    tools: tuple[tuple[str, str], ...]  # (tool name to call, server name its echo must report)
    manifold_pid: int | None  # None for a direct run
    server_pids: tuple[int, ...]
    sessions: list[str] = field(default_factory=list, compare=False)  # reused across runs

    async def ensure_sessions(self, count: int, factory: PosterFactory = open_raw) -> list[str]:
        """At least ``count`` initialized sessions (kept: idle sessions cost nothing measured here)."""
        while len(self.sessions) < count:
            poster = await factory(self.url)
            try:
                self.sessions.append(await McpClient(poster).initialize())
            finally:
                await poster.aclose()
        return self.sessions[:count]


@dataclass(frozen=True)
class CallRun:
    """One measured closed-loop run."""

    target: str
    concurrency: int
    calls: int
    seconds: float
    latencies_ns: list[int] = field(repr=False)
    client_cpu: float  # seconds, this process
    manifold_cpu: float | None  # seconds
    servers_cpu: float  # seconds, every server process behind the target

    @property
    def rps(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0

    def p(self, q: float) -> float:
        """The ``q`` quantile of latency, in milliseconds."""
        return percentile(self.latencies_ns, q) / 1e6


def percentile(values: Sequence[int] | Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


async def run_calls(
    target: CallTarget,
    concurrency: int,
    *,
    duration: float,
    max_calls: int,
    warmup_calls: int,
    factory: PosterFactory = open_raw,
    session_factory: PosterFactory = open_raw,
    clock: Callable[[], float] = time.perf_counter,
    extra: dict[str, Any] | None = None,
) -> CallRun:
    """Closed-loop load: ``concurrency`` workers, each on its own connection and session, call the
    target's echo tools round-robin until ``duration`` seconds or ``max_calls`` calls.

    ``extra`` arguments go with every call (and come back in its echo): a payload of a size.

    ``warmup_calls`` per worker go first and are not measured. Sessions are opened (once, kept
    on the target) with ``session_factory``'s connections: the handshake, also for a target whose
    ``factory`` sends its calls another way.

    Raises:
        WrongAnswer: any answer was wrong (the run stops at once).
    """
    sessions = await target.ensure_sessions(concurrency, session_factory)
    padding = extra or {}
    posters = [await factory(target.url) for _ in range(concurrency)]
    tag = secrets.token_hex(4)  # answers from an earlier run cannot pass for this one's
    tools, count = target.tools, len(target.tools)
    latencies: list[int] = []
    counter = itertools.count()
    limit, deadline = 0, 0.0

    async def worker(poster: HttpPoster, session_id: str, record: bool) -> None:
        perf_ns = time.perf_counter_ns
        while True:
            i = next(counter)
            if i >= limit or clock() >= deadline:
                return
            tool, server = tools[i % count]
            arguments = {"i": i, "tag": tag, **padding}
            body = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                }
            )
            started = perf_ns()
            reply = await poster.post(body, session_id)
            if record:
                latencies.append(perf_ns() - started)
            check_echo(reply, i, server, arguments)

    async def phase(record: bool) -> None:
        async with anyio.create_task_group() as tg:
            for poster, session_id in zip(posters, sessions, strict=True):
                tg.start_soon(worker, poster, session_id, record)

    try:
        limit, deadline = warmup_calls * concurrency, clock() + max(duration, 1.0)
        await phase(record=False)
        tag = secrets.token_hex(4)
        counter = itertools.count()
        pids, manifold_pids = target.server_pids, [] if target.manifold_pid is None else [target.manifold_pid]
        manifold0 = total_cpu(manifold_pids)
        servers0 = total_cpu(pids)
        client0 = time.process_time()
        started = clock()
        limit, deadline = max_calls, started + duration
        await phase(record=True)
        seconds = clock() - started
        client = time.process_time() - client0
        servers = total_cpu(pids) - servers0
        manifold = total_cpu(manifold_pids) - manifold0 if manifold_pids else None
    finally:
        for poster in posters:
            await poster.aclose()
    return CallRun(target.name, concurrency, len(latencies), seconds, latencies, client, manifold, servers)


async def drain_tools(client: McpClient, expected: Sequence[str], *, first_id: int, max_pages: int) -> float:
    """Every page of ``tools/list``; returns the seconds it took.

    Raises:
        WrongAnswer: the names are not exactly ``expected``, in order, or paging did not end.
    """
    names: list[str] = []
    cursor: str | None = None
    started = time.perf_counter()
    for page in range(max_pages):
        result = await client.request(first_id + page, "tools/list", {"cursor": cursor} if cursor else None)
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    else:
        raise WrongAnswer(f"tools/list did not end within {max_pages} pages")
    seconds = time.perf_counter() - started
    if names != list(expected):
        missing = sorted(set(expected) - set(names))[:5]
        extra = sorted(set(names) - set(expected))[:5]
        raise WrongAnswer(
            f"tools/list: {len(names)} names, expected {len(expected)}; missing {missing}, unexpected {extra}"
        )
    return seconds


async def open_sessions(url: str, count: int, *, concurrency: int, timeout: float) -> list[str]:
    """Open ``count`` sessions (initialize + initialized) and leave them idle; returns their ids.

    Raises:
        WrongAnswer: a session was refused.
        TimeoutError: not done within ``timeout`` seconds.
    """
    opened: list[str] = []
    counter = itertools.count()

    async def worker() -> None:
        poster = await open_raw(url)
        try:
            while next(counter) < count:
                opened.append(await McpClient(poster).initialize())
        finally:
            await poster.aclose()

    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
    return opened
