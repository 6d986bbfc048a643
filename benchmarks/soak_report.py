"""The soak's figures, verdicts and report: Markdown on stdout and in a file, plus the JSON.

Nothing here touches a process: :mod:`benchmarks.soak` hands over the samples and the tally.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from benchmarks.soak_traffic import Failure, Kill, Tally

__all__ = [
    "KILL_GRACE",
    "Sample",
    "SoakResult",
    "Thresholds",
    "render",
    "slope",
    "summarize",
    "thirds",
    "write",
]

# A failed call to a killed server counts as inside its kill window when it overlapped
# [kill, first success after it + KILL_GRACE]: calls already queued behind the restart may fail too.
KILL_GRACE: Final = 2.0
_TABLE_ROWS: Final = 24  # more samples than this: one row per 30 s


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the run began
    rss_mib: float
    fds: int
    children: int
    calls: int  # answered-or-not calls so far, all servers
    sessions: int  # manifold_client_sessions_active (0 when /metrics did not answer)


@dataclass(frozen=True)
class Thresholds:
    rss_slope_mib_per_min: float = 2.0
    # RSS plateau: the mean of the last third of the samples over that of the middle third.
    rss_plateau_mib: float = 4.0
    recovery_seconds: float = 30.0


@dataclass
class SoakResult:
    """Everything the report says; ``verdicts`` are (check, threshold, measured, PASS/FAIL)."""

    meta: dict[str, Any]
    samples: list[Sample]
    thresholds: Thresholds
    alive_at_end: bool
    exit_code: int | None  # Manifold's, when it died
    calls: dict[str, int] = field(default_factory=dict)
    total_calls: int = 0
    ok: int = 0
    wrong: int = 0
    wrong_examples: list[str] = field(default_factory=list)
    lost_in_kill_window: int = 0
    lost_outside: int = 0
    lost_outside_examples: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    kills: list[dict[str, Any]] = field(default_factory=list)
    max_recovery: float | None = None
    rss_slope: float = math.nan  # MiB/min over the second half
    fd_slope: float = math.nan  # FDs/min over the second half
    rss_thirds: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # mean RSS of each third
    rss_late_slope: float = math.nan  # MiB/min over the last third
    sessions_opened: int = 0
    sessions_deleted: int = 0
    hostile_sent: dict[str, int] = field(default_factory=dict)
    hostile_answers: list[tuple[str, str, int]] = field(default_factory=list)
    hostile_skipped: dict[str, int] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)  # Manifold's /metrics at the end
    verdicts: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(verdict == "PASS" for *_, verdict in self.verdicts)


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points, per unit of x; NaN for fewer than two distinct x."""
    if len(points) < 2:
        return math.nan
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return math.nan
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def thirds(samples: Sequence[Sample], started: float, ended: float) -> tuple[float, float, float]:
    """The mean RSS (MiB) of the samples in each third of the run; NaN for a third without any."""
    span = (ended - started) / 3
    means: list[float] = []
    for index in range(3):
        low, high = started + index * span, started + (index + 1) * span
        inside = [s.rss_mib for s in samples if low <= s.at < high or (index == 2 and s.at == high)]
        means.append(sum(inside) / len(inside) if inside else math.nan)
    return means[0], means[1], means[2]


def _in_window(failure: Failure, kills: Iterable[Kill], end: float) -> bool:
    for kill in kills:
        if kill.server != failure.server:
            continue
        closes = (kill.recovered_at if kill.recovered_at is not None else end) + KILL_GRACE
        if failure.ended >= kill.at and failure.started <= closes:
            return True
    return False


def summarize(
    meta: dict[str, Any],
    samples: list[Sample],
    tally: Tally,
    *,
    started: float,
    ended: float,
    alive: bool,
    exit_code: int | None,
    thresholds: Thresholds,
    counters: dict[str, float] | None = None,
) -> SoakResult:
    result = SoakResult(meta, samples, thresholds, alive, exit_code, counters=dict(counters or {}))
    result.calls = dict(sorted(tally.calls.items()))
    result.total_calls = sum(tally.calls.values())
    result.ok, result.wrong, result.wrong_examples = tally.ok, tally.wrong, list(tally.wrong_examples)
    for failure in tally.failures:
        if _in_window(failure, tally.kills, ended):
            result.lost_in_kill_window += 1
        else:
            result.lost_outside += 1
            if len(result.lost_outside_examples) < 10:
                result.lost_outside_examples.append(
                    f"{failure.server} {failure.started:.1f}-{failure.ended:.1f}s: {failure.kind}"
                )
    result.errors = dict(tally.errors.most_common())
    result.kills = [
        {"server": k.server, "pid": k.pid, "at": k.at, "recovery": k.recovery} for k in tally.kills
    ]
    recoveries = [k.recovery for k in tally.kills if k.recovery is not None]
    result.max_recovery = max(recoveries) if recoveries else None
    half = started + (ended - started) / 2
    late = [s for s in samples if s.at >= half]
    result.rss_slope = slope([(s.at / 60, s.rss_mib) for s in late])
    result.fd_slope = slope([(s.at / 60, float(s.fds)) for s in late])
    result.rss_thirds = thirds(samples, started, ended)
    last_third = [s for s in samples if s.at >= started + 2 * (ended - started) / 3]
    result.rss_late_slope = slope([(s.at / 60, s.rss_mib) for s in last_third])
    result.sessions_opened, result.sessions_deleted = tally.sessions_opened, tally.sessions_deleted
    result.hostile_sent = dict(tally.hostile_sent)
    result.hostile_answers = [
        (kind, answer, n) for (kind, answer), n in sorted(tally.hostile_answers.items())
    ]
    result.hostile_skipped = dict(tally.hostile_skipped)

    def verdict(check: str, threshold: str, measured: str, ok: bool) -> None:
        result.verdicts.append((check, threshold, measured, "PASS" if ok else "FAIL"))

    verdict(
        "Manifold alive at the end",
        "alive",
        "alive" if alive else f"DIED (exit code {exit_code})",
        alive,
    )
    verdict("wrong (crossed) answers", "0", str(result.wrong), result.wrong == 0)
    verdict(
        "lost answers outside kill windows",
        "0",
        str(result.lost_outside),
        result.lost_outside == 0,
    )
    verdict("calls made", "> 0", str(result.total_calls), result.total_calls > 0)
    slope_ok = math.isnan(result.rss_slope) or result.rss_slope <= thresholds.rss_slope_mib_per_min
    verdict(
        "RSS slope, second half (least squares)",
        f"≤ {thresholds.rss_slope_mib_per_min:g} MiB/min",
        f"{result.rss_slope:+.2f} MiB/min ({len(late)} samples)",
        slope_ok,
    )
    _, middle, last = result.rss_thirds
    plateau = last - middle
    verdict(
        "RSS plateau under session churn (mean of the last third minus the middle third)",
        f"≤ {thresholds.rss_plateau_mib:g} MiB",
        f"{plateau:+.2f} MiB ({middle:.1f} → {last:.1f} MiB; last third "
        f"{result.rss_late_slope:+.2f} MiB/min; {result.sessions_opened:,} sessions opened)",
        math.isnan(plateau) or plateau <= thresholds.rss_plateau_mib,
    )
    unrecovered = sum(1 for k in tally.kills if k.recovery is None)
    worst = "-" if result.max_recovery is None else f"{result.max_recovery:.2f} s"
    verdict(
        "every killed server answered again",
        f"each within {thresholds.recovery_seconds:g} s",
        f"{len(tally.kills)} kills, {unrecovered} never recovered, max {worst}",
        unrecovered == 0
        and (result.max_recovery is None or result.max_recovery <= thresholds.recovery_seconds),
    )
    return result


# ----------------------------------------------------------------------------- rendering


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _rows(samples: Sequence[Sample]) -> list[Sample]:
    if len(samples) <= _TABLE_ROWS:
        return list(samples)
    picked: list[Sample] = []
    for sample in samples:
        if not picked or sample.at - picked[-1].at >= 29.5:
            picked.append(sample)
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return picked


def render(result: SoakResult) -> str:
    meta = result.meta
    lines = [
        "# Soak",
        "",
        f"{meta.get('started', '?')}, {meta.get('seconds', 0):.0f} s of load "
        f"({meta.get('wall_seconds', 0):.0f} s wall), Manifold at `{meta.get('revision', '?')}`, "
        f"load average {meta.get('loadavg', '?')} before, {meta.get('loadavg_after', '?')} after. "
        f"{meta.get('summary', '')}",
        "",
        f"**{'PASS' if result.passed else 'FAIL'}**",
        "",
        *_table(["check", "threshold", "measured", "verdict"], result.verdicts),
        "",
        "## Calls",
        "",
        f"{result.total_calls:,} calls ({', '.join(f'{k} {v:,}' for k, v in result.calls.items())}); "
        f"{result.ok:,} answers right (calls and session operations), {result.wrong} wrong, "
        f"{result.lost_in_kill_window} lost inside a kill window (the killed server's calls from the "
        f"kill until {KILL_GRACE:g} s after its first success), {result.lost_outside} lost outside. "
        f"Sessions opened {result.sessions_opened:,}, deleted {result.sessions_deleted:,}.",
        "",
    ]
    if result.errors:
        lines += _table(
            ["errors by kind (server: kind)", "count"], ([k, str(v)] for k, v in result.errors.items())
        )
        lines.append("")
    for title, examples in (
        ("Wrong answers (first few)", result.wrong_examples),
        ("Lost outside kill windows (first few)", result.lost_outside_examples),
    ):
        if examples:
            lines += [f"{title}:", "", *(f"- {e}" for e in examples), ""]
    lines += ["## Kills (SIGKILL of a stdio server; recovery = until the first new call it answered)", ""]
    if result.kills:
        lines += _table(
            ["#", "server", "pid", "at s", "recovery s"],
            (
                [
                    str(n + 1),
                    k["server"],
                    str(k["pid"]),
                    f"{k['at']:.1f}",
                    "NEVER" if k["recovery"] is None else f"{k['recovery']:.2f}",
                ]
                for n, k in enumerate(result.kills)
            ),
        )
        worst = "-" if result.max_recovery is None else f"{result.max_recovery:.2f} s"
        lines += ["", f"Max recovery: {worst}.", ""]
    else:
        lines += ["No kill: the run was shorter than the first kill.", ""]
    lines += ["## Hostile client", ""]
    if result.hostile_answers:
        lines += _table(
            ["kind", "sent", "answer", "count"],
            (
                [kind, str(result.hostile_sent[kind]), answer, str(n)]
                for kind, answer, n in result.hostile_answers
            ),
        )
        if result.hostile_skipped:
            skipped = ", ".join(f"{k} {v}" for k, v in result.hostile_skipped.items())
            lines += ["", f"Not sent while the held connections were at their bound: {skipped}."]
        lines.append("")
    else:
        lines += ["None sent.", ""]
    lines += [
        "## Manifold over time",
        "",
        f"RSS slope {result.rss_slope:+.2f} MiB/min, FD slope {result.fd_slope:+.1f}/min (least squares "
        "over the second half of the run). Children: Manifold's child processes (stdio servers, one per "
        "client session for per_client); sessions: `manifold_client_sessions_active`.",
        "",
        *_table(
            ["t s", "RSS MiB", "FDs", "children", "sessions", "calls"],
            (
                [
                    f"{s.at:.0f}",
                    f"{s.rss_mib:.1f}",
                    str(s.fds),
                    str(s.children),
                    str(s.sessions),
                    f"{s.calls:,}",
                ]
                for s in _rows(result.samples)
            ),
        ),
        "",
    ]
    if result.counters:
        lines += ["## Manifold's own counters at the end (/metrics)", ""]
        lines += _table(["series", "value"], ([k, f"{v:,.0f}"] for k, v in sorted(result.counters.items())))
        lines.append("")
    return "\n".join(lines)


def write(result: SoakResult, directory: Path) -> tuple[Path, Path]:
    """``soak-latest.md`` and ``soak-latest.json`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / "soak-latest.md"
    markdown.write_text(render(result))
    data = directory / "soak-latest.json"
    payload = asdict(result)
    payload["passed"] = result.passed
    data.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    return markdown, data
