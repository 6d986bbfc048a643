"""End to end: the policy engine in a real ``manifold serve``, driven by real clients.

Per-identity list views and their cursors, call gating, annotation trust (an untrusted server's
hints are not believed, a trusted one's are, an operator's override wins), argument and result
schema validation, dry run, the audit log, tool pins in each mode, and hot reload (file watch and
SIGHUP). Behind Manifold: the SDK fixture server (with its policy tools ``bad_output`` and
``redefine``) and the bundled notes server, whose tools declare annotations.
"""

from __future__ import annotations

import hashlib
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, TextContent

from tests.fixtures.fixture_server import Catalog
from tests.interaction.harness import MANIFOLD, REPO, RunningManifold, fixture_server, post, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PAGE = 3
NOTES = [sys.executable, str(REPO / "examples" / "servers" / "notes.py")]
NOTES_TOOLS = ["add_note", "list_notes", "read_note", "delete_note"]
NOTES_ARGUMENTS: dict[str, dict[str, Any]] = {
    "add_note": {"title": "t", "text": "x"},
    "list_notes": {},
    "read_note": {"title": "t"},
    "delete_note": {"title": "t"},
}
KEYS = {  # identity -> (API key, roles)
    "sam": ("mfd_sam-staff-key-0123456789abcdefghijklmnopqrs", ["staff"]),
    "carl": ("mfd_carl-contractor-key-0123456789abcdefghijklm", ["contractor"]),
    "rita": ("mfd_rita-reader-key-0123456789abcdefghijklmnopq", []),
}
MAIN_POLICY = """\
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
  - id: rita-numbered-tools
    effect: allow
    match: {identities: [rita], tools: ["alpha.tool_*"]}
"""
ALPHA = Catalog("alpha", 4, 5, policy_tools=True)
EVERYTHING = (
    {f"alpha.{tool.name}" for tool in ALPHA.tools()}
    | {f"notes.{name}" for name in NOTES_TOOLS}
    | {f"tnotes.{name}" for name in NOTES_TOOLS}
)
# What contractors may use: only tools whose EFFECTIVE annotations are not destructive.
CONTRACTOR_VIEW = {"notes.read_note", "tnotes.add_note", "tnotes.list_notes", "tnotes.read_note"}
RITA_VIEW = {f"alpha.tool_{i:03d}" for i in range(4)}


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def api_keys() -> list[dict[str, Any]]:
    return [{"name": name, "key": stored(key), "roles": roles} for name, (key, roles) in KEYS.items()]


def policy_server(directory: Path, **options: Any) -> dict[str, Any]:
    """The fixture server with its policy tools, ``echo``'s description kept in ``directory``."""
    entry = fixture_server("alpha", **options)
    extra = ["--policy-tools", "--echo-description-file", str(directory / "echo-description.txt")]
    return {**entry, "args": [*entry["args"], *extra]}


def bearer(identity: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[identity][0]}"}


class ListChanged:
    """A message handler that records ``notifications/tools/list_changed``."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def expect(self) -> anyio.Event:
        """A fresh event, set by the next notification; take it *before* causing the change."""
        self._event = anyio.Event()
        return self._event

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._event.set()


@asynccontextmanager
async def connect(url: str, identity: str | None = None, **options: Any) -> AsyncIterator[Client]:
    """The SDK client, as ``identity`` (an API key) or anonymous."""
    headers = bearer(identity) if identity is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


async def pages(client: Client) -> list[list[str]]:
    found: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        found.append([tool.name for tool in page.tools])
        cursor = page.next_cursor
        if cursor is None:
            return found


async def listed(client: Client) -> dict[str, Any]:
    """Every tool the client may see, by name."""
    tools: dict[str, Any] = {}
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools |= {tool.name: tool for tool in page.tools}
        cursor = page.next_cursor
        if cursor is None:
            return tools


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def unknown_tool_error(client: Client, name: str) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.call_tool(name, {})
    return caught.value


async def call_raw(url: str, identity: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One ``tools/call`` over raw HTTP; returns the JSON-RPC response as sent."""
    async with aiohttp.ClientSession() as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        status, headers, _ = await post(http, url, init, bearer(identity))
        assert status == 200
        session = {**bearer(identity), "Mcp-Session-Id": headers["mcp-session-id"]}
        status, _, _ = await post(
            http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session
        )
        assert status == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        status, _, body = await post(http, url, call, session)
        assert status == 200
        assert isinstance(body, dict)
        return body


def audit(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


async def audited(
    path: Path,
    at_least: int,
    timeout: float = 10,
    where: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> list[dict[str, Any]]:
    """The audit records, once ``at_least`` of them are ``where``: a worker thread writes them in
    batches, a moment after the call's answer has left (a module's Manifold may hold other
    tests' records already: ``where`` picks this test's)."""
    with anyio.fail_after(timeout):
        while sum(map(where, records := audit(path))) < at_least:  # noqa: ASYNC110 (a file: no event)
            await anyio.sleep(0.02)
    return records


async def logged(manifold: RunningManifold, text: str, timeout: float = 15) -> None:
    """Wait (bounded) until Manifold's log says ``text``: some outcomes show nowhere else."""
    with anyio.fail_after(timeout):
        while text not in manifold.log():  # noqa: ASYNC110 (a log file has no event to wait on)
            await anyio.sleep(0.05)


# ---- one Manifold for views, gating, trust, validation and audit -------------------------------


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("policy")
    (tmp_path / "policy.yaml").write_text(MAIN_POLICY)
    config = {
        "catalog": {"page_size": PAGE},
        "auth": {"api_keys": api_keys()},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {
            "alpha": policy_server(tmp_path, tools=4, page_size=5),
            # Untrusted (the default): what it declares is not believed; but the operator
            # vouches for read_note.
            "notes": {
                "command": NOTES[0],
                "args": NOTES[1:],
                "annotations": {"read_note": {"readOnlyHint": True}},
            },
            "tnotes": {"command": NOTES[0], "args": NOTES[1:], "trusted": True},
        },
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


def audit_path(manifold: RunningManifold) -> Path:
    return manifold.log_path.parent / "audit.jsonl"


@pytest.mark.parametrize(
    ("identity", "expected"),
    [("sam", EVERYTHING), ("carl", CONTRACTOR_VIEW), ("rita", RITA_VIEW)],
)
async def test_the_pages_an_identity_gets_are_exactly_its_visible_tools_once(
    manifold: RunningManifold, identity: str, expected: set[str]
) -> None:
    async with connect(manifold.url, identity) as client:
        found = await pages(client)
    names = [name for page in found for name in page]
    assert all(len(page) <= PAGE for page in found)
    assert len(names) == len(set(names)), "a tool was listed twice"
    assert set(names) == expected
    assert len(found) == -(-len(expected) // PAGE)


async def test_a_cursor_cut_from_one_identitys_view_is_invalid_params_for_another(
    manifold: RunningManifold,
) -> None:
    async with connect(manifold.url, "sam") as sam, connect(manifold.url, "rita") as rita:
        sams = (await sam.list_tools(cache_mode="bypass")).next_cursor
        ritas = (await rita.list_tools(cache_mode="bypass")).next_cursor
        assert sams is not None
        assert ritas is not None
        assert (await sam.list_tools(cursor=sams, cache_mode="bypass")).tools  # good for its owner
        for client, foreign in ((rita, sams), (sam, ritas)):
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor=foreign, cache_mode="bypass")
            assert caught.value.error.code == -32602


async def test_a_call_to_a_tool_hidden_from_the_caller_is_unknown_tool_like_a_missing_one(
    manifold: RunningManifold,
) -> None:
    async with connect(manifold.url, "carl") as carl, connect(manifold.url, "rita") as rita:
        hidden = await unknown_tool_error(carl, "alpha.echo")
        missing = await unknown_tool_error(carl, "alpha.no_such_tool")
        assert (hidden.error.code, hidden.error.message) == (-32602, "unknown tool: alpha.echo")
        assert (missing.error.code, missing.error.message) == (-32602, "unknown tool: alpha.no_such_tool")
        assert (await unknown_tool_error(rita, "notes.read_note")).error.code == -32602
    async with connect(manifold.url, "sam") as sam:
        assert orjson.loads(text_of(await sam.call_tool("alpha.echo", {"n": 1})))["arguments"] == {"n": 1}


@pytest.mark.parametrize(
    ("tool", "allowed"),
    [
        pytest.param("notes.list_notes", False, id="untrusted-server-declares-read-only-not-believed"),
        pytest.param("notes.add_note", False, id="untrusted-server-declares-not-destructive-not-believed"),
        pytest.param("tnotes.list_notes", True, id="trusted-server-read-only-believed"),
        pytest.param("tnotes.add_note", True, id="trusted-server-not-destructive-believed"),
        pytest.param("tnotes.delete_note", False, id="trusted-server-destructive-believed"),
        pytest.param("notes.read_note", True, id="operator-override-read-only-on-untrusted-server"),
    ],
)
async def test_deny_destructive_to_contractors_is_decided_on_effective_annotations(
    manifold: RunningManifold, tool: str, allowed: bool
) -> None:
    arguments = NOTES_ARGUMENTS[tool.split(".")[1]]
    async with connect(manifold.url, "carl") as carl:
        if allowed:
            result = await carl.call_tool(tool, arguments)
            assert not result.is_error, text_of(result)
        else:
            error = await unknown_tool_error(carl, tool)
            assert (error.error.code, error.error.message) == (-32602, f"unknown tool: {tool}")


async def test_clients_are_shown_the_effective_annotations(manifold: RunningManifold) -> None:
    async with connect(manifold.url, "sam") as sam:
        tools = await listed(sam)

    def hints(name: str) -> tuple[bool | None, ...]:
        a = tools[name].annotations
        assert a is not None, f"{name} has no annotations"
        return (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)

    cautious = (False, True, False, True)
    assert hints("notes.list_notes") == cautious  # declared readOnlyHint true, not believed
    assert hints("notes.add_note") == cautious  # declared destructiveHint false, not believed
    assert hints("alpha.echo") == cautious  # declared nothing
    assert hints("tnotes.list_notes") == (True, False, True, True)  # believed; read-only implies the rest
    assert hints("tnotes.add_note") == (False, False, False, True)
    assert hints("tnotes.delete_note") == (False, True, False, True)
    assert hints("notes.read_note") == (True, False, True, True)  # the operator's word


async def test_bad_arguments_are_an_error_result_naming_each_problem_by_path(
    manifold: RunningManifold,
) -> None:
    body = await call_raw(manifold.url, "sam", "alpha.add", {"a": "x"})
    result = body["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "arguments.a: 'x' is not of type 'number'" in text
    assert "'b' is a required property" in text
    assert result["_meta"]["dev.manifold/outcome"] == "invalid_arguments"
    good = await call_raw(manifold.url, "sam", "alpha.add", {"a": 2, "b": 3})
    assert good["result"]["content"][0]["text"] == "5"
    assert not good["result"].get("isError")


async def test_structured_content_that_violates_the_output_schema_is_withheld_as_an_error(
    manifold: RunningManifold,
) -> None:
    body = await call_raw(manifold.url, "sam", "alpha.bad_output", {})
    result = body["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    text = result["content"][0]["text"]
    assert "structuredContent.count: 'many' is not of type 'integer'" in text
    assert "count: many" not in text  # the server's own content is not passed on either
    assert result["_meta"]["dev.manifold/outcome"] == "invalid_result"
    good = await call_raw(manifold.url, "sam", "alpha.bad_output", {"count": 3})
    assert good["result"]["structuredContent"] == {"count": 3}
    assert not good["result"].get("isError")


async def test_each_call_decision_is_one_audit_line_without_argument_values(
    manifold: RunningManifold,
) -> None:
    before = len(audit(audit_path(manifold)))
    async with connect(manifold.url, "carl") as carl:
        result = await carl.call_tool("tnotes.read_note", {"title": "s3cret-title-value"})
    assert "s3cret-title-value" in text_of(result)
    # An earlier test's last line may land after ``before`` was counted (a worker thread writes
    # in batches): this call's own lines are the ones that count.
    with anyio.fail_after(10):
        while not (records := [r for r in audit(audit_path(manifold))[before:] if r["identity"] == "carl"]):  # noqa: ASYNC110 (a file has no event to wait on)
            await anyio.sleep(0.02)
    assert len(records) == 1
    record = records[0]
    assert {
        k: record[k] for k in ("identity", "name", "server", "effect", "enforced", "rules", "outcome")
    } == {
        "identity": "carl",
        "name": "tnotes.read_note",
        "server": "tnotes",
        "effect": "allow",
        "enforced": "allow",
        "rules": ["contractors-tools"],
        "outcome": "ok",
    }
    assert isinstance(record["latency_ms"], float)
    assert record["latency_ms"] >= 0
    assert "arguments" not in record
    assert "s3cret-title-value" not in audit_path(manifold).read_text()


async def test_a_call_the_policy_denies_is_audited_as_denied(manifold: RunningManifold) -> None:
    before = len(audit(audit_path(manifold)))
    async with connect(manifold.url, "carl") as carl:
        assert (await unknown_tool_error(carl, "alpha.echo")).error.code == -32602
    records = [
        r for r in (await audited(audit_path(manifold), before + 1))[before:] if r["identity"] == "carl"
    ]
    assert [(r["identity"], r["name"], r["effect"], r["outcome"]) for r in records] == [
        ("carl", "alpha.echo", "deny", "denied")
    ]
    assert records[0]["rules"] == ["contractors-no-destructive"]


# ---- dry run ---------------------------------------------------------------------------------


async def test_in_a_dry_run_a_denied_tool_stays_visible_and_callable_and_is_audited_as_such(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yaml").write_text(
        """\
version: 1
default: deny
rules:
  - id: contractors-tools
    effect: allow
    match: {roles: [contractor], tools: ["*"]}
  - id: no-echo-for-contractors
    effect: deny
    match: {roles: [contractor], tools: ["alpha.echo"]}
"""
    )
    config = {
        "auth": {"api_keys": api_keys()},
        "policy": {
            "files": ["policy.yaml"],
            "dry_run": True,
            "audit": {"path": "audit.jsonl", "include_arguments": True},
        },
        "servers": {"alpha": fixture_server("alpha", tools=1, page_size=10)},
    }
    async with running_manifold(tmp_path, config) as manifold, connect(manifold.url, "carl") as carl:
        assert "alpha.echo" in await listed(carl)
        result = await carl.call_tool("alpha.echo", {"note": "dry"})
        assert orjson.loads(text_of(result))["arguments"] == {"note": "dry"}
        assert "dry run: would deny tools/call alpha.echo to carl" in manifold.log()
    [record] = [r for r in audit(tmp_path / "audit.jsonl") if r["name"] == "alpha.echo"]
    assert (record["effect"], record["enforced"], record["outcome"]) == ("deny", "allow", "ok")
    assert record["rules"] == ["no-echo-for-contractors"]
    assert record["arguments"] == {"note": "dry"}  # include_arguments: true


# ---- hot reload ------------------------------------------------------------------------------


def allow_only(tool: str) -> str:
    rule = f'  - id: only\n    effect: allow\n    match: {{tools: ["{tool}"]}}\n'
    return "version: 1\ndefault: deny\nrules:\n" + rule


def reload_config(reload: bool) -> dict[str, Any]:
    return {
        "policy": {"files": ["policy.yaml"], "reload": reload},
        "servers": {"alpha": fixture_server("alpha", tools=2, page_size=10)},
    }


async def test_a_rewritten_policy_file_is_applied_and_a_broken_one_refused(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(allow_only("alpha.tool_000"))
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, reload_config(reload=True)) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        assert list(await listed(client)) == ["alpha.tool_000"]
        changed = notices.expect()
        policy.write_text(allow_only("alpha.tool_001"))
        with anyio.fail_after(15):
            await changed.wait()
        assert list(await listed(client)) == ["alpha.tool_001"]
        assert (await unknown_tool_error(client, "alpha.tool_000")).error.code == -32602
        assert text_of(await client.call_tool("alpha.tool_001", {})) == "alpha:tool_001"

        policy.write_text(allow_only("alpha.echo") + "  - id: only\n    effect: alow\n    match: {}\n")
        await logged(manifold, "policy reload refused, the previous policy stays in force")
        assert "effect" in manifold.log().split("policy reload refused")[-1]  # the problem is named
        assert list(await listed(client)) == ["alpha.tool_001"]
        assert text_of(await client.call_tool("alpha.tool_001", {})) == "alpha:tool_001"


async def test_sighup_rereads_the_policy_and_clients_are_told(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(allow_only("alpha.tool_000"))
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, reload_config(reload=False)) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        assert list(await listed(client)) == ["alpha.tool_000"]
        policy.write_text(allow_only("alpha.tool_001"))
        changed = notices.expect()
        manifold.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(15):
            await changed.wait()
        assert list(await listed(client)) == ["alpha.tool_001"]
        assert text_of(await client.call_tool("alpha.tool_001", {})) == "alpha:tool_001"


# ---- tool pins -------------------------------------------------------------------------------


def pins_config(directory: Path, mode: str) -> dict[str, Any]:
    return {
        "policy": {"pins": {"mode": mode, "path": str(directory / "pins" / "pins.json")}},
        "servers": {"alpha": policy_server(directory, tools=1, page_size=10)},
    }


async def redefine_echo(client: Client, notices: ListChanged) -> None:
    """Make the server change ``echo`` (a rug pull), and wait until Manifold has re-listed it."""
    changed = notices.expect()
    await client.call_tool("alpha.redefine", {"description": "now also deletes your files"})
    with anyio.fail_after(15):
        await changed.wait()


async def pinned(path: Path, key: str) -> None:
    """Wait (bounded) until the pins file holds ``key``: a worker thread writes it, soon after the
    tools are listed."""
    with anyio.fail_after(10):
        while key not in pins_in(path):  # noqa: ASYNC110 (a file has no event to wait on)
            await anyio.sleep(0.02)


def pins_in(path: Path) -> dict[str, str]:
    return orjson.loads(path.read_bytes())["pins"] if path.exists() else {}


async def accept_pins(config_path: Path) -> str:
    done = await anyio.run_process(
        [*MANIFOLD, "pins", "accept", "--config", str(config_path)], check=False, cwd=REPO
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_pins_warn_serves_a_drifted_tool_and_logs_the_drift(tmp_path: Path) -> None:
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "warn")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await pinned(tmp_path / "pins" / "pins.json", "alpha/echo")
        await redefine_echo(client, notices)
        tools = await listed(client)
        assert tools["alpha.echo"].description == "now also deletes your files"
        assert orjson.loads(text_of(await client.call_tool("alpha.echo", {"k": 1})))["arguments"] == {"k": 1}
        drift = [line for line in manifold.log().splitlines() if "pin drift" in line]
        assert len(drift) == 1
        assert "alpha.echo" in drift[0]
        assert "; served" in drift[0]


async def test_pins_block_hides_a_drifted_tool_until_accepted_and_restarted(tmp_path: Path) -> None:
    notices = ListChanged()
    config = pins_config(tmp_path, "block")
    async with (
        running_manifold(tmp_path, config) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await redefine_echo(client, notices)
        assert "alpha.echo" not in await listed(client)
        refused = await client.call_tool("alpha.echo", {})
        assert refused.is_error  # refused, naming the drift (not a bare "unknown tool")
        assert "changed since it was pinned" in text_of(refused)
        assert "hidden until accepted (manifold pins accept)" in manifold.log()
        accepted = await accept_pins(tmp_path / "manifold.yaml")
    assert "accepted: alpha.echo" in accepted
    async with (
        running_manifold(tmp_path, config) as manifold,
        connect(manifold.url) as client,
    ):
        tools = await listed(client)
        assert tools["alpha.echo"].description == "now also deletes your files"
        assert orjson.loads(text_of(await client.call_tool("alpha.echo", {"k": 2})))["arguments"] == {"k": 2}
        assert "pin drift" not in manifold.log()


async def test_a_call_to_a_tool_blocked_by_pin_drift_is_refused_naming_the_drift(tmp_path: Path) -> None:
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "block")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await redefine_echo(client, notices)
        try:
            result = await client.call_tool("alpha.echo", {})
        except MCPError as exc:
            refusal = exc.error.message
        else:
            assert result.is_error
            refusal = text_of(result)
    assert "changed since it was pinned" in refusal


async def test_pins_block_serves_an_accepted_tool_again_after_sighup(tmp_path: Path) -> None:
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "block")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await redefine_echo(client, notices)
        assert "alpha.echo" not in await listed(client)
        assert "accepted: alpha.echo" in await accept_pins(tmp_path / "manifold.yaml")
        changed = notices.expect()
        manifold.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(15):
            await changed.wait()
        assert "alpha.echo" in await listed(client)


async def test_pins_off_writes_no_pins_and_serves_a_changed_tool(tmp_path: Path) -> None:
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, pins_config(tmp_path, "off")) as manifold,
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await redefine_echo(client, notices)
        tools = await listed(client)
        assert tools["alpha.echo"].description == "now also deletes your files"
        assert orjson.loads(text_of(await client.call_tool("alpha.echo", {"k": 3})))["arguments"] == {"k": 3}
        assert "pin drift" not in manifold.log()
    assert not (tmp_path / "pins").exists()


# ---- prompts and resources the policy hides ----------------------------------------------------


async def test_a_hidden_prompt_or_resource_is_audited_and_answered_as_a_missing_one(tmp_path: Path) -> None:
    """carl (a contractor) may use tools only: r1's prompt and resources do not exist for him,
    and asking for them is one audit line each, denied, like a hidden tool."""
    (tmp_path / "policy.yaml").write_text(MAIN_POLICY)
    relay = str(REPO / "tests" / "fixtures" / "relay_server.py")
    config = {
        "auth": {"api_keys": api_keys()},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {"r1": {"command": sys.executable, "args": [relay, "--name", "r1"], "era": "handshake"}},
    }
    async with running_manifold(tmp_path, config) as running, connect(running.url, "carl") as carl:
        with pytest.raises(MCPError) as hidden_prompt:
            await carl.get_prompt("r1.greet", {"name": "x"})
        with pytest.raises(MCPError) as missing_prompt:
            await carl.get_prompt("r1.nothing", {"name": "x"})
        with pytest.raises(MCPError) as hidden_resource:
            await carl.read_resource("note://r1/static")
        with pytest.raises(MCPError) as missing_resource:
            await carl.read_resource("note://nowhere/static")
        with pytest.raises(MCPError) as hidden_completion:
            await carl.complete(
                PromptReference(type="ref/prompt", name="r1.greet"), {"name": "name", "value": "A"}
            )
        async with connect(running.url, "sam") as sam:  # staff: everything
            assert (await sam.read_resource("note://r1/static")).contents
    assert str(hidden_prompt.value) == str(hidden_completion.value) == "unknown prompt: r1.greet"
    assert hidden_prompt.value.error.code == missing_prompt.value.error.code == -32602
    # -32602 at 2026-07-28 (SEP-2164), -32002 before: the same either way.
    assert hidden_resource.value.error.code == missing_resource.value.error.code
    assert hidden_resource.value.error.message == "resource not found: note://r1/static"
    assert hidden_resource.value.error.data == {"uri": "note://r1/static"}
    records = audit(tmp_path / "audit.jsonl")
    assert [(r["identity"], r["name"], r["effect"], r["outcome"]) for r in records] == [
        ("carl", "r1.greet", "deny", "denied"),
        ("carl", "note://r1/static", "deny", "denied"),
        ("carl", "r1.greet", "deny", "denied"),  # its completion
        ("sam", "note://r1/static", "allow", "ok"),
    ]
