"""Each user reaches each server as themself (``credentials.mode: secret``), attacked by the
users: a real ``manifold serve`` with API-key identities, the official SDK client in both eras,
the stdio fixture server (tool ``report``: the variable its process was started with) and the
HTTP fixture server (``report``: the headers its request carried). Secrets are kept with the real
``manifold credentials`` command, in the sealed file store, and in Redis shared by two replicas.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from proxy.credentials.sealing import new_key
from proxy.protocol import versions
from tests.fixtures.spawn import fixture_command, free_port, running_http_process
from tests.interaction.harness import MANIFOLD, REPO, RunningManifold, running_manifold, write_config
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
MODES = [pytest.param(V, id="2026-07-28"), pytest.param("legacy", id="2025-11-25")]
KEYS = {
    name: f"mfd_{name}-credentials-key-0123456789abcdefghijklmnop"
    for name in ("alice", "bob", "carol", "dave", "mallory")
}
SECRETS = {"alice": "ghp_alice-personal-token-1111", "bob": "ghp_bob-personal-token-22222"}
LISTING_TOKEN = "service-account-listing-token-3333"  # the configured (shared) credentials


def api_keys() -> list[dict[str, Any]]:
    return [
        {"name": name, "key": f"sha256:{hashlib.sha256(key.encode()).hexdigest()}", "roles": []}
        for name, key in KEYS.items()
    ]


def report_server(*flags: str) -> dict[str, Any]:
    command = [*fixture_command("st", tools=1), *flags]
    return {"command": command[0], "args": command[1:]}


async def credentials_cli(config: Path, *args: str, secret: str | None = None) -> tuple[int, str]:
    """``manifold credentials …``: its exit code and everything it printed."""
    result = await anyio.run_process(
        [*MANIFOLD, "credentials", *args, "--config", str(config)],
        input=None if secret is None else f"{secret}\n".encode(),
        check=False,
        cwd=REPO,
        stderr=-2,  # subprocess.STDOUT
    )
    return result.returncode, result.stdout.decode()


async def keep(config: Path, server: str, name: str, secret: str) -> None:
    code, said = await credentials_cli(
        config, "set", "--server", server, "--identity", name, "--secret-stdin", secret=secret
    )
    assert code == 0, said


@dataclass
class Served:
    manifold: RunningManifold
    config: Path  # what `manifold credentials` is given
    store: Path
    audit: Path


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("credentials")
    port = free_port()
    http_command = [
        *fixture_command("ht", tools=1, transport="streamable-http", port=port),
        "--report-header", "authorization",
        "--report-header", "x-api-key",
    ]  # fmt: skip
    config: dict[str, Any] = {
        "auth": {"api_keys": api_keys()},
        "credentials": {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()},
        "policy": {"audit": {"path": str(tmp / "audit.jsonl")}},
        "servers": {
            "st": {
                **report_server("--report-env", "TOKEN", "--report-env", "REGION"),
                # The configured env: the shared connection's (listing), and merged under each
                # identity's own.
                "env": {"TOKEN": LISTING_TOKEN, "REGION": "eu"},
                "credentials": {"mode": "secret", "env": "TOKEN"},
            },
            "ht": {
                "url": f"http://127.0.0.1:{port}/mcp",
                "headers": {"Authorization": f"Bearer {LISTING_TOKEN}"},
                "credentials": {"mode": "secret"},
            },
        },
    }
    config_path = write_config(tmp / "for-cli.yaml", config)
    for name, secret in SECRETS.items():
        await keep(config_path, "st", name, secret)
        await keep(config_path, "ht", name, f"{secret}-http")
    async with running_http_process(http_command, port), running_manifold(tmp, config) as running:
        yield Served(running, config_path, tmp / "credentials.json", tmp / "audit.jsonl")


@asynccontextmanager
async def client(url: str, name: str, mode: str, *, header: str = "X-API-Key") -> AsyncIterator[Client]:
    value = KEYS[name] if header == "X-API-Key" else f"Bearer {KEYS[name]}"
    async with (
        httpx2.AsyncClient(headers={header: value}, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as session,
    ):
        yield session


async def report(session: Client, server: str) -> dict[str, Any]:
    result = await session.call_tool(f"{server}.report", {})
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    assert not result.is_error, text
    found: dict[str, Any] = orjson.loads(text)
    return found


@pytest.mark.parametrize("mode", MODES)
async def test_each_identity_finds_only_its_own_secret_in_its_server_process(
    served: Served, mode: str
) -> None:
    async with (
        client(served.manifold.url, "alice", mode) as alice,
        client(served.manifold.url, "bob", mode) as bob,
    ):
        for _ in range(2):  # and again, on the running processes
            assert (await report(alice, "st"))["env"] == {"TOKEN": SECRETS["alice"], "REGION": "eu"}
            assert (await report(bob, "st"))["env"] == {"TOKEN": SECRETS["bob"], "REGION": "eu"}


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_server_gets_each_identitys_header_and_never_the_callers_own_token(
    served: Served, mode: str
) -> None:
    # Alice signs in to Manifold with Authorization: Bearer <her API key>, Bob with X-API-Key.
    async with (
        client(served.manifold.url, "alice", mode, header="Authorization") as alice,
        client(served.manifold.url, "bob", mode) as bob,
    ):
        seen_by_alice = (await report(alice, "ht"))["headers"]
        seen_by_bob = (await report(bob, "ht"))["headers"]
    assert seen_by_alice == {"authorization": [f"Bearer {SECRETS['alice']}-http"], "x-api-key": []}
    assert seen_by_bob == {"authorization": [f"Bearer {SECRETS['bob']}-http"], "x-api-key": []}


@pytest.mark.parametrize("mode", MODES)
async def test_an_identity_with_no_secret_is_told_what_to_do_and_reaches_nothing(
    served: Served, mode: str
) -> None:
    async with client(served.manifold.url, "carol", mode) as carol:
        for server in ("st", "ht"):
            with pytest.raises(MCPError) as refused:
                await carol.call_tool(f"{server}.report", {})
            error = refused.value.error
            assert error.code == -32000
            assert f"server {server!r} needs your own credentials" in error.message
            assert f"manifold credentials set --server {server} --identity carol" in error.message
            assert error.data == {"server": server, "reason": "sign_in_needed"}
            assert LISTING_TOKEN not in error.message


async def test_a_revoked_secret_fails_the_next_call_and_a_replaced_one_is_used_by_it(served: Served) -> None:
    await keep(served.config, "st", "dave", "dave-first-token-4444")
    async with client(served.manifold.url, "dave", V) as dave:
        assert (await report(dave, "st"))["env"]["TOKEN"] == "dave-first-token-4444"
        await keep(served.config, "st", "dave", "dave-second-token-5555")
        assert (await report(dave, "st"))["env"]["TOKEN"] == "dave-second-token-5555"

        code, said = await credentials_cli(served.config, "revoke", "--server", "st", "--identity", "dave")
        assert code == 0, said
        with pytest.raises(MCPError) as refused:
            await report(dave, "st")
        assert refused.value.error.data == {"server": "st", "reason": "sign_in_needed"}
    code, said = await credentials_cli(served.config, "revoke", "--server", "st", "--identity", "dave")
    assert code == 1
    assert "nothing is kept" in said


async def test_a_sealed_secret_copied_to_another_identity_does_not_open_for_it(served: Served) -> None:
    # Mallory can write the store file (not the key): he copies Alice's entry as his own.
    document = orjson.loads(served.store.read_bytes())
    alices = next(e for e in document["entries"] if e["server"] == "st" and e["subject"] == "alice")
    document["entries"].append({**alices, "subject": "mallory"})
    served.store.write_bytes(orjson.dumps(document))
    try:
        async with client(served.manifold.url, "mallory", V) as mallory:
            with pytest.raises(MCPError) as refused:
                await mallory.call_tool("st.report", {})
        assert refused.value.error.code == -32000
        assert "cannot be read" in refused.value.error.message
        assert SECRETS["alice"] not in refused.value.error.message
    finally:
        document["entries"].remove({**alices, "subject": "mallory"})
        served.store.write_bytes(orjson.dumps(document))


async def test_no_secret_is_in_the_store_file_the_listing_the_log_or_the_audit(served: Served) -> None:
    async with client(served.manifold.url, "alice", V) as alice:
        await report(alice, "st")
        await report(alice, "ht")
    code, listing = await credentials_cli(served.config, "list")
    assert code == 0
    assert "st\tsecret\tapi_key\t-\talice" in listing
    assert "ht\tsecret\tapi_key\t-\tbob" in listing
    with anyio.fail_after(10):
        while not served.audit.exists() or b'"credentials":"secret"' not in served.audit.read_bytes():  # noqa: ASYNC110
            await anyio.sleep(0.05)  # a worker thread writes the audit log: no event to wait on
    records = [orjson.loads(line) for line in served.audit.read_bytes().splitlines()]
    assert {"identity": "alice", "server": "st", "credentials": "secret"}.items() <= next(
        r for r in records if r["identity"] == "alice" and r["server"] == "st"
    ).items()
    texts = {
        "store": served.store.read_text(),
        "listing": listing,
        "log": served.manifold.log(),
        "audit": served.audit.read_text(),
    }
    for secret in SECRETS.values():
        for where, text in texts.items():
            assert secret not in text, where


# ---- Redis: one store, two replicas ------------------------------------------------------------


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
async def test_two_replicas_serve_each_identity_its_secret_from_redis_and_both_honour_a_revoke(
    tmp_path: Path,
) -> None:
    async with running_redis(tmp_path) as redis:
        config: dict[str, Any] = {
            "auth": {"api_keys": api_keys()},
            "credentials": {"store": "redis", "redis_url": redis.url, "key": new_key()},
            "servers": {
                "st": {
                    **report_server("--report-env", "TOKEN"),
                    "credentials": {"mode": "secret", "env": "TOKEN"},
                }
            },
        }
        config_path = write_config(tmp_path / "for-cli.yaml", config)
        await keep(config_path, "st", "alice", SECRETS["alice"])
        stored = await _redis_values(redis.url)
        assert len(stored) == 1
        assert SECRETS["alice"].encode() not in stored[0]
        one, two = tmp_path / "one", tmp_path / "two"
        one.mkdir()
        two.mkdir()
        async with running_manifold(one, config) as first, running_manifold(two, config) as second:
            for replica in (first, second):
                async with client(replica.url, "alice", V) as alice:
                    assert (await report(alice, "st"))["env"] == {"TOKEN": SECRETS["alice"]}
            code, said = await credentials_cli(config_path, "revoke", "--server", "st", "--identity", "alice")
            assert code == 0, said
            for replica in (first, second):
                async with client(replica.url, "alice", V) as alice:
                    with pytest.raises(MCPError) as refused:
                        await alice.call_tool("st.report", {})
                    assert refused.value.error.data == {"server": "st", "reason": "sign_in_needed"}


async def _redis_values(url: str) -> list[bytes]:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        values = [await client.get(key) async for key in client.scan_iter()]
        return [value.encode() if isinstance(value, str) else value or b"" for value in values]
    finally:
        await client.aclose()
