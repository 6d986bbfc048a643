"""What a config does not use is never imported: a stdio-only ``manifold serve`` holds none of the
optional features' libraries (issue #20: idle memory), and a config that uses them still works.

Each test runs the real ``manifold serve`` (:func:`proxy.cli.commands.main` in its own interpreter, as
``python -m proxy.cli`` would) and, once it has been told to stop and ``main`` has returned, the
process writes the names in its ``sys.modules`` to a file. So the list covers the whole life of
the process: start, servers connecting, the requests the test made, and shutdown.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest

from tests.fixtures.spawn import free_port

from .harness import (
    REPO,
    RunningManifold,
    _terminating,
    _wait_healthy,
    fixture_server,
    post,
    raw_session,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# main() returns once SIGTERM has stopped it; then the modules it ever loaded are written out.
_SERVE = """
import sys
from proxy.cli.commands import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    out.write("\\n".join(sorted(sys.modules)))
sys.exit(code)
"""

# Imported only by a config that asks for what they do (OAuth, JWTs, Redis, credential stores,
# HTTP servers), by a ``MANIFOLD_*`` variable (pydantic-settings), or by the first schema checked.
# (uvicorn's and prometheus_client's package __init__ run as they are: their imports are honest ones.)
LAZY = (
    "aiohttp",
    "difflib",
    "cryptography",
    "jsonschema",
    "jwt",
    "numpy",
    "pydantic_settings",
    "opentelemetry",
    "grpc",
    "google.protobuf",
    "requests",
    "re2",
    "redis",
    "referencing",
    "rpds",
    "snowballstemmer",
    "Stemmer",
    "tokenizers",
    "wordllama",
    "proxy.auth.discovery",
    "proxy.auth.introspection",
    "proxy.auth.jwks",
    "proxy.auth.jwt",
    "proxy.auth.oauth",
    "proxy.credentials.exchange",
    "proxy.credentials.oauth_client",
    "proxy.credentials.on_behalf",
    "proxy.credentials.redis_store",
    "proxy.credentials.tokens",
    "proxy.guard",
    "proxy.guardrails",
    "proxy.catalog.fusion",
    "proxy.catalog.meta_tools",
    "proxy.catalog.search",
    "proxy.views.discovery",
    "proxy.views.search_index",
    "proxy.views.semantic",
    "proxy.inbound.signin_page",
    "proxy.cli.inspection",
    "proxy.pipeline.stages.sign_in",
    "proxy.outbound.over_http.sse_legacy",
    "proxy.outbound.over_http.streamable",
    "proxy.policy.patterns",
    "proxy.ratelimit.redis",
    "proxy.tracing.export",
    "proxy.tracing.spans",
)

SECRET = "an-hs256-test-secret-of-at-least-32-bytes!"
ISSUER = "https://id.example.test"
AUDIENCE = "manifold"


@dataclass
class Served:
    manifold: RunningManifold
    modules_path: Path

    def modules(self) -> set[str]:
        """Every module the process loaded; read after it has stopped."""
        assert self.modules_path.exists(), f"manifold did not stop cleanly:\n{self.manifold.log()}"
        return set(self.modules_path.read_text().split())


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )


@asynccontextmanager
async def serving(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[Served]:
    """``manifold serve`` until the block ends, then stopped with SIGTERM (and waited for)."""
    port = free_port()
    config_path = write_config(tmp_path / "manifold.yaml", config)
    log_path = tmp_path / "manifold.log"
    modules_path = tmp_path / "modules.txt"
    args = ["serve", "--config", str(config_path), "--port", str(port)]
    process = _spawn([sys.executable, "-c", _SERVE, str(modules_path), *args], log_path)
    served = Served(RunningManifold(f"http://127.0.0.1:{port}/mcp", process, log_path), modules_path)
    with _terminating(process):
        await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process, log_path)
        yield served
    assert process.returncode == 0, served.manifold.log()


def lazy_among(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == lazy or m.startswith(f"{lazy}.") for lazy in LAZY))


async def list_tools(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> list[str]:
    session = {**headers, "Mcp-Session-Id": await raw_session_with(http, url, headers)}
    status, _, body = await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    assert status == 200, body
    return [tool["name"] for tool in body["result"]["tools"]]


async def raw_session_with(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    if not headers:
        return await raw_session(http, url)
    async with aiohttp.ClientSession(headers=headers) as authed:
        return await raw_session(authed, url)


async def test_a_stdio_only_serve_never_imports_what_its_config_does_not_use(tmp_path: Path) -> None:
    config = {"servers": {"one": fixture_server("one"), "two": fixture_server("two")}}
    async with serving(tmp_path, config) as served, aiohttp.ClientSession() as http:
        names = await list_tools(http, served.manifold.url, {})
        assert "one.echo" in names
        assert "two.add" in names
    assert lazy_among(served.modules()) == []


@pytest.mark.slow
async def test_discovery_loads_the_stemmer_on_its_first_search_and_the_model_only_when_semantic(
    tmp_path: Path,
) -> None:
    search = {"name": "manifold.search_tools", "arguments": {"query": "echo back"}}
    message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search}
    loaded: dict[str, set[str]] = {}
    for semantic in ("off", "auto"):
        config = {
            "discovery": {"mode": "search", "semantic": semantic},
            "servers": {"one": fixture_server("one")},
        }
        (tmp_path / semantic).mkdir()
        async with serving(tmp_path / semantic, config) as served, aiohttp.ClientSession() as http:
            session = {"Mcp-Session-Id": await raw_session(http, served.manifold.url)}
            status, _, body = await post(http, served.manifold.url, message, session)
            assert status == 200, body
            assert not body["result"]["isError"], body
        loaded[semantic] = served.modules()
    assert {"snowballstemmer", "proxy.views.discovery", "proxy.catalog.search"} <= loaded["off"]
    assert not {"numpy", "proxy.views.semantic"} & loaded["off"]
    assert {"numpy", "proxy.views.semantic"} <= loaded["auto"]
    assert "wordllama" not in loaded["auto"]  # its files are read; its loader (and downloads) never run


async def test_a_scrape_of_metrics_loads_the_exposition_and_both_formats_are_served(tmp_path: Path) -> None:
    config = {"servers": {"one": fixture_server("one")}}
    async with serving(tmp_path, config) as served, aiohttp.ClientSession() as http:
        url = served.manifold.url.replace("/mcp", "/metrics")
        async with http.get(url) as text:
            body = await text.text()
            assert text.status == 200
            assert text.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "manifold_build_info" in body
        openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with http.get(url, headers=openmetrics) as om:
            body = await om.text()
            assert om.headers["Content-Type"].startswith("application/openmetrics-text")
            assert body.endswith("# EOF\n")
    loaded = served.modules()
    assert {"prometheus_client.exposition", "prometheus_client.openmetrics.exposition"} <= loaded


async def test_a_config_with_jwt_issuers_loads_them_and_checks_tokens_and_arguments(
    tmp_path: Path,
) -> None:
    config = {
        "auth": {"jwt": [{"issuer": ISSUER, "audience": AUDIENCE, "secret": SECRET}]},
        "servers": {"one": fixture_server("one")},
    }
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "exp": 4_102_444_800}
    good = {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}
    forged = {"Authorization": f"Bearer {jwt.encode(claims, 'x' * 40, algorithm='HS256')}"}
    async with serving(tmp_path, config) as served, aiohttp.ClientSession() as http:
        url = served.manifold.url
        assert "one.echo" in await list_tools(http, url, good)
        status, _, body = await post(http, url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, forged)
        assert status == 401, body
        session = {**good, "Mcp-Session-Id": await raw_session_with(http, url, good)}
        call = {"name": "one.add", "arguments": {"a": "x"}}
        status, _, body = await post(
            http, url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}, session
        )
        assert status == 200, body
        assert body["result"]["isError"] is True
        assert "arguments.a: 'x' is not of type 'number'" in body["result"]["content"][0]["text"]
    loaded = served.modules()
    assert {"jwt", "proxy.auth.jwt", "jsonschema", "proxy.policy.patterns"} <= loaded
    assert "redis" not in loaded  # nothing here keeps anything in Redis


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_bad_jwt_issuer_is_still_refused_before_anything_starts(tmp_path: Path, command: str) -> None:
    config = {
        "auth": {"jwt": [{"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(tmp_path / "none.json")}]},
        "servers": {"one": fixture_server("one")},
    }
    config_path = write_config(tmp_path / "manifold.yaml", config)
    extra = ["--port", "0"] if command == "serve" else []
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", command, "--config", str(config_path), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "auth.jwt[0].jwks_file" in result.stderr
    if command == "check":
        assert result.returncode == 2


async def test_a_policy_without_guardrail_rules_loads_no_detector_and_one_with_them_does(
    tmp_path: Path,
) -> None:
    guarded = ("proxy.guard", "proxy.guardrails")
    plain = "version: 1\ndefault: allow\n"
    for name, policy, expected in (
        ("plain", plain, False),
        ("guarded", plain + "guardrails:\n  rules:\n    - {id: r, effect: audit, match: {}}\n", True),
    ):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "policy.yaml").write_text(policy)
        config = {
            "servers": {"one": fixture_server("one")},
            "policy": {"files": [str(directory / "policy.yaml")], "pins": {"mode": "off"}},
        }
        async with serving(directory, config) as served, aiohttp.ClientSession() as http:
            assert "one.echo" in await list_tools(http, served.manifold.url, {})
        loaded = {m for m in served.modules() if m.split(".")[:2] in (g.split(".") for g in guarded)}
        assert bool(loaded) is expected, (name, sorted(loaded))


async def test_a_config_with_tracing_on_loads_the_sdk_and_its_http_exporter_only(tmp_path: Path) -> None:
    # Nobody listens at the endpoint: export fails, quietly, and the call is served all the same.
    config = {
        "tracing": {"enabled": True, "endpoint": f"http://127.0.0.1:{free_port()}", "export_timeout_ms": 200},
        "servers": {"one": fixture_server("one")},
    }
    async with serving(tmp_path, config) as served, aiohttp.ClientSession() as http:
        assert "one.echo" in await list_tools(http, served.manifold.url, {})
    loaded = served.modules()
    assert {"opentelemetry.sdk.trace", "proxy.tracing.spans", "proxy.tracing.export"} <= loaded
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in loaded
    assert "grpc" not in loaded  # the gRPC exporter only for protocol grpc
