"""``servers.X.credentials`` and top-level ``credentials``: every mistake named at its field."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.credentials import SecretCredentials, SharedCredentials
from proxy.config.loading import config_from_mapping
from proxy.core.errors import ConfigError
from proxy.credentials.sealing import new_key

KEY = new_key()
HTTP = {"url": "http://127.0.0.1:9/mcp"}
STDIO = {"command": "server"}


def config(server: dict[str, Any], **top: Any) -> Any:
    return config_from_mapping({"servers": {"s": server}, **top}, environ={})


def refused(server: dict[str, Any], **top: Any) -> str:
    with pytest.raises(ConfigError) as error:
        config(server, **top)
    return str(error.value)


def test_shared_is_the_default_and_keeps_the_servers_session_mode() -> None:
    server = config(HTTP).servers["s"]
    assert server.credentials == SharedCredentials()
    assert server.session_mode == "shared"


def test_own_credentials_imply_a_connection_per_client() -> None:
    server = config({**HTTP, "credentials": {"mode": "secret"}}, credentials={"key": KEY}).servers["s"]
    assert server.session_mode == "per_client"
    assert server.credentials == SecretCredentials(mode="secret")
    assert server.credentials.render("abc") == "Bearer abc"


def test_own_credentials_on_a_shared_connection_are_refused() -> None:
    message = refused(
        {**HTTP, "session_mode": "shared", "credentials": {"mode": "secret"}}, credentials={"key": KEY}
    )
    assert (
        "servers.s.session_mode: must be per_client (or left out) with credentials.mode 'secret'" in message
    )


@pytest.mark.parametrize(
    ("server", "where", "problem"),
    [
        (
            {**STDIO, "credentials": {"mode": "secret"}},
            "servers.s.credentials.env",
            "required for a command server",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "env": "T"}},
            "servers.s.credentials.env",
            "only applies to command",
        ),
        (
            {**STDIO, "credentials": {"mode": "secret", "env": "1X"}},
            "servers.s.credentials.env",
            "variable name",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "header": "Bad Header"}},
            "servers.s.credentials.header",
            "header name",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "header": "Host"}},
            "servers.s.credentials.header",
            "writes itself",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "template": "Bearer secret"}},
            "servers.s.credentials.template",
            "'{secret}'",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "template": "{secret}{secret}"}},
            "servers.s.credentials.template",
            "once",
        ),
        (
            {**HTTP, "credentials": {"mode": "secret", "template": "Bearer {secret}\r\nX: y"}},
            "servers.s.credentials.template",
            "control",
        ),
        (
            {**HTTP, "credentials": {"mode": "nope"}},
            "servers.s.credentials",
            "'mode' must be one of 'shared', 'secret', 'oauth', 'exchange' (got 'nope')",
        ),
        ({**HTTP, "credentials": {"header": "X"}}, "servers.s.credentials", "(it is missing)"),
        (
            {**HTTP, "credentials": {"mode": "secret", "heder": "X"}},
            "servers.s.credentials.heder",
            "unknown field",
        ),
        (
            {**STDIO, "credentials": {"mode": "oauth"}},
            "servers.s.credentials.mode",
            "only applies to url servers",
        ),
    ],
)
def test_a_wrong_credentials_setting_is_named_at_its_field(
    server: dict[str, Any], where: str, problem: str
) -> None:
    message = refused(server, credentials={"key": KEY})
    assert f"<config>: {where}: " in message
    assert problem in message


def test_a_sealed_store_needs_a_key_and_a_bad_key_is_not_repeated() -> None:
    server = {**HTTP, "credentials": {"mode": "secret"}}
    assert "credentials.key: required: server 's' has credentials.mode 'secret'" in refused(server)
    assert config(server, credentials={"store": "env"}).credentials.key is None
    message = refused(server, credentials={"key": "c2hvcnQtYnV0LXNlY3JldA=="})
    assert "credentials.key: must be 32 bytes in base64" in message
    assert "c2hvcnQtYnV0LXNlY3JldA" not in message


def test_the_store_file_is_found_next_to_the_config_file(tmp_path: Any) -> None:
    from proxy.config.loading import load_config

    path = tmp_path / "manifold.yaml"
    path.write_text("credentials: {path: creds/c.json}\n")
    assert load_config(path, environ={}).credentials.path == str(tmp_path / "creds" / "c.json")


def test_the_env_stores_variables_are_no_settings_of_manifolds() -> None:
    assert config(HTTP, credentials={"store": "env"}).credentials.env_prefix == "MCP_SECRET__"
    message = refused(HTTP, credentials={"store": "env", "env_prefix": "MANIFOLD_S__"})
    assert "credentials.env_prefix: must not start with MANIFOLD_" in message
    # The default prefix's variables pass the MANIFOLD_ override reader by.
    environ = {"MCP_SECRET__s__alice": "alice-env-token"}
    assert config_from_mapping({"credentials": {"store": "env"}}, environ=environ).credentials.store == "env"
