"""``manifold admin …`` against a real ``manifold serve``: each action reaches the API and says
what happened; a refused key exits 1 with the API's message, an unreachable URL exits 2; the
key never appears on the command line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml

from proxy.cli.admin import _opener, _request
from proxy.cli.commands import _parser
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold

ADMIN_KEY = "admin-key-for-the-cli-tests-0123"


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config() -> dict[str, object]:
    return {
        "auth": {"api_keys": [{"name": "root", "key": stored(ADMIN_KEY), "roles": ["admin"]}]},
        "admin": {},
        "servers": {"alpha": fixture_server("alpha", tools=1)},
    }


async def admin(
    manifold: RunningManifold, *args: str, key: str = ADMIN_KEY
) -> subprocess.CompletedProcess[str]:
    base = manifold.url.removesuffix("/mcp")
    command = [sys.executable, "-m", "proxy.cli", "admin", *args, "--url", base]
    env = {**os.environ, "MANIFOLD_ADMIN_KEY": key}
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False
        )
    )


@pytest.mark.anyio
@pytest.mark.slow
async def test_each_action_reaches_a_running_manifold(tmp_path: Path) -> None:
    async with running_manifold(tmp_path, config()) as manifold:
        listed = await admin(manifold, "servers", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [s["id"] for s in json.loads(listed.stdout)] == ["alpha"]
        off = await admin(manifold, "tools", "off", "alpha.echo", "--minutes", "5", "--reason", "flaky")
        assert off.returncode == 0, off.stderr
        assert "switched off for everyone by an operator (root)" in off.stdout
        on = await admin(manifold, "tools", "on", "alpha.echo", "--json")
        assert len(json.loads(on.stdout)["removed"]) == 1
        drained = await admin(manifold, "drain", "alpha")
        assert drained.stdout.strip().endswith(": done"), drained.stdout
        assert "drained" in (await admin(manifold, "servers")).stdout
        assert (await admin(manifold, "undrain", "alpha")).returncode == 0
        (tmp_path / "next.yaml").write_text(yaml.safe_dump({**config(), "servers": {}}))
        plan = await admin(manifold, "reload", "--plan", "--file", str(tmp_path / "next.yaml"))
        assert plan.returncode == 0, plan.stderr
        assert "servers removed: alpha" in plan.stdout
        missing = await admin(manifold, "restart", "nobody")
        assert (missing.returncode, missing.stderr.strip()) == (
            1,
            "manifold admin: 404: no server 'nobody' is configured",
        )
        refused = await admin(manifold, "servers", key="not-a-key")
        assert refused.returncode == 1
        assert refused.stderr.startswith("manifold admin: 401")


def test_an_unreachable_manifold_or_a_missing_key_exit_2(tmp_path: Path) -> None:
    from proxy.cli.commands import main

    os.environ.pop("MANIFOLD_ADMIN_KEY", None)
    assert main(["admin", "servers", "--url", "http://127.0.0.1:9"]) == 2
    os.environ["MANIFOLD_ADMIN_KEY"] = "k"
    try:
        assert main(["admin", "servers", "--url", "file:///etc/passwd"]) == 2
    finally:
        del os.environ["MANIFOLD_ADMIN_KEY"]


def test_actions_become_the_api_requests_they_name(tmp_path: Path) -> None:
    parse = _parser().parse_args
    assert _request(parse(["admin", "end", "abc/../x"])) == ("POST", "/sessions/abc%2F..%2Fx/end", {})
    assert _request(parse(["admin", "tools", "on", "gh.t", "--role", "dev"])) == (
        "POST",
        "/tools/on",
        {"tool": "gh.t", "role": "dev"},
    )
    revoke = parse(["admin", "revoke", "--server", "gh", "--subject", "ann"])
    assert _request(revoke)[2] == {
        "server": "gh",
        "kind": "secret",
        "holder": {"source": "api_key", "issuer": "", "subject": "ann"},
    }
    assert _request(parse(["admin", "reload", "--apply"])) == ("POST", "/reload/apply", {"config": None})


def test_the_admin_client_refuses_to_follow_a_redirect_with_the_key() -> None:
    import io
    import urllib.request
    from http.client import HTTPMessage

    handlers = getattr(_opener(), "handlers")  # noqa: B009  (not in the stubs)
    handler = next(h for h in handlers if isinstance(h, urllib.request.HTTPRedirectHandler))
    asked = urllib.request.Request(
        "http://127.0.0.1:1/admin/api/servers", headers={"Authorization": "Bearer k"}
    )
    followed = handler.redirect_request(
        asked, io.BytesIO(), 302, "Found", HTTPMessage(), "http://elsewhere.example/"
    )
    assert followed is None
