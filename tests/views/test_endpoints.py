"""Endpoints: views of the one merged catalog, each paged, named and told of changes apart."""

from __future__ import annotations

import functools
from typing import Any, cast

import orjson
import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.clients.listen_streams import Listens
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.config.loading import config_from_mapping
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.core.errors import ConfigError, InvalidParams, ResourceNotFound
from proxy.enforce.access import Access
from proxy.notify.list_changes import Notices
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol.subscriptions import Filter
from proxy.servers.connections import Connections
from proxy.views.catalogs import Catalogs
from proxy.views.discovery import Discovery
from proxy.views.endpoints import admits, discovery_of, make_discovery, views_of

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
BOB = Identity("bob", frozenset(), "api_key")
IDS = ("gh", "fs", "bare")
SERVERS = {
    sid: ServerConfig(id=sid, command="x", transport="stdio", prefix="" if sid == "bare" else sid)
    for sid in IDS
}
LONG = "create_or_update_a_pull_request_review_comment_with_suggestions"  # 62 characters


def gateway(endpoints: dict[str, Any]) -> tuple[Catalogs, dict[str, Catalogs], list[tuple[str, str]]]:
    config = config_from_mapping(
        {
            "servers": {sid: {"command": "x", **({"prefix": ""} if sid == "bare" else {})} for sid in IDS},
            "endpoints": endpoints,
        }
    )
    told: list[tuple[str, str]] = []
    base = Catalogs(
        {sid: s.prefix for sid, s in SERVERS.items()},
        codec=NamingCodec(".", 128),
        cursors=CursorCodec(b"k" * 32),
        access=Access(PolicySettings(), SERVERS),
        metrics=Metrics(process_metrics=False),
        page_size=2,
        hints={},
        private=False,
        on_change=lambda kind: told.append(("", kind)),
    )
    views = {
        name: base.viewed(name, view, on_change=functools.partial(_tell, told, name))
        for name, (_, _, view) in views_of(config).items()
    }
    return base, views, told


def _tell(told: list[tuple[str, str]], name: str, kind: str) -> None:
    told.append((name, kind))


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "inputSchema": {"type": "object"}} for name in names]


def names(catalogs: Catalogs, identity: Identity = ALICE) -> list[str]:
    found: list[str] = []
    cursor = None
    while True:
        page = orjson.loads(orjson.dumps(catalogs.page("tools", cursor, identity)))
        found += [tool["name"] for tool in page["tools"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            return found


def test_two_endpoints_over_the_same_servers_show_different_tools_in_their_own_names() -> None:
    base, views, _ = gateway(
        {
            "code": {"servers": ["gh"]},
            "claude": {"tools": ["gh.*", "fs.read_*"], "naming": {"separator": "__", "max_length": 64}},
        }
    )
    base.listed("gh", "tools", tools("create_issue", LONG))
    base.listed("fs", "tools", tools("read_file", "write_file"))
    assert names(views["code"]) == ["gh.create_issue", f"gh.{LONG}"]
    claude = names(views["claude"])
    assert (claude[0], claude[2], len(claude)) == ("gh__create_issue", "fs__read_file", 3)
    assert all("." not in name and len(name) <= 64 for name in claude)
    # Every name routes back to its server's own tool, and the policy's name is the canonical one.
    for name, (server, original) in zip(
        claude, [("gh", "create_issue"), ("gh", LONG), ("fs", "read_file")], strict=True
    ):
        entry = views["claude"].tool(name)
        assert entry is not None
        assert (entry.server_id, entry.original_name) == (server, original)
        assert entry.canonical == f"{server}.{original}"
    # A name of one endpoint (or of the whole catalog) is unknown on another.
    assert views["claude"].tool("gh.create_issue") is None
    assert views["code"].tool("fs.read_file") is None
    assert base.tool("gh__create_issue") is None


def test_a_cursor_of_one_endpoint_is_refused_on_another_and_on_the_whole_catalog() -> None:
    base, views, _ = gateway({"a": {}, "b": {}})
    base.listed("gh", "tools", tools("t1", "t2", "t3"))
    cursor = orjson.loads(orjson.dumps(views["a"].page("tools", None, ALICE)))["nextCursor"]
    views["a"].page("tools", cursor, ALICE)  # good where it was cut
    for other in (views["b"], base):
        with pytest.raises(InvalidParams):
            other.page("tools", cursor, ALICE)


def test_a_list_change_is_told_only_to_the_endpoints_whose_view_changed() -> None:
    base, _, told = gateway({"code": {"servers": ["gh"]}, "files": {"servers": ["fs"]}})
    base.listed("gh", "tools", tools("x"))
    assert told == [("", "tools"), ("code", "tools")]
    told.clear()
    base.listed("fs", "prompts", [{"name": "p"}])
    assert told == [("", "prompts"), ("files", "prompts")]
    told.clear()
    base.listed("gh", "tools", tools("x"))  # the same again: nobody is told
    assert told == []


def test_an_unprefixed_server_cannot_take_a_namespace_in_an_endpoints_separator() -> None:
    base, views, _ = gateway({"flat": {"naming": {"separator": "__"}}})
    base.listed("gh", "tools", tools("secret"))
    base.listed("bare", "tools", tools("gh__secret", "plain"))
    assert names(views["flat"]) == ["gh__secret", "plain"]
    entry = views["flat"].tool("gh__secret")
    assert entry is not None
    assert entry.server_id == "gh"


def test_an_unprefixed_server_cannot_take_manifolds_namespace_in_an_endpoints_separator() -> None:
    # Where the endpoint's discovery lists manifold__call_tool, no server may list one too:
    # a search would show it, and call_tool would call it instead of refusing a meta-tool.
    base, views, _ = gateway({"flat": {"naming": {"separator": "__"}}})
    base.listed("bare", "tools", tools("manifold__call_tool", "manifold__search_tools", "plain"))
    assert names(views["flat"]) == ["plain"]
    assert views["flat"].tool("manifold__call_tool") is None


def _discoveries(settings: dict[str, Any]) -> dict[str, Discovery | None]:
    config = config_from_mapping(settings)
    sessions = Sessions(SessionTokens(b"k" * 32), Metrics(process_metrics=False), idle_timeout=60)
    make = functools.partial(
        make_discovery,
        config,
        access=Access(PolicySettings(), {}),
        sessions=sessions,
        metrics=Metrics(process_metrics=False),
    )
    return {name: make(name) for name in ("", *config.endpoints)}


def test_each_endpoint_has_its_own_discovery_or_the_top_level_one() -> None:
    found = _discoveries(
        {
            "discovery": {"mode": "search", "default_results": 3, "max_results": 7},
            "endpoints": {
                "inherits": {"naming": {"separator": "__", "max_length": 64}},
                "off": {"discovery": {"mode": False}},  # YAML's bare `off`
                "own": {"discovery": {"mode": "promote"}},
            },
        }
    )
    whole, inherits, own = found[""], found["inherits"], found["own"]
    assert whole is not None
    assert inherits is not None
    assert own is not None
    assert found["off"] is None
    assert whole.names.search == "manifold.search_tools"
    assert inherits.names.search == "manifold__search_tools"  # the endpoint's own profile
    assert inherits.settings.max_results == 7
    # An endpoint's block replaces the top-level one as a whole (no field is taken from it).
    assert (own.settings.mode, own.settings.max_results) == ("promote", 20)
    assert len({id(d) for d in found.values() if d is not None}) == 3  # state of its own each
    config = config_from_mapping({"endpoints": {"e": {"discovery": {"mode": "search"}}, "f": {}}})
    assert discovery_of(config, None).mode == "off"
    assert discovery_of(config, config.endpoints["e"]).mode == "search"
    assert discovery_of(config, config.endpoints["f"]).mode == "off"
    # Opt-in: with the top-level one off, only the endpoint that switched it on has one.
    opted = _discoveries({"endpoints": {"e": {"discovery": {"mode": "search"}}, "f": {}}})
    assert [name for name, discovery in opted.items() if discovery is not None] == ["e"]


def test_resources_and_prompts_are_selected_by_server_and_glob() -> None:
    base, views, _ = gateway({"docs": {"servers": ["fs"], "resources": ["file:///docs/*"], "prompts": []}})
    base.listed(
        "fs", "resources", [{"uri": "file:///docs/a", "name": "a"}, {"uri": "file:///etc/x", "name": "x"}]
    )
    base.listed("gh", "resources", [{"uri": "gh://repo", "name": "r"}])
    base.listed("fs", "prompts", [{"name": "p"}])
    docs = views["docs"]
    assert docs.route("file:///docs/a") == "fs"
    for hidden in ("file:///etc/x", "gh://repo"):
        with pytest.raises(ResourceNotFound):
            docs.route(hidden)
    with pytest.raises(InvalidParams):
        docs.prompt("fs.p")


def test_roles_narrow_who_may_use_an_endpoint() -> None:
    config = config_from_mapping({"endpoints": {"dev": {"roles": ["dev"]}, "all": {}}})
    assert admits(config.endpoints["dev"], ALICE)
    assert not admits(config.endpoints["dev"], BOB)
    assert admits(config.endpoints["all"], BOB)


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        ({"x" * 10_000: {}}, "an endpoint name is 1..64"),
        ({"..": {}}, "an endpoint name is 1..64"),
        ({"a/b": {}}, "an endpoint name is 1..64"),
        ({"a": {"servers": ["nope"]}}, "endpoints.a.servers: names no configured server (got 'nope')"),
        ({"a": {"tools": ["[x"]}}, "endpoints.a.tools: unclosed '['"),
        ({"a": {"naming": {"separator": "-"}}}, "endpoints.a.naming"),
        ({"a": {"discovery": {"mode": "on"}}}, "endpoints.a.discovery.mode"),
        (
            {"a": {"naming": {"separator": "d"}}},
            "with 'd' the namespace of server 'manifol' overlaps Manifold's 'manifoldd'",
        ),
        ({"a": {"discovery": {"mode": "search", "limit": 3}}}, "endpoints.a.discovery.limit"),
        (
            {"a": {"naming": {"separator": "__", "max_length": 16}, "discovery": {"mode": "search"}}},
            "endpoints.a.naming.max_length: with discovery on, the meta-tools need names of 24",
        ),
    ],
)
def test_a_bad_endpoint_is_a_config_error_naming_it(endpoints: dict[str, Any], message: str) -> None:
    servers = {"my-server": {"command": "x"}, "manifol": {"command": "x"}}
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"servers": servers, "endpoints": endpoints})
    assert message in str(caught.value)
    assert len(str(caught.value)) < 2_000  # a huge name is not echoed whole


def test_a_signed_session_id_carries_its_endpoint_and_a_replica_restores_it() -> None:
    tokens = SessionTokens(b"s" * 32)
    token, _ = tokens.issue("2025-11-25", {}, ALICE, "code")
    restored = tokens.restore(token, ALICE)
    assert restored is not None
    assert restored.endpoint == "code"
    whole = tokens.restore(tokens.issue("2025-11-25", {}, ALICE)[0], ALICE)
    assert whole is not None
    assert whole.endpoint == ""


def test_a_list_change_reaches_the_sessions_and_listen_streams_of_its_endpoint_only() -> None:
    sessions = Sessions(SessionTokens(b"k" * 32), Metrics(process_metrics=False), idle_timeout=60)
    listens = Listens()
    notices = Notices(sessions, listens, cast(Connections, None), Access(PolicySettings(), SERVERS))
    on = {name: sessions.open("stdio", ALICE) for name in ("", "a", "b")}
    streams = {name: listens.open(1, ALICE, Filter(tools=True), endpoint=name) for name in ("", "a", "b")}
    for name, session in on.items():
        session.endpoint, session.initialized = name, True
    try:
        notices.list_changed("tools", endpoint="a")
        assert {name: s.standalone.pending for name, s in on.items()} == {"": False, "a": True, "b": False}
        assert {name: bool(s._unread) for name, s in streams.items()} == {"": False, "a": True, "b": False}
    finally:
        for stream in streams.values():
            listens.close(stream)


def test_discovery_on_where_its_meta_tools_are_longer_than_the_naming_allows_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"naming.max_length: with discovery on, the meta-tools need names of 23"
    ):
        config_from_mapping({"naming": {"max_length": 20}, "discovery": {"mode": "search"}})
    # Off there, on where the names fit: fine.
    config_from_mapping(
        {
            "naming": {"max_length": 20},
            "endpoints": {"find": {"naming": {"max_length": 64}, "discovery": {"mode": "search"}}},
        }
    )
