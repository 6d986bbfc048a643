"""End to end: calls of every outcome through a real Manifold move exactly the right counters,
labels stay bounded, and a real Prometheus scrapes it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml
from mcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.spawn import free_port
from tests.interaction.harness import (
    REPO,
    RunningManifold,
    fixture_server,
    prometheus_binary,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

POLICY = """
version: 1
default: allow
rules:
  - id: no-tool-001
    effect: deny
    show: true
    match: {tools: ["alpha.tool_001"]}
limits:
  - id: add-twice
    rate: 2/minute
    burst: 2
    per: [identity]
    match: {tools: ["alpha.add"]}
"""


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of one metric: sorted label pairs -> value."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def calls(text: str, server: str, tool: str, outcome: str) -> float:
    key = (("outcome", outcome), ("server", server), ("tool", tool))
    return samples(text, "manifold_tool_calls_total").get(key, 0.0)


async def scrape(manifold: RunningManifold) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(manifold.url.replace("/mcp", "/metrics")) as response,
    ):
        assert response.status == 200
        return await response.text()


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("metrics")
    (tmp / "policy.yaml").write_text(POLICY)
    clock = {"command": sys.executable, "args": [str(REPO / "examples" / "servers" / "clock.py")]}
    config = {
        "policy": {"files": ["policy.yaml"], "pins": {"mode": "off"}},
        "servers": {
            "alpha": {**fixture_server("alpha", tools=3, page_size=10), "request_timeout": 1},
            "beta": fixture_server("beta", tools=1, page_size=10),
            "clock": clock,
        },
    }
    async with running_manifold(tmp, config) as running:
        yield running


async def test_every_outcome_moves_its_own_counter_by_exactly_one(manifold: RunningManifold) -> None:
    before = await scrape(manifold)
    async with Client(manifold.url) as client:
        await client.call_tool("alpha.echo", {"n": 1})  # ok
        assert (
            await client.call_tool("clock.add_days", {"date": "not a date", "days": 1})
        ).is_error  # tool_error
        assert (await client.call_tool("alpha.tool_001", {})).is_error  # denied by policy
        await client.call_tool("alpha.add", {"a": 1, "b": 2})
        await client.call_tool("alpha.add", {"a": 1, "b": 2})
        assert (await client.call_tool("alpha.add", {"a": 1, "b": 2})).is_error  # rate_limited (third)
        assert (await client.call_tool("alpha.add", {"a": "x", "b": 2})).is_error  # invalid arguments
        with pytest.raises(MCPError):
            await client.call_tool("alpha.hang", {})  # timeout after 1 s
        with pytest.raises(MCPError):
            await client.call_tool("alpha.slow", {"seconds": 5}, read_timeout_seconds=0.5)  # cancelled
        with pytest.raises(MCPError):
            await client.call_tool("beta.crash", {})  # server_error
        with pytest.raises(MCPError):
            await client.call_tool("no.such_tool", {})  # invalid, and not a label of its own
    after = await scrape(manifold)
    expected = {
        ("alpha", "alpha.echo", "ok"): 1,
        ("clock", "clock.add_days", "tool_error"): 1,
        ("alpha", "alpha.tool_001", "denied"): 1,
        ("alpha", "alpha.add", "ok"): 2,
        ("alpha", "alpha.add", "rate_limited"): 1,
        ("alpha", "alpha.add", "invalid"): 1,
        ("alpha", "alpha.hang", "timeout"): 1,
        ("alpha", "alpha.slow", "cancelled"): 1,
        ("beta", "beta.crash", "server_error"): 1,
        ("unknown", "unknown", "invalid"): 1,
    }
    for (server, tool, outcome), moved in expected.items():
        assert calls(after, server, tool, outcome) - calls(before, server, tool, outcome) == moved, (
            tool,
            outcome,
        )
    tools = {dict(key)["tool"] for key in samples(after, "manifold_tool_calls_total")}
    assert "no.such_tool" not in tools
    denials = samples(after, "manifold_policy_decisions_total")
    assert denials[(("effect", "deny"), ("rule", "no-tool-001"))] >= 1
    assert samples(after, "manifold_rate_limit_rejections_total")[(("limit", "add-twice"),)] >= 1


async def test_servers_catalog_sessions_and_restarts_are_reported(manifold: RunningManifold) -> None:
    async with Client(manifold.url, mode="legacy") as client:  # a session, to be counted
        await client.list_tools()
        text = await scrape(manifold)
        assert samples(text, "manifold_client_sessions_active")[(("transport", "http"),)] >= 1
    assert samples(text, "manifold_server_up")[(("server", "clock"),)] == 1
    assert (
        samples(text, "manifold_catalog_tools")[(("server", "alpha"),)] == 3 + 7
    )  # tool_000… plus fixed tools
    assert samples(text, "manifold_list_requests_total")[(("kind", "tools"),)] >= 1
    assert sum(samples(text, "manifold_received_bytes_total").values()) > 0
    labels = {name for key in samples(text, "manifold_tool_calls_total") for name, _ in key}
    assert labels == {"server", "tool", "outcome"}  # no identity, session or request id


async def test_a_real_prometheus_scrapes_manifold_and_answers_a_query(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    prometheus = prometheus_binary()
    target = manifold.url.removeprefix("http://").removesuffix("/mcp")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "manifold", "static_configs": [{"targets": [target]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    async with Client(manifold.url) as client:
        await client.call_tool("alpha.echo", {"scraped": True})
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
    query = 'manifold_tool_calls_total{server="alpha",tool="alpha.echo",outcome="ok"}'
    result: list[Any] = []
    try:
        with anyio.fail_after(60):
            async with aiohttp.ClientSession() as http:
                while not result:
                    try:
                        url = f"http://127.0.0.1:{port}/api/v1/query"
                        async with http.get(url, params={"query": query}) as response:
                            body = await response.json()
                            result = body["data"]["result"] if body.get("status") == "success" else []
                    except aiohttp.ClientConnectionError:
                        pass
                    if not result:
                        await anyio.sleep(0.5)  # the next scrape is at most 1 s away; there is no event
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        await process.aclose()
    assert float(result[0]["value"][1]) >= 1
    assert result[0]["metric"]["job"] == "manifold"


async def test_metrics_can_move_to_their_own_port_and_behind_the_mcp_credentials(tmp_path: Path) -> None:
    from proxy.auth.apikeys import generate_api_key

    key, stored = generate_api_key()
    port = free_port()
    config = {
        "metrics": {"port": port, "require_auth": True},
        "auth": {"api_keys": [{"name": "scraper", "key": stored, "roles": ["observer"]}]},
        "servers": {"alpha": fixture_server("alpha", tools=1, page_size=10)},
    }
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        async with http.get(manifold.url.replace("/mcp", "/metrics")) as main_port:
            assert main_port.status == 404  # not served on the main listener any more
        url = f"http://127.0.0.1:{port}/metrics"
        async with http.get(url) as anonymous:
            assert anonymous.status == 401
            assert anonymous.headers["WWW-Authenticate"].startswith('Bearer realm="manifold"')
        async with http.get(url, headers={"Authorization": f"Bearer {key}"}) as scraped:
            assert scraped.status == 200
            assert "manifold_server_up" in await scraped.text()
