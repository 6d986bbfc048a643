"""End to end: the files users already have, read as they are (issue #18).

* README's client snippet, run as written against ``manifold serve`` on ``examples/manifold.yaml``
  (only the port differs: the test takes a free one).
* The desktop entry ``make desktop-config`` prints (``make run`` prints it too), spawned as a desktop
  app does: from another working directory, with only the entry's environment.
* A VS Code ``.vscode/mcp.json`` with ``inputs``, ``type``, ``dev`` and ``${input:…}``, the input
  read from ``INPUT_<ID>``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import orjson
import pytest
from mcp import Client, StdioServerParameters

from tests.fixtures.spawn import fixture_command, free_port
from tests.interaction.harness import REPO, RunningManifold, _spawn, _terminating, _wait_healthy
from tests.interaction.test_policy import text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@asynccontextmanager
async def serving(config: Path, log: Path) -> AsyncIterator[RunningManifold]:
    """``manifold serve`` on ``config`` exactly as given, on a free port."""
    port = free_port()
    process = _spawn(["serve", "--config", str(config), "--port", str(port)], log)
    with _terminating(process):
        await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process, log)
        yield RunningManifold(f"http://127.0.0.1:{port}/mcp", process, log)


def readme_snippet() -> str:
    readme = (REPO / "README.md").read_text()
    blocks: list[str] = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    (snippet,) = [block for block in blocks if "127.0.0.1:8080" in block]
    return snippet


async def test_the_readmes_client_snippet_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `make run` starts it: the virtualenv's bin first on PATH (the example servers import the SDK).
    monkeypatch.setenv("PATH", f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}")
    async with serving(REPO / "examples" / "manifold.yaml", tmp_path / "m.log") as manifold:
        port = manifold.url.split(":")[2].split("/")[0]
        script = readme_snippet().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = await anyio.run_process(
            [sys.executable, "-c", script], check=False, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
    assert done.returncode == 0, done.stderr.decode()
    printed = done.stdout.decode()
    assert "notes.add_note" in printed
    assert "clock.now" in printed
    assert "saved note 'hello'" in printed
    # Client(url) speaks 2026-07-28 with Manifold; mode="legacy" the handshake era.
    assert printed.splitlines()[0] == "2026-07-28"
    assert "2025-11-25" in printed.splitlines()


async def test_the_desktop_entry_from_make_works_from_any_directory(tmp_path: Path) -> None:
    made = await anyio.run_process(
        ["make", "--no-print-directory", "-s", "desktop-config", f"VENV={sys.prefix}"], cwd=REPO
    )
    entry = orjson.loads(made.stdout)["mcpServers"]["manifold"]
    assert os.access(entry["command"], os.X_OK)  # an executable file, named by its absolute path
    # As a desktop app spawns it: its own working directory, and only the entry's environment
    # (PYTHONPATH: this checkout's code rather than the installed one's).
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry["env"], "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        cwd=str(tmp_path),
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"notes.add_note", "clock.now"} <= names
            saved = await client.call_tool("notes.add_note", {"title": "t", "text": "x"})
            assert text_of(saved) == "saved note 't'"


async def test_a_vscode_mcp_json_is_read_as_it_is_with_inputs_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = fixture_command("ignored", tools=0)
    name_at = command.index("--name") + 1
    args = [*command[1:name_at], "${input:server-name}", *command[name_at + 1 :]]
    vscode = tmp_path / ".vscode"
    vscode.mkdir()
    (vscode / "mcp.json").write_text(
        json.dumps(
            {
                "inputs": [
                    {"type": "promptString", "id": "server-name", "description": "A name", "password": True}
                ],
                "servers": {
                    "alpha": {
                        "type": "stdio",
                        "command": command[0],
                        "args": args,
                        "cwd": "${workspaceFolder}",
                        "dev": {"watch": "src/**/*.py"},
                    }
                },
            }
        )
    )
    monkeypatch.setenv("INPUT_SERVER_NAME", "from-the-environment")
    async with serving(vscode / "mcp.json", tmp_path / "m.log") as manifold, Client(manifold.url) as client:
        answer = json.loads(text_of(await client.call_tool("alpha.echo", {"k": 1})))
    assert answer["server"] == "from-the-environment"  # the input reached the server's args


def test_a_vscode_input_that_is_not_in_the_environment_is_an_error_naming_the_variable(
    tmp_path: Path,
) -> None:
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "inputs": [{"type": "promptString", "id": "api-key", "password": True}],
                "servers": {
                    "s": {
                        "type": "http",
                        "url": "http://127.0.0.1:1/mcp",
                        "headers": {"K": "${input:api-key}"},
                    }
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "INPUT_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "check", "--config", str(tmp_path / "mcp.json")],
        cwd=REPO,
        capture_output=True,
        check=False,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert b"input 'api-key' is read from the environment variable INPUT_API_KEY" in done.stderr + done.stdout
