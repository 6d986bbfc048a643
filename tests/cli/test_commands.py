from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from proxy.cli.commands import bounded_lines
from proxy.protocol.framing import LineTooLong
from tests.interaction.harness import REPO, fixture_server, write_config

MANIFOLD = [sys.executable, "-m", "proxy.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MANIFOLD, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


@pytest.mark.slow
def test_check_accepts_the_example_configs() -> None:
    for name in ("examples/manifold.yaml", "examples/claude_desktop.json"):
        done = run("check", "--config", name)
        assert done.returncode == 0, done.stderr
        assert "OK (2 servers: notes, clock)" in done.stdout


@pytest.mark.slow
def test_check_rejects_a_bad_config_naming_file_field_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("servers:\n  a:\n    command: x\n    request_timeout: -1\n")
    done = run("check", "--config", str(bad))
    assert done.returncode == 2
    assert "bad.yaml" in done.stderr
    assert "servers.a.request_timeout" in done.stderr
    assert "-1" in done.stderr


@pytest.mark.slow
def test_check_lists_every_problem_of_the_config_and_then_of_the_policy_and_auth(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("servers:\n  'bad id!':\n    command: echo\n  nocmd:\n    args: [x]\n")
    done = run("check", "--config", str(bad))
    assert done.returncode == 2
    assert "servers.nocmd: needs exactly one of 'command' (stdio) or 'url' (HTTP)" in done.stderr
    assert "servers.bad id!: server id may only contain" in done.stderr

    (tmp_path / "p.yaml").write_text("version: 2\n")
    valid = tmp_path / "valid.yaml"
    valid.write_text(
        "servers:\n  a: {command: echo}\npolicy: {files: [p.yaml]}\n"
        "auth:\n  api_keys: [{name: k, key: 'env:MANIFOLD_TEST_NO_SUCH_KEY'}]\n"
    )
    done = run("check", "--config", str(valid))
    assert done.returncode == 2
    assert "p.yaml: version" in done.stderr, done.stderr
    assert "auth.api_keys" in done.stderr, done.stderr


@pytest.mark.slow
def test_check_warns_when_metrics_are_opened_to_everyone_while_credentials_are_configured(
    tmp_path: Path,
) -> None:
    key = {"name": "ci", "key": "sha256:" + "a" * 64}
    opened = write_config(
        tmp_path / "m.yaml", {"auth": {"api_keys": [key]}, "metrics": {"require_auth": False}}
    )
    done = run("check", "--config", str(opened))
    assert done.returncode == 0, done.stderr
    assert "warning: metrics.require_auth is false while credentials are configured" in done.stderr
    closed = write_config(tmp_path / "n.yaml", {"auth": {"api_keys": [key]}})
    assert "metrics.require_auth" not in run("check", "--config", str(closed)).stderr


@pytest.mark.slow
def test_tools_prints_the_merged_catalog_and_reports_a_server_that_cannot_start(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "m.yaml",
        {
            "servers": {
                "alpha": fixture_server("alpha", tools=2, page_size=1),
                "ghost": {"command": "/nonexistent/server", "connect_timeout": 1},
            }
        },
    )
    done = run("tools", "--config", str(config), "--json")
    assert done.returncode == 1  # a configured server is not ready
    report = json.loads(done.stdout)
    rows = {row["name"]: row for row in report["tools"]}
    assert rows["alpha.tool_001"]["server"] == "alpha"
    assert rows["alpha.tool_001"]["original_name"] == "tool_001"
    assert report["servers"]["alpha"]["state"] == "ready"
    assert report["servers"]["ghost"]["state"] == "backoff"
    assert "cannot start" in report["servers"]["ghost"]["reason"]

    table = run("tools", "--config", str(config))
    assert "alpha.echo" in table.stdout
    assert "server ghost: backoff" in table.stdout


@pytest.mark.slow
def test_tools_reports_name_collisions(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "m.yaml",
        {
            "servers": {
                "one": {**fixture_server("one", tools=1, page_size=5), "prefix": ""},
                "two": {**fixture_server("two", tools=1, page_size=5), "prefix": ""},
            }
        },
    )
    done = run("tools", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    names = [row["name"] for row in report["tools"]]
    assert len(names) == len(set(names))
    collided = {c["name"] for c in report["collisions"]}
    assert {"echo", "tool_000"} <= collided
    renamed = {c["renamed_to"] for c in report["collisions"]}
    assert renamed <= set(names)


@pytest.mark.slow
def test_tools_and_explain_show_the_canonical_name_the_policy_matches(tmp_path: Path) -> None:
    long = "secret_with_a_long_name"
    st = fixture_server("st", tools=0)
    evil = fixture_server("evil", tools=0)
    (tmp_path / "policy.yaml").write_text(
        "version: 1\ndefault: allow\nrules:\n"
        f"  - id: no-secret\n    effect: deny\n    match: {{tools: [st.{long}]}}\n"
    )
    config = write_config(
        tmp_path / "m.yaml",
        {
            "naming": {"max_length": 20},
            "policy": {"files": [str(tmp_path / "policy.yaml")]},
            "servers": {
                "evil": {**evil, "args": [*evil["args"], "--extra-tool", f"st.{long}"], "prefix": ""},
                "st": {**st, "args": [*st["args"], "--extra-tool", long]},
            },
        },
    )
    done = run("tools", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [secret] = [row for row in report["tools"] if row["original_name"] == long]
    assert (secret["server"], secret["canonical_name"]) == ("st", f"st.{long}")
    assert len(secret["name"]) == 20
    assert [s["server"] for s in report["skipped"]] == ["evil"]
    assert "namespace 'st.' of server 'st'" in report["skipped"][0]["reason"]

    for spelling in (secret["name"], f"st.{long}"):
        explained = run("explain", "--config", str(config), "--identity", "x", "--tool", spelling, "--json")
        assert explained.returncode == 3, explained.stderr  # denied, by the rule on the canonical name
        decision = json.loads(explained.stdout)
        assert decision["rules"] == ["no-secret"]
        assert decision["subject"] == {
            "kind": "tool",
            "name": f"st.{long}",
            "server": "st",
            "shown_as": secret["name"],
        }


def test_stdin_lines_past_the_limit_are_dropped_as_they_arrive_and_the_rest_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chunks = [b'{"a":1}\n' + b"x" * 6, b"x" * 10, b"x\n{", b'"b":2}\n{"c":3}', b""]
    asked: list[int] = []

    async def read(size: int) -> bytes:
        asked.append(size)
        return chunks.pop(0)

    async def lines() -> list[bytes | LineTooLong]:
        return [line async for line in bounded_lines(read, 8)]

    got = anyio.run(lines)
    assert [line if isinstance(line, bytes) else type(line) for line in got] == [
        b'{"a":1}',
        LineTooLong,  # stands in for the dropped line, so that the client hears of it
        b'{"b":2}',
        b'{"c":3}',
    ]
    assert asked == [65536] * 5  # never asked for a whole line
    assert [r.getMessage() for r in caplog.records] == [
        "stdin: dropped a line from the client: a message line exceeded 8 bytes (limits.max_request_bytes)"
    ]


@pytest.mark.slow
def test_explain_says_a_confirmed_tool_is_asked_about_by_whom_and_exits_4(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "version: 1\ndefault: allow\nrules:\n"
        "  - id: ask\n    effect: confirm\n    match: {tools: [st.echo]}\n"
        "    confirm: {approver: {role: admins}, timeout: 30}\n"
    )
    config = write_config(
        tmp_path / "m.yaml",
        {
            "policy": {"files": [str(tmp_path / "policy.yaml")]},
            "servers": {"st": fixture_server("st", tools=0)},
        },
    )
    explained = run("explain", "--config", str(config), "--identity", "x", "--tool", "st.echo", "--json")
    assert explained.returncode == 4, explained.stderr
    decision = json.loads(explained.stdout)
    assert (decision["effect"], decision["rules"]) == ("confirm", ["ask"])
    assert decision["confirm"]["approver_roles"] == ["admins"]
    assert decision["confirm"]["timeout"] == 30


@pytest.mark.slow
def test_explain_starts_no_server_for_a_name_the_config_resolves_and_prints_only_its_report(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "started"
    starts = {
        "command": "sh",
        "args": ["-c", f"touch {marker}; echo started >&2; exec cat"],
        "connect_timeout": 2,
    }
    (tmp_path / "policy.yaml").write_text(
        "version: 1\ndefault: deny\nrules:\n  - {id: readers, effect: allow, match: {tools: [s.get_*]}}\n"
    )
    config = write_config(
        tmp_path / "m.yaml", {"policy": {"files": [str(tmp_path / "policy.yaml")]}, "servers": {"s": starts}}
    )
    explained = run("explain", "--config", str(config), "--identity", "x", "--tool", "s.get_it", "--json")
    assert explained.returncode == 0, explained.stderr
    decision = json.loads(explained.stdout)  # the report alone: no log line in it
    assert (decision["rules"], decision["servers_started"]) == (["readers"], False)
    assert not marker.exists()
    level = run("explain", "--config", str(config), "--identity", "x", "--log-level-of", "s")
    assert level.returncode == 3, level.stderr
    assert not marker.exists()

    live = run(
        "explain", "--config", str(config), "--identity", "x", "--tool", "s.get_it", "--json", "--live"
    )
    assert marker.exists()  # --live starts them; the server never answers, so no such tool
    assert live.returncode == 1
    assert live.stdout == ""
    assert "no such tool: s.get_it" in live.stderr


@pytest.mark.slow
def test_check_warns_about_each_role_a_scope_could_carry_when_scopes_are_roles(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "version: 1\ndefault: deny\nrules:\n  - {id: admins, effect: allow, match: {roles: [admin]}}\n"
    )
    oauth = {
        "resource": "https://mcp.example.test/mcp",
        "authorization_servers": [{"issuer": "https://id.test"}],
    }
    policy = {"files": [str(tmp_path / "policy.yaml")]}
    risky = write_config(
        tmp_path / "r.yaml", {"auth": {"oauth": {**oauth, "scopes_as_roles": True}}, "policy": policy}
    )
    done = run("check", "--config", str(risky))
    assert done.returncode == 0, done.stderr
    assert "warning: role 'admin' (policy rule 'admins') is granted to any token carrying" in done.stderr
    safe = write_config(tmp_path / "s.yaml", {"auth": {"oauth": oauth}, "policy": policy})
    assert "role 'admin'" not in run("check", "--config", str(safe)).stderr


@pytest.mark.slow
def test_tools_shows_each_openapi_tool_with_its_operation_and_check_lists_document_problems(
    tmp_path: Path,
) -> None:
    notes = str(REPO / "examples" / "openapi" / "notes.yaml")
    served = write_config(tmp_path / "m.yaml", {"servers": {"notes": {"openapi": {"document": notes}}}})
    report = json.loads(run("tools", "--config", str(served), "--json").stdout)
    rows = {row["name"]: row for row in report["tools"]}
    assert rows["notes.getNote"]["operation"] == "GET /notes/{id}"
    assert "operation: DELETE /notes/{id}" in run("tools", "--config", str(served)).stdout

    broken = tmp_path / "broken.yaml"
    broken.write_text(Path(notes).read_text().replace('"200": {description: deleted}', '"200": {}'))
    config = write_config(
        tmp_path / "b.yaml",
        {"servers": {"notes": {"openapi": {"document": str(broken), "security_scheme": "k"}}}},
    )
    done = run("check", "--config", str(config))
    assert done.returncode == 2
    assert (
        "servers.notes.openapi.document: paths./notes/{id}.delete.responses.200: {} is not valid"
        in done.stderr
    )
    assert "security_scheme 'k' is not in the document's securitySchemes" in done.stderr


@pytest.mark.slow
def test_check_fetches_a_url_document_and_lists_its_problems(tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    notes = REPO / "examples" / "openapi" / "notes.yaml"
    (tmp_path / "broken.yaml").write_text(
        notes.read_text().replace('"200": {description: deleted}', '"200": {}')
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        config = write_config(
            tmp_path / "b.yaml",
            {
                "servers": {
                    "notes": {"openapi": {"document": f"{base}/broken.yaml"}},
                    "gone": {"openapi": {"document": f"{base}/missing.yaml"}},
                    "small": {"openapi": {"document": f"{base}/broken.yaml", "max_document_bytes": 100}},
                }
            },
        )
        done = run("check", "--config", str(config))
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2
    assert (
        "servers.notes.openapi.document: paths./notes/{id}.delete.responses.200: {} is not valid"
        in done.stderr
    )
    assert "servers.gone.openapi.document: answered HTTP 404" in done.stderr
    assert "servers.small.openapi.document: is larger than max_document_bytes (100 bytes)" in done.stderr


@pytest.mark.slow
def test_check_refuses_a_per_tool_tasks_value_and_tools_warns_of_a_setting_naming_no_tool(
    tmp_path: Path,
) -> None:
    bad = write_config(
        tmp_path / "bad.yaml", {"servers": {"a": {"command": "x", "tools": {"slow": {"tasks": "always"}}}}}
    )
    done = run("check", "--config", str(bad))
    assert done.returncode == 2
    assert "servers.a.tools.slow.tasks" in done.stderr, done.stderr
    fine = {
        **fixture_server("alpha", tools=2),
        "tools": {"slow": {"tasks": "held"}, "ghost": {"tasks": "held"}},
    }
    config = write_config(tmp_path / "m.yaml", {"servers": {"alpha": fine}})
    assert run("check", "--config", str(config)).returncode == 0
    listed = run("tools", "--config", str(config), "--json")
    assert listed.returncode == 0, listed.stderr
    assert "server 'alpha' lists no tool 'ghost'" in listed.stderr  # the server has listed: it is known now
