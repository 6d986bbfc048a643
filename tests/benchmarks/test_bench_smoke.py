"""The benchmark harness works end to end and trusts no answer; timing is not judged here."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import anyio
import orjson
import pytest

from benchmarks.clients import HttpPoster, Reply, open_raw
from benchmarks.figures import CallRow, Results, evaluate
from benchmarks.load import CallTarget, WrongAnswer, check_echo, decode_reply, run_calls, wrong_answer_in
from benchmarks.plan import CORE_MIDDLEWARES, MIDDLEWARES, Plan, deep_merge, manifold_config, materialize
from benchmarks.procs import manifold_check, write_config
from benchmarks.profile import REPO, parse_collapsed
from benchmarks.report import write
from benchmarks.run import bench

pytestmark = pytest.mark.slow


def _echo(request_id: int, server: str, arguments: dict[str, object]) -> bytes:
    text = orjson.dumps({"server": server, "tool": "echo", "arguments": arguments}).decode()
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


@pytest.mark.anyio
async def test_a_tiny_run_measures_every_section_and_writes_the_report(tmp_path: Path) -> None:
    plan = dataclasses.replace(Plan.smoke(), startup_seconds=30.0, budget_seconds=80.0)
    with anyio.fail_after(90):
        results = await bench(plan, tmp_path)

    calls = {(row.target, row.concurrency): row for row in results.call_rows}
    assert set(calls) == {
        (target, c)
        for target in ("direct-json", "direct-stdio", "direct-2026", "stdio-2", "http-2", "handshake-http-1")
        for c in (1, 4)
    }
    assert all(row.calls > 0 and row.rps > 0 for row in calls.values())
    assert calls["direct-json", 1].p50_x == 1.0
    assert calls["stdio-2", 4].manifold_cpu_us is not None
    like = {(row.target, row.reference) for row in results.same_transport_rows}
    assert like == {("stdio-2", "direct-stdio"), ("http-2", "direct-2026")}
    assert {row.target for row in results.client_rows} == {"client:raw", "client:aiohttp"}
    variants = {row.target for row in results.middleware_rows}
    assert "mw:all-off" in variants
    assert all("SKIPPED" not in results.middleware_notes[name] for name in variants)
    assert {(r.target, r.tools) for r in results.lists} == {
        ("stdio-2", 20),
        ("http-2", 20),
        ("direct-2x3", 20),
    }
    assert [(m.target, m.servers) for m in results.memory] == [("stdio-2", 2), ("http-2", 2)]
    assert [s.target for s in results.sessions] == ["stdio-2", "direct-json"]
    assert {t.verdict for t in results.targets} <= {"PASS", "FAIL", "SKIP"}
    scale = results.scale
    assert scale is not None
    assert (scale.sessions_opened, scale.calls_answered, scale.errors) == (40, 12, {})
    assert scale.all_in_flight
    assert scale.first_answer_after_last_send
    assert scale.p50_ms >= plan.scale_slow_seconds * 1e3
    assert scale.probe_calls > 0
    assert scale.rss_peak_mib >= scale.rss_sessions_mib > 0

    markdown, data = write(results, tmp_path / "results")
    text = markdown.read_text()
    for heading in (
        "## Targets",
        "## tools/call",
        "## tools/list",
        "## Memory",
        "## Stage",
        "## HTTP clients",
        "## Scale",
    ):
        assert heading in text
    assert orjson.loads(data.read_bytes())["call_rows"]


@pytest.mark.anyio
async def test_the_lean_client_reads_length_and_chunked_answers_on_one_connection() -> None:
    event = b"event: message\r\ndata: " + _echo(2, "sse", {"i": 2}) + b"\r\n\r\n"
    answers = [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: sid-0\r\n"
        + b"content-length: %d\r\n\r\n" % len(_echo(1, "h", {}))
        + _echo(1, "h", {}),
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n" % 10
        + event[:10]
        + b"\r\n"
        + b"%x\r\n" % (len(event) - 10)
        + event[10:]
        + b"\r\n0\r\n\r\n",
    ]
    received: list[tuple[bytes, bytes]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"Content-Length: (\d+)", head)
            assert length is not None
            received.append((head, await reader.readexactly(int(length[1]))))
            writer.write(answer)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with anyio.fail_after(10):
            poster = await open_raw(f"http://127.0.0.1:{port}/mcp")
            first = await poster.post(b'{"a":1}')
            second = await poster.post(b'{"b":2}', "sid-1")
            await poster.aclose()
    finally:
        server.close()
        await server.wait_closed()

    assert first == Reply(200, "application/json", "sid-0", _echo(1, "h", {}))
    assert (second.status, second.content_type, second.body) == (200, "text/event-stream", event)
    check_echo(second, 2, "sse", {"i": 2})
    assert received[0][0].startswith(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Mcp-Session-Id" not in received[0][0]
    assert b"Mcp-Session-Id: sid-1\r\n" in received[1][0]
    assert [body for _, body in received] == [b'{"a":1}', b'{"b":2}']


def test_an_echo_of_other_arguments_or_from_another_server_is_a_wrong_answer() -> None:
    right = Reply(200, "application/json", None, _echo(7, "s01", {"i": 7, "tag": "a"}))
    check_echo(right, 7, "s01", {"i": 7, "tag": "a"})
    with pytest.raises(WrongAnswer, match="request 7"):
        check_echo(right, 7, "s01", {"i": 8, "tag": "a"})
    with pytest.raises(WrongAnswer, match="request 7"):
        check_echo(right, 7, "s00", {"i": 7, "tag": "a"})
    with pytest.raises(WrongAnswer, match="no response with that id"):
        check_echo(right, 8, "s01", {"i": 7, "tag": "a"})
    with pytest.raises(WrongAnswer, match="HTTP 500"):
        check_echo(Reply(500, "application/json", None, b"{}"), 7, "s01", {"i": 7})
    error = orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "unknown tool"}})
    with pytest.raises(WrongAnswer, match="not an echo result"):
        check_echo(Reply(200, "application/json", None, error), 7, "s01", {"i": 7})


class _Liar:
    """Answers every call with the echo of call 0: right server, right shape, wrong request."""

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        return Reply(200, "application/json", session_id, _echo(orjson.loads(body)["id"], "s00", {"i": 0}))

    async def aclose(self) -> None:
        return None


@pytest.mark.anyio
async def test_one_wrong_answer_under_load_stops_the_run() -> None:
    async def liar(_: str) -> HttpPoster:
        return _Liar()

    target = CallTarget("liar", "http://127.0.0.1:9/mcp", (("s00.echo", "s00"),), None, (), ["sid"] * 4)
    with anyio.fail_after(10), pytest.raises(ExceptionGroup) as caught:
        await run_calls(target, 4, duration=1.0, max_calls=100, warmup_calls=1, factory=liar)
    wrong = wrong_answer_in(caught.value)
    assert wrong is not None
    assert "expected s00's echo of" in str(wrong)


def test_the_answer_is_found_among_the_events_of_an_sse_body() -> None:
    notification = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
    body = b"event: message\r\ndata: " + notification + b"\r\n\r\nevent: message\r\ndata: "
    body += _echo(3, "sse", {"i": 3}) + b"\r\n\r\n"
    assert decode_reply(Reply(200, "text/event-stream", None, body), 3)["id"] == 3


def test_overlays_merge_mappings_concatenate_lists_and_name_their_directory(tmp_path: Path) -> None:
    merged = deep_merge(
        {"policy": {"files": ["a"]}, "metrics": {"enabled": False}, "log_level": "warning"},
        {"policy": {"files": ["a", "b"]}, "metrics": {"enabled": True}},
    )
    assert merged == {"policy": {"files": ["a", "b"]}, "metrics": {"enabled": True}, "log_level": "warning"}
    assert deep_merge(merged, {"policy": {"files": []}})["policy"] == {"files": []}
    assert materialize({"files": ["{dir}/x.yaml"]}, tmp_path) == {"files": [f"{tmp_path}/x.yaml"]}
    assert set(MIDDLEWARES) == {
        "auth",
        "audit",
        "policy",
        "validation",
        "ratelimit",
        "metrics",
        "access-log",
        "guardrails",
        "tracing-100",
        "tracing-10",
    }


def test_every_overlay_and_issue_34s_set_together_is_a_config_this_manifold_accepts(tmp_path: Path) -> None:
    base = manifold_config({}, page_size=100)
    configs: dict[str, dict[str, object]] = {}
    for name, overlay in MIDDLEWARES.items():
        for file_name, text in overlay.files.items():
            (tmp_path / file_name).write_text(text)
        configs[name] = deep_merge(base, materialize(overlay.on, tmp_path, "http://127.0.0.1:9/v1/traces"))
    core = base
    for name in CORE_MIDDLEWARES:
        core = deep_merge(core, materialize(MIDDLEWARES[name].on, tmp_path))
    configs["core"] = core
    paths = {name: write_config(tmp_path / f"{name}.yaml", config) for name, config in configs.items()}
    verdicts = manifold_check(list(paths.values()))
    assert {name: verdicts[path] for name, path in paths.items()} == dict.fromkeys(paths, (True, ""))
    assert core["auth"]["api_keys"]  # the load generator then sends the key
    assert core["policy"]["audit"]["path"] == f"{tmp_path}/audit.jsonl"


def test_manifold_check_tells_which_config_fragments_this_manifold_accepts(tmp_path: Path) -> None:
    good = write_config(tmp_path / "good.yaml", manifold_config({}, page_size=100))
    bad = write_config(
        tmp_path / "bad.yaml", manifold_config({}, page_size=100, overlay={"bench_no_such_key": 1})
    )
    verdicts = manifold_check([good, bad])
    assert verdicts[good] == (True, "")
    assert verdicts[bad][0] is False
    assert "bench_no_such_key" in verdicts[bad][1]


def test_collapsed_stacks_are_summarized_by_function_and_by_area() -> None:
    lines = [
        f"<module> (/v/lib/python3.11/site-packages/uvicorn/main.py:1);"
        f"handle ({REPO}/proxy/app/gateway.py:10);"
        f"dumps ({REPO}/proxy/protocol/jsonrpc.py:50) 3",
        "<module> (/v/lib/python3.11/site-packages/uvicorn/main.py:1);"
        "data_received (/v/lib/python3.11/site-packages/uvicorn/protocols/http/httptools_impl.py:9) 1",
        # An anyio worker waiting for work is idle, whatever py-spy said: not counted.
        "Thread._bootstrap (threading.py:1002);WorkerThread.run (anyio/_backends/_asyncio.py:1113);"
        "Queue.get (queue.py:171);Condition.wait (threading.py:327) 5",
    ]
    profile = parse_collapsed("t", lines)
    assert profile.samples == 4
    assert profile.self_top[0].where == "proxy/protocol/jsonrpc.py:dumps"
    assert profile.self_top[0].share == 0.75
    assert profile.areas == {"manifold": 0.75, "uvicorn": 0.25}
    assert profile.manifold_inclusive[0].where in (
        "proxy/app/gateway.py:handle",
        "proxy/protocol/jsonrpc.py:dumps",
    )


def _middleware_row(target: str, concurrency: int, cpu_x: float) -> CallRow:
    return CallRow(
        target, concurrency, 3, 1000, 1.0, 2.0, 500.0, 50.0, 300.0 * cpu_x, 400.0, "mw:all-off",
        1.0, 1.0, 1.0, 1.0, cpu_x, 1.0,
    )  # fmt: skip


def test_everything_on_is_judged_on_issue_34s_set_and_all_on_is_shown_beside_it() -> None:
    results = Results(meta={})
    for target, cpu_x in (("mw:policy", 1.02), ("mw:core-on", 1.05), ("mw:all-on", 1.6)):
        results.middleware_rows += [_middleware_row(target, c, cpu_x) for c in (1, 16)]
    targets = {t.what: t for t in evaluate(results, low=1, high=16)}
    assert targets["everything on vs off: Manifold CPU per call (mw:core-on)"].verdict == "PASS"
    informative = targets["  every row on together (mw:all-on) vs off: Manifold CPU per call"]
    assert (informative.measured, informative.verdict) == ("c=1 1.60x, c=16 1.60x", "FAIL")
    assert not [t for t in targets.values() if t.verdict == "SKIP" and "everything" in t.what]
    only_all = Results(meta={}, middleware_rows=[_middleware_row("mw:all-on", c, 1.2) for c in (1, 16)])
    verdicts = [(t.what, t.verdict) for t in evaluate(only_all, low=1, high=16) if "everything" in t.what]
    assert verdicts == [
        ("everything on vs everything off (mw:all-on)", "PASS"),
        ("everything on vs off: Manifold CPU per call (mw:all-on)", "FAIL"),
    ]
