"""End to end: the policy commands of the ``manifold`` CLI, run as real processes.

``explain`` prints the decision and the rules behind it (exit 0 allow, 3 deny), ``tools
--identity`` lists what that identity may see, and the stored form ``keygen`` prints works as an
``auth.api_keys`` entry of a real ``manifold serve``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.fixtures.fixture_server import Catalog
from tests.interaction.harness import MANIFOLD, REPO, fixture_server, post, running_manifold, write_config

pytestmark = pytest.mark.slow

NOTES = [sys.executable, str(REPO / "examples" / "servers" / "notes.py")]
POLICY = """\
version: 1
default: deny
rules:
  - id: staff-everything
    effect: allow
    match: {roles: [staff]}
  - id: contractors-tools
    effect: allow
    match: {roles: [contractor], tools: ["*"]}
  - id: contractors-no-destructive
    effect: deny
    description: contractors may not run destructive tools
    match: {roles: [contractor], annotations: {destructive: true}}
  - id: partners-no-notes
    effect: deny
    match: {issuers: ["https://partners.test"], servers: [tnotes]}
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def gateway_config(directory: Path, auth: dict[str, Any] | None = None) -> dict[str, Any]:
    (directory / "policy.yaml").write_text(POLICY)
    config: dict[str, Any] = {
        "policy": {"files": ["policy.yaml"], "pins": {"mode": "off"}},
        "servers": {
            "alpha": fixture_server("alpha", tools=1, page_size=10),
            "tnotes": {"command": NOTES[0], "args": NOTES[1:], "trusted": True},
        },
    }
    if auth is not None:
        config["auth"] = auth
    return config


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cli-policy")
    return write_config(directory / "manifold.yaml", gateway_config(directory))


def manifold(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MANIFOLD, *args], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("who", "tool", "code", "first_line", "rules"),
    [
        pytest.param(
            ["--identity", "carl", "--role", "contractor"],
            "tnotes.delete_note",
            3,
            "DENY: carl -> tool tnotes.delete_note (server tnotes)",
            "contractors-no-destructive",
            id="deny-by-rule",
        ),
        pytest.param(
            ["--identity", "carl", "--role", "contractor"],
            "tnotes.list_notes",
            0,
            "ALLOW: carl -> tool tnotes.list_notes (server tnotes)",
            "contractors-tools",
            id="allow-by-rule",
        ),
        pytest.param(
            ["--identity", "sam", "--role", "contractor", "--role", "staff"],
            "alpha.echo",
            3,
            "DENY: sam -> tool alpha.echo (server alpha)",
            "contractors-no-destructive",
            id="deny-overrides-allow",
        ),
        pytest.param(
            [
                "--identity",
                "carl",
                "--role",
                "contractor",
                "--source",
                "jwt",
                "--issuer",
                "https://partners.test",
            ],
            "tnotes.list_notes",
            3,
            "DENY: carl -> tool tnotes.list_notes (server tnotes)",
            "partners-no-notes",
            id="another-issuers-carl",
        ),
        pytest.param(
            ["--identity", "nobody"],
            "alpha.echo",
            3,
            "DENY: nobody -> tool alpha.echo (server alpha)",
            "(none: the default applies)",
            id="deny-by-default",
        ),
    ],
)
def test_explain_prints_the_decision_with_its_rules_and_exits_0_or_3(
    config_path: Path, who: list[str], tool: str, code: int, first_line: str, rules: str
) -> None:
    done = manifold("explain", "--config", str(config_path), *who, "--tool", tool)
    assert done.returncode == code, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == first_line
    assert lines[1].split() == ["rules:", *rules.split()]


def test_tools_for_an_identity_lists_only_what_it_may_see(config_path: Path) -> None:
    done = manifold(
        "tools", "--config", str(config_path), "--identity", "carl", "--role", "contractor", "--json"
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["tools"]}
    # Trusted tnotes: its read-only and its non-destructive tools; alpha is untrusted: destructive.
    assert set(rows) == {"tnotes.add_note", "tnotes.list_notes", "tnotes.read_note"}
    assert rows["tnotes.list_notes"]["annotations"]["readOnlyHint"] is True
    assert rows["tnotes.add_note"]["annotations"]["destructiveHint"] is False


@pytest.mark.anyio
async def test_the_stored_form_keygen_prints_is_an_api_key_manifold_accepts(tmp_path: Path) -> None:
    done = manifold("keygen", "--name", "kim", "--role", "staff")
    assert done.returncode == 0, done.stderr
    head, _, snippet = done.stdout.partition("config:\n")
    key = head.strip().rsplit(" ", 1)[-1]
    assert key.startswith("mfd_")
    auth = yaml.safe_load(snippet)["auth"]
    [entry] = auth["api_keys"]
    assert (entry["name"], entry["roles"]) == ("kim", ["staff"])
    assert key not in snippet  # only the stored form goes into the config

    async with running_manifold(tmp_path, gateway_config(tmp_path, auth)) as running:
        async with (
            httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(running.url, http_client=http)) as client,
        ):
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {f"alpha.{t.name}" for t in Catalog("alpha", 1, 10).tools()} | {
                f"tnotes.{n}" for n in ("add_note", "list_notes", "read_note", "delete_note")
            }  # kim is staff
            result = await client.call_tool("alpha.echo", {"from": "kim"})
            block = result.content[0]
            assert isinstance(block, TextContent)
            assert json.loads(block.text)["arguments"] == {"from": "kim"}
        async with aiohttp.ClientSession() as raw:
            wrong = key[:-1] + ("A" if key[-1] != "A" else "B")
            status, _, _ = await post(raw, running.url, INITIALIZE, {"X-API-Key": wrong})
            assert status == 401


def test_explain_says_who_may_change_a_shared_servers_log_level(config_path: Path) -> None:
    # staff-everything names no kind: it does not allow a log level, and the default is no help.
    done = manifold(
        "explain",
        "--config",
        str(config_path),
        "--identity",
        "sam",
        "--role",
        "staff",
        "--log-level-of",
        "alpha",
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[0] == "DENY: sam -> log_level alpha (server alpha)"
    unknown = manifold("explain", "--config", str(config_path), "--identity", "sam", "--log-level-of", "nope")
    assert unknown.returncode == 1
    assert "manifold: no such server: nope" in unknown.stderr.splitlines()
