"""``ServerLogs``: who hears a server's log lines, and whose ``logging/setLevel`` reaches a server."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.config.model import EndpointConfig, ServerConfig
from proxy.config.policy import PolicySettings
from proxy.enforce.access import Access
from proxy.notify.server_logs import ServerLogs
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc
from proxy.servers.connections import Connections
from proxy.views.catalogs import Catalogs

ANN = Identity("ann", frozenset({"staff"}), "api_key")
BOB = Identity("bob", frozenset(), "api_key")
SERVERS = {sid: ServerConfig(id=sid, command="x", transport="stdio", prefix=sid) for sid in ("a", "b", "c")}
POLICY = """\
version: 1
default: deny
rules:
  - {id: staff, effect: allow, match: {roles: [staff]}}
  - {id: bob-b-tools, effect: allow, match: {identities: [bob], tools: ["b.*"]}}
  - {id: bob-c-templates, effect: allow, match: {identities: [bob], resources: ["note://c/{topic}"]}}
"""


class _Shared:
    """What ServerLogs asks of Connections when a line arrives: every server is shared."""

    def shares(self, caller: object, server_id: str) -> bool:
        return True


def gateway(
    tmp_path: Path, *, policy: str | None = POLICY, dry_run: bool = False
) -> tuple[ServerLogs, Catalogs]:
    files: tuple[str, ...] = ()
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(policy)
        files = (str(tmp_path / "policy.yaml"),)
    access = Access(PolicySettings(files=files, dry_run=dry_run), SERVERS)
    access.load()
    catalogs = Catalogs(
        {sid: s.prefix for sid, s in SERVERS.items()},
        codec=NamingCodec(".", 64),
        cursors=CursorCodec(b"k" * 32),
        access=access,
        metrics=Metrics(process_metrics=False),
        page_size=100,
        hints={},
        private=bool(files),
        on_change=lambda kind: None,
    )
    catalogs.listed("a", "tools", [{"name": "secret", "inputSchema": {"type": "object"}}])
    catalogs.listed("b", "tools", [{"name": "open", "inputSchema": {"type": "object"}}])
    catalogs.listed("c", "resourceTemplates", [{"uriTemplate": "note://c/{topic}", "name": "note"}])
    sessions = Sessions(SessionTokens(b"k" * 32), Metrics(process_metrics=False), idle_timeout=60)
    return ServerLogs(sessions, catalogs, access, cast(Connections, _Shared())), catalogs


def test_an_identity_sees_the_servers_of_which_the_policy_allows_it_something(tmp_path: Path) -> None:
    logs, _ = gateway(tmp_path)
    assert logs.servers_seen(ANN) == frozenset({"a", "b", "c"})
    assert logs.servers_seen(BOB) == frozenset({"b", "c"})  # a tool of b, a resource template of c


def test_without_a_policy_or_in_a_dry_run_every_identity_sees_every_server(tmp_path: Path) -> None:
    assert gateway(tmp_path, policy=None)[0].servers_seen(BOB) is None
    assert gateway(tmp_path, dry_run=True)[0].servers_seen(BOB) is None


def test_what_an_identity_sees_follows_the_catalog(tmp_path: Path) -> None:
    logs, catalogs = gateway(tmp_path)
    assert logs.servers_seen(BOB) == frozenset({"b", "c"})
    catalogs.listed("b", "tools", [])
    assert logs.servers_seen(BOB) == frozenset({"c"})


def test_a_log_line_reaches_only_sessions_whose_identity_sees_its_server_at_their_level(
    tmp_path: Path,
) -> None:
    logs, _ = gateway(tmp_path)
    registry = logs._sessions  # the sessions it was built with
    ann, bob, quiet = registry.open("stdio", ANN), registry.open("stdio", BOB), registry.open("stdio", ANN)
    ann.log_level = bob.log_level = "debug"
    quiet.log_level = "emergency"
    line = jsonrpc.notification("notifications/message", {"level": "error", "data": "x"})

    logs.line("a", line)
    assert (ann.standalone.pending, bob.standalone.pending, quiet.standalone.pending) == (True, False, False)
    logs.line("b", line)
    assert bob.standalone.pending


@pytest.mark.parametrize(
    ("identity", "allowed"), [(ANN, False), (Identity("o", frozenset({"ops"}), "jwt"), True)]
)
def test_a_shared_servers_log_level_is_the_policys_to_give(
    tmp_path: Path, identity: Identity, allowed: bool
) -> None:
    logs, _ = gateway(
        tmp_path, policy=POLICY + '  - {id: ops, effect: allow, match: {roles: [ops], log_levels: ["*"]}}\n'
    )
    assert logs.may_set_level(identity, "a") is allowed


def test_a_session_on_an_endpoint_hears_only_the_servers_that_endpoint_selects(tmp_path: Path) -> None:
    logs, catalogs = gateway(tmp_path, policy=None)
    endpoints = {"b-only": EndpointConfig(servers=("b",)), "all": EndpointConfig()}
    logs = ServerLogs(logs._sessions, catalogs, logs._access, cast(Connections, _Shared()), endpoints)
    registry = logs._sessions
    narrow, wide = registry.open("stdio", ANN), registry.open("stdio", ANN)
    narrow.endpoint, wide.endpoint = "b-only", "all"
    narrow.log_level = wide.log_level = "debug"
    logs.line("a", jsonrpc.notification("notifications/message", {"level": "error", "data": "x"}))
    assert (narrow.standalone.pending, wide.standalone.pending) == (False, True)
    logs.line("b", jsonrpc.notification("notifications/message", {"level": "error", "data": "y"}))
    assert narrow.standalone.pending


def test_an_endpoint_added_by_a_reload_hears_only_the_servers_it_selects(tmp_path: Path) -> None:
    logs, _ = gateway(tmp_path, policy=None)
    registry = logs._sessions
    narrow = registry.open("stdio", ANN)
    narrow.endpoint, narrow.log_level = "b-only", "debug"
    logs.endpoints_changed({"b-only": EndpointConfig(servers=("b",))})
    logs.line("a", jsonrpc.notification("notifications/message", {"level": "error", "data": "x"}))
    assert not narrow.standalone.pending
    logs.line("b", jsonrpc.notification("notifications/message", {"level": "error", "data": "y"}))
    assert narrow.standalone.pending
