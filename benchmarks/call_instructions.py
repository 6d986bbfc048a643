"""Manifold's instructions per ``tools/call``, the whole process, counted by valgrind (issues #29
and #34): a cost figure the load on a shared machine does not move.

CPU time per call read from ``/proc`` moves by ±15% between paired rounds on a busy 2-core box;
the instructions a call runs do not. Each variant is a real ``manifold serve`` with one stdio
fixture server (the server is not counted: valgrind does not follow the child), driven over
loopback by the load generator (:data:`VARIANTS`):

* ``off``, ``guard``, ``secrets``: ``benchmarks.guard_cost``'s three Manifolds (an allow-all
  policy; no guardrails, every built-in detector on every tool result, the secret detectors
  only), each call's ``echo`` carrying 4 KiB of prose, so each result the guardrails read is
  ~4 KiB and never the same twice;
* ``all-off``, ``core-on``: ``make bench``'s middleware configs "all off" and issue #34's
  everything on (auth, policy, validation, rate limits, audit, metrics), plain ``echo`` calls;
  and each of those six alone (``auth``, ``policy``, ...), against ``all-off``.

Per variant three processes run the same start-up, 16 sessions and a warm-up at c=16, then:
``base`` nothing more; ``c1`` ``--calls`` calls at c=1; ``c16`` the same, then ``--calls`` at c=16.
Instructions per call at c=1 are ``(c1 - base) / calls``, at c=16 ``(c16 - c1) / calls``; the
shut-down and everything before the measured calls cancel out. Under valgrind Manifold runs
~30x slower than the load generator, so at c=16 more requests wait per wake-up than in a real
run, and how many moves from run to run: c=1's figure is the plain path and repeats to ~0.5%,
c=16's moves by several percent.

    .venv/bin/python -m benchmarks.call_instructions [--variants off,guard] [--calls 1000]

Instructions are not time (a cold cache or a syscall costs more than its count), so this
complements ``benchmarks.guard_cost`` and ``make bench`` rather than replacing them. Needs
``valgrind`` (cachegrind, no cache simulation); about a minute per variant.
"""

from __future__ import annotations

import argparse
import functools
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread

from benchmarks.clients import open_raw
from benchmarks.guard_cost import PAD, guard_configs
from benchmarks.load import CallTarget, run_calls
from benchmarks.plan import (
    BENCH_API_KEY,
    CORE_MIDDLEWARES,
    MIDDLEWARES,
    deep_merge,
    manifold_config,
    materialize,
    stdio_server,
)
from benchmarks.procs import children_of, spawn_manifold, wait_listening, wait_servers_ready

__all__ = ["VARIANTS", "Variant", "main"]

_REFS: Final = re.compile(rb"I\s+refs:\s+([\d,]+)")


@dataclass(frozen=True)
class Variant:
    """A Manifold config to count, and how the load reaches it."""

    build: Callable[[Path, dict[str, Any]], dict[str, Any]]  # (its directory, servers) -> config
    keyed: bool = False  # the load sends BENCH_API_KEY
    pad: bool = True  # each call carries guard_cost's 4 KiB of prose (echoed in its result)


def _guarded(guardrails: dict[str, Any] | None, rules: str = "guard.yaml") -> Variant:
    return Variant(lambda directory, servers: guard_configs(directory, servers, guardrails, rules))


def _middlewares(*on: str) -> Variant:
    """``make bench``'s middleware configs: every middleware's "off", then ``on``'s "on"."""

    def build(directory: Path, servers: dict[str, Any]) -> dict[str, Any]:
        config = manifold_config(servers, page_size=100)
        for overlay in MIDDLEWARES.values():
            for name, text in overlay.files.items():
                (directory / name).write_text(text)
            if overlay.off:
                config = deep_merge(config, materialize(overlay.off, directory))
        for name in on:
            config = deep_merge(config, materialize(MIDDLEWARES[name].on, directory))
        return config

    return Variant(build, keyed="auth" in on, pad=False)


VARIANTS: Final[Mapping[str, Variant]] = {
    # benchmarks.guard_cost's three Manifolds (an allow-all policy; 4 KiB results)
    "off": _guarded(None),
    "guard": _guarded({}),  # every built-in detector on every tool result
    "secrets": _guarded({}, "secrets.yaml"),  # the secret detectors only
    # make bench's "mw:all-off" and "mw:core-on" (issue #34's everything on; plain echo calls)
    "all-off": _middlewares(),
    "core-on": _middlewares(*CORE_MIDDLEWARES),
    # and each of those alone, against "all-off"
    **{name: _middlewares(name) for name in CORE_MIDDLEWARES},
}
_STAGES: Final = ("base", "c1", "c16")
_WARMUP: Final = 30  # calls per worker at c=16 before anything is counted


async def _stage(workdir: Path, variant: str, stage: str, calls: int) -> int:
    """Instructions of one Manifold process of ``variant`` driven through ``stage``."""
    servers = {"s00": stdio_server("s00", tools=10, page_size=100)}
    chosen = VARIANTS[variant]
    directory = workdir / f"{variant}-{stage}"
    directory.mkdir()
    config = chosen.build(directory, servers)
    wrapper = ("valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={directory}/out")
    manifold = spawn_manifold(f"{variant}-{stage}", directory, config, wrapper=wrapper)
    try:
        await wait_listening([manifold], 600)
        await wait_servers_ready([manifold], 600)
        target = CallTarget(
            manifold.name,
            manifold.url,
            (("s00.echo", "s00"),),
            manifold.process.pid,
            tuple(children_of(manifold.process.pid)),
        )
        connect = functools.partial(open_raw, headers=(("X-API-Key", BENCH_API_KEY),) if chosen.keyed else ())
        await target.ensure_sessions(16, connect)
        load = functools.partial(
            run_calls,
            target,
            warmup_calls=0,
            factory=connect,
            session_factory=connect,
            extra={"pad": PAD} if chosen.pad else None,
        )
        await load(16, duration=600, max_calls=16 * _WARMUP)
        for concurrency, needed in ((1, ("c1", "c16")), (16, ("c16",))):
            if stage in needed:
                run = await load(concurrency, duration=900, max_calls=calls)
                if run.calls != calls:
                    raise RuntimeError(f"{manifold.name}: {run.calls} of {calls} calls in the time bound")
    finally:
        manifold.process.send_signal(signal.SIGTERM)
        try:
            await anyio.to_thread.run_sync(manifold.process.wait, 300)
        except subprocess.TimeoutExpired:
            manifold.process.kill()  # no count then (below): nothing left running
            manifold.process.wait()
    found = _REFS.search(manifold.log_path.read_bytes())
    if found is None:
        raise RuntimeError(f"{manifold.name}: no instruction count in {manifold.log_path}")
    return int(found.group(1).replace(b",", b""))


async def main(variants: list[str], calls: int, parallel: int) -> dict[str, dict[str, float]]:
    counts: dict[tuple[str, str], int] = {}
    limiter = anyio.CapacityLimiter(parallel)
    with tempfile.TemporaryDirectory(prefix="call-instr-") as tmp:

        async def one(variant: str, stage: str) -> None:
            async with limiter:
                counts[variant, stage] = await _stage(Path(tmp), variant, stage, calls)

        with anyio.fail_after(3600):
            async with anyio.create_task_group() as tg:
                for variant in variants:
                    for stage in _STAGES:
                        tg.start_soon(one, variant, stage)
    report: dict[str, dict[str, float]] = {}
    for variant in variants:
        report[variant] = {
            "c=1": (counts[variant, "c1"] - counts[variant, "base"]) / calls,
            "c=16": (counts[variant, "c16"] - counts[variant, "c1"]) / calls,
        }
    return report


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="off,guard", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=2, help="processes under valgrind at once")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    calls = max(16, min(args.calls, 5_000))
    report = anyio.run(main, variants, calls, max(1, args.parallel), backend_options={"use_uvloop": True})
    sys.stdout.write(f"| variant | instructions per call, c=1 | c=16 | ({calls} calls, whole process) |\n")
    sys.stdout.write("|---|---:|---:|---|\n")
    for variant, row in report.items():
        base = "off" if variant in ("off", "guard", "secrets") else "all-off"
        off = report.get(base)
        ratio = ""
        if off is not None and variant != base:
            ratio = f"{row['c=1'] / off['c=1']:.3f}x / {row['c=16'] / off['c=16']:.3f}x of {base}"
        sys.stdout.write(f"| {variant} | {row['c=1']:,.0f} | {row['c=16']:,.0f} | {ratio} |\n")


if __name__ == "__main__":
    _cli()
