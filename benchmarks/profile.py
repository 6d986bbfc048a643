"""Where Manifold spends its CPU under load: py-spy samples, summarized by function and by area.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;… count``, outermost first,
each frame ``function (file:line)``). Only samples with the thread on the CPU are kept (py-spy's
default drops idle ones), so the shares are shares of Manifold's busy time. One kind of idle sample
gets past py-spy: an anyio worker thread blocked in ``Queue.get`` for its next job (it was 7-16% of
the samples, while /proc gave that thread no CPU at all under load): those are dropped here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["Hotspot", "Profile", "find_py_spy", "parse_collapsed", "record"]

REPO: Final = Path(__file__).resolve().parents[1]
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
# Where a frame's file lives decides its area; the first match wins.
_AREAS: Final = (
    ("manifold", "/proxy/"),
    ("uvicorn", "/uvicorn/"),
    ("starlette", "/starlette/"),
    ("aiohttp", "/aiohttp/"),
    ("anyio", "/anyio/"),
    ("asyncio", "/asyncio/"),
    ("uvloop", "/uvloop/"),
    ("logging", "/logging/"),
    ("prometheus", "/prometheus_client/"),
    ("jsonschema", "/jsonschema/"),
)


@dataclass(frozen=True)
class Hotspot:
    where: str  # path from the repository or package root, and function
    share: float  # of all samples


@dataclass
class Profile:
    target: str
    samples: int
    self_top: list[Hotspot] = field(default_factory=list)  # any code, by time in the function itself
    manifold_inclusive: list[Hotspot] = field(default_factory=list)  # proxy/ functions, incl. callees
    areas: dict[str, float] = field(default_factory=dict)  # share of samples by the leaf frame's area
    raw_path: str | None = None
    cpu_us_per_call: float | None = None  # Manifold's CPU per call during the profiled run
    note: str = ""


def _short(path: str) -> str:
    """A path as py-spy shortens it (relative to its sys.path entry), whatever it was given."""
    for marker in ("/site-packages/", f"{REPO}/", "/lib/python3.11/", "/lib/python3.12/", "/lib/python3.13/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _area(path: str) -> str:
    rooted = "/" + _short(path).lstrip("/")
    for name, marker in _AREAS:
        if marker in rooted:
            return name
    return "other"


def _frame(text: str) -> tuple[str, str]:
    match = _FRAME.match(text.strip())
    if match is None:
        return text.strip(), ""
    return match["function"], match["file"]


def _idle_worker(frames: list[tuple[str, str]]) -> bool:
    """A worker thread waiting for work: idle, whatever py-spy thought."""
    names = [function for function, _ in frames[-3:]]
    return names[-2:] == ["Queue.get", "Condition.wait"] and any(
        function == "WorkerThread.run" for function, _ in frames
    )


def parse_collapsed(target: str, lines: Iterable[str], *, top: int = 15) -> Profile:
    """Summarize py-spy's collapsed stacks: hottest functions, Manifold's functions, areas."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(frame) for frame in stack.split(";") if frame.strip()]
        if not frames or _idle_worker(frames):
            continue
        total += count
        function, path = frames[-1]
        self_counts[f"{_short(path)}:{function}"] += count
        areas[_area(path)] += count
        seen: set[str] = set()
        for function, path in frames:
            if _area(path) == "manifold":
                key = f"{_short(path)}:{function}"
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += count
    if total == 0:
        return Profile(target, 0, note="no samples")
    return Profile(
        target,
        total,
        [Hotspot(where, n / total) for where, n in self_counts.most_common(top)],
        # The entry point's frames hold every sample and say nothing: leave them out.
        [Hotspot(where, n / total) for where, n in inclusive.most_common(top + 2) if n < total][:top],
        {name: n / total for name, n in areas.most_common()},
    )


def find_py_spy() -> str | None:
    """py-spy next to this interpreter (the venv) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record(py_spy: str, pid: int, seconds: float, raw_path: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` into ``raw_path`` (collapsed stacks); the caller waits.

    The raw file also feeds flame-graph tools (``flamegraph.pl``, speedscope) if one is wanted.
    """
    argv = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        "250",
        "--format",
        "raw",
        "--output",
        str(raw_path),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
