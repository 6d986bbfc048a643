"""The fast tier's guard (tests/conftest.py): under ``--fast`` a test that starts a process
without the ``slow`` marker fails, naming the marker; with the marker, or without ``--fast``, it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

SPAWNS = f"""
import subprocess, sys, asyncio
import anyio
import pytest

def test_popen() -> None:
    subprocess.run([{sys.executable!r}, "-c", "pass"], check=True)

def test_asyncio_process() -> None:
    async def main() -> None:
        process = await asyncio.create_subprocess_exec({sys.executable!r}, "-c", "pass")
        await process.wait()
    asyncio.run(main())

def test_anyio_process() -> None:
    anyio.run(anyio.run_process, [{sys.executable!r}, "-c", "pass"])

@pytest.mark.slow
def test_marked() -> None:
    subprocess.run([{sys.executable!r}, "-c", "pass"], check=True)
"""


@pytest.mark.slow  # it runs pytest, whose tests start processes
def test_a_process_started_in_the_fast_tier_fails_naming_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: starts a process\n")
    pytester.makepyfile(test_spawns=SPAWNS)
    fast = pytester.runpytest_subprocess("--fast", "-p", "no:cacheprovider")
    fast.assert_outcomes(passed=1, failed=3)
    fast.stdout.fnmatch_lines(["*this test starts a process: mark it @pytest.mark.slow*"])
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    plain.assert_outcomes(passed=4)
