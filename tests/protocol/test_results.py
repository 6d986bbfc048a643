"""Results per era: shaping for 2026-07-28 callers (checked against that revision's schema),
stripping for handshake-era ones, and merging caching hints across servers."""

from __future__ import annotations

import itertools
from typing import Any

import jsonschema
import pytest

from proxy.protocol import results
from proxy.protocol.results import NO_STORE, CacheHint
from proxy.protocol.stateless import SERVER_INFO_KEY
from tests.protocol.schemas import validator

MANIFOLD = {"name": "manifold", "version": "0.1.0"}
PUBLIC_MINUTE = CacheHint(60_000, "public")


@pytest.mark.parametrize(
    ("definition", "result", "cache"),
    [
        ("ListToolsResult", {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}, PUBLIC_MINUTE),
        ("ListPromptsResult", {"prompts": [], "nextCursor": "c"}, PUBLIC_MINUTE),
        ("ReadResourceResult", {"contents": [{"uri": "x://y", "text": "hi"}]}, NO_STORE),
        ("CallToolResult", {"content": [{"type": "text", "text": "ok"}]}, None),
        ("GetPromptResult", {"messages": []}, None),
        ("CompleteResult", {"completion": {"values": []}}, None),
        ("DiscoverResult", {"supportedVersions": ["2026-07-28"], "capabilities": {}}, NO_STORE),
    ],
)
def test_a_shaped_result_is_valid_at_2026_07_28(
    definition: str, result: dict[str, Any], cache: CacheHint | None
) -> None:
    shaped = results.stateless(result, server_info=MANIFOLD, cache=cache)
    validator("2026-07-28", definition)(shaped)
    assert shaped["resultType"] == "complete"
    assert shaped["_meta"][SERVER_INFO_KEY] == MANIFOLD


def test_without_shaping_a_result_is_not_valid_at_2026_07_28() -> None:
    # The schema check above can fail: resultType is required, and so are the hints where cacheable.
    with pytest.raises(jsonschema.ValidationError):
        validator("2026-07-28", "CallToolResult")({"content": []})
    with pytest.raises(jsonschema.ValidationError):
        validator("2026-07-28", "ListToolsResult")(results.stateless({"tools": []}, server_info=MANIFOLD))


def test_cache_hints_go_on_a_complete_result() -> None:
    shaped = results.stateless({"tools": []}, server_info=MANIFOLD, cache=CacheHint(5_000, "private"))
    assert (shaped["ttlMs"], shaped["cacheScope"]) == (5_000, "private")
    assert "ttlMs" not in results.stateless({"content": []}, server_info=MANIFOLD)


def test_the_stamp_replaces_another_servers_and_keeps_the_rest_of_meta() -> None:
    result: dict[str, Any] = {
        "content": [],
        "_meta": {SERVER_INFO_KEY: {"name": "behind", "version": "9"}, "k": 1},
    }
    shaped = results.stateless(result, server_info=MANIFOLD)
    assert shaped["_meta"] == {SERVER_INFO_KEY: MANIFOLD, "k": 1}
    assert result["_meta"][SERVER_INFO_KEY] == {"name": "behind", "version": "9"}  # not mutated


def test_an_input_required_result_keeps_its_type_and_is_never_cacheable() -> None:
    asked = {"resultType": "input_required", "inputRequests": {}, "requestState": "s", "ttlMs": 9}
    shaped = results.stateless(asked, server_info=MANIFOLD, cache=PUBLIC_MINUTE)
    assert shaped["resultType"] == "input_required"
    assert not {"ttlMs", "cacheScope"} & shaped.keys()
    assert results.is_input_required(shaped)
    assert not results.is_input_required({"resultType": "complete"})
    assert not results.is_input_required(["input_required"])


def test_only_manifolds_own_result_type_survives_shaping() -> None:
    handle = {"resultType": "task", "taskId": "m-1", "status": "working", "ttlMs": 5}
    assert results.stateless(handle, server_info=MANIFOLD)["resultType"] == "complete"  # a server's
    own = results.stateless(results.OwnResultType(handle), server_info=MANIFOLD)
    assert (own["resultType"], own["ttlMs"], own["taskId"]) == ("task", 5, "m-1")


def test_a_legacy_caller_gets_none_of_the_2026_fields() -> None:
    shaped = results.stateless({"tools": [], "_meta": {"k": 1}}, server_info=MANIFOLD, cache=PUBLIC_MINUTE)
    assert results.handshake(shaped) == {"tools": [], "_meta": {"k": 1}}
    assert results.handshake(results.stateless({"tools": []}, server_info=MANIFOLD)) == {"tools": []}
    validator("2025-11-25", "ListToolsResult")(results.handshake(shaped))


@pytest.mark.parametrize(
    ("hints", "merged"),
    [
        ([CacheHint(60_000, "public"), CacheHint(5_000, "public")], CacheHint(5_000, "public")),
        ([CacheHint(60_000, "public"), CacheHint(90_000, "private")], CacheHint(60_000, "private")),
        ([CacheHint(0, "public")], CacheHint(0, "public")),
        ([], NO_STORE),
    ],
)
def test_merged_hints_take_the_shortest_ttl_and_the_most_restrictive_scope(
    hints: list[CacheHint], merged: CacheHint
) -> None:
    for order in itertools.permutations(hints):
        assert results.merge_cache(order) == merged


@pytest.mark.parametrize(
    ("result", "hint"),
    [
        ({"ttlMs": 5, "cacheScope": "public"}, CacheHint(5, "public")),
        ({"ttlMs": 0, "cacheScope": "private"}, CacheHint(0, "private")),
        ({"ttlMs": -1, "cacheScope": "public"}, None),
        ({"ttlMs": True, "cacheScope": "public"}, None),
        ({"ttlMs": 5.5, "cacheScope": "public"}, None),
        ({"ttlMs": 5, "cacheScope": "shared"}, None),
        ({"ttlMs": 5}, None),
        ({}, None),
    ],
)
def test_a_servers_hints_are_read_only_when_valid(result: dict[str, Any], hint: CacheHint | None) -> None:
    assert results.hint_of(result) == hint


def test_a_negative_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        CacheHint(-1, "public")


def test_the_cacheable_and_input_required_methods_are_the_sdks() -> None:
    from mcp_types import methods

    assert frozenset(methods.CACHEABLE_METHODS) == results.CACHEABLE_METHODS
    assert frozenset(methods.INPUT_REQUIRED_METHODS) == results.INPUT_REQUIRED_METHODS
