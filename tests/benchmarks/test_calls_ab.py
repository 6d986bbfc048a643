"""benchmarks.calls_ab counts a revision's and this tree's Python calls per tools/call, echoes checked."""

from __future__ import annotations

import re

import pytest

from benchmarks.calls_ab import main

pytestmark = pytest.mark.slow


def test_a_revision_against_itself_is_counted_for_both_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base", "HEAD", "--calls", "20", "--loop", "uvloop"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["http-1 on uvloop", "stdio-1 on uvloop"]
    for line in lines:
        match = re.search(r"Python calls ([\d,]+) -> ([\d,]+)", line)
        assert match is not None
        assert int(match[1].replace(",", "")) > 0
        assert int(match[2].replace(",", "")) > 0
