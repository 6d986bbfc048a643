"""End to end, issue #27: with ``audit.include_arguments: true``, the secrets Manifold knows of
that arrive in a tool call's arguments are written to the audit log redacted, as log lines are:
the caller's own API key (the config holds only its SHA-256), a key read from the environment,
and a configured server secret (an ``env`` value)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest

from tests.interaction.harness import fixture_server, post, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HASHED_KEY = "mfd_" + "h" * 43
ENV_KEY = "operator-chosen-key-from-env-0123"
SERVER_SECRET = "server-env-secret-0123456789"


async def test_secrets_in_arguments_are_redacted_in_the_audit_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUDIT_TEST_KEY", ENV_KEY)  # the child process inherits it
    audit = tmp_path / "audit.jsonl"
    server = fixture_server("notes", tools=2)
    server["env"] = {"NOTES_TOKEN": SERVER_SECRET}
    config = {
        "auth": {
            "api_keys": [
                {"name": "ci", "key": "sha256:" + hashlib.sha256(HASHED_KEY.encode()).hexdigest()},
                {"name": "ops", "key": "env:AUDIT_TEST_KEY"},
            ]
        },
        "servers": {"notes": server},
        "policy": {"audit": {"path": str(audit), "include_arguments": True}, "pins": {"mode": "off"}},
    }
    assert os.environ["AUDIT_TEST_KEY"] == ENV_KEY
    text = f"keys {HASHED_KEY} and {ENV_KEY}; secret {SERVER_SECRET}"
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {HASHED_KEY}"}
        async with http.post(
            manifold.url,
            data=orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                }
            ),
            headers={
                **headers,
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        ) as response:
            assert response.status == 200
            session = response.headers["mcp-session-id"]
        call: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "notes.echo", "arguments": {"text": text}},
        }
        status, _, answer = await post(http, manifold.url, call, {**headers, "Mcp-Session-Id": session})
        assert status == 200, answer
        with anyio.fail_after(10):  # a worker thread writes the audit log
            while not audit.exists() or b"tools/call" not in audit.read_bytes():  # noqa: ASYNC110
                await anyio.sleep(0.05)
    written = audit.read_text()
    for secret in (HASHED_KEY, ENV_KEY, SERVER_SECRET):
        assert secret not in written
    [record] = [orjson.loads(line) for line in written.splitlines() if b'"tools/call"' in line.encode()]
    assert record["arguments"] == {"text": "keys [REDACTED] and [REDACTED]; secret [REDACTED]"}
