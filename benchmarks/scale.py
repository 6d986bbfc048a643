"""The scale run: many open idle sessions and many ``tools/call`` in flight at once, one Manifold.

One ``manifold serve`` of its own (started after every other measurement has stopped, so the
machine is quiet), on loopback, with ``plan.scale_servers`` stdio fixture servers behind it:

1. its RSS once every server is ready ("before");
2. ``plan.scale_sessions`` sessions (initialize + initialized) opened over
   ``plan.scale_session_connections`` keep-alive connections (a session is a header, not a
   connection) and left idle: RSS "with the sessions", KiB per session;
3. ``plan.scale_calls`` connections, one per call, each for a different one of those sessions;
   then every call sent at once: ``tools/call`` of the fixture's ``slow`` tool, which answers
   after ``plan.scale_slow_seconds``. Sending takes milliseconds and the sleep seconds, so all are
   in flight together *by design*, and that is checked twice: at the client (one instant at which
   every call was outstanding) and in Manifold (``manifold_requests_in_flight`` on its
   ``/metrics`` reaches the count). RSS is sampled throughout (its peak). Once all are in flight,
   one more session calls ``echo`` in a closed loop until shortly before the first ``slow`` call
   can end (the probe): what a call costs while the others are held.

Answers: a ``slow`` answer must answer its own request id with exactly the fixture's ``done``
text, and no sooner than the sleep; anything else that answers is a :class:`WrongAnswer` and
voids the run, as everywhere in the harness (the probe's echoes are checked like every echo). A
refusal (an HTTP status, a JSON-RPC error, an ``isError`` result, a broken connection, no answer
in time, a session not opened) is counted by kind and reported; any makes the scale target fail.
The step is bounded by ``plan.scale_seconds``: overrunning it is reported as a failure of this
step, not of the whole run.

Limits (``proxy/config/model.py`` ``LimitsConfig``): every benchmark Manifold keeps 20,000 sessions per
identity (:func:`benchmarks.plan.manifold_config`); the calls use one session each, so
``max_in_flight_per_session`` (64) is never approached; ``max_connections`` is raised only when
the calls' connections would not fit under it (the default, 2,000, holds 1,000 calls). Manifold
raises its own ``RLIMIT_NOFILE`` (``proxy/cli/commands.py``); the load generator raises its soft limit to
the hard one here.
"""

from __future__ import annotations

import itertools
import math
import resource
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import anyio
import anyio.to_thread
import orjson

from benchmarks.clients import HttpError, HttpPoster, Reply, open_raw
from benchmarks.figures import MIB, ScaleRecord
from benchmarks.load import CallTarget, McpClient, WrongAnswer, decode_reply, percentile, run_calls
from benchmarks.plan import Plan, manifold_config, stdio_server
from benchmarks.procs import Spawned, rss_bytes, spawn_manifold, stop_all, wait_servers_ready
from benchmarks.sections import Run

__all__ = ["check_slow", "in_flight_at_once", "measure_scale", "scale_config"]

_DEFAULT_MAX_CONNECTIONS: Final = 2_000  # LimitsConfig.max_connections
_CONNECTION_RESERVE: Final = 32  # LimitsConfig.connection_reserve: kept for the probes
_SPARE_CONNECTIONS: Final = 16  # the probe's, the /metrics scrapes', slack
_SAMPLE_EVERY: Final = 0.05  # seconds between RSS samples while the calls are in flight
_SCRAPE_EVERY: Final = 0.2  # seconds between reads of Manifold's in-flight gauge
_PROBE_MARGIN: Final = 1.0  # the probe stops this long before the first slow call may end
_DONE: Final = [{"type": "text", "text": "done"}]  # the fixture's answer to `slow`
_GAUGE: Final = b"manifold_requests_in_flight "


def scale_config(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scale Manifold's config, and the limits it raises beyond the benchmark's base config.

    ``max_connections`` only when the calls' connections (one per call), the sessions' and a
    few spare ones would not fit below it with its reserve kept.
    """
    servers = {
        f"s{i:02d}": stdio_server(f"s{i:02d}", tools=plan.tools_per_server, page_size=plan.page_size)
        for i in range(plan.scale_servers)
    }
    needed = plan.scale_calls + plan.scale_session_connections + _SPARE_CONNECTIONS + _CONNECTION_RESERVE
    raised: dict[str, Any] = {}
    if needed > _DEFAULT_MAX_CONNECTIONS:
        raised["max_connections"] = needed
    config = manifold_config(
        servers, page_size=plan.page_size, overlay={"limits": raised} if raised else None
    )
    return config, raised


def check_slow(reply: Reply, request_id: int, seconds: float, slept: float) -> str | None:
    """None when ``reply`` is the fixture's ``slow`` answer to ``request_id``; else the kind of
    refusal it is (an HTTP status, a JSON-RPC error, an ``isError`` result).

    Raises:
        WrongAnswer: an answer, but not this call's: another id, other content, or sooner than
            the ``slept`` seconds the server sleeps before answering.
    """
    if reply.status != 200:
        return f"HTTP {reply.status}"
    message = decode_reply(reply, request_id)
    if "error" in message:
        error = message["error"]
        code = error.get("code") if isinstance(error, dict) else None
        return f"JSON-RPC error {code}"
    result = message.get("result")
    if isinstance(result, dict) and result.get("isError"):
        return "isError result"
    if not isinstance(result, dict) or result.get("content") != _DONE:
        raise WrongAnswer(f"request {request_id}: expected slow's 'done', got {message!r:.300}")
    if seconds < slept:
        raise WrongAnswer(
            f"request {request_id}: answered after {seconds:.3f} s, before the {slept} s the server "
            "sleeps: not this call's answer"
        )
    return None


def in_flight_at_once(started: Sequence[float], ended: Sequence[float]) -> int:
    """The most calls outstanding at one instant (an unanswered call, ``nan``, stays outstanding)."""
    events = sorted(
        [(s, 1) for s in started if not math.isnan(s)] + [(e, -1) for e in ended if not math.isnan(e)],
        key=lambda event: (event[0], event[1]),  # an end at the same instant as a start comes first
    )
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def _raise_open_files(needed: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit when below ``needed``; the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    target = hard if hard != resource.RLIM_INFINITY else max(needed, 65_536)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def _open_files_limit(pid: int) -> str:
    """The soft "Max open files" of a process, from /proc/PID/limits."""
    try:
        with open(f"/proc/{pid}/limits") as limits:
            for line in limits:
                if line.startswith("Max open files"):
                    return line.split()[3]
    except OSError:
        pass
    return "?"


@dataclass
class _Tally:
    """What the step has seen so far (filled in as it goes, so a timeout still reports it)."""

    errors: Counter[str] = field(default_factory=Counter)
    sessions: list[str] = field(default_factory=list)
    sessions_seconds: float = math.nan
    rss_before: int = 0
    rss_sessions: int = 0
    rss_peak: int = 0
    gauge_peak: float | None = None
    started: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    probe: tuple[int, float, float] = (0, math.nan, math.nan)  # calls, p50 ms, p99 ms
    notes: list[str] = field(default_factory=list)


async def _open_sessions(url: str, plan: Plan, tally: _Tally) -> None:
    """``plan.scale_sessions`` sessions over ``plan.scale_session_connections`` connections; a
    refusal is counted, and that connection goes on with the next session."""
    counter = itertools.count()

    async def worker() -> None:
        try:
            poster = await open_raw(url)
        except OSError as exc:
            tally.errors[f"connect: {type(exc).__name__}"] += 1
            return
        try:
            while next(counter) < plan.scale_sessions:
                try:
                    tally.sessions.append(await McpClient(poster).initialize())
                except WrongAnswer as exc:  # initialize refused: a limit, counted, not a crossed answer
                    tally.errors[f"initialize: {str(exc)[:80]}"] += 1
        except (OSError, EOFError, HttpError) as exc:  # the connection broke: this worker stops
            tally.errors[f"initialize, connection: {type(exc).__name__}"] += 1
        finally:
            await poster.aclose()

    async with anyio.create_task_group() as tg:
        for _ in range(min(plan.scale_session_connections, plan.scale_sessions)):
            tg.start_soon(worker)


async def _gauge(http: aiohttp.ClientSession, url: str) -> float | None:
    """Manifold's ``manifold_requests_in_flight``, from its /metrics (None when not there)."""
    try:
        async with http.get(url) as response:
            body = await response.read()
    except aiohttp.ClientError:
        return None
    for line in body.splitlines():
        if line.startswith(_GAUGE):
            return float(line[len(_GAUGE) :])
    return None


async def _calls(spawned: Spawned, plan: Plan, tally: _Tally) -> None:
    """Every call at once, each on its own connection and session; RSS and the gauge sampled."""
    count, slept = plan.scale_calls, plan.scale_slow_seconds
    tools = [f"{sid}.slow" for sid in spawned.server_ids]
    posters: list[HttpPoster] = []
    tally.started = [math.nan] * count
    tally.ended = [math.nan] * count
    all_in = anyio.Event()
    finished = anyio.Event()
    first_ended = anyio.Event()
    latencies: list[float] = []

    async def call(i: int) -> None:
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": i + 1,
                "method": "tools/call",
                "params": {"name": tools[i % len(tools)], "arguments": {"seconds": slept}},
            }
        )
        tally.started[i] = time.perf_counter()
        try:
            with anyio.fail_after(slept + plan.scale_call_timeout):
                reply = await posters[i].post(body, tally.sessions[i])
        except TimeoutError:
            tally.errors[f"no answer within {slept + plan.scale_call_timeout:g} s"] += 1
            return
        except (OSError, EOFError, HttpError) as exc:  # EOFError: asyncio's IncompleteReadError
            tally.errors[f"connection: {type(exc).__name__}"] += 1
            return
        tally.ended[i] = time.perf_counter()
        first_ended.set()
        seconds = tally.ended[i] - tally.started[i]
        refusal = check_slow(reply, i + 1, seconds, slept)
        if refusal is not None:
            tally.errors[refusal] += 1
        else:
            latencies.append(seconds)

    async def watch() -> None:
        metrics = spawned.url.replace("/mcp", "/metrics")
        next_scrape = 0.0
        async with aiohttp.ClientSession() as http:
            while not finished.is_set():
                try:
                    tally.rss_peak = max(tally.rss_peak, rss_bytes(spawned.pid))
                except (OSError, RuntimeError):  # Manifold is gone: the calls will say how
                    return
                if time.perf_counter() >= next_scrape:
                    next_scrape = time.perf_counter() + _SCRAPE_EVERY
                    gauge = await _gauge(http, metrics)
                    if gauge is not None:
                        tally.gauge_peak = max(tally.gauge_peak or 0.0, gauge)
                        if gauge >= count:
                            all_in.set()
                with anyio.move_on_after(_SAMPLE_EVERY):  # a sampling period, not a wait for an event
                    await finished.wait()

    async def probe(t0: float) -> None:
        with anyio.move_on_after(slept - _PROBE_MARGIN):
            await all_in.wait()
        left = t0 + slept - _PROBE_MARGIN - time.perf_counter()
        if not all_in.is_set() or first_ended.is_set() or left < 0.2:
            tally.notes.append("probe: skipped, the calls were not all in flight with time to spare")
            return
        target = CallTarget(
            "scale-probe",
            spawned.url,
            tuple((f"{sid}.echo", sid) for sid in spawned.server_ids),
            spawned.pid,
            (),
        )
        run = await run_calls(
            target, 1, duration=min(left, plan.scale_probe_seconds), max_calls=10_000, warmup_calls=0
        )
        tally.probe = (run.calls, run.p(0.50), run.p(0.99))

    try:
        with anyio.fail_after(plan.scale_connect_seconds):
            for _ in range(count):
                posters.append(await open_raw(spawned.url))
    except (OSError, TimeoutError) as exc:
        tally.errors[f"connect: {type(exc).__name__} after {len(posters)} connections"] += 1
        tally.notes.append("calls: skipped, their connections could not all be opened")
        for poster in posters:
            await poster.aclose()
        return
    try:
        async with anyio.create_task_group() as outer:
            outer.start_soon(watch)
            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(count):
                    tg.start_soon(call, i)
                tg.start_soon(probe, t0)
            finished.set()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            for poster in posters:
                await poster.aclose()
    tally.latencies = latencies


async def _scale(spawned: Spawned, plan: Plan, tally: _Tally) -> None:
    await wait_servers_ready([spawned], plan.startup_seconds)
    await anyio.sleep(plan.sessions_settle)  # let the process settle: nothing to wait on from outside
    tally.rss_before = rss_bytes(spawned.pid)
    started = time.perf_counter()
    with anyio.fail_after(plan.scale_sessions_seconds):
        await _open_sessions(spawned.url, plan, tally)
    tally.sessions_seconds = time.perf_counter() - started
    await anyio.sleep(plan.sessions_settle)
    tally.rss_sessions = rss_bytes(spawned.pid)
    if len(set(tally.sessions)) != len(tally.sessions):
        raise WrongAnswer(f"scale: {len(tally.sessions) - len(set(tally.sessions))} session ids repeated")
    if len(tally.sessions) < plan.scale_calls:
        tally.notes.append(f"calls: skipped, only {len(tally.sessions)} sessions opened")
        return
    await _calls(spawned, plan, tally)


async def measure_scale(run: Run) -> None:
    """The scale step on a Manifold of its own, stopped before this returns; its record goes
    to ``run.results.scale``.

    Raises:
        WrongAnswer: a wrong answer (the whole run is void).
    """
    plan = run.plan
    config, raised = scale_config(plan)
    name = f"scale-{plan.scale_servers}"
    tally = _Tally()
    wanted_files = plan.scale_calls + plan.scale_session_connections + 256
    soft = _raise_open_files(wanted_files)
    if soft < wanted_files:
        tally.notes.append(
            f"the load generator's open-files limit is {soft}, below the {wanted_files} wanted"
        )
    spawned = run.spawn(spawn_manifold(name, run.workdir, config))
    run.say(
        f"scale run: {plan.scale_sessions} idle sessions, {plan.scale_calls} calls in flight "
        f"({plan.scale_slow_seconds:g} s each), {plan.scale_servers} stdio servers"
    )
    started = time.perf_counter()
    manifold_files = "?"
    try:
        with anyio.fail_after(plan.scale_seconds):
            manifold_files = _open_files_limit(spawned.pid)
            await _scale(spawned, plan, tally)
    except TimeoutError:
        tally.errors[f"the scale step overran its {plan.scale_seconds:g} s"] += 1
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(stop_all, [spawned])
    answered = [e for e in tally.ended if not math.isnan(e)]
    sent = [s for s in tally.started if not math.isnan(s)]
    latencies_ms = [s * 1e3 for s in tally.latencies]
    sessions = len(tally.sessions)
    run.results.scale = ScaleRecord(
        target=name,
        servers=plan.scale_servers,
        sessions_wanted=plan.scale_sessions,
        sessions_opened=sessions,
        sessions_seconds=tally.sessions_seconds,
        calls_wanted=plan.scale_calls,
        calls_answered=len(tally.latencies),
        slow_seconds=plan.scale_slow_seconds,
        in_flight_client=in_flight_at_once(tally.started, tally.ended) if tally.started else 0,
        in_flight_manifold=tally.gauge_peak,
        rss_before_mib=tally.rss_before / MIB,
        rss_sessions_mib=tally.rss_sessions / MIB,
        rss_peak_mib=max(tally.rss_peak, tally.rss_sessions) / MIB,
        kib_per_session=(tally.rss_sessions - tally.rss_before) / 1024 / sessions if sessions else math.nan,
        p50_ms=percentile(latencies_ms, 0.50),
        p99_ms=percentile(latencies_ms, 0.99),
        max_ms=max(latencies_ms, default=math.nan),
        first_answer_after_last_send=bool(answered)
        and len(sent) == plan.scale_calls
        and min(answered) > max(sent),
        probe_calls=tally.probe[0],
        probe_p50_ms=tally.probe[1],
        probe_p99_ms=tally.probe[2],
        errors=dict(tally.errors),
        raised_limits=raised,
        open_files=f"load generator {soft}, Manifold {manifold_files}",
        seconds=time.perf_counter() - started,
        notes=tally.notes,
    )
