"""MCP Apps' UIs namespaced by server, and what a hostile server's references come to."""

from __future__ import annotations

from typing import Any

from proxy.catalog.apps import is_ui, links, namespace_items, namespace_read, namespaced, server_spelling


def tool(name: str, meta: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, "_meta": meta}


def test_a_ui_uri_is_namespaced_by_its_servers_id_and_spelled_back_for_the_server() -> None:
    assert namespaced("weather", "ui://forecast/panel") == "ui://weather/forecast/panel"
    assert namespaced("weather", "UI://Forecast/Panel") == "ui://weather/Forecast/Panel"
    assert server_spelling("ui://weather/forecast/panel") == "ui://forecast/panel"
    assert server_spelling("ui://weather/Forecast/Panel") == "ui://Forecast/Panel"
    assert server_spelling("file:///etc/hosts") == "file:///etc/hosts"
    assert (is_ui("Ui://x"), is_ui("uix://x"), is_ui(None)) == (True, False, False)


def test_a_server_cannot_leave_its_own_namespace() -> None:
    # Dot segments, another server's namespaced spelling: all stay under the server's id.
    assert namespaced("evil", "ui://../weather/panel") == "ui://evil/weather/panel"
    assert namespaced("evil", "ui://weather/panel") == "ui://evil/weather/panel"
    assert namespaced("evil", "ui://x/../../../../y") == "ui://evil/y"
    assert namespaced("evil", "ui://@weather/p") == "ui://evil/@weather/p"


def test_tools_meta_references_both_spellings_are_namespaced() -> None:
    items = [
        tool("show", {"ui": {"resourceUri": "ui://forecast/panel", "visibility": ["model"]}}),
        tool("legacy", {"ui/resourceUri": "ui://forecast/old", "other": 1}),
        {"name": "plain", "inputSchema": {"type": "object"}},
    ]
    shown, problems = namespace_items("weather", "tools", items)
    assert problems == ()
    assert shown[0]["_meta"] == {
        "ui": {"resourceUri": "ui://weather/forecast/panel", "visibility": ["model"]}
    }
    assert shown[1]["_meta"] == {"ui/resourceUri": "ui://weather/forecast/old", "other": 1}
    assert shown[2] is items[2]
    assert items[0]["_meta"]["ui"]["resourceUri"] == "ui://forecast/panel"  # the server's own: untouched


def test_a_reference_that_is_not_a_ui_uri_is_removed_the_tool_kept_and_the_problem_named() -> None:
    items = [
        tool("a", {"ui": {"resourceUri": "javascript:alert(1)", "visibility": ["model", "app"]}}),
        tool("b", {"ui/resourceUri": "https://evil.example/x"}),
        tool("c", {"ui": {"resourceUri": "file:///etc/passwd"}, "ui/resourceUri": "ui://ok/x"}),
        tool("d", {"ui": {"resourceUri": 42}}),
        tool("e", {"ui": {"resourceUri": "ui://x/%2F..%2Fy"}}),
    ]
    shown, problems = namespace_items("evil", "tools", items)
    assert [t["name"] for t in shown] == ["a", "b", "c", "d", "e"]
    assert shown[0]["_meta"] == {"ui": {"visibility": ["model", "app"]}}
    assert shown[1]["_meta"] == {}
    assert shown[2]["_meta"] == {"ui": {}, "ui/resourceUri": "ui://evil/ok/x"}
    assert shown[3]["_meta"] == {"ui": {}}
    assert shown[4]["_meta"] == {"ui": {}}
    assert problems[0] == "tool 'a': _meta.ui.resourceUri 'javascript:alert(1)' removed: not a ui:// URI"
    assert "'https://evil.example/x' removed: not a ui:// URI" in problems[1]
    assert "'file:///etc/passwd'" in problems[2]
    assert "'int' removed" in problems[3]
    assert "%2F" in problems[4]
    assert len(problems) == 5


def test_ui_resources_are_namespaced_and_ui_templates_left_out() -> None:
    resources = [{"uri": "ui://forecast/panel", "name": "p"}, {"uri": "file:///a", "name": "a"}]
    shown, problems = namespace_items("weather", "resources", resources)
    assert shown == [{"uri": "ui://weather/forecast/panel", "name": "p"}, resources[1]]
    assert problems == ()
    templates = [
        {"uriTemplate": "ui://forecast/{day}", "name": "t"},
        {"uriTemplate": "file:///{p}", "name": "f"},
    ]
    shown, problems = namespace_items("weather", "resourceTemplates", templates)
    assert shown == [templates[1]]
    assert problems == ("resource template 'ui://forecast/{day}' left out: UIs are not templated",)
    bad, problems = namespace_items("weather", "resources", [{"uri": "ui://x/%2F", "name": "x"}])
    assert bad == []
    assert len(problems) == 1


def test_links_say_which_tools_point_at_each_ui() -> None:
    found = links(
        [
            ("w", "w.show", {"_meta": {"ui": {"resourceUri": "ui://w/panel"}}}),
            ("w", "w.legacy", {"_meta": {"ui/resourceUri": "ui://w/panel"}}),
            (
                "w",
                "w.other",
                {"_meta": {"ui": {"resourceUri": "ui://w/other"}, "ui/resourceUri": "ui://w/other"}},
            ),
            ("w", "w.plain", {"name": "plain"}),
            ("w", "w.odd", {"_meta": {"ui": "not an object", "ui/resourceUri": "https://x"}}),
        ]
    )
    assert found == {"ui://w/panel": ("w", ("w.show", "w.legacy")), "ui://w/other": ("w", ("w.other",))}


def test_a_reads_contents_are_namespaced_as_the_client_asked() -> None:
    result = {
        "contents": [
            {"uri": "ui://forecast/panel", "mimeType": "text/html;profile=mcp-app", "text": "<html/>"},
            {"uri": "https://cdn.example/x.js", "text": "x"},
            {"uri": "ui://bad/%2F", "text": "dropped"},
        ],
        "_meta": {"k": 1},
    }
    assert namespace_read("weather", result) == {
        "contents": [
            {
                "uri": "ui://weather/forecast/panel",
                "mimeType": "text/html;profile=mcp-app",
                "text": "<html/>",
            },
            {"uri": "https://cdn.example/x.js", "text": "x"},
        ],
        "_meta": {"k": 1},
    }
    assert namespace_read("weather", {"resultType": "input_required"}) == {"resultType": "input_required"}
