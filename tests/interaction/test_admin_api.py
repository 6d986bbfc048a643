"""The admin API end to end: two ``manifold serve`` processes sharing a real Redis, fronting a
real fixture server (and one that fails at start), driven by the official SDK client and raw
HTTP. Switch a tool off on one replica: a client's call is refused on both within a second;
see a failing server's reason with its stderr redacted; restart and drain on every replica;
end a session another replica holds; plan and apply a reload; every answer checked against the
OpenAPI document."""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import orjson
import pytest
import yaml
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.interaction.harness import RunningManifold, fixture_server, post, raw_session, running_manifold
from tests.ratelimit.redis_server import REDIS_SERVER, RedisServer, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ADMIN_KEY = "admin-key-for-the-admin-api-tests"
USER_KEY = "user-key-for-the-admin-api-tests"
SECRET = "replicas-share-this-secret-of-32+chars"
LEAKED = "stderr-leaks-this-configured-secret-4242"


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def broken_server() -> dict[str, Any]:
    """A stdio server that prints its own secret to stderr and exits at start."""
    code = (
        "import os, sys; sys.stderr.write('cannot start: token=' + os.environ['TOKEN'] + '\\n'); sys.exit(3)"
    )
    return {"command": sys.executable, "args": ["-c", code], "env": {"TOKEN": LEAKED}, "connect_timeout": 5}


def config(redis: RedisServer, name: str) -> dict[str, Any]:
    return {
        "sessions": {"secret": SECRET},
        "auth": {
            "api_keys": [
                {"name": "root", "key": stored(ADMIN_KEY), "roles": ["admin"]},
                {"name": "ann", "key": stored(USER_KEY), "roles": ["dev"]},
            ]
        },
        "admin": {"roles": ["admin"], "redis_url": redis.url, "replica": name, "reply_wait": 2},
        "servers": {"alpha": fixture_server("alpha", tools=2), "broken": broken_server()},
    }


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed to share admin actions between replicas)")
    (tmp_path / "redis").mkdir()
    async with running_redis(tmp_path / "redis") as server:
        yield server


@asynccontextmanager
async def two_replicas(tmp_path: Path, redis: RedisServer) -> AsyncIterator[list[RunningManifold]]:
    async with AsyncExitStack() as stack:
        running = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            running.append(
                await stack.enter_async_context(running_manifold(tmp_path / name, config(redis, name)))
            )
        yield running


@asynccontextmanager
async def sdk_client(manifold: RunningManifold, key: str = USER_KEY) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(manifold.url, http_client=http)) as client,
    ):
        yield client


class AdminClient:
    """Raw HTTP to one replica's /admin/api, every answer checked against its OpenAPI document."""

    def __init__(
        self, http: aiohttp.ClientSession, manifold: RunningManifold, document: dict[str, Any]
    ) -> None:
        self.base = manifold.url.replace("/mcp", "/admin/api")
        self._http = http
        self._document = document

    async def call(
        self, method: str, path: str, schema: str, body: dict[str, Any] | None = None, key: str = ADMIN_KEY
    ) -> tuple[int, Any]:
        async with self._http.request(
            method, self.base + path, json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            answer = orjson.loads(await response.read())
        check = schema if response.status == 200 else "Error"
        ref = {"$ref": f"#/components/schemas/{check}", "components": self._document["components"]}
        assert [e.message for e in Draft202012Validator(ref).iter_errors(answer)] == [], (path, answer)
        return response.status, answer


@asynccontextmanager
async def admins(replicas: list[RunningManifold]) -> AsyncIterator[list[AdminClient]]:
    async with aiohttp.ClientSession() as http:
        base = replicas[0].url.replace("/mcp", "/admin/api")
        async with http.get(
            f"{base}/openapi.json", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as response:
            assert response.status == 200
            document = orjson.loads(await response.read())
        yield [AdminClient(http, replica, document) for replica in replicas]


def refused(result: Any) -> bool:
    return bool(result.is_error) and "switched off" in str(result.content)


async def test_a_tool_switched_off_on_one_replica_is_refused_on_both_within_a_second(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with (
        two_replicas(tmp_path, redis) as (a, b),
        admins([a, b]) as (admin_a, admin_b),
        sdk_client(a) as on_a,
        sdk_client(b) as on_b,
    ):
        for client in (on_a, on_b):
            assert not (await client.call_tool("alpha.echo", {"n": 0})).is_error
        body = {"tool": "alpha.echo", "minutes": 5, "reason": "misbehaves"}
        started = time.monotonic()
        status, overlay = await admin_a.call("POST", "/tools/off", "Overlay", body)
        assert status == 200
        assert overlay["by"] == "root"
        waits = {}
        for name, client in (("a", on_a), ("b", on_b)):
            with anyio.fail_after(1.0):
                while not refused(await client.call_tool("alpha.echo", {"n": 1})):  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.02)
            waits[name] = time.monotonic() - started
        assert max(waits.values()) < 1.0, waits
        # Another tool still works; explain on the other replica shows the overlay as such.
        assert not (await on_b.call_tool("alpha.tool_000", {})).is_error
        status, explained = await admin_b.call(
            "GET", "/explain?tool=alpha.echo&identity=ann&role=dev", "Explain"
        )
        assert (explained["effect"], explained["policy_effect"]) == ("deny", "allow")
        assert explained["overlay"]["reason"] == "misbehaves"
        # Switched on again from the other replica: both serve the tool again.
        status, removed = await admin_b.call("POST", "/tools/on", "Removed", {"tool": "alpha.echo"})
        assert len(removed["removed"]) == 1
        for client in (on_a, on_b):
            with anyio.fail_after(1.0):
                while (await client.call_tool("alpha.echo", {"n": 2})).is_error:  # noqa: ASYNC110 - likewise
                    await anyio.sleep(0.02)
        status, audit = await admin_b.call("GET", "/audit?identity=root", "Audit")
        assert [e["action"] for e in audit] == ["tool_on"]  # each replica's own actions
        status, audit = await admin_a.call("GET", "/audit?identity=root", "Audit")
        assert [(e["action"], e["from"]) for e in audit] == [("tool_off", "127.0.0.1")]


async def test_a_failing_server_shows_why_with_its_stderr_redacted_and_acts_reach_both(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with two_replicas(tmp_path, redis) as (a, b), admins([a, b]) as (admin_a, admin_b):
        with anyio.fail_after(10):
            while True:
                _, broken = await admin_a.call("GET", "/servers/broken", "Server")
                # The stderr line can show before the exit that sets last_error is seen.
                if broken["stderr_tail"] and broken["last_error"]:
                    break
                await anyio.sleep(0.1)
        assert broken["state"] != "ready"
        assert broken["last_error"]
        assert any("cannot start: token=[REDACTED]" in line for line in broken["stderr_tail"])
        _, everything = await admin_a.call("GET", "/servers", "Servers")
        assert LEAKED not in orjson.dumps(everything).decode()
        # A non-admin identity: 403, the same body as for a path that does not exist.
        forbidden = [
            await admin_a.call("GET", "/servers", "Error", key=USER_KEY),
            await admin_a.call("GET", "/no/such/path", "Error", key=USER_KEY),
        ]
        assert forbidden[0] == forbidden[1]
        assert forbidden[0][0] == 403
        # Drain on one replica: no new calls on either; undrain: calls again.
        _, acted = await admin_b.call("POST", "/servers/alpha/drain", "Acted", {})
        assert sorted((r["replica"], r["acted"]) for r in acted["replicas"]) == [("a", True), ("b", True)]
        for replica in (a, b):
            async with sdk_client(replica) as client:
                with pytest.raises(Exception, match="drained by an operator"):
                    await client.call_tool("alpha.echo", {})
        await admin_b.call("POST", "/servers/alpha/undrain", "Acted", {})
        async with sdk_client(a) as client:
            assert not (await client.call_tool("alpha.echo", {})).is_error
            assert not (await client.call_tool("alpha.echo", {"again": True})).is_error
        # Manifold's own measurements of the calls above.
        _, alpha = await admin_a.call("GET", "/servers/alpha", "Server")
        calls = alpha["calls"]
        assert calls["calls"] >= 2
        assert calls["p50_ms"] is not None
        assert calls["p99_ms"] >= calls["p50_ms"]
        assert sum(calls["series"]) == calls["calls"]
        # Restart on every replica: each answers, and alpha serves again on both.
        _, acted = await admin_a.call("POST", "/servers/alpha/restart", "Acted", {})
        assert sorted((r["replica"], r["acted"]) for r in acted["replicas"]) == [("a", True), ("b", True)]
        for replica in (a, b):
            async with sdk_client(replica) as client:
                with anyio.fail_after(10):
                    while True:
                        try:
                            if not (await client.call_tool("alpha.echo", {})).is_error:
                                break
                        except Exception:  # while it reconnects
                            pass
                        await anyio.sleep(0.1)


@asynccontextmanager
async def with_sessions(
    tmp_path: Path, redis: RedisServer
) -> AsyncIterator[tuple[list[RunningManifold], list[AdminClient], aiohttp.ClientSession]]:
    """Two replicas, an admin client of each, and a user's HTTP session to open MCP sessions."""
    async with (
        two_replicas(tmp_path, redis) as replicas,
        admins(replicas) as clients,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {USER_KEY}"}) as http,
    ):
        yield replicas, clients, http


async def test_a_session_held_by_one_replica_is_ended_from_the_other(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with with_sessions(tmp_path, redis) as ((_, b), (admin_a, admin_b), http):
        session = await raw_session(http, b.url)
        _, held = await admin_b.call("GET", "/sessions", "Sessions")
        (shown,) = [s for s in held if session.startswith(s["id"])]
        assert len(shown["id"]) == 12
        assert shown["identity"]["name"] == "ann"
        status, acted = await admin_a.call("POST", f"/sessions/{shown['id']}/end", "Acted", {})
        assert {r["replica"]: r["acted"] for r in acted["replicas"]} == {"a": False, "b": True}
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        status, _, _ = await post(http, b.url, ping, {"Mcp-Session-Id": session})
        assert status == 404
        _, held = await admin_b.call("GET", "/sessions", "Sessions")
        assert not [s for s in held if session.startswith(s["id"])]


async def test_sessions_and_servers_are_read_from_every_replica_each_under_its_name(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with with_sessions(tmp_path, redis) as ((a, b), (admin_a, _), http):
        on_a, on_b = await raw_session(http, a.url), await raw_session(http, b.url)
        status, read = await admin_a.call("GET", "/replicas/sessions", "Everywhere")
        assert status == 200
        assert read["unanswered"] == 0
        held = {r["replica"]: [s["id"] for s in r["sessions"]] for r in read["replicas"]}
        assert set(held) == {"a", "b"}  # before: only the replica asked
        assert [on_a.startswith(i) for i in held["a"]].count(True) == 1
        assert [on_b.startswith(i) for i in held["b"]].count(True) == 1
        assert not [i for i in held["a"] if on_b.startswith(i)]  # each replica its own
        _, read = await admin_a.call("GET", "/replicas/servers", "Everywhere")
        states = {r["replica"]: {s["id"]: s["state"] for s in r["servers"]} for r in read["replicas"]}
        assert set(states) == {"a", "b"}
        assert {v["alpha"] for v in states.values()} == {"ready"}
        status, refused = await admin_a.call("GET", "/replicas/credentials", "Everywhere")
        assert status == 404
        assert "servers or sessions" in refused["message"]


async def test_a_reload_is_planned_then_applied(tmp_path: Path, redis: RedisServer) -> None:
    async with two_replicas(tmp_path, redis) as (a, _), admins([a]) as (admin_a,):
        new = config(redis, "a")
        new["servers"] = {"alpha": new["servers"]["alpha"], "beta": fixture_server("beta", tools=1)}
        new["log_level"] = "debug"
        text = yaml.safe_dump(new)
        status, plan = await admin_a.call("POST", "/reload/plan", "Plan", {"config": text})
        assert (plan["add"], plan["remove"], plan["needs_restart"]) == (["beta"], ["broken"], ["log_level"])
        _, servers = await admin_a.call("GET", "/servers", "Servers")
        assert sorted(s["id"] for s in servers) == ["alpha", "broken"]  # a plan changes nothing
        status, bad = await admin_a.call("POST", "/reload/plan", "Error", {"config": "servers: [1"})
        assert status == 400
        assert "invalid config" in bad["message"]
        status, applied = await admin_a.call("POST", "/reload/apply", "Applied", {"config": text})
        assert applied["outcome"] == "applied"
        _, servers = await admin_a.call("GET", "/servers", "Servers")
        assert sorted(s["id"] for s in servers) == ["alpha", "beta"]
        async with sdk_client(a) as client:
            with anyio.fail_after(10):
                while "beta.echo" not in [t.name for t in (await client.list_tools()).tools]:  # noqa: ASYNC110
                    await anyio.sleep(0.1)


async def test_a_held_credential_is_listed_without_its_value_and_revoked(tmp_path: Path) -> None:
    from proxy.credentials.sealing import new_key
    from tests.fixtures.spawn import fixture_command
    from tests.interaction.harness import MANIFOLD, REPO, write_config

    held = "ghp_ann-personal-token-never-shown-5555"
    command = [*fixture_command("st", tools=1), "--report-env", "TOKEN"]
    setup = {
        **config_without_redis(),
        "credentials": {"store": "file", "path": str(tmp_path / "credentials.json"), "key": new_key()},
        "servers": {
            "st": {
                "command": command[0],
                "args": command[1:],
                "env": {"TOKEN": LEAKED},
                "credentials": {"mode": "secret", "env": "TOKEN"},
            }
        },
    }
    path = write_config(tmp_path / "for-cli.yaml", setup)
    kept = await anyio.run_process(
        [
            *MANIFOLD,
            "credentials",
            "set",
            "--config",
            str(path),
            "--server",
            "st",
            "--identity",
            "ann",
            "--secret-stdin",
        ],
        input=f"{held}\n".encode(),
        cwd=REPO,
        check=False,
    )
    assert kept.returncode == 0, kept.stderr
    async with running_manifold(tmp_path, setup) as manifold, admins([manifold]) as (api,):
        async with sdk_client(manifold) as client:
            assert held in str((await client.call_tool("st.report", {})).content)
        _, listed = await api.call("GET", "/credentials", "Credentials")
        assert listed == [
            {
                "server": "st",
                "kind": "secret",
                "holder": {"source": "api_key", "issuer": "", "subject": "ann"},
            }
        ]
        # No answer of the API carries the held credential, a configured secret or a key.
        for path_and_query, schema in ROUTES_TO_READ:
            status, answer = await api.call("GET", path_and_query, schema)
            assert status == 200, (path_and_query, answer)
            shown = orjson.dumps(answer).decode()
            for secret in (held, LEAKED, ADMIN_KEY, USER_KEY, SECRET):
                assert secret not in shown, path_and_query
        holder = {"source": "api_key", "issuer": "", "subject": "ann"}
        status, revoked = await api.call(
            "POST", "/credentials/revoke", "Revoked", {"server": "st", "kind": "secret", "holder": holder}
        )
        assert revoked == {"revoked": True}
        _, listed = await api.call("GET", "/credentials", "Credentials")
        assert listed == []
        async with sdk_client(manifold) as client:
            with pytest.raises(Exception, match="credentials set --server st --identity ann"):
                await client.call_tool("st.report", {})
        _, audit = await api.call("GET", "/audit?identity=root", "Audit")
        assert [(e["action"], e["target"]) for e in audit] == [
            ("revoke_credential", "st/secret/api_key//ann")
        ]


def config_without_redis() -> dict[str, Any]:
    return {
        "auth": {
            "api_keys": [
                {"name": "root", "key": stored(ADMIN_KEY), "roles": ["admin"]},
                {"name": "ann", "key": stored(USER_KEY), "roles": ["dev"]},
            ]
        },
        "admin": {},
    }


ROUTES_TO_READ = [
    ("/servers", "Servers"),
    ("/servers/st", "Server"),
    ("/endpoints", "Endpoints"),
    ("/catalog?identity=ann&role=dev", "Catalog"),
    ("/policy", "Policy"),
    ("/explain?identity=ann&tool=st.report", "Explain"),
    ("/sessions", "Sessions"),
    ("/approvals", "Approvals"),
    ("/credentials", "Credentials"),
    ("/overlays", "Overlays"),
    ("/ratelimits", "Buckets"),
    ("/refusals", "Refusals"),
    ("/audit", "Audit"),
]


async def test_with_its_own_listener_the_api_is_there_and_not_beside_mcp(tmp_path: Path) -> None:
    from tests.fixtures.spawn import free_port

    port = free_port()
    setup = {**config_without_redis(), "admin": {"listen": {"host": "127.0.0.1", "port": port}}}
    async with running_manifold(tmp_path, setup) as manifold, aiohttp.ClientSession() as http:
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        main = manifold.url.replace("/mcp", "/admin/api/servers")
        async with http.get(main, headers=auth) as response:
            assert response.status == 404
        async with http.get(f"http://127.0.0.1:{port}/admin/api/servers", headers=auth) as response:
            assert response.status == 200
            assert response.headers["content-type"] == "application/json"
            assert response.headers["x-content-type-options"] == "nosniff"
        async with http.post(f"http://127.0.0.1:{port}/mcp", json={}, headers=auth) as response:
            assert response.status == 404  # only the admin API is served there
        # The Host check applies as on /mcp: a rebinding page's name is refused.
        headers = {**auth, "Host": "evil.example"}
        async with http.get(f"http://127.0.0.1:{port}/admin/api/servers", headers=headers) as response:
            assert response.status == 403


async def test_the_catalog_is_viewed_as_a_role_sees_it_and_explain_names_the_rule(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "version: 1\ndefault: allow\nrules:\n"
        "  - {id: interns-read-only, effect: deny, match: {roles: [intern], tools: ['alpha.tool_*']}}\n"
    )
    setup = {
        **config_without_redis(),
        "policy": {"files": ["policy.yaml"]},
        "servers": {"alpha": fixture_server("alpha", tools=2)},
    }
    async with running_manifold(tmp_path, setup) as manifold, admins([manifold]) as (api,):
        _, as_dev = await api.call("GET", "/catalog?identity=ann&role=dev", "Catalog")
        _, as_intern = await api.call("GET", "/catalog?identity=ivy&role=intern", "Catalog")
        dev_tools = {t["name"]: t for t in as_dev["tools"]}
        assert {"alpha.tool_000", "alpha.tool_001", "alpha.echo"} <= set(dev_tools)
        assert (dev_tools["alpha.echo"]["server"], dev_tools["alpha.echo"]["original_name"]) == (
            "alpha",
            "echo",
        )
        assert dev_tools["alpha.echo"]["annotations"]["source"]
        intern_tools = {t["name"] for t in as_intern["tools"]}
        assert "alpha.echo" in intern_tools
        assert not intern_tools & {"alpha.tool_000", "alpha.tool_001"}
        _, explained = await api.call(
            "GET", "/explain?identity=ivy&role=intern&tool=alpha.tool_000", "Explain"
        )
        assert (explained["effect"], explained["rules"]) == ("deny", ["interns-read-only"])
        _, policy = await api.call("GET", "/policy", "Policy")
        assert [(r["id"], r["line"]) for r in policy["rules"]] == [("interns-read-only", 4)]


async def test_a_drifted_tool_is_accepted_and_served_again_without_a_restart(tmp_path: Path) -> None:
    from tests.interaction.test_policy import ListChanged, connect, pinned, pins_config, redefine_echo

    setup = {**config_without_redis(), **pins_config(tmp_path, "block")}
    setup["auth"]["anonymous"] = {"enabled": True}  # the policy tests' client has no key
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, setup) as manifold,
        admins([manifold]) as (api,),
        connect(manifold.url, mode="legacy", message_handler=notices) as client,
    ):
        await pinned(tmp_path / "pins" / "pins.json", "alpha/echo")
        await redefine_echo(client, notices)
        assert (await client.call_tool("alpha.echo", {})).is_error
        _, accepted = await api.call("POST", "/pins/accept", "Accepted", {"tools": ["alpha.echo"]})
        assert accepted == {"accepted": ["alpha.echo"]}
        with anyio.fail_after(10):
            while (await client.call_tool("alpha.echo", {"k": 1})).is_error:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.1)
        _, audit = await api.call("GET", "/audit?identity=root", "Audit")
        assert [(e["action"], e["target"]) for e in audit] == [("accept_pins", "alpha.echo")]
