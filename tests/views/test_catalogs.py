"""``Catalogs``: what servers listed, merged, and served page by page to each identity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.core.errors import InvalidParams, ResourceNotFound
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol.results import CacheHint
from proxy.views.catalogs import Catalogs

ALICE = Identity("alice", frozenset(), "api_key")
SERVERS = {sid: ServerConfig(id=sid, command="x", transport="stdio", prefix=sid) for sid in ("a", "b")}


class Hints:
    def __init__(self, **hints: CacheHint) -> None:
        self.cache_hints = hints


def catalogs(
    *, page_size: int = 100, hints: dict[str, Hints] | None = None, access: Access | None = None
) -> tuple[Catalogs, list[str]]:
    changed: list[str] = []
    built = Catalogs(
        {sid: s.prefix for sid, s in SERVERS.items()},
        codec=NamingCodec(".", 64),
        cursors=CursorCodec(b"k" * 32),
        access=access or Access(PolicySettings(), SERVERS),
        metrics=Metrics(process_metrics=False),
        page_size=page_size,
        hints=hints or {"a": Hints(), "b": Hints()},
        private=False,
        on_change=changed.append,
    )
    return built, changed


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "inputSchema": {"type": "object"}} for name in names]


def page(built: Catalogs, kind: str, cursor: object = None) -> Any:
    return orjson.loads(orjson.dumps(built.page(kind, cursor, ALICE)))


def test_each_servers_list_is_merged_under_its_prefix_and_a_change_is_told_once() -> None:
    built, changed = catalogs()
    built.listed("a", "tools", tools("x", "y"))
    built.listed("b", "tools", tools("x"))
    built.listed("b", "tools", tools("x"))  # the same again: nothing changed
    assert [t["name"] for t in page(built, "tools")["tools"]] == ["a.x", "a.y", "b.x"]
    assert changed == ["tools", "tools"]
    entry = built.tool("b.x")
    assert entry is not None
    assert (entry.server_id, entry.original_name) == ("b", "x")


def test_pages_follow_cursors_and_a_foreign_cursor_is_refused() -> None:
    built, _ = catalogs(page_size=2)
    built.listed("a", "tools", tools("t1", "t2", "t3"))
    first = page(built, "tools")
    second = page(built, "tools", first["nextCursor"])
    assert [t["name"] for t in first["tools"] + second["tools"]] == ["a.t1", "a.t2", "a.t3"]
    assert "nextCursor" not in second
    with pytest.raises(InvalidParams):
        built.page("prompts", first["nextCursor"], ALICE)  # cut from another view


@pytest.mark.parametrize(
    "other",
    [
        Identity("alice", frozenset(), "jwt", issuer="https://a.example"),
        Identity("alice", frozenset(), "jwt", issuer="https://b.example"),
        Identity("alice", frozenset(), "jwt", issuer="https://a.example", subject="u-2"),
    ],
    ids=["jwt-named-like-the-key", "another-issuer", "another-subject"],
)
def test_a_cursor_is_refused_to_another_principal_of_the_same_name(other: Identity) -> None:
    built, _ = catalogs(page_size=2)
    built.listed("a", "tools", tools("t1", "t2", "t3"))
    first = orjson.loads(orjson.dumps(built.page("tools", None, ALICE)))
    with pytest.raises(InvalidParams):
        built.page("tools", first["nextCursor"], other)
    issued = orjson.loads(orjson.dumps(built.page("tools", None, other)))
    with pytest.raises(InvalidParams):  # and the other way round
        built.page("tools", issued["nextCursor"], ALICE)


def test_resources_route_to_their_server_and_an_unknown_uri_is_not_found() -> None:
    built, changed = catalogs()
    built.listed("b", "resources", [{"uri": "mem://one", "name": "one"}])
    assert built.route("mem://one") == "b"
    assert built.readable("mem://one", ALICE) == "b"
    with pytest.raises(ResourceNotFound):
        built.readable("mem://two", ALICE)
    assert changed == ["resources"]


def test_a_policy_reload_tells_every_kind_and_drops_the_cached_pages() -> None:
    built, changed = catalogs()
    built.listed("a", "prompts", [{"name": "p"}])
    before = built.page("prompts", None, ALICE)
    assert built.page("prompts", None, ALICE) is before  # a warm list is one dict lookup
    built.policy_changed()
    assert changed[-3:] == ["tools", "prompts", "resources"]
    assert built.page("prompts", None, ALICE) is not before


def test_a_merged_lists_freshness_is_the_shortest_of_its_servers() -> None:
    hints = {"a": Hints(tools=CacheHint(5000, "public")), "b": Hints(tools=CacheHint(1000, "private"))}
    built, _ = catalogs(hints=hints)
    built.listed("a", "tools", tools("x"))
    assert built.cache_hint("tools") == CacheHint(5000, "public")
    built.listed("b", "tools", tools("y"))
    assert built.cache_hint("tools") == CacheHint(1000, "private")


def test_a_restarted_server_that_lists_the_same_again_tells_nobody() -> None:
    built, changed = catalogs()
    built.listed("a", "tools", tools("x", "y"))
    built.listed("a", "prompts", [{"name": "p"}])
    changed.clear()
    built.servers_changed()  # a reload restarted "a" (its env changed): nothing it lists moved
    built.listed("a", "tools", tools("x", "y"))  # it came back and listed byte for byte the same
    built.listed("a", "prompts", [{"name": "p"}])
    assert changed == []


def test_a_restarted_server_whose_override_changed_what_clients_see_is_told_once() -> None:
    access = Access(PolicySettings(), SERVERS)
    built, changed = catalogs(access=access)
    built.listed("a", "tools", tools("x", "y"))
    changed.clear()
    restarted = ServerConfig.model_validate(
        {**SERVERS["a"].model_dump(), "tools": {"x": {"description": "mine"}}}
    )
    access.servers_changed({**SERVERS, "a": restarted})  # a reload gave "x" a description of its own
    built.servers_changed()
    built.listed("a", "tools", tools("x", "y"))  # the server itself sent the same
    assert changed == ["tools"]
    assert [t.get("description") for t in page(built, "tools")["tools"]] == ["mine", None]


def test_an_endpoint_view_hears_of_a_restarted_servers_new_override_and_not_of_the_same_lists() -> None:
    access = Access(PolicySettings(), SERVERS)
    built, _ = catalogs(access=access)
    built.listed("a", "tools", tools("x", "y"))
    heard: list[str] = []
    built.viewed("e", lambda snapshot: snapshot, on_change=heard.append)
    heard.clear()  # what it was made with
    built.listed("a", "tools", tools("x", "y"))  # listed again, the same: nothing to tell
    assert heard == []
    restarted = ServerConfig.model_validate(
        {**SERVERS["a"].model_dump(), "tools": {"x": {"description": "mine"}}}
    )
    access.servers_changed({**SERVERS, "a": restarted})
    built.servers_changed()
    assert heard == ["tools"]


UI_POLICY = """\
version: 1
default: allow
rules:
  - id: no-secret-panel-for-alice
    effect: deny
    match: {identities: [alice], tools: ["a.secret"]}
"""
BOB = Identity("bob", frozenset(), "api_key")


def ui_tool(name: str, uri: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, "_meta": {"ui": {"resourceUri": uri}}}


def test_a_ui_is_listed_and_routed_only_for_an_identity_shown_a_tool_pointing_at_it(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(UI_POLICY)
    access = Access(PolicySettings(files=(str(tmp_path / "policy.yaml"),)), SERVERS)
    access.load()
    built, _ = catalogs(access=access)
    built.listed("a", "tools", [ui_tool("show", "ui://panel/main"), ui_tool("secret", "ui://panel/secret")])
    # main is listed; secret is not (servers may leave UIs out of resources/list); "orphan" has no tool.
    built.listed(
        "a", "resources", [{"uri": "ui://panel/main", "name": "m"}, {"uri": "ui://orphan", "name": "o"}]
    )
    built.listed("b", "resourceTemplates", [{"uriTemplate": "{+anything}", "name": "all"}])

    def listed(who: Identity) -> list[str]:
        return [r["uri"] for r in orjson.loads(orjson.dumps(built.page("resources", None, who)))["resources"]]

    assert listed(BOB) == ["ui://a/panel/main"]  # the orphan UI is not served at all
    assert built.route_resource("ui://a/panel/secret", BOB) == "a"  # unlisted, pointed at by a shown tool
    assert built.route_resource("ui://a/panel/secret", ALICE) is None  # its tool is hidden from her
    assert built.route_resource("ui://a/orphan", BOB) is None
    # A UI is never routed by a template, not even a catch-all one; other URIs still are.
    assert built.route_resource("ui://b/panel/main", BOB) is None
    assert built.route_resource("file:///x", BOB) == "b"
    with pytest.raises(ResourceNotFound):
        built.readable("ui://a/panel/secret", ALICE)
    assert built.resources.spelling("ui://a/panel/main") == "ui://panel/main"
    # Hiding the tool that points at a listed UI takes it out of the list too.
    built.listed("a", "tools", [ui_tool("secret", "ui://panel/main")])
    assert listed(ALICE) == []
    assert listed(BOB) == ["ui://a/panel/main"]
