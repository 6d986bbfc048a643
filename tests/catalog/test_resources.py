"""The resource index: listed URIs keyed on their normal form, exact listings before templates."""

from __future__ import annotations

from proxy.catalog.merge import ServerSlice
from proxy.catalog.resources import build_resource_index

CATCH_ALL = ServerSlice("greedy", "greedy", ({"uriTemplate": "{+anything}"},))
FILES = ServerSlice("files", "files", ({"uriTemplate": "file:///{+path}"},))


def listing(server: str, *uris: str) -> ServerSlice:
    return ServerSlice(server, server, tuple({"uri": uri, "name": uri} for uri in uris))


def test_an_earlier_catch_all_template_does_not_swallow_a_uri_a_later_server_lists() -> None:
    index = build_resource_index(
        (listing("notes", "note://b/~x", "NOTE://b/%7Ey", "file://localhost/etc/./motd"),), (CATCH_ALL, FILES)
    )
    assert index.route("note://b/~x") == "notes"
    assert index.route("note://b/~y") == "notes"  # what a client's NOTE://b/%7ey normalizes to
    assert index.route("file:///etc/motd") == "notes"
    assert index.route("note://b/other") == "greedy"  # what no list names: the first template


def test_a_listing_is_found_by_the_normal_form_of_its_uri_and_forwarded_as_listed() -> None:
    """A server listing a spelling that is not normal (``%7e``) still owns the URI, in any
    spelling a client normalizes to the same one, and is asked for it in its own spelling."""
    index = build_resource_index((listing("notes", "NOTE://B/%7ex"),), (CATCH_ALL,))
    assert index.by_uri == {"note://b/~x": "notes"}
    assert index.route("note://b/~x") == "notes"
    assert index.spelling("note://b/~x") == "NOTE://B/%7ex"
    assert index.spelling("note://b/y") == "note://b/y"
    assert index.resource_uris == ("note://b/~x",)


def test_two_spellings_of_one_uri_collide_and_the_first_server_keeps_it() -> None:
    index = build_resource_index((listing("a", "file:///x/../y"), listing("b", "FILE:///y")), ())
    assert index.route("file:///y") == "a"
    assert [c.describe() for c in index.collisions] == [
        "'b' lists 'FILE:///y', which 'a' already lists; reads go to 'a'"
    ]
    assert [item["uri"] for item in index.resources] == ["file:///x/../y"]


def test_a_listed_uri_no_client_could_name_is_left_out_and_said_why() -> None:
    index = build_resource_index((listing("a", "file:///a%2Fb", "file:///ok"),), ())
    assert [item["uri"] for item in index.resources] == ["file:///ok"]
    assert len(index.invalid) == 1
    assert index.invalid[0][0] == "a"
    assert "encoded '/'" in index.invalid[0][1]
