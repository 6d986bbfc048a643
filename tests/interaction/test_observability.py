"""End to end, as the attacker: what ``/healthz``, ``/readyz`` and ``/metrics`` give away.

A page rebinding its domain to Manifold's address, a caller without credentials, and an MCP
client with a key but no operator role each try to read server addresses, credentials in
upstream URLs, a failing server's stderr, and the tool names in the metrics. Behind Manifold: an
HTTP server that does not answer, configured with a password and a token in its URL, and a
stdio server that prints a secret to stderr as it crashes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
import yaml

from proxy.auth.apikeys import generate_api_key
from tests.fixtures.spawn import free_port
from tests.interaction.harness import (
    REPO,
    RunningManifold,
    fixture_server,
    prometheus_binary,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

UNRULY = str(REPO / "tests" / "fixtures" / "unruly_stdio_server.py")
OBSERVER_KEY, OBSERVER_STORED = generate_api_key()
USER_KEY, USER_STORED = generate_api_key()
KEYS = [
    {"name": "prometheus", "key": OBSERVER_STORED, "roles": ["observer"]},
    {"name": "alice", "key": USER_STORED, "roles": ["dev"]},
]
# What no caller without the role may read, and nobody at all in clear.
DOWN_PORT = free_port()  # nothing listens: the server stays down
PASSWORD, TOKEN = "pa55-w0rd-xyzzy", "t0ken-s3cret-plugh"
DOWN_URL = f"http://alice:{PASSWORD}@127.0.0.1:{DOWN_PORT}/mcp?access_token={TOKEN}"
STDERR_SECRET = "hunter2-secret-value"  # what the crashing server prints (unruly_stdio_server.py)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def servers() -> dict[str, Any]:
    return {
        "notes": fixture_server("notes", tools=2),
        "down": {"url": DOWN_URL, "transport": "streamable-http", "required": True, "connect_timeout": 2},
        "crashy": {"command": sys.executable, "args": [UNRULY, "--crash-on-start"], "era": "handshake"},
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {"auth": {"api_keys": KEYS}, "servers": servers()}
    async with running_manifold(tmp_path_factory.mktemp("observability"), config) as running:
        yield running


def url_of(manifold: RunningManifold, path: str) -> str:
    return manifold.url.removesuffix("/mcp") + path


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers or {}) as response:
        return response.status, await response.text()


# ---- DNS rebinding -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_a_rebinding_page_is_refused_on_the_probes_as_it_is_on_mcp(
    manifold: RunningManifold, path: str
) -> None:
    port = manifold.url.split(":")[2].split("/")[0]
    rebound = {"Host": f"attacker.example:{port}", **bearer(OBSERVER_KEY)}
    async with aiohttp.ClientSession() as http:
        async with http.post(manifold.url, headers=rebound, data=b"{}") as mcp:
            assert mcp.status == 403  # what /mcp does with it
        status, body = await get(url_of(manifold, path), rebound)
        assert (status, body.strip()) == (403, "Forbidden: Host not allowed")
        foreign = {"Origin": "http://attacker.example", **bearer(OBSERVER_KEY)}
        status, body = await get(url_of(manifold, path), foreign)
        assert (status, body.strip()) == (403, "Forbidden: Origin not allowed")
        # A probe that addresses the pod by IP (kubelet, Prometheus' discovery) is no rebinding.
        status, _ = await get(url_of(manifold, path), {"Host": f"10.1.2.3:{port}", **bearer(OBSERVER_KEY)})
        assert status in (200, 503)


# ---- what the probes tell whom -------------------------------------------------------------------


async def until_down(manifold: RunningManifold) -> dict[str, Any]:
    """The observer's /healthz once both broken servers have failed and printed (bounded)."""
    with anyio.fail_after(20):
        while True:
            _status, body = await get(url_of(manifold, "/healthz"), bearer(OBSERVER_KEY))
            health: dict[str, Any] = orjson.loads(body)
            entries = health["servers"]
            if entries["down"]["reason"] and "stderr" in entries["crashy"]:
                return health
            await anyio.sleep(0.1)  # a server's failure has no event to wait on from outside


@pytest.mark.parametrize("who", ["nobody", "a client without the role"])
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_a_caller_without_the_observer_role_reads_only_the_status_and_counts(
    manifold: RunningManifold, who: str, path: str
) -> None:
    await until_down(manifold)
    headers = {} if who == "nobody" else bearer(USER_KEY)
    status, body = await get(url_of(manifold, path), headers)
    assert status == (200 if path == "/healthz" else 503)
    answer = orjson.loads(body)
    assert set(answer) == ({"status", "counts"} if path == "/healthz" else {"status", "counts", "waiting"})
    assert answer["counts"]["total"] == 3
    for leak in (
        "down",
        "crashy",
        "notes",
        "127.0.0.1",
        str(DOWN_PORT),
        PASSWORD,
        TOKEN,
        STDERR_SECRET,
        "unruly",
    ):
        assert leak not in body, (leak, body)


async def test_the_observer_sees_each_server_with_the_credentials_in_its_text_redacted(
    manifold: RunningManifold,
) -> None:
    health = await until_down(manifold)
    assert health["servers"]["down"]["state"] != "ready"
    assert "unruly: fatal: cannot open the database" in health["servers"]["crashy"]["stderr"]
    status, body = await get(url_of(manifold, "/readyz"), bearer(OBSERVER_KEY))
    assert status == 503
    assert orjson.loads(body)["waiting_for"] == ["down"]
    for text in (orjson.dumps(health).decode(), body):
        assert TOKEN not in text, text
        assert STDERR_SECRET not in text, text


async def test_the_observer_never_reads_the_password_in_a_server_url(manifold: RunningManifold) -> None:
    health = await until_down(manifold)
    assert "127.0.0.1" in health["servers"]["down"]["reason"]  # the address is the observer's to see
    assert PASSWORD not in orjson.dumps(health).decode()


async def test_a_bad_credential_on_a_probe_is_refused_not_read_as_nobody(manifold: RunningManifold) -> None:
    status, body = await get(url_of(manifold, "/healthz"), bearer("not-a-key"))
    assert status == 401
    assert "servers" not in body
    assert "counts" not in body


# ---- /metrics --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def metrics_port_manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    port = free_port()
    config = {"auth": {"api_keys": KEYS}, "metrics": {"port": port}, "servers": {"notes": servers()["notes"]}}
    async with running_manifold(tmp_path_factory.mktemp("metrics_port"), config) as running:
        running.url = f"http://127.0.0.1:{port}/mcp"  # url_of() then names the metrics listener
        yield running


@pytest.mark.parametrize("listener", ["main port", "metrics.port"])
async def test_once_a_key_is_configured_metrics_need_a_credential_with_the_observer_role(
    manifold: RunningManifold, metrics_port_manifold: RunningManifold, listener: str
) -> None:
    target = manifold if listener == "main port" else metrics_port_manifold
    url = url_of(target, "/metrics")
    status, body = await get(url)
    assert status == 401
    assert "notes." not in body
    status, body = await get(url, bearer(USER_KEY))  # an MCP client: the series name hidden tools
    assert status == 403
    assert "notes." not in body
    assert "metrics.role" in body
    status, body = await get(url, bearer(OBSERVER_KEY))
    assert status == 200
    assert 'manifold_server_up{server="notes"}' in body
    port = url.split(":")[2].split("/")[0]
    status, _ = await get(url, {"Host": f"attacker.example:{port}", **bearer(OBSERVER_KEY)})
    assert status == 403


async def test_require_auth_false_still_opens_metrics_and_says_so_at_start(tmp_path: Path) -> None:
    config = {
        "auth": {"api_keys": KEYS},
        "metrics": {"require_auth": False},
        "servers": {"notes": servers()["notes"]},
    }
    async with running_manifold(tmp_path, config) as manifold:
        status, body = await get(url_of(manifold, "/metrics"))
        assert status == 200
        assert 'manifold_server_up{server="notes"}' in body
        assert "metrics.require_auth is false while credentials are configured" in manifold.log()


async def test_a_real_prometheus_scrapes_with_the_observer_key_and_a_client_key_is_refused(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    prometheus = prometheus_binary()
    target = manifold.url.removeprefix("http://").removesuffix("/mcp")
    (tmp_path / "observer.key").write_text(OBSERVER_KEY)
    (tmp_path / "client.key").write_text(USER_KEY)
    jobs = [
        {
            "job_name": job,
            "static_configs": [{"targets": [target]}],  # Host: 127.0.0.1:<port>, an address
            "authorization": {"type": "Bearer", "credentials_file": f"{job}.key"},
        }
        for job in ("observer", "client")
    ]
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = await anyio.open_process(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    up: dict[str, float] = {}
    try:
        with anyio.fail_after(60):
            async with aiohttp.ClientSession() as http:
                while set(up) != {"observer", "client"}:
                    try:
                        url = f"http://127.0.0.1:{port}/api/v1/query"
                        async with http.get(url, params={"query": "up"}) as response:
                            body = await response.json()
                        for sample in body["data"]["result"] if body.get("status") == "success" else []:
                            up[sample["metric"]["job"]] = float(sample["value"][1])
                    except aiohttp.ClientConnectionError:
                        pass
                    if set(up) != {"observer", "client"}:
                        await anyio.sleep(0.5)  # the next scrape is at most 1 s away; there is no event
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        await process.aclose()
    assert up == {"observer": 1.0, "client": 0.0}
