"""benchmarks.calls_ab counts a revision's and this tree's Python calls per tools/call, echoes checked."""

from __future__ import annotations

import re

import pytest

from benchmarks.calls_ab import main

pytestmark = pytest.mark.slow


def test_a_revision_against_itself_is_counted_for_both_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base", "HEAD", "--calls", "20", "--loop", "uvloop"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    labels = ["http-1 on uvloop, handshake client", "stdio-1 on uvloop, handshake client"]
    assert [line.split(":")[0] for line in lines] == labels
    for line in lines:
        match = re.search(r"Python calls ([\d,]+) -> ([\d,]+)", line)
        assert match is not None
        assert int(match[1].replace(",", "")) > 0
        assert int(match[2].replace(",", "")) > 0


def test_the_2026_client_a_middleware_and_paired_cpu_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--base", "HEAD", "--calls", "20", "--loop", "asyncio", "--kinds", "http"]
    assert main([*argv, "--client", "2026", "--middleware", "ratelimit", "--cpu-rounds", "2"]) == 0
    calls, cpu = capsys.readouterr().out.strip().splitlines()
    assert calls.startswith("http-1 on asyncio, 2026 client, ratelimit on: Python calls ")
    match = re.search(r"CPU per call (\d+) -> (\d+) µs \(medians\), paired ratio ([\d.]+) over 2 rounds", cpu)
    assert match is not None, cpu
    assert min(int(match[1]), int(match[2]), float(match[3])) > 0
