"""Speaking to a server of each era, as transcripts: the envelope, a server's introduction, and
its tools as their ``x-mcp-header`` annotations leave them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from proxy.core.errors import ServerProtocolError, ServerUnavailable
from proxy.outbound.era import Era, Introduction, envelope, mirror_tools, parse_discover, parse_initialize
from proxy.protocol.headers import ParamHeader
from proxy.protocol.jsonrpc import Message

VERSION = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


@dataclass
class Caller:
    """A Relay: the client a request is for."""

    capabilities: dict[str, Any]
    log_level: str | None = None
    session_id: str = "s1"
    asleep: bool = False

    def notify(self, message: Message) -> None:
        raise AssertionError("not notified in these tests")

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        raise AssertionError("not asked in these tests")


# ---- Era ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "era"), [("auto", Era.UNKNOWN), ("handshake", Era.HANDSHAKE), ("stateless", Era.STATELESS)]
)
def test_an_era_setting_pins_that_era_and_auto_pins_none(setting: str, era: Era) -> None:
    assert Era.of(setting) is era


def test_an_era_setting_that_names_no_era_is_refused() -> None:
    with pytest.raises(ValueError, match="'unknown-ish' is not a valid Era"):
        Era.of("unknown-ish")


# ---- envelope -------------------------------------------------------------------------------


def test_a_request_on_nobodys_behalf_carries_manifolds_envelope_and_no_capabilities() -> None:
    meta = envelope(None)
    assert meta == {VERSION: "2026-07-28", CAPS: {}, INFO: meta[INFO]}
    assert meta[INFO]["name"] == "manifold"


def test_the_envelope_names_only_what_manifold_can_relay_of_the_callers_capabilities() -> None:
    caller = Caller({"sampling": {}, "roots": {"listChanged": True}, "experimental": {"x": {}}, "tasks": {}})
    assert envelope(caller)[CAPS] == {"sampling": {}, "roots": {"listChanged": True}}


def test_the_callers_log_level_is_in_the_envelope_only_when_it_set_one() -> None:
    assert envelope(Caller({}, "warning"))[LEVEL] == "warning"
    assert LEVEL not in envelope(Caller({}))


# ---- a server's introduction ----------------------------------------------------------------


def discover_result(**extra: Any) -> dict[str, Any]:
    return {
        "supportedVersions": ["2025-11-25", "2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}},
        "_meta": {SERVER_INFO: {"name": "m", "version": "2"}},
        **extra,
    }


def test_a_discover_result_offering_2026_07_28_introduces_a_modern_server() -> None:
    assert parse_discover(discover_result(instructions="be nice")) == Introduction(
        era=Era.STATELESS,
        protocol_version="2026-07-28",
        capabilities={"tools": {"listChanged": True}},
        server_info={"name": "m", "version": "2"},
        instructions="be nice",
    )


@pytest.mark.parametrize(
    "result",
    [
        discover_result(supportedVersions=["2025-11-25"]),  # only handshake-era revisions
        discover_result(supportedVersions="2026-07-28"),  # not a list
        {"capabilities": {}},  # no supportedVersions
        ["2026-07-28"],  # not an object
        None,
    ],
)
def test_a_discover_result_not_offering_2026_07_28_introduces_nothing(result: Any) -> None:
    assert parse_discover(result) is None


def test_what_a_discover_result_leaves_out_or_garbles_is_empty_not_an_error() -> None:
    result = discover_result(capabilities=None, instructions=7, _meta={SERVER_INFO: "m"})
    introduction = parse_discover(result)
    assert introduction is not None
    assert (introduction.capabilities, introduction.server_info, introduction.instructions) == ({}, {}, None)
    no_meta = parse_discover({"supportedVersions": ["2026-07-28"]})
    assert no_meta is not None
    assert no_meta.server_info == {}


def test_an_initialize_result_introduces_a_handshake_era_server_at_the_revision_it_chose() -> None:
    result = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"prompts": {}},
        "serverInfo": {"name": "old", "version": "1"},
        "instructions": "hi",
    }
    assert parse_initialize(result, "s") == Introduction(
        Era.HANDSHAKE, "2025-06-18", {"prompts": {}}, {"name": "old", "version": "1"}, "hi"
    )
    bare = parse_initialize({"protocolVersion": "2025-11-25", "instructions": ["x"]}, "s")
    assert (bare.capabilities, bare.server_info, bare.instructions) == ({}, {}, None)


def test_an_initialize_result_that_is_not_an_object_is_a_protocol_error() -> None:
    with pytest.raises(
        ServerProtocolError, match="'s' broke the protocol: it answered initialize with a non-object result"
    ):
        parse_initialize(["2025-11-25"], "s")


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28", None])
def test_a_revision_manifold_does_not_handshake_in_makes_the_server_unavailable(version: Any) -> None:
    with pytest.raises(ServerUnavailable, match=f"it chose protocol revision {version!r}"):
        parse_initialize({"protocolVersion": version, "capabilities": {}}, "s")


# ---- x-mcp-header tools ---------------------------------------------------------------------


def tool(name: Any, **properties: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": properties}}


REGION = {"type": "string", "x-mcp-header": "Region"}


def test_tools_whose_annotations_break_the_rules_are_dropped_and_the_rest_kept_in_order() -> None:
    tools = [
        tool("plain", q={"type": "string"}),
        tool("bad", x={"type": "number", "x-mcp-header": "X"}),
        tool("annotated", region=REGION),
        tool("twice", a=REGION, b={"type": "string", "x-mcp-header": "region"}),
    ]
    mirrored = mirror_tools(tools)
    assert [t["name"] for t in mirrored.tools] == ["plain", "annotated"]
    assert [name for name, _ in mirrored.dropped] == ["bad", "twice"]
    assert "allowed on string, integer and boolean only" in mirrored.dropped[0][1]
    assert mirrored.specs == {"annotated": (ParamHeader(("region",), "Region", "string"),)}


def test_a_tool_without_a_schema_is_kept_with_nothing_to_mirror() -> None:
    mirrored = mirror_tools([{"name": "bare"}])
    assert (mirrored.tools, mirrored.specs, mirrored.dropped) == ([{"name": "bare"}], {}, [])
