"""The tasks extension's pure parts: what a caller declares, what ``server/discover`` says, which
tools run as tasks. End to end (server-everything, raw 2026-07-28 clients):
tests/interaction/test_tasks_modern.py."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.catalog.merge import Entry
from proxy.clients.session import InboundRequest, StatelessCaller
from proxy.pipeline.context import CallContext
from proxy.policy import ANONYMOUS
from proxy.tasks import modern


def _ctx(definition: dict[str, Any]) -> CallContext:
    caller = StatelessCaller(
        id="r", transport="http", protocol_version="2026-07-28", capabilities={}, identity=ANONYMOUS
    )
    entry = Entry("s.t", "s", "t", {"name": "s.t", **definition})
    return CallContext(InboundRequest(caller), 1, "tools/call", "s", "s.t", {"name": "t"}, entry)


@pytest.mark.parametrize(
    ("capabilities", "declared"),
    [
        ({"extensions": {modern.EXTENSION: {}}}, True),
        ({"extensions": {modern.EXTENSION: True}}, False),  # settings must be an object
        ({"extensions": ["io.modelcontextprotocol/tasks"]}, False),
        ({"extensions": {"io.modelcontextprotocol/ui": {}}}, False),
        ({"tasks": {}}, False),  # the handshake-era capability is not the extension
        ({}, False),
    ],
)
def test_only_the_extension_declared_as_an_object_counts(
    capabilities: dict[str, Any], declared: bool
) -> None:
    assert modern.declares(capabilities) is declared


def test_discover_adds_the_extension_and_keeps_the_others() -> None:
    shown: dict[str, Any] = {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/ui": {"a": 1}}},
    }
    result = modern.discovered(shown)
    assert result["capabilities"]["extensions"] == {
        "io.modelcontextprotocol/ui": {"a": 1},
        modern.EXTENSION: {},
    }
    assert result["capabilities"]["tools"] == {}
    assert "extensions" in shown["capabilities"]
    assert modern.EXTENSION not in shown["capabilities"]["extensions"]
    assert modern.discovered({"capabilities": {}})["capabilities"] == {"extensions": {modern.EXTENSION: {}}}


@pytest.mark.parametrize(
    ("definition", "support"),
    [
        ({"execution": {"taskSupport": "required"}}, "required"),
        ({"execution": {"taskSupport": "optional"}}, "optional"),
        ({"execution": {"taskSupport": 1}}, "forbidden"),
        ({"execution": "required"}, "forbidden"),
        ({}, "forbidden"),
    ],
)
def test_task_support_is_read_from_the_tool_and_defaults_to_forbidden(
    definition: dict[str, Any], support: str
) -> None:
    assert modern.task_support(_ctx(definition)) == support


def test_a_held_tasks_mark_is_the_one_held_tasks_are_recorded_with() -> None:
    from proxy.tasks import held  # held imports the relay, which imports this module

    assert modern._HELD == held.HELD
