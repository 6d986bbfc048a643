"""Tests for proxy.config.model: file formats, desktop compatibility, interpolation, overrides, errors."""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path
from typing import Any

import pydantic
import pytest

import proxy.config.model
import proxy.config.overrides
from proxy.config.loading import config_from_mapping, load_config
from proxy.config.model import CatalogConfig, Config, ListenConfig, NamingConfig, SessionsConfig
from proxy.config.overrides import overridable
from proxy.core.errors import ConfigError

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "s3cret-value-42"


def build(data: dict[str, Any], environ: dict[str, str] | None = None) -> Config:
    return config_from_mapping(data, source="test.yaml", environ=environ or {})


def error_of(data: dict[str, Any], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        build(data, environ)
    return str(info.value)


def stdio(**fields: Any) -> dict[str, Any]:
    return {"command": "python3", **fields}


# --- formats ---------------------------------------------------------------------------------


def test_a_yaml_file_with_every_section_loads(tmp_path: Path) -> None:
    path = tmp_path / "manifold.yaml"
    path.write_text(
        """
listen: {host: 0.0.0.0, port: 9100, allowed_origins: ["https://app.example.com"], allowed_hosts: ["gw:9100"]}
naming: {separator: "__", max_length: 64}
catalog: {page_size: 50, max_server_pages: 10}
sessions: {idle_timeout: 60}
log_level: warning
servers:
  github:
    command: npx
    args: ["-y", "@x/server-github"]
    cwd: /srv/github
    prefix: gh
    connect_timeout: 5
    request_timeout: 7.5
  search:
    url: http://127.0.0.1:9000/mcp
    transport: sse
""",
        encoding="utf-8",
    )
    config = load_config(path, environ={})
    assert config.listen == ListenConfig(
        host="0.0.0.0", port=9100, allowed_origins=("https://app.example.com",), allowed_hosts=("gw:9100",)
    )
    assert config.naming == NamingConfig(separator="__", max_length=64)
    assert config.catalog == CatalogConfig(page_size=50, max_server_pages=10)
    assert config.sessions == SessionsConfig(idle_timeout=60)
    assert config.log_level == "warning"
    github, search = config.servers["github"], config.servers["search"]
    assert (github.id, github.command, github.args, github.cwd) == (
        "github",
        "npx",
        ("-y", "@x/server-github"),
        "/srv/github",
    )
    assert (github.prefix, github.connect_timeout, github.request_timeout) == ("gh", 5.0, 7.5)
    assert (github.kind, github.transport) == ("stdio", "stdio")
    assert (search.kind, search.url, search.transport) == ("http", "http://127.0.0.1:9000/mcp", "sse")


def test_a_json_file_is_parsed_as_json(tmp_path: Path) -> None:
    path = tmp_path / "manifold.JSON"
    path.write_text('{"log_level": "debug", "servers": {"a": {"command": "x"}}}', encoding="utf-8")
    config = load_config(path, environ={})
    assert config.log_level == "debug"
    assert config.servers["a"].command == "x"


def test_a_file_with_another_suffix_is_read_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "manifold.conf"
    path.write_text("listen:\n  port: 9001\n", encoding="utf-8")
    assert load_config(path, environ={}).listen.port == 9001


def test_yaml_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "manifold.yaml"
    path.write_text(
        "servers:\n  a: &base {command: python3, request_timeout: 5}\n  b: {<<: *base, request_timeout: 9}\n",
        encoding="utf-8",
    )
    servers = load_config(path, environ={}).servers
    assert (servers["b"].command, servers["b"].request_timeout) == ("python3", 9.0)


@pytest.mark.parametrize("name", ["manifold.yaml", "claude_desktop.json"])
def test_the_example_files_load(name: str) -> None:
    config = load_config(EXAMPLES / name, environ={})
    assert list(config.servers) == ["notes", "clock"]
    assert all(server.kind == "stdio" and server.command == "python3" for server in config.servers.values())


# --- Claude Desktop / Cursor compatibility ------------------------------------------------------


def test_a_claude_desktop_file_with_only_mcp_servers_is_a_complete_config(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(
        '{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "fs"], "env": {"K": "v"}},'
        ' "remote": {"url": "https://example.com/mcp"}}}',
        encoding="utf-8",
    )
    config = load_config(path, environ={})
    assert list(config.servers) == ["fs", "remote"]
    assert config.servers["fs"].resolved_env() == {"K": "v"}
    assert config.servers["remote"].transport == "auto"
    assert config.listen.port == 8080


@pytest.mark.parametrize(
    ("server", "transport"),
    [
        ({"type": "http", "url": "http://h/mcp"}, "streamable-http"),
        ({"type": "streamable-http", "url": "http://h/mcp"}, "streamable-http"),
        ({"type": "sse", "url": "http://h/sse"}, "sse"),
        ({"type": "stdio", "command": "x"}, "stdio"),
    ],
)
def test_desktop_type_is_an_alias_of_transport(server: dict[str, Any], transport: str) -> None:
    assert build({"mcpServers": {"s": server}}).servers["s"].transport == transport


def test_desktop_disabled_timeout_and_approval_keys_are_understood() -> None:
    server = stdio(disabled=True, timeout=2500, autoApprove=["read"], alwaysAllow=["write"])
    config = build({"mcpServers": {"s": server, "t": stdio(timeout=2500, request_timeout=9)}})
    assert config.servers["s"].enabled is False
    assert config.servers["s"].request_timeout == 2.5
    assert config.servers["t"].request_timeout == 9.0  # an explicit request_timeout wins


@pytest.mark.parametrize(
    ("server", "line"),
    [
        (
            {"type": "websocket", "url": "http://h"},
            "test.yaml: mcpServers.s.type: must be one of 'stdio', 'http', 'streamable-http', 'sse' "
            "(got 'websocket')",
        ),
        (
            {"type": "sse", "transport": "auto", "url": "http://h"},
            "mcpServers.s.type: 'type' is 'sse' but 'transport' is 'auto'; they disagree",
        ),
        (stdio(disabled="yes"), "test.yaml: mcpServers.s.disabled: must be true or false (got 'yes')"),
        (stdio(disabled=True, enabled=True), "mcpServers.s.disabled: give either 'disabled' or 'enabled'"),
        (
            stdio(timeout=-5),
            "test.yaml: mcpServers.s.timeout: must be a positive number of milliseconds (got -5)",
        ),
    ],
)
def test_bad_desktop_keys_are_reported_where_they_were_written(server: dict[str, Any], line: str) -> None:
    assert line in error_of({"mcpServers": {"s": server}}).splitlines()[0]


def test_servers_and_mcp_servers_together_are_an_error() -> None:
    message = error_of({"servers": {"a": stdio()}, "mcpServers": {"b": stdio()}})
    assert message == "test.yaml: mcpServers: give either 'servers' or 'mcpServers', not both"


# --- defaults and order --------------------------------------------------------------------------


def test_servers_keep_the_order_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "manifold.yaml"
    path.write_text(
        "servers:\n  zeta: {command: z}\n  alpha: {command: a}\n  mid: {command: m}\n", encoding="utf-8"
    )
    config = load_config(path, environ={})
    assert list(config.servers) == ["zeta", "alpha", "mid"]
    assert [server.id for server in config.enabled_servers()] == ["zeta", "alpha", "mid"]


def test_omitted_sections_take_their_defaults() -> None:
    config = build({})
    assert config.listen == ListenConfig(host="127.0.0.1", port=8080, allowed_origins=(), allowed_hosts=())
    assert config.naming == NamingConfig(separator=".", max_length=128)
    assert config.catalog == CatalogConfig(page_size=100, max_server_pages=1000)
    assert config.sessions.idle_timeout == 3600
    assert (config.log_level, config.servers) == ("info", {})
    assert config.limits.max_depth == 64


def test_the_depth_limit_is_configurable_and_overridable_from_the_environment() -> None:
    assert build({"limits": {"max_depth": 32}}).limits.max_depth == 32
    assert build({}, environ={"MANIFOLD_LIMITS__MAX_DEPTH": "100"}).limits.max_depth == 100


@pytest.mark.parametrize("depth", [0, 7, 201, 300])
def test_a_depth_limit_the_encoder_could_not_honour_or_too_small_to_use_is_refused(depth: int) -> None:
    message = error_of({"limits": {"max_depth": depth}})
    assert "limits.max_depth" in message


def test_server_fields_take_their_defaults() -> None:
    server = build({"servers": {"a": stdio()}}).servers["a"]
    assert (server.args, server.env, server.cwd, server.headers) == ((), {}, None, {})
    assert (server.enabled, server.connect_timeout, server.request_timeout) == (True, 30.0, 60.0)


def test_prefix_defaults_to_the_server_id_and_may_be_empty() -> None:
    servers = build(
        {"servers": {"github": stdio(), "plain": stdio(prefix=""), "other": stdio(prefix="")}}
    ).servers
    assert [servers[key].prefix for key in ("github", "plain", "other")] == ["github", "", ""]


def test_transport_defaults_to_stdio_for_commands_and_auto_for_urls() -> None:
    servers = build({"servers": {"cmd": stdio(), "web": {"url": "https://h/mcp"}}}).servers
    assert (servers["cmd"].transport, servers["cmd"].kind) == ("stdio", "stdio")
    assert (servers["web"].transport, servers["web"].kind) == ("auto", "http")


def test_enabled_servers_leaves_out_disabled_ones() -> None:
    config = build({"servers": {"a": stdio(), "b": stdio(enabled=False), "c": stdio()}})
    assert [server.id for server in config.enabled_servers()] == ["a", "c"]
    assert list(config.servers) == ["a", "b", "c"]


def test_log_level_is_case_insensitive() -> None:
    assert build({"log_level": "WARNING"}).log_level == "warning"


def test_numbers_in_args_and_env_become_strings() -> None:
    server = build({"servers": {"a": stdio(args=["--port", 8080], env={"PORT": 8080})}}).servers["a"]
    assert server.args == ("--port", "8080")
    assert server.resolved_env() == {"PORT": "8080"}


def test_models_are_frozen() -> None:
    config = build({"servers": {"a": stdio()}})
    with pytest.raises(pydantic.ValidationError):
        config.listen.port = 1
    with pytest.raises(pydantic.ValidationError):
        config.servers["a"].command = "rm"


# --- interpolation ----------------------------------------------------------------------------


def test_variables_are_interpolated_in_every_string_value() -> None:
    environ = {"TOKEN": "t0k", "HOST": "api.example.com", "BIN": "node"}
    config = build(
        {
            "listen": {"host": "${HOST}"},
            "servers": {
                "cmd": {"command": "${BIN}", "args": ["--token=${TOKEN}"], "env": {"T": "${TOKEN}"}},
                "web": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            },
        },
        environ,
    )
    cmd, web = config.servers["cmd"], config.servers["web"]
    assert (config.listen.host, cmd.command, cmd.args, cmd.resolved_env()) == (
        "api.example.com",
        "node",
        ("--token=t0k",),
        {"T": "t0k"},
    )
    assert (web.url, web.resolved_headers()) == (
        "https://api.example.com/mcp",
        {"Authorization": "Bearer t0k"},
    )


def test_interpolated_numbers_are_validated_as_numbers() -> None:
    assert build({"listen": {"port": "${PORT}"}}, {"PORT": "9443"}).listen.port == 9443


def test_a_default_is_used_when_the_variable_is_unset_or_empty() -> None:
    data = {"listen": {"host": "${BIND:-0.0.0.0}"}}
    assert build(data, {}).listen.host == "0.0.0.0"
    assert build(data, {"BIND": ""}).listen.host == "0.0.0.0"
    assert build(data, {"BIND": "10.0.0.1"}).listen.host == "10.0.0.1"


def test_a_set_but_empty_variable_without_default_is_the_empty_string() -> None:
    server = build({"servers": {"a": stdio(args=["x${EMPTY}y"])}}, {"EMPTY": ""}).servers["a"]
    assert server.args == ("xy",)


def test_double_dollar_brace_is_a_literal_dollar_brace() -> None:
    server = build({"servers": {"a": stdio(args=["$${HOME} costs $$5", "${A}$${A}"])}}, {"A": "1"}).servers[
        "a"
    ]
    assert server.args == ("${HOME} costs $$5", "1${A}")


def test_a_missing_variable_names_the_field_path_and_the_variable() -> None:
    message = error_of(
        {"servers": {"gh": stdio(args=["ok", "--t=${NOPE}"], env={"A": f"{SECRET}${{ALSO_NOPE}}"})}},
        {"SET": SECRET},
    )
    assert message.splitlines() == [
        "test.yaml: servers.gh.args[1]: environment variable 'NOPE' is not set "
        "(use ${NOPE:-default} for a default)",
        "test.yaml: servers.gh.env.A: environment variable 'ALSO_NOPE' is not set "
        "(use ${ALSO_NOPE:-default} for a default)",
    ]


@pytest.mark.parametrize("reference", ["${}", "${1ABC}", "${A B}", "${UNCLOSED"])
def test_a_malformed_reference_is_an_error(reference: str) -> None:
    message = error_of({"listen": {"host": f"h{reference}"}})
    assert message.startswith(f"test.yaml: listen.host: bad reference {reference!r}")


# --- environment overrides ---------------------------------------------------------------------


def test_manifold_variables_override_the_file() -> None:
    environ = {
        "MANIFOLD_LISTEN__PORT": "9000",
        "MANIFOLD_LOG_LEVEL": "DEBUG",
        "MANIFOLD_NAMING__SEPARATOR": "__",
        "MANIFOLD_LISTEN__ALLOWED_HOSTS": '["gw:9000"]',
    }
    config = build({"listen": {"port": 8000, "host": "127.0.0.2"}, "log_level": "error"}, environ)
    assert (config.listen.port, config.listen.host, config.listen.allowed_hosts) == (
        9000,
        "127.0.0.2",
        ("gw:9000",),
    )
    assert (config.log_level, config.naming.separator) == ("debug", "__")


# A value for every setting the environment may set, different from the default. The list of
# settings is derived from the Config model (see test_every_setting_has_a_sample): a new field
# fails that test until it has a sample here, and then is tested like all the others.
SAMPLES: dict[str, str] = {
    "MANIFOLD_LISTEN": '{"port": 9001, "host": "0.0.0.0"}',
    "MANIFOLD_LISTEN__HOST": "0.0.0.0",
    "MANIFOLD_LISTEN__PORT": "9001",
    "MANIFOLD_LISTEN__ALLOWED_ORIGINS": '["https://app.example.com"]',
    "MANIFOLD_LISTEN__ALLOWED_HOSTS": '["gw:9001"]',
    "MANIFOLD_NAMING": '{"separator": "__", "max_length": 64}',
    "MANIFOLD_NAMING__SEPARATOR": "__",
    "MANIFOLD_NAMING__MAX_LENGTH": "64",
    "MANIFOLD_CATALOG": '{"page_size": 5}',
    "MANIFOLD_LIMITS": '{"max_depth": 32}',
    "MANIFOLD_LIMITS__MAX_DEPTH": "32",
    "MANIFOLD_LIMITS__MAX_REQUEST_BYTES": "1048576",
    "MANIFOLD_LIMITS__MAX_CONTAINERS": "5000",
    "MANIFOLD_LIMITS__MAX_CAPABILITIES_BYTES": "2048",
    "MANIFOLD_LIMITS__MAX_META_BYTES": "2048",
    "MANIFOLD_LIMITS__MAX_ARGUMENT_BYTES": "2048",
    "MANIFOLD_LIMITS__VALIDATE_IN_THREAD_BYTES": "0",
    "MANIFOLD_LIMITS__MAX_BATCH": "10",
    "MANIFOLD_LIMITS__MAX_URI_BYTES": "2048",
    "MANIFOLD_LIMITS__BATCH_CONCURRENCY": "2",
    "MANIFOLD_LIMITS__MAX_HEADER_BYTES": "8192",
    "MANIFOLD_LIMITS__HEADER_TIMEOUT": "2.5",
    "MANIFOLD_LIMITS__BODY_TIMEOUT": "5.5",
    "MANIFOLD_LIMITS__MAX_CONNECTIONS": "100",
    "MANIFOLD_LIMITS__CONNECTION_RESERVE": "4",
    "MANIFOLD_LIMITS__MAX_SESSIONS": "50",
    "MANIFOLD_LIMITS__MAX_SESSIONS_PER_IDENTITY": "5",
    "MANIFOLD_LIMITS__MAX_IN_FLIGHT_PER_SESSION": "3",
    "MANIFOLD_LIMITS__MAX_LISTEN_STREAMS_PER_SESSION": "2",
    "MANIFOLD_LIMITS__MAX_SUBSCRIPTIONS_PER_SESSION": "7",
    "MANIFOLD_LIMITS__REPLAY_BUFFER_BYTES": "4096",
    "MANIFOLD_LIMITS__MAX_PARKED_CALLS": "9",
    "MANIFOLD_LIMITS__MAX_HELD_QUESTIONS": "3",
    "MANIFOLD_LIMITS__MAX_QUESTION_BYTES": "4096",
    "MANIFOLD_LIMITS__MAX_TASKS_PER_IDENTITY": "7",
    "MANIFOLD_LIMITS__MAX_TASKS": "70",
    "MANIFOLD_LIMITS__MAX_TASK_RESULT_BYTES": "2048",
    "MANIFOLD_LIMITS__MAX_TASK_TTL": "60",
    "MANIFOLD_LIMITS__MAX_CLIENT_TASKS_PER_SERVER": "9",
    "MANIFOLD_LIMITS__MAX_PENDING_APPROVALS": "7",
    "MANIFOLD_LIMITS__MAX_PER_CLIENT_CONNECTIONS": "6",
    "MANIFOLD_LIMITS__PER_CLIENT_IDLE_TIMEOUT": "12.5",
    "MANIFOLD_LIMITS__MAX_SERVER_MESSAGE_BYTES": "1048576",
    "MANIFOLD_LIMITS__MAX_SERVER_ITEMS": "500",
    "MANIFOLD_LIMITS__STDERR_LINES_KEPT": "10",
    "MANIFOLD_LIMITS__STDERR_LINES_LOGGED_PER_MINUTE": "30",
    "MANIFOLD_LIMITS__FAILURES_UNTIL_UNREADY": "3",
    "MANIFOLD_LIMITS__AUDIT_BUFFER_BYTES": "1048576",
    "MANIFOLD_CATALOG__PAGE_SIZE": "5",
    "MANIFOLD_CATALOG__MAX_SERVER_PAGES": "9",
    "MANIFOLD_SESSIONS": '{"idle_timeout": 60}',
    "MANIFOLD_SESSIONS__IDLE_TIMEOUT": "60.5",
    "MANIFOLD_SESSIONS__SECRET": "s" * 40,
    "MANIFOLD_SESSIONS__MAX_LIFETIME": "7200",
    "MANIFOLD_SESSIONS__REVOCATIONS": "redis",
    "MANIFOLD_SESSIONS__TASKS": "memory",
    "MANIFOLD_SESSIONS__REDIS_URL": "redis://cache:6379/2",
    "MANIFOLD_SESSIONS__FAILURE_MODE": "fail_open",
    "MANIFOLD_LOG_LEVEL": "debug",
    "MANIFOLD_AUTH": '{"token_cache_size": 5}',
    "MANIFOLD_AUTH__API_KEYS": '[{"name": "ci", "key": "env:CI_KEY", "roles": ["ci"]}]',
    "MANIFOLD_AUTH__JWT": '[{"issuer": "https://id.example.com/", "jwks_url": "https://id.example.com/jwks"}]',
    "MANIFOLD_AUTH__ANONYMOUS": '{"enabled": true, "roles": ["guest"]}',
    "MANIFOLD_AUTH__ANONYMOUS__ENABLED": "false",
    "MANIFOLD_AUTH__ANONYMOUS__NAME": "guest",
    "MANIFOLD_AUTH__ANONYMOUS__ROLES": '["guest"]',
    "MANIFOLD_AUTH__STDIO_IDENTITY": '{"name": "me"}',
    "MANIFOLD_AUTH__STDIO_IDENTITY__NAME": "me",
    "MANIFOLD_AUTH__STDIO_IDENTITY__ROLES": '["admin"]',
    "MANIFOLD_AUTH__TOKEN_CACHE_SIZE": "5",
    "MANIFOLD_AUTH__OAUTH": '{"resource": "https://mcp.example.com/mcp", "authorization_servers": [{"issuer": "https://id.example.com"}]}',
    "MANIFOLD_AUTH__OAUTH__RESOURCE": "https://gw.example.com/team/mcp",
    "MANIFOLD_AUTH__OAUTH__AUTHORIZATION_SERVERS": '[{"issuer": "https://other.example.com"}]',
    "MANIFOLD_AUTH__OAUTH__SCOPES_SUPPORTED": '["mcp:tools"]',
    "MANIFOLD_AUTH__OAUTH__REQUIRED_SCOPES": '["mcp:tools"]',
    "MANIFOLD_AUTH__OAUTH__SCOPE_ROLES": '{"mcp:admin": ["admin"]}',
    "MANIFOLD_AUTH__OAUTH__ROLES_CLAIM": "realm_access.roles",
    "MANIFOLD_AUTH__OAUTH__NAME_CLAIM": "preferred_username",
    "MANIFOLD_AUTH__OAUTH__RESOURCE_NAME": "Acme tools",
    "MANIFOLD_AUTH__OAUTH__INTROSPECTION_CACHE": "5",
    "MANIFOLD_AUTH__OAUTH__SCOPES_AS_ROLES": "true",
    "MANIFOLD_AUTH__OAUTH__CA_FILE": "/etc/manifold/corp-ca.pem",
    "MANIFOLD_AUTH__OAUTH__INTROSPECTIONS_PER_CLIENT": "5",
    "MANIFOLD_AUTH__OAUTH__INTROSPECTIONS_PER_SECOND": "5",
    "MANIFOLD_POLICY": '{"dry_run": true}',
    "MANIFOLD_POLICY__FILES": '["policies/default.yaml"]',
    "MANIFOLD_POLICY__DRY_RUN": "true",
    "MANIFOLD_POLICY__RELOAD": "false",
    "MANIFOLD_POLICY__VALIDATE_ARGUMENTS": "false",
    "MANIFOLD_POLICY__VALIDATE_RESULTS": "false",
    "MANIFOLD_POLICY__PINS": '{"mode": "off"}',
    "MANIFOLD_POLICY__PINS__MODE": "block",
    "MANIFOLD_POLICY__PINS__PATH": "/var/lib/manifold/pins.json",
    "MANIFOLD_POLICY__AUDIT": '{"path": "-"}',
    "MANIFOLD_POLICY__AUDIT__PATH": "/var/log/manifold/audit.jsonl",
    "MANIFOLD_POLICY__APPROVALS_URL": "https://manifold.example.com",
    "MANIFOLD_POLICY__GUARDRAILS": '{"max_depth": 32}',
    "MANIFOLD_POLICY__GUARDRAILS__MAX_BYTES": "2097152",
    "MANIFOLD_POLICY__GUARDRAILS__MAX_DEPTH": "16",
    "MANIFOLD_POLICY__GUARDRAILS__IN_THREAD_BYTES": "0",
    "MANIFOLD_POLICY__GUARDRAILS__HOOKS": '{"dlp": {"url": "https://dlp.example/i", "failure": "open"}}',
    "MANIFOLD_POLICY__AUDIT__INCLUDE_ARGUMENTS": "true",
    "MANIFOLD_RATE_LIMITS": '{"backend": "redis"}',
    "MANIFOLD_RATE_LIMITS__BACKEND": "redis",
    "MANIFOLD_RATE_LIMITS__REDIS_URL": "rediss://cache:6380/1",
    "MANIFOLD_RATE_LIMITS__KEY_PREFIX": "gw:",
    "MANIFOLD_RATE_LIMITS__FAILURE_MODE": "fail_closed",
    "MANIFOLD_RATE_LIMITS__TIMEOUT": "1.5",
    "MANIFOLD_RATE_LIMITS__HTTP": '{"rate": "50/second", "burst": 100}',
    "MANIFOLD_RATE_LIMITS__HTTP__RATE": "10/minute",
    "MANIFOLD_RATE_LIMITS__HTTP__BURST": "7",
    "MANIFOLD_METRICS": '{"port": 9100}',
    "MANIFOLD_METRICS__ENABLED": "false",
    "MANIFOLD_METRICS__PATH": "/prom",
    "MANIFOLD_METRICS__PORT": "9100",
    "MANIFOLD_METRICS__PER_TOOL_LATENCY": "false",
    "MANIFOLD_METRICS__IDENTITY_LABELS": "true",
    "MANIFOLD_METRICS__REQUIRE_AUTH": "true",
    "MANIFOLD_METRICS__MAX_TOOL_LABEL_VALUES": "50",
    "MANIFOLD_METRICS__ROLE": "prometheus",
    "MANIFOLD_ADMIN": '{"roles": ["ops"]}',
    "MANIFOLD_ADMIN__ROLES": '["ops", "sre"]',
    "MANIFOLD_ADMIN__LISTEN": '{"port": 9191}',
    "MANIFOLD_ADMIN__LISTEN__HOST": "::1",
    "MANIFOLD_ADMIN__LISTEN__PORT": "9292",
    "MANIFOLD_ADMIN__REDIS_URL": "redis://cache:6379/2",
    "MANIFOLD_ADMIN__REPLICA": "eu-1",
    "MANIFOLD_ADMIN__WRITES": '{"rate": "5/minute", "burst": 2}',
    "MANIFOLD_ADMIN__WRITES__RATE": "5/minute",
    "MANIFOLD_ADMIN__WRITES__BURST": "3",
    "MANIFOLD_ADMIN__REQUESTS": '{"rate": "5/second", "burst": 9}',
    "MANIFOLD_ADMIN__REQUESTS__RATE": "5/second",
    "MANIFOLD_ADMIN__REQUESTS__BURST": "7",
    "MANIFOLD_ADMIN__REPLY_WAIT": "2.5",
    "MANIFOLD_ADMIN__GRAFANA_URL": "https://grafana.example.com/d/manifold",
    "MANIFOLD_TRACING": '{"enabled": true, "service_name": "gw"}',
    "MANIFOLD_TRACING__ENABLED": "true",
    "MANIFOLD_TRACING__PROTOCOL": "grpc",
    "MANIFOLD_TRACING__ENDPOINT": "http://collector:4317",
    "MANIFOLD_TRACING__HEADERS": '{"x-tenant": "blue"}',
    "MANIFOLD_TRACING__SERVICE_NAME": "gateway-eu",
    "MANIFOLD_TRACING__SAMPLER": "parentbased_traceidratio",
    "MANIFOLD_TRACING__SAMPLER_RATIO": "0.1",
    "MANIFOLD_TRACING__MAX_QUEUE_SIZE": "8192",
    "MANIFOLD_TRACING__MAX_EXPORT_BATCH_SIZE": "256",
    "MANIFOLD_TRACING__SCHEDULE_DELAY_MS": "250",
    "MANIFOLD_TRACING__EXPORT_TIMEOUT_MS": "3000",
    "MANIFOLD_TRACING__IDENTITY": "true",
    "MANIFOLD_TRACING__MAX_ATTRIBUTE_LENGTH": "256",
    "MANIFOLD_LOGGING": '{"format": "json"}',
    "MANIFOLD_LOGGING__FORMAT": "plain",
    "MANIFOLD_LOGGING__ACCESS_LOG": "false",
    "MANIFOLD_DISCOVERY": '{"mode": "search"}',
    "MANIFOLD_DISCOVERY__MODE": "promote",
    "MANIFOLD_DISCOVERY__DEFAULT_RESULTS": "3",
    "MANIFOLD_DISCOVERY__MAX_RESULTS": "30",
    "MANIFOLD_DISCOVERY__MAX_DESCRIBE": "5",
    "MANIFOLD_DISCOVERY__MAX_QUERY_CHARS": "200",
    "MANIFOLD_DISCOVERY__MAX_PROMOTED": "4",
    "MANIFOLD_DISCOVERY__SEMANTIC": "off",
    "MANIFOLD_CREDENTIALS": '{"store": "redis"}',
    "MANIFOLD_CREDENTIALS__STORE": "env",
    "MANIFOLD_CREDENTIALS__PATH": "/var/lib/manifold/credentials.json",
    "MANIFOLD_CREDENTIALS__KEY": "A" * 43 + "=",
    "MANIFOLD_CREDENTIALS__REDIS_URL": "redis://cache:6379/3",
    "MANIFOLD_CREDENTIALS__KEY_PREFIX": "mf:cred:",
    "MANIFOLD_CREDENTIALS__ENV_PREFIX": "GW_SECRET__",
    "MANIFOLD_CREDENTIALS__MAX_SECRET_BYTES": "4096",
    "MANIFOLD_CREDENTIALS__MAX_ENTRIES": "500",
    "MANIFOLD_CREDENTIALS__TIMEOUT": "1.5",
    "MANIFOLD_CREDENTIALS__CALLBACK_URL": "https://gw.example.com/oauth/callback",
    "MANIFOLD_CREDENTIALS__SIGNIN_TIMEOUT": "300",
    "MANIFOLD_CREDENTIALS__ALLOW_INSECURE_HTTP": "true",
}
# What a few samples need from the file to be valid on their own.
_OAUTH = {
    "auth": {
        "oauth": {
            "resource": "https://mcp.example.com/mcp",
            "authorization_servers": [{"issuer": "https://id.example.com"}],
        }
    }
}
SAMPLE_FILES: dict[str, dict[str, Any]] = {
    **{
        f"MANIFOLD_ADMIN__{field}": {"admin": {}}
        for field in ("ROLES", "REDIS_URL", "REPLICA", "WRITES", "REQUESTS", "REPLY_WAIT", "GRAFANA_URL")
    },
    **{f"MANIFOLD_ADMIN__{field}": {"admin": {"listen": {}}} for field in ("LISTEN__HOST", "LISTEN__PORT")},
    "MANIFOLD_ADMIN__LISTEN": {"admin": {}},
    "MANIFOLD_ADMIN__WRITES__RATE": {"admin": {}},
    "MANIFOLD_ADMIN__WRITES__BURST": {"admin": {"writes": {"rate": "1/second"}}},
    "MANIFOLD_ADMIN__REQUESTS__RATE": {"admin": {}},
    "MANIFOLD_ADMIN__REQUESTS__BURST": {"admin": {"requests": {"rate": "1/second"}}},
    "MANIFOLD_RATE_LIMITS__HTTP__BURST": {"rate_limits": {"http": {"rate": "1/second"}}},
    **{
        f"MANIFOLD_AUTH__OAUTH__{field}": _OAUTH
        for field in (
            "RESOURCE",
            "AUTHORIZATION_SERVERS",
            "SCOPES_SUPPORTED",
            "REQUIRED_SCOPES",
            "SCOPE_ROLES",
            "ROLES_CLAIM",
            "NAME_CLAIM",
            "RESOURCE_NAME",
            "INTROSPECTION_CACHE",
            "SCOPES_AS_ROLES",
            "CA_FILE",
            "INTROSPECTIONS_PER_CLIENT",
            "INTROSPECTIONS_PER_SECOND",
        )
    },
}
OVERRIDABLE = overridable(Config, exclude={"servers", "endpoints"})


def plain(value: Any) -> Any:
    """A config value as JSON-ish data, to compare with what a variable said."""
    if isinstance(value, pydantic.SecretStr):
        return value.get_secret_value()
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # a parsed value such as a rate: its text


def said(text: str) -> Any:
    """What a variable's text means: JSON where it is JSON, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def holds(actual: Any, expected: Any) -> bool:
    """``actual`` has everything ``expected`` says (a section given as JSON keeps its defaults)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and holds(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(holds(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected)


def setting(config: Config, path: tuple[str, ...]) -> Any:
    value: Any = config
    for name in path:
        value = getattr(value, name, None)  # None: a section that is off (rate_limits.http)
    return value


def test_every_setting_has_a_sample() -> None:
    assert sorted(SAMPLES) == sorted(s.variable for s in OVERRIDABLE)


def test_the_derived_settings_reach_every_section_and_leave_out_the_servers() -> None:
    sections = {s.path[0] for s in OVERRIDABLE}
    assert sections == set(Config.model_fields) - {"servers", "endpoints"}
    assert {"MANIFOLD_POLICY__PINS__MODE", "MANIFOLD_METRICS__PORT", "MANIFOLD_AUTH__ANONYMOUS__ENABLED"} <= {
        s.variable for s in OVERRIDABLE
    }


@pytest.mark.parametrize("variable", [s.variable for s in OVERRIDABLE])
def test_every_setting_can_be_overridden_from_the_environment(variable: str) -> None:
    path = next(s.path for s in OVERRIDABLE if s.variable == variable)
    text = SAMPLES[variable]
    data = SAMPLE_FILES.get(variable, {})

    overridden = plain(setting(build(data, {variable: text}), path))

    assert holds(overridden, said(text)), overridden
    assert not holds(plain(setting(build(data), path)), said(text))  # the sample is not the default


def documented_overrides() -> list[str]:
    """Every ``MANIFOLD_X=value`` example in the README, the documentation and the config module's
    docstring."""
    pages = [README, *sorted((README.parent / "docs").rglob("*.md"))]
    texts = [
        *(page.read_text(encoding="utf-8") for page in pages),
        proxy.config.model.__doc__ or "",
        proxy.config.overrides.__doc__ or "",
    ]
    found = {
        match for text in texts for match in re.findall(r"MANIFOLD_[A-Z0-9_]+=(?:'[^']*'|[^`'\s]+)", text)
    }
    return sorted(found)


def test_the_documentation_shows_overrides_of_nested_sections() -> None:
    documented = {example.partition("=")[0] for example in documented_overrides()}
    assert {"MANIFOLD_LISTEN__PORT", "MANIFOLD_POLICY__PINS__MODE", "MANIFOLD_METRICS__PORT"} <= documented


@pytest.mark.parametrize("example", documented_overrides())
def test_every_documented_override_works(example: str) -> None:
    variable, _, text = example.partition("=")
    text = text.strip("'")
    path = next(s.path for s in OVERRIDABLE if s.variable == variable)
    assert holds(plain(setting(build({}, {variable: text}), path)), said(text))


def test_a_variable_for_a_field_wins_over_one_for_its_whole_section() -> None:
    environ = {"MANIFOLD_LISTEN": '{"port": 1, "host": "0.0.0.0"}', "MANIFOLD_LISTEN__PORT": "2"}
    config = build({"listen": {"allowed_hosts": ["gw"]}}, environ)
    assert (config.listen.port, config.listen.host, config.listen.allowed_hosts) == (2, "0.0.0.0", ("gw",))


def test_null_unsets_a_setting_that_may_be_unset() -> None:
    data = {"metrics": {"port": 9100}, "rate_limits": {"http": {"rate": "5/second"}}}
    config = build(data, {"MANIFOLD_METRICS__PORT": "null", "MANIFOLD_RATE_LIMITS__HTTP": "null"})
    assert (config.metrics.port, config.rate_limits.http) == (None, None)


def test_variable_names_are_matched_without_regard_to_case() -> None:
    assert build({}, {"manifold_policy__pins__mode": "off"}).policy.pins.mode == "off"


def test_other_manifold_variables_without_a_path_are_left_alone() -> None:
    # ${MANIFOLD_SESSION_SECRET} in the README's example config is the operator's own variable.
    environ = {"MANIFOLD_SESSION_SECRET": "x" * 40, "MANIFOLD_READY": "1"}
    config = build({"sessions": {"secret": "${MANIFOLD_SESSION_SECRET}"}}, environ)
    assert config.sessions.secret is not None
    assert config.sessions.secret.get_secret_value() == "x" * 40


def test_os_environ_is_read_when_no_environ_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MANIFOLD_CATALOG__PAGE_SIZE", "7")
    monkeypatch.setenv("CONFIG_TEST_BIN", "node")
    path = tmp_path / "m.yaml"
    path.write_text("servers:\n  a: {command: '${CONFIG_TEST_BIN}'}\n", encoding="utf-8")
    config = load_config(path)
    assert (config.catalog.page_size, config.servers["a"].command) == (7, "node")


def test_an_injected_environ_replaces_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANIFOLD_LISTEN__PORT", "1234")
    assert build({}, {}).listen.port == 8080


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"MANIFOLD_LISTEN__PORT": "99999"},
            "test.yaml: listen.port: must be less than or equal to 65535 (got '99999') "
            "(set by MANIFOLD_LISTEN__PORT)",
        ),
        (
            {"MANIFOLD_METRICS__PORT": "ninety"},
            "test.yaml: metrics.port: must be a valid integer, unable to parse string as an integer "
            "(got 'ninety') (set by MANIFOLD_METRICS__PORT)",
        ),
        (
            {"MANIFOLD_POLICY__PINS__MODE": "sometimes"},
            "test.yaml: policy.pins.mode: must be 'off', 'warn', 'block' or 'confirm' (got 'sometimes') "
            "(set by MANIFOLD_POLICY__PINS__MODE)",
        ),
        (
            {"MANIFOLD_AUTH__ANONYMOUS__ENABLED": "maybe"},
            "test.yaml: auth.anonymous.enabled: must be a valid boolean, unable to interpret input "
            "(got 'maybe') (set by MANIFOLD_AUTH__ANONYMOUS__ENABLED)",
        ),
        (
            {"MANIFOLD_LISTEN": '{"port": 1, "hots": "x"}'},
            "test.yaml: listen.hots: unknown field (did you mean 'host'?) (set by MANIFOLD_LISTEN)",
        ),
        (
            {"MANIFOLD_LISTEN": "{not json"},
            "MANIFOLD_LISTEN: must be JSON (an object); Expecting property name enclosed in double "
            "quotes at line 1, column 2",
        ),
        (
            {"MANIFOLD_POLICY__FILES": "policies/default.yaml"},
            "MANIFOLD_POLICY__FILES: must be JSON (a list); Expecting value at line 1, column 1",
        ),
        (
            {"MANIFOLD_LISTEN__PORTT": "9000"},
            "MANIFOLD_LISTEN__PORTT: no setting 'portt' in listen (did you mean MANIFOLD_LISTEN__PORT?)",
        ),
        (
            {"MANIFOLD_POLCY__DRY_RUN": "true"},
            "MANIFOLD_POLCY__DRY_RUN: no setting 'polcy' (did you mean MANIFOLD_POLICY?)",
        ),
        (
            {"MANIFOLD_LOG_LEVEL__NAME": "x"},
            "MANIFOLD_LOG_LEVEL__NAME: log_level is a single setting, not a section with 'name' in it",
        ),
        (
            {"MANIFOLD_SERVERS": '{"b": {"command": "evil"}}'},
            "MANIFOLD_SERVERS: servers cannot be set from the environment; use ${VARIABLE} in the file",
        ),
        (
            {"MANIFOLD_LISTEN__PORT": "1", "manifold_listen__port": "2"},
            "manifold_listen__port: sets listen.port as MANIFOLD_LISTEN__PORT does; keep one of them",
        ),
    ],
)
def test_a_bad_override_is_an_error_naming_the_variable(environ: dict[str, str], message: str) -> None:
    assert error_of({"listen": {"port": 80}}, environ) == message


def test_every_bad_variable_is_reported_on_its_own_line() -> None:
    message = error_of({}, {"MANIFOLD_LISTEN__PORTT": "1", "MANIFOLD_LISTEN": "{", "MANIFOLD_SERVERS": "{}"})
    assert [line.partition(":")[0] for line in message.splitlines()] == [
        "MANIFOLD_LISTEN",
        "MANIFOLD_LISTEN__PORTT",
        "MANIFOLD_SERVERS",
    ]


@pytest.mark.parametrize(
    ("data", "environ"),
    [({"sessions": {"secret": SECRET}}, {}), ({}, {"MANIFOLD_SESSIONS__SECRET": SECRET})],
    ids=["in-the-file", "from-the-environment"],
)
def test_a_session_secret_that_is_too_short_is_not_echoed(
    data: dict[str, Any], environ: dict[str, str]
) -> None:
    message = error_of(data, environ)
    assert message.startswith("test.yaml: sessions.secret: ")
    assert SECRET not in message


def test_a_bad_key_or_secret_from_the_environment_is_not_echoed() -> None:
    environ = {
        "MANIFOLD_AUTH__API_KEYS": f'[{{"name": "ci", "key": "{SECRET}"}}]',
        "MANIFOLD_AUTH__JWT": f'[{{"issuer": "x", "secret": "{SECRET}"}}]',
    }
    message = error_of({}, environ)
    assert SECRET not in message
    assert "(set by MANIFOLD_AUTH__API_KEYS)" in message
    assert "MANIFOLD_AUTH__JWT" in message


# --- secrets -------------------------------------------------------------------------------------


def test_env_and_header_values_never_appear_in_repr_or_str() -> None:
    config = build(
        {
            "servers": {
                "a": stdio(env={"TOKEN": "${T}"}),
                "b": {"url": "http://h", "headers": {"X-Key": "${T}"}},
            }
        },
        {"T": SECRET},
    )
    for text in (repr(config), str(config), repr(config.servers["a"]), config.model_dump_json()):
        assert SECRET not in text
    assert "TOKEN" in repr(config)  # names are not secret, only values
    assert config.servers["a"].resolved_env() == {"TOKEN": SECRET}
    assert config.servers["b"].resolved_headers() == {"X-Key": SECRET}


def test_env_and_header_values_never_appear_in_errors_or_tracebacks() -> None:
    data = {
        "servers": {
            "a": stdio(env={"TOKEN": [SECRET]}, request_timeout=0),
            "b": {"url": "http://h", "headers": {"X-Key": {"v": SECRET}}},
            "c": stdio(enviroment={"TOKEN": SECRET}),
        }
    }
    with pytest.raises(ConfigError) as info:
        build(data)
    message = str(info.value)
    assert "servers.a.env.TOKEN: must be a valid string" in message
    assert "servers.b.headers.X-Key: must be a valid string" in message
    assert "servers.c.enviroment: unknown field" in message
    assert SECRET not in message
    assert SECRET not in "".join(traceback.format_exception(info.value))


def test_no_value_under_env_or_headers_is_echoed_even_a_harmless_looking_one() -> None:
    message = error_of({"servers": {"a": stdio(env={"FLAG": True})}})
    assert message == "test.yaml: servers.a.env.FLAG: must be a valid string"


# --- validation errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"servers": {"github": stdio(request_timeout=-1)}},
            "test.yaml: servers.github.request_timeout: must be greater than 0 (got -1)",
        ),
        (
            {"servers": {"s": stdio(connect_timeout=0)}},
            "test.yaml: servers.s.connect_timeout: must be greater than 0 (got 0)",
        ),
        (
            {"servers": {"s": {"args": ["x"]}}},
            "test.yaml: servers.s: needs exactly one of 'command' (stdio) or 'url' (HTTP) (got neither)",
        ),
        (
            {"servers": {"s": {"command": "x", "url": "http://h"}}},
            "test.yaml: servers.s: needs exactly one of 'command' (stdio) or 'url' (HTTP) (got both)",
        ),
        (
            {"servers": {"s": stdio(transport="sse")}},
            "test.yaml: servers.s.transport: must be 'stdio' for a command server (got 'sse')",
        ),
        (
            {"servers": {"s": {"url": "http://h", "transport": "stdio"}}},
            "test.yaml: servers.s.transport: must be 'auto', 'streamable-http' or 'sse' for a url server "
            "(got 'stdio')",
        ),
        (
            {"servers": {"s": {"url": "http://h", "transport": "websocket"}}},
            "test.yaml: servers.s.transport: must be 'stdio', 'auto', 'streamable-http' or 'sse' "
            "(got 'websocket')",
        ),
        (
            {"servers": {"s": {"url": "ftp://h/mcp"}}},
            "test.yaml: servers.s.url: must be an http:// or https:// URL (got 'ftp://h/mcp')",
        ),
        (
            {"servers": {"s": {"url": "http://h", "args": ["x"]}}},
            "test.yaml: servers.s.args: only applies to command servers; this server has a 'url'",
        ),
        (
            {"servers": {"s": stdio(headers={"A": "b"})}},
            "test.yaml: servers.s.headers: only applies to url servers; this server has a 'command'",
        ),
        ({"servers": {"s": stdio(id="t")}}, "test.yaml: servers.s.id: unknown field (the id is the key)"),
        ({"servers": {"s": stdio(enabled="maybe")}}, "test.yaml: servers.s.enabled: must be a valid boolean"),
        (
            {"listen": {"port": 70000}},
            "test.yaml: listen.port: must be less than or equal to 65535 (got 70000)",
        ),
        ({"listen": {"port": "http"}}, "test.yaml: listen.port: must be a valid integer"),
        (
            {"listen": {"allowed_origins": ["https://app.example.com/"]}},
            "test.yaml: listen.allowed_origins: each must look like 'https://app.example.com' "
            "(got 'https://app.example.com/')",
        ),
        (
            {"naming": {"separator": ""}},
            "test.yaml: naming.separator: must have at least 1 character (got '')",
        ),
        (
            {"naming": {"separator": "123456789"}},
            "test.yaml: naming.separator: must have at most 8 characters",
        ),
        ({"naming": {"separator": "/"}}, "test.yaml: naming.separator: must match pattern"),
        (
            {"naming": {"max_length": 15}},
            "test.yaml: naming.max_length: must be greater than or equal to 16 (got 15)",
        ),
        (
            {"catalog": {"page_size": 0}},
            "test.yaml: catalog.page_size: must be greater than or equal to 1 (got 0)",
        ),
        (
            {"catalog": {"page_size": 10001}},
            "test.yaml: catalog.page_size: must be less than or equal to 10000",
        ),
        (
            {"catalog": {"max_server_pages": 0}},
            "test.yaml: catalog.max_server_pages: must be greater than or equal to 1",
        ),
        (
            {"sessions": {"idle_timeout": 0}},
            "test.yaml: sessions.idle_timeout: must be greater than 0 (got 0)",
        ),
        (
            {"log_level": "verbose"},
            "test.yaml: log_level: must be 'debug', 'info', 'warning' or 'error' (got 'verbose')",
        ),
        ({"servers": ["a"]}, "test.yaml: servers: must be a valid dictionary (got a list)"),
    ],
)
def test_each_invalid_value_is_reported_with_file_field_and_value(data: dict[str, Any], line: str) -> None:
    assert error_of(data).splitlines()[0].startswith(line)


def test_every_problem_gets_its_own_line() -> None:
    message = error_of({"listen": {"port": -1}, "catalog": {"page_size": 0}, "log_level": "loud"})
    assert len(message.splitlines()) == 3
    assert all(line.startswith("test.yaml: ") for line in message.splitlines())


def test_an_unknown_server_key_suggests_the_closest_field() -> None:
    message = error_of({"servers": {"github": {"comand": "npx"}}})
    assert "test.yaml: servers.github.comand: unknown field (did you mean 'command'?)" in message.splitlines()


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"sever": {}}, "test.yaml: sever: unknown field (did you mean 'servers'?)"),
        ({"listen": {"prot": 1}}, "test.yaml: listen.prot: unknown field (did you mean 'port'?)"),
        (
            {"catalog": {"page_sise": 1}},
            "test.yaml: catalog.page_sise: unknown field (did you mean 'page_size'?)",
        ),
        (
            {"servers": {"s": stdio(dissabled=True)}},
            "test.yaml: servers.s.dissabled: unknown field (did you mean 'disabled'?)",
        ),
        ({"zzz": 1}, "test.yaml: zzz: unknown field"),
    ],
)
def test_unknown_keys_are_errors_with_a_suggestion(data: dict[str, Any], line: str) -> None:
    assert error_of(data) == line


def test_errors_in_a_desktop_file_use_the_mcp_servers_path() -> None:
    message = error_of({"mcpServers": {"s": stdio(request_timeout=0)}})
    assert message == "test.yaml: mcpServers.s.request_timeout: must be greater than 0 (got 0)"


# --- server ids, prefixes and the separator --------------------------------------------------------


@pytest.mark.parametrize(("separator", "server_id"), [("__", "my__srv"), ("-", "my-srv"), ("_", "my_srv")])
def test_a_server_id_may_not_contain_the_separator(separator: str, server_id: str) -> None:
    message = error_of({"naming": {"separator": separator}, "servers": {server_id: stdio()}})
    assert message == (
        f"test.yaml: servers.{server_id}: "
        f"server id must not contain the separator {separator!r} (got {server_id!r})"
    )


def test_a_server_id_without_the_separator_is_fine() -> None:
    assert list(build({"naming": {"separator": "__"}, "servers": {"my_srv": stdio()}}).servers) == ["my_srv"]


@pytest.mark.parametrize("server_id", ["my.srv", "my srv", "ünï", ""])
def test_a_server_id_may_only_use_letters_digits_underscore_and_dash(server_id: str) -> None:
    message = error_of({"servers": {server_id: stdio()}})
    assert message == (
        f"test.yaml: servers.{server_id}: "
        f"server id may only contain letters, digits, '_' and '-' (got {server_id!r})"
    )


def test_a_prefix_may_not_contain_the_separator() -> None:
    message = error_of({"naming": {"separator": "-"}, "servers": {"a": stdio(prefix="x-y")}})
    assert message == "test.yaml: servers.a.prefix: must not contain the separator '-' (got 'x-y')"


def test_a_prefix_may_only_use_letters_digits_underscore_and_dash() -> None:
    message = error_of({"servers": {"a": stdio(prefix="g h")}})
    assert message == "test.yaml: servers.a.prefix: may only contain letters, digits, '_' and '-' (got 'g h')"


def test_two_servers_may_not_share_a_prefix_and_the_error_names_both() -> None:
    message = error_of({"servers": {"gh": stdio(), "github": stdio(prefix="gh")}})
    assert message == "test.yaml: servers.github.prefix: 'gh' is already the prefix of server 'gh'"


def test_a_namespace_that_starts_another_servers_namespace_is_refused() -> None:
    # "a_" + "__" = "a___" starts with "a" + "__": a name in it would be both servers'.
    message = error_of({"naming": {"separator": "__"}, "servers": {"a": stdio(), "a_": stdio()}})
    assert message == (
        "test.yaml: servers.a_.prefix: names in the namespace 'a___' would also be in the namespace "
        "'a__' of server 'a'; choose prefixes that do not start one another's namespace"
    )


@pytest.mark.parametrize(
    ("separator", "server_id", "prefix"),
    [(".", "manifold", None), (".", "x", "manifold"), ("__", "manifold_", None)],
)
def test_no_server_may_have_manifolds_own_namespace(
    separator: str, server_id: str, prefix: str | None
) -> None:
    # The namespace of progressive discovery's meta-tools (manifold.search_tools …) is Manifold's.
    server = stdio() if prefix is None else stdio(prefix=prefix)
    message = error_of({"naming": {"separator": separator}, "servers": {server_id: server}})
    space = (prefix or server_id) + separator
    assert message == (
        f"test.yaml: servers.{server_id}.prefix: the namespace {space!r} is reserved for Manifold's own "
        f"tools (manifold{separator}search_tools …); give this server another prefix"
    )


def test_discovery_mode_off_may_be_written_bare_in_yaml_and_a_bad_mode_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("discovery: {mode: off}\n")
    assert load_config(path, environ={}).discovery.mode == "off"
    path.write_text("discovery: {mode: promote, max_promoted: 2}\n")
    assert load_config(path, environ={}).discovery.max_promoted == 2
    path.write_text("discovery: {mode: everything}\n")
    with pytest.raises(ConfigError, match=r"discovery\.mode"):
        load_config(path, environ={})


def test_an_unprefixed_server_may_be_called_manifold() -> None:
    assert list(build({"servers": {"manifold": stdio(prefix="")}}).servers) == ["manifold"]


# --- files ------------------------------------------------------------------------------------------


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"absent\.yaml: file not found$"):
        load_config(path, environ={})


def test_a_directory_is_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the file"):
        load_config(tmp_path, environ={})


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("listen:\n  port: 1\n servers: [\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value).startswith(f"{path}: invalid YAML: line 3, column 2: ")


def test_a_duplicate_yaml_key_is_an_error_rather_than_a_silently_lost_server(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("servers:\n  a: {command: x}\n  a: {command: y}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: invalid YAML: line 3, column 3: duplicate key 'a'"


def test_invalid_json_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "listen": {"port": 1,}\n}', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value).startswith(f"{path}: invalid JSON: line 2, column ")


def test_a_duplicate_json_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"invalid JSON: duplicate key 'a'"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("text", "got"), [("", "an empty file"), ("- a\n- b\n", "a list"), ("just text\n", "a str")]
)
def test_a_top_level_that_is_not_a_mapping_is_an_error(tmp_path: Path, text: str, got: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: the top level must be a mapping of settings (got {got})"


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(b"log_level: \xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text"):
        load_config(path, environ={})


def test_validation_errors_name_the_file_they_came_from(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("servers:\n  github: {command: npx, request_timeout: -1}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: servers.github.request_timeout: must be greater than 0 (got -1)"


@pytest.mark.parametrize(
    ("given", "era"), [("handshake", "handshake"), ("legacy", "handshake"), ("modern", "stateless")]
)
def test_a_servers_era_takes_the_names_of_earlier_releases_too(given: str, era: str) -> None:
    config = config_from_mapping({"servers": {"s": {"command": "x", "era": given}}}, environ={})
    assert config.servers["s"].era == era


def test_an_era_that_is_none_of_them_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="handshake"):
        config_from_mapping({"servers": {"s": {"command": "x", "era": "ancient"}}}, environ={})


def test_session_ids_expire_after_a_day_and_ended_ones_are_shared_when_rate_limits_use_redis() -> None:
    sessions = config_from_mapping({}).sessions
    assert (sessions.max_lifetime, sessions.revocations, sessions.failure_mode) == (
        86_400,
        "auto",
        "fail_closed",
    )
    with pytest.raises(ConfigError) as raised:
        config_from_mapping({"sessions": {"redis_url": "http://:hunter2@cache", "max_lifetime": 0}})
    message = str(raised.value)
    assert "sessions.redis_url" in message
    assert "must start with redis://" in message
    assert "sessions.max_lifetime" in message
    assert "hunter2" not in message
    assert "hunter2" not in repr(config_from_mapping({"sessions": {"redis_url": "redis://:hunter2@c"}}))


def test_per_identity_is_another_name_for_per_client() -> None:
    config = config_from_mapping(
        {"servers": {"fs": {"command": "x", "session_mode": "per_identity"}}}, environ={}
    )
    assert [s.session_mode for s in config.enabled_servers()] == ["per_client"]


# --- YAML 1.1 booleans where a mode is expected ----------------------------------------------


def _models_with_off_modes() -> list[tuple[str, type[pydantic.BaseModel], str]]:
    """Every (path, settings model, field) of the config whose value is a mode with an ``off``."""
    import typing

    found: list[tuple[str, type[pydantic.BaseModel], str]] = []
    seen: set[type[pydantic.BaseModel]] = set()

    def models_in(annotation: Any) -> list[type[pydantic.BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]

    def literals_in(annotation: Any) -> set[Any]:
        if typing.get_origin(annotation) is typing.Literal:
            return set(typing.get_args(annotation))
        return {v for arg in typing.get_args(annotation) for v in literals_in(arg)}

    def walk(model: type[pydantic.BaseModel], path: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            if "off" in literals_in(field.annotation):
                found.append((f"{path}{name}", model, name))
            for inner in models_in(field.annotation):
                walk(inner, f"{path}{name}.")

    walk(Config, "")
    return found


def test_every_mode_with_an_off_takes_a_bare_yaml_off() -> None:
    modes = _models_with_off_modes()
    assert {path for path, _, _ in modes} >= {"policy.pins.mode", "discovery.mode"}
    for path, model, name in modes:
        assert getattr(model.model_validate({name: False}), name) == "off", path


def test_policy_pins_mode_off_unquoted_is_accepted_like_discovery_mode_off(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "servers: {a: {command: x}}\n"
        "policy: {pins: {mode: off}}\n"
        "discovery: {mode: off}\n"
        "endpoints: {e: {discovery: {mode: off}}}\n"
    )
    config = load_config(path)
    assert (config.policy.pins.mode, config.discovery.mode) == ("off", "off")
    assert config.endpoints["e"].discovery is not None
    assert config.endpoints["e"].discovery.mode == "off"


def test_a_bare_on_where_no_mode_is_called_on_is_refused_naming_the_modes() -> None:
    message = error_of({"policy": {"pins": {"mode": True}}})
    assert "policy.pins.mode: must be 'off', 'warn', 'block' or 'confirm' (got 'on')" in message
