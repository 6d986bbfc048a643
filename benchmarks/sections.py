"""The steps of a run: its shared state, the middleware variants, and each measurement.

:mod:`benchmarks.run` strings them together; each step appends what it measured to ``run.results``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from benchmarks.clients import open_raw
from benchmarks.figures import MIB, CallRecord, ListRecord, Results, SessionRecord
from benchmarks.load import CallTarget, McpClient, WrongAnswer, drain_tools, open_sessions, run_calls
from benchmarks.plan import (
    CORE_MIDDLEWARES,
    FIXED_TOOLS,
    MIDDLEWARES,
    Plan,
    deep_merge,
    manifold_config,
    materialize,
    stdio_server,
    wants_otlp,
)
from benchmarks.procs import Spawned, manifold_check, rss_bytes, spawn_otlp_receiver, write_config
from benchmarks.profile import find_py_spy, parse_collapsed, record

__all__ = [
    "ALL_OFF",
    "ALL_ON",
    "CORE_ON",
    "Run",
    "measure_calls",
    "measure_lists",
    "measure_sessions",
    "middleware_variants",
    "profile_under_load",
    "rotate",
    "tool_names",
]

ALL_OFF: Final = "mw:all-off"
ALL_ON: Final = "mw:all-on"
CORE_ON: Final = "mw:core-on"  # plan.CORE_MIDDLEWARES together (issue #34's list)
_RESERVE: Final = 75.0  # seconds kept for what follows the call rounds: sessions, profiles, stopping
# (plus the scale run's own bound, Plan.scale_reserve)
_T = TypeVar("_T")


def rotate(items: Sequence[_T], by: int) -> list[_T]:
    """``items`` starting at ``by``: each round visits the targets in a different order."""
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


def tool_names(count: int) -> list[str]:
    """What one fixture server with ``--tools count`` lists, in order."""
    return [f"tool_{i:03d}" for i in range(count)] + list(FIXED_TOOLS)


@dataclass
class Run:
    """Everything one run has started and measured so far."""

    plan: Plan
    workdir: Path
    results: Results
    spawned: list[Spawned]
    clock0: float
    stack: contextlib.AsyncExitStack = dataclasses.field(default_factory=contextlib.AsyncExitStack)

    def say(self, message: str) -> None:
        print(f"[bench {time.perf_counter() - self.clock0:6.1f}s] {message}", file=sys.stderr, flush=True)

    def left(self) -> float:
        """Seconds left of the run's time budget."""
        return self.plan.budget_seconds - (time.perf_counter() - self.clock0)

    def spawn(self, item: Spawned) -> Spawned:
        self.spawned.append(item)
        return item


# ----------------------------------------------------------------------------- middleware variants


async def _checked(configs: dict[str, dict[str, Any]], directory: Path) -> dict[str, tuple[bool, str]]:
    """``manifold check`` on each config: accepted, or the first problem it names."""
    paths = {
        name: write_config(directory / f"check-{name.replace(':', '-')}.yaml", c)
        for name, c in configs.items()
    }
    verdicts = await anyio.to_thread.run_sync(manifold_check, list(paths.values()))
    return {name: verdicts[path] for name, path in paths.items()}


async def middleware_variants(run: Run, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The configs to measure: all off, each middleware on alone, all on; skips noted in the results."""
    plan = run.plan
    directory = run.workdir / "middleware"
    directory.mkdir(exist_ok=True)
    overlays = {name: MIDDLEWARES[name] for name in names}
    for overlay in overlays.values():
        for file_name, text in overlay.files.items():
            (directory / file_name).write_text(text)
    otlp = ""
    if any(wants_otlp(overlay.on) for overlay in overlays.values()):
        otlp = run.spawn(spawn_otlp_receiver(run.workdir)).url  # stopped with the rest
    servers = {
        f"s{i:02d}": stdio_server(f"s{i:02d}", tools=plan.tools_per_server, page_size=plan.page_size)
        for i in range(plan.middleware_servers)
    }
    base = manifold_config(servers, page_size=plan.page_size)

    def with_(*fragments: Any) -> dict[str, Any]:
        config = base
        for fragment in fragments:
            config = deep_merge(config, materialize(fragment, directory, otlp))
        return config

    # First each fragment alone, to learn which keys this Manifold accepts at all.
    alone = {f"{n}:on": with_(o.on) for n, o in overlays.items()}
    alone |= {f"{n}:off": with_(o.off) for n, o in overlays.items() if o.off}
    verdicts = await _checked(alone, directory)
    offs = [o.off for n, o in overlays.items() if o.off and verdicts[f"{n}:off"][0]]
    ons = {n: o.on for n, o in overlays.items() if verdicts[f"{n}:on"][0]}
    notes = run.results.middleware_notes
    for name, overlay in overlays.items():
        ok, reason = verdicts[f"{name}:on"]
        if not ok:
            notes[f"mw:{name}"] = f"SKIPPED: this Manifold's config does not accept it yet ({reason})"
        else:
            notes[f"mw:{name}"] = overlay.note
    variants: dict[str, dict[str, Any]] = {ALL_OFF: with_(*offs)}
    notes[ALL_OFF] = "every middleware off that the config can switch off" + (
        "" if offs else " (none can be switched yet: Manifold's call path as it is)"
    )
    for name, on in ons.items():
        variants[f"mw:{name}"] = with_(*offs, on)
    core = {n: on for n, on in ons.items() if n in CORE_MIDDLEWARES}
    if len(core) > 1 and len(core) < len(ons):
        variants[CORE_ON] = with_(*offs, *core.values())
        notes[CORE_ON] = "issue #34's everything on: " + ", ".join(core)
    if len(ons) == 1:
        notes[ALL_ON] = f"the same as mw:{next(iter(ons))} (the only one that can be switched on)"
    elif ons:
        variants[ALL_ON] = with_(*offs, *ons.values())
        notes[ALL_ON] = "on: " + ", ".join(ons)
    else:
        notes[ALL_ON] = "SKIPPED: no middleware can be switched on in this Manifold's config yet"
    # Then the combinations themselves (a check per distinct config).
    combined = await _checked({k: v for k, v in variants.items() if k != ALL_OFF or offs}, directory)
    for name, (ok, reason) in combined.items():
        if not ok:
            notes[name] = f"SKIPPED: the combined config is rejected ({reason})"
            variants.pop(name)
    return variants


# ----------------------------------------------------------------------------- sections


async def measure_lists(run: Run, specs: list[tuple[str, str, int, int, str, list[str], str]]) -> None:
    """Cold drain on each target (the first after start), then warm drains interleaved."""
    plan = run.plan
    clients: list[McpClient] = []
    cold: list[float] = []
    try:
        for _, _, _, _, url, expected, _ in specs:
            client = McpClient(await open_raw(url))
            clients.append(client)
            await client.initialize()
            cold.append(await drain_tools(client, expected, first_id=1, max_pages=1000))
        warm: list[list[float]] = [[] for _ in specs]
        deadline = time.perf_counter() + plan.list_seconds
        for repeat in range(plan.list_repeats):
            if time.perf_counter() >= deadline:
                break
            for i, (client, spec) in enumerate(zip(clients, specs, strict=True)):
                warm[i].append(
                    await drain_tools(client, spec[5], first_id=1000 * (repeat + 1), max_pages=1000)
                )
    finally:
        for client in clients:
            await client.poster.aclose()
    medians = {
        spec[0]: (c * 1e3, _median(w) * 1e3, len(w)) for spec, c, w in zip(specs, cold, warm, strict=True)
    }
    for name, via, k, t, _, expected, reference in specs:
        c_ms, w_ms, n = medians[name]
        ref = medians.get(reference)
        run.results.lists.append(
            ListRecord(
                name,
                via,
                f"{k}x{t}",
                len(expected),
                math.ceil(len(expected) / plan.page_size),
                c_ms,
                w_ms,
                n,
                reference,
                c_ms / ref[0] if ref else math.nan,
                w_ms / ref[1] if ref else math.nan,
            )
        )


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.nan


async def measure_calls(
    run: Run,
    blocks: list[list[tuple[str, CallTarget]]],
    rounds: int,
    duration: float,
    factories: dict[str, Any],
    session_factories: dict[str, Any] | None = None,
) -> None:
    """Interleaved rounds: in each, every target at every concurrency, in a rotated order.

    Targets compared with each other (the middleware variants) form a block: they run back to back,
    so the machine's load changes little between a variant and its reference.
    """
    targets = [target for block in blocks for target in block]
    plan = run.plan
    started = time.perf_counter()
    for round_ in range(rounds):
        per_round = (time.perf_counter() - started) / round_ if round_ else 0.0
        if round_ and run.left() < 1.2 * per_round + _RESERVE + plan.scale_reserve():
            run.results.notes.append(
                f"{targets[0][0]}: only {round_} of {rounds} rounds fitted in the time budget (busy machine)"
            )
            break
        order = [target for block in blocks for target in rotate(block, round_)]
        for concurrency in plan.concurrencies:
            for group, target in order:
                gc.collect()
                result = await run_calls(
                    target,
                    concurrency,
                    duration=duration,
                    max_calls=plan.max_calls,
                    warmup_calls=plan.warmup_calls,
                    factory=factories.get(target.name, open_raw),
                    session_factory=(session_factories or {}).get(target.name, open_raw),
                )
                run.results.calls.append(CallRecord.of(group, round_, result))
        run.say(f"  round {round_ + 1}/{rounds} done")


async def measure_sessions(run: Run, name: str, spawned: Spawned) -> None:
    plan = run.plan
    before = rss_bytes(spawned.pid)
    started = time.perf_counter()
    opened = await open_sessions(
        spawned.url, plan.sessions, concurrency=min(16, plan.sessions), timeout=plan.sessions_seconds
    )
    seconds = time.perf_counter() - started
    await anyio.sleep(plan.sessions_settle)  # let the process settle: nothing to wait on from outside
    after = rss_bytes(spawned.pid)
    if len(set(opened)) != plan.sessions:
        raise WrongAnswer(f"{name}: {len(set(opened))} distinct sessions opened, expected {plan.sessions}")
    per = (after - before) / 1024 / plan.sessions
    run.results.sessions.append(SessionRecord(name, plan.sessions, seconds, before / MIB, after / MIB, per))


def _finish(sampler: subprocess.Popen[bytes]) -> bytes:
    """Wait (bounded) for py-spy to write its file and exit; its stderr."""
    try:
        _, stderr = sampler.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        sampler.kill()
        _, stderr = sampler.communicate(timeout=5)
    return stderr or b""


async def profile_under_load(run: Run, targets: list[CallTarget]) -> None:
    plan = run.plan
    py_spy = find_py_spy()
    if py_spy is None:
        run.results.notes.append("profile: skipped, py-spy is not installed (pip install py-spy)")
        return
    for target in targets:
        assert target.manifold_pid is not None
        raw_path = run.workdir / f"profile-{target.name}.txt"
        sampler = record(py_spy, target.manifold_pid, plan.profile_seconds, raw_path)
        try:
            result = await run_calls(
                target,
                max(plan.concurrencies),
                duration=plan.profile_seconds + 1.0,
                max_calls=plan.max_calls * 4,
                warmup_calls=0,
            )
            run.results.calls.append(CallRecord.of("profile", 0, result))
        finally:
            with anyio.CancelScope(shield=True):
                stderr = await anyio.to_thread.run_sync(_finish, sampler)
        if sampler.returncode != 0 or not raw_path.exists():
            reason = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            run.results.notes.append(f"profile of {target.name}: py-spy failed: {reason[0]}")
            continue
        profile = parse_collapsed(target.name, raw_path.read_text().splitlines())
        profile.raw_path = raw_path.name  # in the workdir (--keep-workdir keeps it)
        profile.cpu_us_per_call = run.results.calls[-1].manifold_cpu_us
        run.results.profiles.append(profile)


# ----------------------------------------------------------------------------- the run
