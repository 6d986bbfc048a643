"""The scale run's checks: what counts as a right answer, a refusal, and all calls in flight at once."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import orjson
import pytest

from benchmarks.clients import Reply
from benchmarks.figures import Results, ScaleRecord, evaluate
from benchmarks.load import WrongAnswer
from benchmarks.plan import Plan
from benchmarks.procs import manifold_check, write_config
from benchmarks.scale import check_slow, in_flight_at_once, scale_config

pytestmark = pytest.mark.slow


def _reply(request_id: int, result: object = None, *, error: object = None, status: int = 200) -> Reply:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    return Reply(status, "application/json", None, orjson.dumps(message))


_DONE = {"content": [{"type": "text", "text": "done"}], "isError": False}


def test_a_slow_answer_to_its_own_request_after_the_sleep_is_right() -> None:
    assert check_slow(_reply(5, _DONE), 5, seconds=2.01, slept=2.0) is None


def test_another_requests_answer_other_content_or_an_answer_before_the_sleep_is_wrong() -> None:
    with pytest.raises(WrongAnswer, match="no response with that id"):
        check_slow(_reply(6, _DONE), 5, seconds=2.01, slept=2.0)
    other = {"content": [{"type": "text", "text": "not done"}], "isError": False}
    with pytest.raises(WrongAnswer, match="expected slow's 'done'"):
        check_slow(_reply(5, other), 5, seconds=2.01, slept=2.0)
    with pytest.raises(WrongAnswer, match=r"before the 2\.0 s"):
        check_slow(_reply(5, _DONE), 5, seconds=0.4, slept=2.0)


def test_refusals_are_counted_by_kind_not_taken_for_answers() -> None:
    assert check_slow(_reply(5, status=503), 5, seconds=0.1, slept=2.0) == "HTTP 503"
    error = {"code": -32603, "message": "server unavailable"}
    assert check_slow(_reply(5, error=error), 5, seconds=0.1, slept=2.0) == "JSON-RPC error -32603"
    failed = {"content": [{"type": "text", "text": "timed out"}], "isError": True}
    assert check_slow(_reply(5, failed), 5, seconds=2.5, slept=2.0) == "isError result"


def test_calls_count_as_in_flight_together_only_while_every_one_is_outstanding() -> None:
    assert in_flight_at_once([0.0, 0.1, 0.2], [5.0, 5.1, 5.2]) == 3
    assert in_flight_at_once([0.0, 0.1, 5.5], [5.0, 5.1, 9.0]) == 2  # the third began after one ended
    assert in_flight_at_once([0.0, 1.0], [1.0, 2.0]) == 1  # an end and a start at one instant: never both
    assert in_flight_at_once([0.0, 0.1, 0.2], [math.nan, 0.15, math.nan]) == 2  # unanswered stay outstanding


def test_the_scale_config_raises_max_connections_only_when_the_calls_would_not_fit(tmp_path: Path) -> None:
    config, raised = scale_config(Plan())
    assert raised == {}
    assert config["limits"] == {"max_sessions": 20_000, "max_sessions_per_identity": 20_000}
    assert len(config["servers"]) == Plan().scale_servers

    big = dataclasses.replace(Plan(), scale_calls=5_000, scale_sessions=10_000)
    config, raised = scale_config(big)
    assert raised["max_connections"] > 5_000
    assert config["limits"]["max_connections"] == raised["max_connections"]
    path = write_config(tmp_path / "scale.yaml", config)
    assert manifold_check([path])[path] == (True, "")


def test_a_plan_with_fewer_sessions_than_calls_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_sessions"):
        Plan(scale_sessions=10, scale_calls=20)
    assert Plan.quick().scale_sessions == 0  # --quick stays quick: no scale run


def _scale(**changes: object) -> ScaleRecord:
    record = ScaleRecord(
        target="scale-4",
        servers=4,
        sessions_wanted=10_000,
        sessions_opened=10_000,
        sessions_seconds=2.5,
        calls_wanted=1_000,
        calls_answered=1_000,
        slow_seconds=8.0,
        in_flight_client=1_000,
        in_flight_manifold=1_001.0,
        rss_before_mib=80.0,
        rss_sessions_mib=114.0,
        rss_peak_mib=140.0,
        kib_per_session=3.5,
        p50_ms=8_400.0,
        p99_ms=8_500.0,
        max_ms=8_510.0,
        first_answer_after_last_send=True,
        probe_calls=100,
        probe_p50_ms=1.4,
        probe_p99_ms=8.6,
        errors={},
        raised_limits={},
        open_files="load generator 20000, Manifold 20000",
        seconds=16.0,
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def _verdicts(scale: ScaleRecord | None) -> dict[str, tuple[str, str]]:
    results = Results(meta={}, scale=scale)
    return {t.what: (t.measured, t.verdict) for t in evaluate(results, low=1, high=16)}


def test_the_scale_target_passes_only_with_every_session_every_call_in_flight_and_no_error() -> None:
    what = "scale: 10,000 idle sessions open and 1,000 tools/call in flight at once, one Manifold"
    measured, verdict = _verdicts(_scale())[what]
    assert verdict == "PASS"
    assert "1,000/1,000 calls in flight at once (Manifold's gauge 1,001)" in measured
    assert "p99 8,500 ms" in measured
    assert "RSS 80.0 / 114.0 / 140.0 MiB" in measured
    for failing in (
        _scale(errors={"HTTP 503": 3}, calls_answered=997),
        _scale(in_flight_manifold=None),  # Manifold's own count not read: not verified
        _scale(in_flight_manifold=640.0),
        _scale(in_flight_client=999),
        _scale(sessions_opened=9_990),
    ):
        assert _verdicts(failing)[what][1] == "FAIL", failing
    assert _verdicts(None)["scale: idle sessions open and tools/call in flight at once, one Manifold"] == (
        "not run",
        "SKIP",
    )


def test_the_scale_runs_sessions_are_judged_by_the_per_session_memory_target_too() -> None:
    row = _verdicts(_scale())["memory per idle client session"]
    assert row == ("scale-4 (10,000) 3.5 KiB", "PASS")
    assert _verdicts(_scale(kib_per_session=4.2))["memory per idle client session"][1] == "FAIL"
