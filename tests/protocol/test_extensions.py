"""Which extensions Manifold passes on and which it drops, with the reason for each drop."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.outbound.era import CLIENT_CAPABILITIES, relayed_capabilities
from proxy.protocol.asks import kept_capabilities
from proxy.protocol.extensions import (
    MAX_EXTENSIONS,
    MAX_KEPT_BYTES,
    MAX_SETTINGS_BYTES,
    TASKS,
    UI,
    Dropped,
    kept,
    merge,
    relayable,
)

VENDOR = "com.example/maps"


def test_mcp_apps_and_a_third_partys_extension_are_relayed_with_their_settings() -> None:
    declared = {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}, VENDOR: {"zoom": 3}}
    assert relayable(declared) == (declared, ())


def test_tasks_and_unknown_official_extensions_are_dropped_with_a_reason() -> None:
    kept, dropped = relayable({TASKS: {}, "io.modelcontextprotocol/skills": {}, VENDOR: {}})
    assert kept == {VENDOR: {}}
    assert [d.extension for d in dropped] == [TASKS, "io.modelcontextprotocol/skills"]
    assert "task ids" in dropped[0].reason
    assert dropped[1].reason == "an official extension Manifold does not know"


@pytest.mark.parametrize(
    ("extension", "settings", "reason"),
    [
        ("no-prefix", {}, "not an extension identifier"),
        ("com.example/", {}, "not an extension identifier"),
        ("1com.example/x", {}, "not an extension identifier"),
        ("com..example/x", {}, "not an extension identifier"),
        ("com.example/x y", {}, "not an extension identifier"),
        ("com.example/" + "x" * 200, {}, "not an extension identifier"),
        (VENDOR, [], "its settings are not an object"),
        (VENDOR, "yes", "its settings are not an object"),
        (UI, None, "its settings are not an object"),
        (VENDOR, {"blob": "x" * MAX_SETTINGS_BYTES}, f"its settings are over {MAX_SETTINGS_BYTES} bytes"),
        (VENDOR, {"n": 2**70}, "its settings are not JSON"),
    ],
)
def test_a_hostile_declaration_is_dropped_naming_what_is_wrong(
    extension: str, settings: Any, reason: str
) -> None:
    kept, dropped = relayable({extension: settings})
    assert kept == {}
    assert len(dropped) == 1
    assert dropped[0].reason.startswith(reason)


def test_only_the_first_few_declarations_are_looked_at() -> None:
    declared: dict[str, Any] = {f"com.example/e{i}": {} for i in range(10_000)}
    kept, dropped = relayable(declared)
    assert list(kept) == [f"com.example/e{i}" for i in range(MAX_EXTENSIONS)]
    assert dropped == (Dropped("extensions", f"more than {MAX_EXTENSIONS} declared; the rest dropped"),)


def test_extensions_that_are_not_an_object_are_dropped_and_none_is_nothing() -> None:
    assert relayable(None) == ({}, ())
    assert relayable(["com.example/x"]) == ({}, (Dropped("extensions", "not an object"),))


def test_servers_declarations_merge_and_an_extension_with_two_settings_is_dropped() -> None:
    shown, dropped = merge(
        [
            ("a", {UI: {}, VENDOR: {"zoom": 3}}),
            ("b", {UI: {}, VENDOR: {"zoom": 4}, "org.other/x": {}}),
            ("c", {VENDOR: {"zoom": 3}, TASKS: {}}),
            ("d", None),
        ]
    )
    assert shown == {UI: {}, "org.other/x": {}}
    assert ("b", Dropped(VENDOR, "declared with other settings than a's")) in dropped
    assert [(s, d.extension) for s, d in dropped] == [("b", VENDOR), ("c", TASKS)]


def test_a_client_keeps_its_relayed_extensions_in_its_session_and_its_servers_hear_of_them() -> None:
    declared = {"roots": {}, "extensions": {UI: {"mimeTypes": ["a"]}, TASKS: {}}, "experimental": {"x": {}}}
    kept = kept_capabilities(declared)
    assert kept == {"roots": {}, "extensions": {UI: {"mimeTypes": ["a"]}}}
    # A 2026-07-28 caller's capabilities come unfiltered: what its server hears is filtered.
    assert relayed_capabilities(declared) == {"roots": {}, "extensions": {UI: {"mimeTypes": ["a"]}}}
    assert relayed_capabilities({"extensions": {TASKS: {}}}) == {}


def test_manifold_declares_mcp_apps_on_the_connections_it_shares() -> None:
    assert CLIENT_CAPABILITIES["extensions"] == {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}


def test_a_session_keeps_the_first_relayable_extensions_that_fit_its_share() -> None:
    declared = {TASKS: {}, **{f"com.example/e{i}": {"x": "y" * 100} for i in range(MAX_EXTENSIONS)}}
    kept_ones = kept(declared)
    assert list(kept_ones) == ["com.example/e0", "com.example/e1", "com.example/e2", "com.example/e3"]
    assert len(orjson.dumps(kept_ones)) <= MAX_KEPT_BYTES
    assert kept({UI: {}}) == {UI: {}}
