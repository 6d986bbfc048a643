"""The soak's traffic: steady checked calls, session churn, and a hostile client.

Every call's answer is classified (:func:`classify`): **ok**, **wrong** (an answer that is not
the echo of this very request: another request's id, other arguments, another server, a
malformed result; a crossed answer) or **lost** (no answer within the timeout, a broken
connection, an HTTP or JSON-RPC error, an ``isError`` result). Lost answers are recorded with
their server and times, so the report can tell those inside a server's kill window from the
rest. Every loop stops at its deadline, and every request has a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import orjson

from benchmarks.clients import HttpError, HttpPoster, Reply, open_raw
from benchmarks.load import PROTOCOL_VERSION, McpClient, WrongAnswer

__all__ = [
    "GATEWAY",
    "HOSTILE_KINDS",
    "Failure",
    "Kill",
    "Tally",
    "churn",
    "classify",
    "hostile",
    "steady",
]

GATEWAY: Final = "-"  # the "server" of session operations (initialize, DELETE): Manifold itself
_KINDS_KEPT: Final = 60  # distinct error kinds counted; the rest count as "other"
_EXAMPLES_KEPT: Final = 10
_LIMIT_NAME: Final = re.compile(r"limits\.[a-z_]+")
HOSTILE_KINDS: Final = (
    "malformed-json",
    "deep-300",
    "oversized-5MiB",
    "batch-1000",
    "big-initialize",
    "idle",
    "slowloris",
)
_CONNECTION_ERRORS: Final = (OSError, EOFError, HttpError, ValueError, asyncio.LimitOverrunError)


@dataclass(frozen=True, slots=True)
class Failure:
    """One lost answer: which server the call was for, when it ran, and why it failed."""

    server: str
    started: float  # seconds since the run began
    ended: float
    kind: str


@dataclass
class Kill:
    """One SIGKILL of a server process, and when that server answered a new call again."""

    server: str
    pid: int
    at: float  # seconds since the run began
    recovered_at: float | None = None
    new_pid: int | None = None

    @property
    def recovery(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at


@dataclass
class Tally:
    """What the traffic saw, shared by every task of the run (one event loop: no locks)."""

    clock: Callable[[], float]
    calls: Counter[str] = field(default_factory=Counter)  # by server
    ok: int = 0
    wrong: int = 0
    wrong_examples: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # "server: kind"
    kills: list[Kill] = field(default_factory=list)
    sessions_opened: int = 0
    sessions_deleted: int = 0
    hostile_sent: Counter[str] = field(default_factory=Counter)
    hostile_answers: Counter[tuple[str, str]] = field(default_factory=Counter)
    hostile_skipped: Counter[str] = field(default_factory=Counter)

    def error(self, server: str, kind: str) -> None:
        key = f"{server}: {kind}"
        if key not in self.errors and len(self.errors) >= _KINDS_KEPT:
            key = f"{server}: other"
        self.errors[key] += 1

    def record(self, server: str, started: float, outcome: str, kind: str) -> None:
        ended = self.clock()
        if server != GATEWAY:
            self.calls[server] += 1
        if outcome == "ok":
            self.ok += 1
            for kill in self.kills:
                if kill.server == server and kill.recovered_at is None and started >= kill.at:
                    kill.recovered_at = ended
            return
        self.error(server, kind)
        if outcome == "wrong":
            self.wrong += 1
            if len(self.wrong_examples) < _EXAMPLES_KEPT:
                self.wrong_examples.append(f"{server} at {started:.1f}s: {kind}")
        else:
            self.failures.append(Failure(server, started, ended, kind))

    def hostile(self, kind: str, answer: str) -> None:
        self.hostile_sent[kind] += 1
        self.hostile_answers[kind, answer] += 1


# ----------------------------------------------------------------------------- answers


def _error_kind(message: dict[str, Any]) -> str:
    error = message.get("error")
    if not isinstance(error, dict):
        return f"error {error!r:.60}"
    text = str(error.get("message", ""))
    limit = _LIMIT_NAME.search(text)
    return f"rpc {error.get('code')} {limit[0] if limit else text[:60]}"


def _messages(reply: Reply) -> list[Any]:
    if reply.content_type == "application/json":
        decoded = orjson.loads(reply.body)
        return decoded if isinstance(decoded, list) else [decoded]
    if reply.content_type == "text/event-stream":
        return [orjson.loads(line[5:]) for line in reply.body.splitlines() if line.startswith(b"data:")]
    return []


def classify(reply: Reply, request_id: int, server: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """``(outcome, kind)`` of an answer to a ``tools/call`` of ``server``'s echo with ``arguments``.

    outcome is ``ok``, ``wrong`` (not this request's echo: a crossed answer) or ``lost``.
    """
    try:
        messages = _messages(reply)
    except orjson.JSONDecodeError:
        return ("lost", f"HTTP {reply.status} undecodable {reply.content_type or 'body'}")
    responses = [m for m in messages if isinstance(m, dict) and "method" not in m]
    if reply.status != 200:
        kind = f"HTTP {reply.status}"
        if responses:
            kind += f" {_error_kind(responses[0])}"
        return ("lost", kind)
    mine = [m for m in responses if m.get("id") == request_id]
    if not mine:
        others = [m.get("id") for m in responses]
        if others:
            return ("wrong", f"crossed: answer to id {others[0]!r} for request {request_id}")
        return ("lost", f"no response in a {reply.content_type or 'typeless'} answer")
    message = mine[0]
    if "error" in message:
        return ("lost", _error_kind(message))
    result = message.get("result")
    try:
        assert isinstance(result, dict)
        text = result["content"][0]["text"]
    except (AssertionError, KeyError, IndexError, TypeError):
        return ("wrong", f"not a tool result: {message!r:.120}")
    if result.get("isError"):
        return ("lost", f"tool error {str(text)[:60]}")
    try:
        echoed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ("wrong", f"not an echo: {text!r:.120}")
    if echoed != {"server": server, "tool": "echo", "arguments": arguments}:
        return ("wrong", f"crossed: expected {server}'s echo of {arguments!r}, got {echoed!r:.160}")
    return ("ok", "")


# ----------------------------------------------------------------------------- callers


class Caller:
    """One client: one session on one keep-alive connection, reopened after any failure."""

    def __init__(self, url: str, tally: Tally, timeout: float, tag: str) -> None:
        self.url, self.tally, self.timeout, self.tag = url, tally, timeout, tag
        self.poster: HttpPoster | None = None
        self.session_id: str | None = None
        self._ids = itertools.count(1)

    async def _poster(self) -> HttpPoster:
        if self.poster is None:
            with anyio.fail_after(self.timeout):
                self.poster = await open_raw(self.url)
        return self.poster

    async def drop_connection(self) -> None:
        if self.poster is not None:
            poster, self.poster = self.poster, None
            with anyio.move_on_after(2, shield=True):
                await poster.aclose()

    async def open_session(self) -> bool:
        """Initialize a new session; False (counted as a lost answer) when that failed."""
        started = self.tally.clock()
        try:
            poster = await self._poster()
            with anyio.fail_after(self.timeout):
                self.session_id = await McpClient(poster).initialize()
        except TimeoutError:
            await self.drop_connection()
            self.tally.record(GATEWAY, started, "lost", "initialize: no answer")
            return False
        except WrongAnswer as exc:
            self.tally.record(GATEWAY, started, "lost", f"initialize refused: {str(exc)[:80]}")
            return False
        except _CONNECTION_ERRORS as exc:
            await self.drop_connection()
            self.tally.record(GATEWAY, started, "lost", f"initialize: {type(exc).__name__}")
            return False
        self.tally.sessions_opened += 1
        return True

    async def echo(self, server: str) -> None:
        """One checked ``tools/call`` of ``server``'s echo."""
        request_id = next(self._ids)
        arguments = {"tag": self.tag, "i": request_id, "pad": secrets.token_hex(4)}
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": f"{server}.echo", "arguments": arguments},
            }
        )
        started = self.tally.clock()
        try:
            poster = await self._poster()
            with anyio.fail_after(self.timeout):
                reply = await poster.post(body, self.session_id)
        except TimeoutError:
            await self.drop_connection()  # an answer may still come on it: never read it as another's
            self.tally.record(server, started, "lost", f"no answer within {self.timeout:g} s")
            return
        except _CONNECTION_ERRORS as exc:
            await self.drop_connection()
            self.tally.record(server, started, "lost", f"connection {type(exc).__name__}")
            return
        outcome, kind = classify(reply, request_id, server, arguments)
        self.tally.record(server, started, outcome, kind)
        if reply.status == 404:
            self.session_id = None  # gone: the next round opens a new one

    async def delete_session(self) -> None:
        """DELETE the session (on a connection of its own); a refusal counts as a lost answer."""
        if self.session_id is None:
            return
        started = self.tally.clock()
        host, port = _host_port(self.url)
        head = (
            f"DELETE {urlsplit(self.url).path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Mcp-Session-Id: {self.session_id}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        answer = await exchange(self.url, [head.encode()], self.timeout)
        self.session_id = None
        if answer.startswith(("HTTP 200", "HTTP 202", "HTTP 204")):
            self.tally.sessions_deleted += 1
            self.tally.record(GATEWAY, started, "ok", "")
        else:
            self.tally.record(GATEWAY, started, "lost", f"DELETE: {answer}")


async def steady(
    url: str,
    tally: Tally,
    servers: tuple[str, ...],
    *,
    index: int,
    interval: float,
    deadline: float,
    timeout: float,
) -> None:
    """One steady client until ``deadline``: its own session, one call every ``interval`` seconds,
    round-robin over ``servers``' echo tools."""
    caller = Caller(url, tally, timeout, f"steady{index}-{secrets.token_hex(3)}")
    rotation = itertools.cycle(servers[index % len(servers) :] + servers[: index % len(servers)])
    next_at = tally.clock()
    try:
        while tally.clock() < deadline:
            if caller.session_id is None and not await caller.open_session():
                await anyio.sleep(min(1.0, max(0.0, deadline - tally.clock())))
                continue
            await caller.echo(next(rotation))
            now = tally.clock()
            next_at = max(next_at + interval, now - interval)  # no catch-up burst after a stall
            await anyio.sleep(max(0.0, min(next_at, deadline) - now))
    finally:
        await caller.drop_connection()


async def churn(
    url: str,
    tally: Tally,
    servers: tuple[str, ...],
    per_client: str | None,
    *,
    pause: float,
    per_client_every: int,
    deadline: float,
    timeout: float,
) -> None:
    """Session churn until ``deadline``: open a session on a new connection, call each server once
    (the per_client one every ``per_client_every``-th session: each call there starts a process),
    DELETE the session, close the connection."""
    for number in itertools.count():
        if tally.clock() >= deadline:
            return
        caller = Caller(url, tally, timeout, f"churn{number}")
        try:
            if await caller.open_session():
                chosen = servers
                if per_client is not None and number % per_client_every == 0:
                    chosen = (*servers, per_client)
                for server in chosen:
                    await caller.echo(server)
                await caller.delete_session()
        finally:
            await caller.drop_connection()
        await anyio.sleep(max(0.0, min(pause, deadline - tally.clock())))


# ----------------------------------------------------------------------------- raw HTTP


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _describe(status: int, body: bytes) -> str:
    answer = f"HTTP {status}"
    try:
        decoded = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, list):
        errors = sum(1 for item in decoded if isinstance(item, dict) and "error" in item)
        return f"{answer}, a batch of {len(decoded)} answers ({errors} errors)"
    if isinstance(decoded, dict) and "error" in decoded:
        answer += f" {_error_kind(decoded)}"
    elif isinstance(decoded, dict) and "result" in decoded:
        answer += " result"
    elif (limit := _LIMIT_NAME.search(body[:2000].decode("latin-1"))) is not None:
        answer += f" {limit[0]}"
    return answer


async def exchange(url: str, parts: list[bytes], timeout: float, *, gap: float = 0.0) -> str:
    """Send ``parts`` on a new connection (``gap`` seconds apart), read one answer; describe it.

    Never raises for what the server does: a reset, a close or silence is the description.
    """
    host, port = _host_port(url)
    started = time.monotonic()
    writer: asyncio.StreamWriter | None = None
    try:
        with anyio.fail_after(timeout):
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
            for index, part in enumerate(parts):
                if index and gap:
                    await anyio.sleep(gap)
                writer.write(part)
                await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            body = await reader.readexactly(int(length[1])) if length else b""
            return _describe(status, body)
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except asyncio.IncompleteReadError as exc:
        return f"closed by Manifold after {time.monotonic() - started:.0f} s" + (
            " mid-answer" if exc.partial else ""
        )
    except _CONNECTION_ERRORS as exc:
        return f"{type(exc).__name__} after {time.monotonic() - started:.0f} s"
    finally:
        if writer is not None:
            writer.close()


async def _hold(url: str, tally: Tally, kind: str, bound: float, slow: bool) -> None:
    """A connection that sends nothing (``slow``: a header line per second, never the end)."""
    host, port = _host_port(url)
    started = time.monotonic()
    writer: asyncio.StreamWriter | None = None
    answer = "still open at our bound (closed by us)"
    try:
        reader, writer = await asyncio.open_connection(host, port)
        if slow:
            writer.write(f"POST {urlsplit(url).path} HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        with anyio.move_on_after(bound):
            async with anyio.create_task_group() as tg:

                async def trickle() -> None:
                    for n in itertools.count():
                        await anyio.sleep(1.0)
                        writer.write(f"X-Slow-{n}: {'a' * 16}\r\n".encode())
                        await writer.drain()

                if slow:
                    tg.start_soon(trickle)
                data = await reader.read(4096)
                seconds = time.monotonic() - started
                # Bucketed to 5 s: the table shows the bound that closed it, not jitter.
                when = f"{5 * round(seconds / 5):.0f} s"
                answer = f"HTTP {data[9:12].decode()} after ~{when}" if data else f"closed after ~{when}"
                tg.cancel_scope.cancel()
    except _CONNECTION_ERRORS as exc:
        answer = f"{type(exc).__name__} after {time.monotonic() - started:.0f} s"
    finally:
        if writer is not None:
            writer.close()
    tally.hostile(kind, answer)


def _post(url: str, body: bytes, session_id: str | None = None, extra: str = "") -> bytes:
    host, port = _host_port(url)
    sid = f"Mcp-Session-Id: {session_id}\r\n" if session_id else ""
    return (
        f"POST {urlsplit(url).path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{sid}{extra}Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def _initialize(version: str, capabilities: dict[str, Any]) -> bytes:
    params = {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "hostile"}}
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})


def _call(request_id: int, server: str, arguments: bytes) -> bytes:
    """A ``tools/call`` of ``server``'s echo with ``arguments``, already encoded."""
    head = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": f"{server}.echo"}}
    return orjson.dumps(head)[:-2] + b',"arguments":' + arguments + b"}}"


async def hostile(
    url: str,
    tally: Tally,
    server: str,
    *,
    pause: float,
    deadline: float,
    timeout: float,
    held: int,
    hold_seconds: float,
    big_capabilities: int,
    kinds: tuple[str, ...] = HOSTILE_KINDS,
) -> None:
    """Cycle through hostile requests (``kinds``, a subset of :data:`HOSTILE_KINDS`) until
    ``deadline``, one every ``pause`` seconds; idle and slowloris connections run beside them, at
    most ``held`` at a time, each closed after ``hold_seconds``. ``server`` is the server whose
    echo the in-session requests name."""
    # Written by hand: orjson refuses to write more than 255 levels.
    nested = b'{"d":' * 300 + b"0" + b"}" * 300
    oversized = 5 * 1024 * 1024
    holding = anyio.Semaphore(held)

    async def open_session(version: str) -> str | None:
        try:
            with anyio.fail_after(timeout):
                poster = await open_raw(url)
                try:
                    body = _initialize(version, {})
                    reply = await poster.post(body)
                    if reply.status != 200 or reply.session_id is None:
                        return None
                    note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
                    await poster.post(note, reply.session_id)
                    return reply.session_id
                finally:
                    await poster.aclose()
        except (TimeoutError, *_CONNECTION_ERRORS):
            return None

    async def hold(kind: str, slow: bool) -> None:
        try:  # closed by the deadline at the latest
            await _hold(url, tally, kind, max(1.0, min(hold_seconds, deadline - tally.clock())), slow)
        finally:
            holding.release()

    async def send(kind: str) -> list[str]:
        """The answers to one hostile step of ``kind`` (a request, or a few)."""
        if kind == "malformed-json":
            return [await exchange(url, [_post(url, b'{"jsonrpc": "2.0", "id": 1, "meth')], timeout)]
        if kind == "deep-300":
            sid = await open_session(PROTOCOL_VERSION)
            return [await exchange(url, [_post(url, _call(7, server, nested), sid)], timeout)]
        if kind == "oversized-5MiB":
            sid = await open_session(PROTOCOL_VERSION)
            body = _call(8, server, orjson.dumps({"blob": "x" * oversized}))
            return [await exchange(url, [_post(url, body, sid)], timeout)]
        if kind == "batch-1000":
            sid = await open_session("2025-03-26")
            batch = orjson.dumps([{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(1000)])
            extra = "MCP-Protocol-Version: 2025-03-26\r\n"
            return [await exchange(url, [_post(url, batch, sid, extra)], timeout)]
        # big-initialize: sessions accepted here are abandoned (the idle timeout's job)
        body = _initialize(PROTOCOL_VERSION, {"experimental": {"x": {"blob": "c" * big_capabilities}}})
        return [await exchange(url, [_post(url, body)], timeout) for _ in range(5)]

    async with anyio.create_task_group() as tg:
        for kind in itertools.cycle(kinds):
            if tally.clock() + pause >= deadline:
                break
            if kind in ("idle", "slowloris"):
                if holding.value > 0:  # never more than `held` at once
                    await holding.acquire()
                    tg.start_soon(hold, kind, kind == "slowloris")
                else:
                    tally.hostile_skipped[kind] += 1
            else:
                try:
                    answers = await send(kind)
                except Exception as exc:  # a bug of this harness must not end the soak: count it
                    answers = [f"HARNESS ERROR {type(exc).__name__}: {exc}"[:120]]
                for answer in answers:
                    tally.hostile(kind, answer)
            await anyio.sleep(max(0.0, min(pause, deadline - tally.clock())))
