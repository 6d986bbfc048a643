"""Configured secrets, attacked from both sides against a real ``manifold serve`` (issue #15).

A server that goes down must not make Manifold print its URL's ``user:pass@`` or query token
(to the debug log, to a client's error, to ``/healthz`` or ``manifold tools``), and a server that
redirects Manifold's requests to another origin must never receive the configured headers there.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import orjson
import pytest

from tests.fixtures.spawn import (
    HttpRequest,
    free_port,
    http_response,
    running_http_fixture,
    scripted_http_server,
)
from tests.interaction.harness import (
    MANIFOLD,
    OBSERVER,
    REPO,
    post,
    raw_session,
    running_manifold,
    wait_for_health,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PASSWORD = "pw-Hunter2-5d1e"
TOKEN = "tok-7f3a9c2b"
SIGNATURE = "sig-0e4d8a"
HEADER = "hdr-api-key-91b2c3"
MOVED_HEADER = "moved-key-44aa6f"
ENV_VALUE = "env-value-d00d5e"
SECRETS = (PASSWORD, TOKEN, SIGNATURE, HEADER, MOVED_HEADER, ENV_VALUE)
# A stdio server that says its secret on stderr and exits: Manifold logs and reports stderr.
LEAKY = "import os, sys; sys.stderr.write('using key ' + os.environ['LEAKY'] + '\\n'); sys.exit(3)"


def secret_url(port: int) -> str:
    return f"http://alice:{PASSWORD}@127.0.0.1:{port}/mcp?access_token={TOKEN}&sig={SIGNATURE}"


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def call(request_id: int, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"text": "hi"}},
    }


async def test_no_configured_secret_reaches_the_log_a_client_healthz_or_another_origin(
    tmp_path: Path,
) -> None:
    seen_elsewhere: list[HttpRequest] = []

    async def elsewhere(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
        seen_elsewhere.append(request)
        await stream.send(http_response(404))

    port = free_port()
    async with AsyncExitStack() as fixture, scripted_http_server(elsewhere) as other:

        async def moved(request: HttpRequest, stream: anyio.abc.ByteStream) -> None:
            await stream.send(http_response(307, headers={"Location": other.url + request.path}))

        async with scripted_http_server(moved) as mover:
            await fixture.enter_async_context(
                running_http_fixture("alpha", transport="streamable-http", port=port)
            )
            config = {
                "auth": OBSERVER,  # /healthz shows per-server details (where secrets could leak)
                "servers": {
                    "alpha": {
                        "url": secret_url(port),
                        "headers": {"X-API-Key": HEADER},
                        "transport": "streamable-http",
                        "request_timeout": 10,
                    },
                    "never": {"url": secret_url(free_port()), "headers": {"X-API-Key": HEADER}},
                    "moved": {"url": mover.url + "/mcp", "headers": {"X-API-Key": MOVED_HEADER}},
                    "leaky": {"command": sys.executable, "args": ["-c", LEAKY], "env": {"LEAKY": ENV_VALUE}},
                },
            }
            answers: list[bytes] = []
            async with (
                running_manifold(tmp_path, config, log_level="debug") as manifold,
                aiohttp.ClientSession() as http,
            ):
                session = await raw_session(http, manifold.url)
                status, _, body = await post(
                    http, manifold.url, call(2, "alpha.echo"), {"Mcp-Session-Id": session}
                )
                assert status == 200
                assert "result" in body, body  # it works while alpha is up
                await fixture.aclose()  # alpha goes down
                for request_id in range(3, 8):
                    status, _, body = await post(
                        http, manifold.url, call(request_id, "alpha.echo"), {"Mcp-Session-Id": session}
                    )
                    answers.append(orjson.dumps(body))
                for name in ("never.echo", "moved.echo"):
                    status, _, body = await post(
                        http, manifold.url, call(9, name), {"Mcp-Session-Id": session}
                    )
                    answers.append(orjson.dumps(body))
                health = await wait_for_health(
                    manifold,
                    lambda h: h["servers"]["alpha"]["state"] != "up" and "stderr" in h["servers"]["leaky"],
                )
                async with http.get(manifold.url.replace("/mcp", "/readyz")) as response:
                    readyz = await response.text()
                log = manifold.log()

    assert any(b"unavailable" in answer for answer in answers), answers  # the calls failed, and said so
    for answer in answers:
        assert leaked(answer.decode()) == [], answer
    assert leaked(orjson.dumps(health).decode()) == [], health
    assert leaked(readyz) == [], readyz
    assert "127.0.0.1" in health["servers"]["never"]["reason"]  # the reason still says where
    assert "using key [REDACTED]" in health["servers"]["leaky"]["stderr"]  # the line was there
    assert leaked(log) == [], [line for line in log.splitlines() if leaked(line)][:5]
    assert '"level":"debug"' in log  # the debug lines were there to leak from
    # The redirect went nowhere, and both the log and the health report say why.
    assert seen_elsewhere == []
    assert "another origin" in health["servers"]["moved"]["reason"]
    assert "redirect refused" in log


def test_manifold_tools_prints_no_secret_of_a_down_server(tmp_path: Path) -> None:
    config = {
        "servers": {
            "never": {"url": secret_url(free_port()), "headers": {"X-API-Key": HEADER}, "connect_timeout": 5}
        }
    }
    path = write_config(tmp_path / "manifold.yaml", config)
    done = subprocess.run(
        [*MANIFOLD, "tools", "--config", str(path), "--json"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
    )
    out = done.stdout.decode() + done.stderr.decode()
    assert "never" in out, out
    assert leaked(out) == [], out
