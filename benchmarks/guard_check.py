"""What one guardrail inspection costs in-process (issue #29), as the thread's CPU time (robust to
other work on a shared box), warm and cold.

The message is the 4 KiB result of ``benchmarks.guard_cost`` (the fixture's ``echo`` answering
``{"server", "tool", "arguments": {"pad": <4 KiB of prose>}}`` as JSON text), the policy its
"every detector" rule. *Warm*: the same call again and again, caches hot. *Cold*: 16 MiB written
between calls (outside the timed span), as a process on a loaded box meets its own data and code.

    .venv/bin/python -m benchmarks.guard_check [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson

from benchmarks.guard_cost import ALLOW_ALL, EVERY_DETECTOR, PAD
from proxy.config.model import ServerConfig
from proxy.config.policy import PinSettings, PolicySettings
from proxy.enforce.access import Access
from proxy.guard.detect import Scanner, ScannerSettings
from proxy.guard.detect.normalise import normalise
from proxy.guardrails.guard import Guard
from proxy.observe.metrics import Metrics
from proxy.policy.guardrail_engine import GuardSubject
from proxy.policy.model import Identity

_JUNK = bytearray(16 << 20)


def _thrash() -> None:
    _JUNK[::64] = bytes(len(_JUNK) // 64)  # one write per cache line


def _median_us(run: Callable[[], Any], calls: int, cold: bool) -> float:
    """The median thread CPU of ``run`` in µs (a mean would count the odd interrupt)."""
    spent = []
    for _ in range(calls):
        if cold:
            _thrash()
        began = time.thread_time()
        run()
        spent.append(time.thread_time() - began)
    return statistics.median(spent) * 1e6


def bench_guard() -> Guard:
    """The guard of ``benchmarks.guard_cost``'s "every detector" Manifold, counting into metrics."""
    with tempfile.TemporaryDirectory(prefix="guard-check-") as tmp:
        folder = Path(tmp)
        (folder / "allow.yaml").write_text(ALLOW_ALL)
        (folder / "guard.yaml").write_text(EVERY_DETECTOR)
        settings = PolicySettings(
            files=(str(folder / "allow.yaml"), str(folder / "guard.yaml")),
            pins=PinSettings(mode="off", path=str(folder / "pins.json")),
        )
        access = Access(settings, {"s00": ServerConfig.model_validate({"id": "s00", "command": "x"})})
        access.load()
    guard = access.guard
    assert guard is not None
    guard.observe(Metrics(process_metrics=False), None)
    return guard


def measure(calls: int) -> dict[str, dict[str, float]]:
    guard = bench_guard()
    identity = Identity("bench", frozenset(), "api_key")
    subject = GuardSubject("tool_results", "s00", "tool", "s00.echo")
    text = orjson.dumps({"server": "s00", "tool": "echo", "arguments": {"pad": PAD}}).decode()
    message = {"content": [{"type": "text", "text": text}], "isError": False}
    scanner = Scanner(ScannerSettings())

    async def checks() -> dict[str, float]:
        out = {}
        for label, cold in (("warm", False), ("cold", True)):
            spent: list[float] = []
            for _ in range(calls):
                if cold:
                    _thrash()
                began = time.thread_time()
                await guard.check(identity, subject, message)
                spent.append(time.thread_time() - began)
            out[label] = statistics.median(spent) * 1e6
        return out

    parts: dict[str, Callable[[], Any]] = {
        "Scanner.scan": lambda: scanner.scan(text, kind="result"),
        "normalise": lambda: normalise(text),
        "walk (select the texts)": lambda: guard.inspector.selected("tool_results", message),
    }
    report = {"Guard.check": anyio.run(checks)}
    for name, run in parts.items():
        report[name] = {"warm": _median_us(run, calls, False), "cold": _median_us(run, calls, True)}
    return report


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    report = measure(max(1, min(args.calls, 10_000)))
    sys.stdout.write("| thread CPU, µs (median) | warm | cold |\n|---|---:|---:|\n")
    for name, row in report.items():
        sys.stdout.write(f"| {name} | {row['warm']:.1f} | {row['cold']:.1f} |\n")


if __name__ == "__main__":
    _cli()
