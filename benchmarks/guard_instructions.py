"""What one guardrail inspection costs in instructions (issue #29), counted by valgrind, so the
figure does not move with the load on a shared machine.

The message is ``benchmarks.guard_cost``'s 4 KiB result (the fixture's ``echo`` answer as JSON
text), the policy its "every detector" rule. Each call's message differs (its ``i`` and ``tag``,
as in the real run), so nothing a cache keyed by content could keep would help. A part is run
``--calls`` times by a driver that builds everything first; the same driver run 0 times is
subtracted, and the difference divided by the calls is the instructions per call.

    .venv/bin/python -m benchmarks.guard_instructions [--calls 200] [--parts check,scan]

Needs ``valgrind`` (cachegrind, no cache simulation). ``--drive PART N`` is the driver itself.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.guard_cost import PAD
from proxy.policy.guardrail_engine import GuardSubject
from proxy.policy.model import Identity

PARTS = ("check", "inspect", "select", "scan", "prefilter", "shapes", "finish", "size", "decide")
MESSAGES = 256  # built whatever the calls (the baseline must build the same)
_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")


def _messages() -> list[dict[str, Any]]:
    tag = "5d1e0c42"  # a fixed tag (the real run's is random): the count repeats to ~0.1%
    return [
        {
            "content": [
                {
                    "type": "text",
                    "text": orjson.dumps(
                        {"server": "s00", "tool": "echo", "arguments": {"i": i, "tag": tag, "pad": PAD}}
                    ).decode(),
                }
            ],
            "isError": False,
        }
        for i in range(MESSAGES)
    ]


def _parts() -> dict[str, Callable[[dict[str, Any]], Any]]:
    from benchmarks.guard_check import bench_guard
    from proxy.guard.detect.normalise import normalise
    from proxy.guardrails.guard import _size

    guard = bench_guard()
    identity = Identity("bench", frozenset(), "api_key")
    subject = GuardSubject("tool_results", "s00", "tool", "s00.echo")
    inspector = guard.inspector
    scanner = inspector._scanner
    prefilter = scanner._prefilters["result"]
    assert prefilter._shapes is not None
    shapes = prefilter._shapes
    candidates = inspector.candidates(identity, subject)
    inspection = inspector.inspect(candidates, subject, _messages()[0])

    def check(message: dict[str, Any]) -> Any:
        coroutine = guard.check(identity, subject, message)
        try:
            coroutine.send(None)
        except StopIteration as done:  # no hook, no thread: it never suspends
            return done.value
        raise RuntimeError("Guard.check suspended")

    def text(message: dict[str, Any]) -> str:
        return str(message["content"][0]["text"])

    return {
        "check": check,
        "inspect": lambda m: inspector.inspect(candidates, subject, m),
        "select": lambda m: inspector.selected("tool_results", m),
        "scan": lambda m: scanner.scan_blocks([text(m)], kind="result"),
        "shapes": lambda m: shapes.present(text(m).encode()),
        "encode": lambda m: text(m).encode(),
        "size": lambda m: _size(m, ("content", "structuredContent")),
        "normalise": lambda m: normalise(text(m)),
        "prefilter": lambda m: prefilter.candidates(text(m).encode()),
        "candidates": lambda m: inspector.candidates(identity, subject),
        "finish": lambda m: guard._finish(identity, subject, m, inspection, 0.0, ()),
        "decide": lambda m: inspector.engine.decide_among(candidates, subject, frozenset()),
    }


def drive(part: str, calls: int) -> None:
    """Build everything, then run ``part`` ``calls`` times (0: the baseline)."""
    parts = _parts()
    messages = _messages()
    for warm in parts.values():  # every part's first calls, in every run: the baseline has them too
        for message in messages[:2]:
            warm(message)
    run = parts[part]
    for i in range(calls):
        run(messages[i % MESSAGES])


def count(part: str, calls: int) -> int:
    """Instructions of one driver run under cachegrind."""
    with tempfile.TemporaryDirectory(prefix="guard-instr-") as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={Path(tmp) / 'out'}",
                sys.executable,
                "-m",
                "benchmarks.guard_instructions",
                "--drive",
                part,
                str(calls),
            ],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            timeout=600,
        )
    found = _REFS.search(out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {out.stderr[-500:]!r}")
    return int(found.group(1).replace(b",", b""))


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--drive", nargs=2, metavar=("PART", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.drive[0], int(args.drive[1]))
        return
    calls = max(1, min(args.calls, 10_000))
    baseline = count("check", 0)
    sys.stdout.write(f"| instructions per call ({calls} calls, minus a run of 0) | |\n|---|---:|\n")
    for part in args.parts.split(","):
        per_call = (count(part, calls) - baseline) / calls
        sys.stdout.write(f"| {part} | {per_call:,.0f} |\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _cli()
