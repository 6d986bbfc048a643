"""The soak harness works end to end for a few seconds and trusts no answer; leaks are not judged here."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import orjson
import pytest

from benchmarks.clients import Reply
from benchmarks.soak import SoakPlan, soak
from benchmarks.soak_report import Sample, render, slope, summarize, thirds, write
from benchmarks.soak_traffic import Failure, Kill, Tally, classify

pytestmark = pytest.mark.slow


def _echo(request_id: int, server: str, arguments: dict[str, object]) -> Reply:
    text = orjson.dumps({"server": server, "tool": "echo", "arguments": arguments}).decode()
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return Reply(
        200, "application/json", None, orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
    )


@pytest.mark.anyio
async def test_a_short_soak_calls_every_server_kills_one_recovers_it_and_writes_the_report(
    tmp_path: Path,
) -> None:
    plan = SoakPlan(
        seconds=8.0,
        clients=2,
        rate=30.0,
        churn_pause=0.2,
        per_client_every=2,
        kill_first=2.0,
        kill_every=100.0,
        kill_settle=4.0,
        sample_every=1.0,
        hostile_pause=0.2,
        held=2,
        hold_seconds=2.0,
        big_capabilities=1024,
        startup_seconds=30.0,
    )
    with anyio.fail_after(60):
        result = await soak(plan, tmp_path, lambda _: None)

    assert result.alive_at_end
    assert set(result.calls) == {"shared", "perclient", "http"}
    assert all(count > 0 for count in result.calls.values())
    assert result.wrong == 0, result.wrong_examples
    assert result.lost_outside == 0, result.lost_outside_examples
    assert [k["server"] for k in result.kills] == ["shared"]
    assert result.kills[0]["recovery"] is not None
    assert result.sessions_deleted > 0
    assert {"malformed-json", "deep-300", "oversized-5MiB", "batch-1000", "big-initialize"} <= set(
        result.hostile_sent
    )
    assert len(result.samples) >= 5
    assert result.samples[0].children >= 2
    markdown, data = write(result, tmp_path / "results")
    for heading in ("## Calls", "## Kills", "## Hostile client", "## Manifold over time"):
        assert heading in markdown.read_text()
    assert orjson.loads(data.read_bytes())["total_calls"] == result.total_calls


def test_an_echo_of_another_request_is_wrong_and_an_error_is_lost() -> None:
    arguments = {"tag": "t", "i": 1}
    assert classify(_echo(1, "shared", arguments), 1, "shared", arguments) == ("ok", "")
    assert classify(_echo(1, "shared", {"tag": "t", "i": 2}), 1, "shared", arguments)[0] == "wrong"
    assert classify(_echo(1, "http", arguments), 1, "shared", arguments)[0] == "wrong"
    assert classify(_echo(2, "shared", arguments), 1, "shared", arguments)[0] == "wrong"
    error = orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "unavailable"}})
    assert classify(Reply(200, "application/json", None, error), 1, "shared", arguments) == (
        "lost",
        "rpc -32000 unavailable",
    )
    assert classify(Reply(404, "application/json", None, error), 1, "shared", arguments)[0] == "lost"


def test_a_failure_counts_inside_a_kill_window_only_for_the_killed_server() -> None:
    tally = Tally(clock=lambda: 0.0)
    tally.kills.append(Kill("shared", 1, at=10.0, recovered_at=12.0))
    tally.failures += [
        Failure("shared", 9.5, 10.5, "in flight at the kill"),
        Failure("shared", 13.0, 13.1, "within the grace"),
        Failure("shared", 20.0, 20.1, "long after"),
        Failure("http", 11.0, 11.1, "another server"),
    ]
    tally.calls.update({"shared": 3, "http": 1})
    result = summarize(
        {}, [], tally, started=0.0, ended=30.0, alive=True, exit_code=None, thresholds=SoakPlan().thresholds
    )
    assert (result.lost_in_kill_window, result.lost_outside) == (2, 2)
    assert not result.passed
    assert "lost answers outside kill windows" in render(result)


def test_the_slope_is_least_squares_per_unit_of_x() -> None:
    assert slope([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == pytest.approx(2.0)
    assert math.isnan(slope([(1.0, 1.0)]))


def _samples(rss: list[float]) -> list[Sample]:
    return [
        Sample(at=float(t), rss_mib=mib, fds=10, children=2, calls=t, sessions=1) for t, mib in enumerate(rss)
    ]


def test_a_plateau_passes_and_a_line_that_keeps_rising_under_churn_fails() -> None:
    tally = Tally(clock=lambda: 0.0)
    tally.calls.update({"shared": 1})
    thresholds = SoakPlan().thresholds
    flat = [50.0 + min(t, 10) for t in range(30)]  # grows while warming up, then holds
    rising = [50.0 + 0.5 * t for t in range(30)]  # 5 MiB more in the last third than the middle
    assert thirds(_samples(flat), 0.0, 30.0) == pytest.approx((54.5, 60.0, 60.0))
    held = summarize(
        {}, _samples(flat), tally, started=0.0, ended=30.0, alive=True, exit_code=None, thresholds=thresholds
    )
    grown = summarize(
        {},
        _samples(rising),
        tally,
        started=0.0,
        ended=30.0,
        alive=True,
        exit_code=None,
        thresholds=thresholds,
    )
    plateau = "RSS plateau under session churn (mean of the last third minus the middle third)"
    assert [v[3] for v in held.verdicts if v[0] == plateau] == ["PASS"]
    assert [v[3] for v in grown.verdicts if v[0] == plateau] == ["FAIL"]
    assert "+5.00 MiB" in render(grown)
