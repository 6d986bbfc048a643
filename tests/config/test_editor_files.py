"""Files users already have: VS Code's mcp.json variables, and ``type`` beside ``transport``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.config.editor_files import input_variable
from proxy.config.loading import config_from_mapping, load_config
from proxy.core.errors import ConfigError


def server(**fields: Any) -> dict[str, Any]:
    return {"servers": {"s": {"url": "http://127.0.0.1:1/mcp", **fields}}}


@pytest.mark.parametrize(
    ("kind", "transport"),
    [("http", "streamable-http"), ("http", "auto"), ("sse", "sse"), ("streamable-http", "streamable-http")],
)
def test_type_and_transport_are_accepted_together_when_they_agree(kind: str, transport: str) -> None:
    config = config_from_mapping(server(type=kind, transport=transport))
    assert config.servers["s"].transport == transport


def test_type_and_transport_that_disagree_are_an_error_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(server(type="sse", transport="streamable-http"))
    assert "servers.s.type: 'type' is 'sse' but 'transport' is 'streamable-http'; they disagree" in str(
        caught.value
    )


def test_an_input_is_read_from_its_input_variable_and_env_and_workspace_references_resolve(
    tmp_path: Path,
) -> None:
    vscode = tmp_path / ".vscode"
    vscode.mkdir()
    path = vscode / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "inputs": [{"type": "promptString", "id": "gh.token", "password": True}],
                "servers": {
                    "gh": {
                        "type": "stdio",
                        "command": "${workspaceFolder}/bin/gh-mcp",
                        "env": {"TOKEN": "${input:gh.token}", "HOME_WAS": "${env:HOME_FOR_TEST}"},
                        "dev": {"watch": "**/*.ts"},
                        "gallery": "https://example.com",
                        "version": "1.0.0",
                    }
                },
            }
        )
    )
    assert input_variable("gh.token") == "INPUT_GH_TOKEN"
    config = load_config(path, environ={"INPUT_GH_TOKEN": "t0ken", "HOME_FOR_TEST": "/h"})
    gh = config.servers["gh"]
    assert gh.command == f"{tmp_path.resolve()}/bin/gh-mcp"  # the folder holding .vscode/
    assert gh.resolved_env() == {"TOKEN": "t0ken", "HOME_WAS": "/h"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"inputs": [], "servers": {"s": {"command": "x", "args": ["${input:nope}"]}}}, "names input 'nope'"),
        ({"servers": {"s": {"command": "x", "args": ["${input:k}"]}}}, "environment variable INPUT_K"),
        ({"inputs": [{"type": "promptString"}], "servers": {}}, "inputs: input #0 has no string 'id'"),
        ({"servers": {"s": {"command": "${workspaceFolder}"}}}, "known only for a config file"),
    ],
)
def test_a_reference_that_cannot_be_resolved_is_an_error_naming_it(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data, environ={})
    assert message in str(caught.value)


def test_a_relative_cwd_is_found_next_to_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("servers: {s: {command: x, cwd: ..}, t: {command: x, cwd: /abs}}\n")
    config = load_config(path, environ={})
    assert config.servers["s"].cwd == str(tmp_path / "..")
    assert config.servers["t"].cwd == "/abs"
