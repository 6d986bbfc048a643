"""The 2026-07-28 request ladder and the status table, as transcripts; the cases the official SDK
decides the same way are also fed to ``mcp.shared.inbound`` (a test-only dependency) so both
stay in agreement."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared import inbound as sdk

from proxy.core.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    PARSE_ERROR,
    RATE_LIMITED,
    UNSUPPORTED_VERSION,
    ProtocolError,
    RemoteError,
    ResourceNotFound,
)
from proxy.observe.boundary import wire_error
from proxy.protocol import jsonrpc, stateless, versions
from proxy.protocol.headers import Headers, encode_header_value
from proxy.protocol.stateless import Envelope

V = "2026-07-28"
META = {
    stateless.PROTOCOL_VERSION_KEY: V,
    stateless.CLIENT_CAPABILITIES_KEY: {"sampling": {}},
    stateless.CLIENT_INFO_KEY: {"name": "t", "version": "1"},
}


def request(method: str = "tools/list", meta: Any = META, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {**params}
    if meta is not None:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": body}


def headers(method: str = "tools/list", version: str | None = V, **more: str) -> list[tuple[str, str]]:
    pairs = [("mcp-method", method)]
    if version is not None:
        pairs.append(("mcp-protocol-version", version))
    return pairs + [(name.replace("_", "-"), value) for name, value in more.items()]


def outcome(message: dict[str, Any], pairs: list[tuple[str, str]] | None) -> int | None:
    """The JSON-RPC error code the ladder gives, or None when the request passes."""
    try:
        stateless.classify(message, None if pairs is None else Headers.of(pairs))
    except ProtocolError as exc:
        return exc.code
    return None


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in META.items() if k != key}


CALL = request("tools/call", name="get_weather", arguments={})
READ = request("resources/read", uri="file:///a b.txt")
UNICODE = request("prompts/get", name="grüße")

# (what, body, headers, code): every rung, in order; the first failure wins.
LADDER: list[tuple[str, dict[str, Any], list[tuple[str, str]] | None, int | None]] = [
    ("a well-formed request passes", request(), headers(), None),
    ("no _meta", request(meta=None), headers(), INVALID_PARAMS),
    ("_meta is not an object", request(meta="2026-07-28"), headers(), INVALID_PARAMS),
    ("no protocolVersion", request(meta=without(stateless.PROTOCOL_VERSION_KEY)), headers(), INVALID_PARAMS),
    (
        "no clientCapabilities",
        request(meta=without(stateless.CLIENT_CAPABILITIES_KEY)),
        headers(),
        INVALID_PARAMS,
    ),
    ("no clientInfo is fine", request(meta=without(stateless.CLIENT_INFO_KEY)), headers(), None),
    ("no MCP-Protocol-Version header", request(), headers(version=None), HEADER_MISMATCH),
    ("header version unlike the body's", request(), headers(version="2025-11-25"), HEADER_MISMATCH),
    ("no Mcp-Method header", request(), [("mcp-protocol-version", V)], HEADER_MISMATCH),
    ("Mcp-Method unlike the method", request(), headers(method="prompts/list"), HEADER_MISMATCH),
    ("header values are case-sensitive", request(), headers(method="Tools/List"), HEADER_MISMATCH),
    ("tools/call with its Mcp-Name", CALL, headers("tools/call", mcp_name="get_weather"), None),
    ("tools/call without Mcp-Name", CALL, headers("tools/call"), HEADER_MISMATCH),
    ("Mcp-Name unlike params.name", CALL, headers("tools/call", mcp_name="get_news"), HEADER_MISMATCH),
    (
        "Mcp-Name of resources/read is the uri",
        READ,
        headers("resources/read", mcp_name="file:///a b.txt"),
        None,
    ),
    (
        "a base64 sentinel Mcp-Name is decoded",
        UNICODE,
        headers("prompts/get", mcp_name=encode_header_value("grüße")),
        None,
    ),
    (
        "a malformed sentinel matches nothing",
        request("tools/call", name="Hello", arguments={}),
        headers("tools/call", mcp_name="=?base64?SGVsbG8?="),
        HEADER_MISMATCH,
    ),
    (
        "header and body disagree before the version is judged",
        request(meta={**META, stateless.PROTOCOL_VERSION_KEY: "v999.0.0"}),
        headers(),
        HEADER_MISMATCH,
    ),
    (
        "an unknown version in both",
        request(meta={**META, stateless.PROTOCOL_VERSION_KEY: "v999.0.0"}),
        headers(version="v999.0.0"),
        UNSUPPORTED_VERSION,
    ),
    (
        "a handshake version is not served per request",
        request(meta={**META, stateless.PROTOCOL_VERSION_KEY: "2025-11-25"}),
        headers(version="2025-11-25"),
        UNSUPPORTED_VERSION,
    ),
    ("no headers at all (stdio): no header rung", request(), None, None),
    (
        "a version that is not a string (stdio)",
        request(meta={**META, stateless.PROTOCOL_VERSION_KEY: 2026}),
        None,
        INVALID_PARAMS,
    ),
]


@pytest.mark.parametrize(("what", "body", "pairs", "code"), LADDER, ids=[case[0] for case in LADDER])
def test_the_ladder_answers_each_rung_with_its_code(
    what: str, body: dict[str, Any], pairs: list[tuple[str, str]] | None, code: int | None
) -> None:
    assert outcome(body, pairs) == code


@pytest.mark.parametrize(("what", "body", "pairs", "code"), LADDER, ids=[case[0] for case in LADDER])
def test_the_sdk_ladder_agrees(
    what: str, body: dict[str, Any], pairs: list[tuple[str, str]] | None, code: int | None
) -> None:
    # Manifold serves no handshake version per request; the SDK, asked the same, agrees.
    verdict = sdk.classify_inbound_request(body, headers=None if pairs is None else dict(pairs))
    assert (verdict.code if isinstance(verdict, sdk.InboundLadderRejection) else None) == code


def test_beyond_the_sdk_optional_whitespace_around_a_header_value_is_not_part_of_it() -> None:
    # RFC 9110 §5.5; the suite's pending sep-2243-server-accepts-whitespace-header-value.
    body = request("tools/call", name="get_weather", arguments={})
    pairs = [
        ("MCP-Protocol-Version", f" {V}\t"),
        ("Mcp-Method", "tools/call "),
        ("Mcp-Name", "  get_weather  "),
    ]
    assert outcome(body, pairs) is None


def test_header_names_are_case_insensitive() -> None:
    assert outcome(request(), [("MCP-PROTOCOL-VERSION", V), ("Mcp-Method", "tools/list")]) is None


@pytest.mark.parametrize("name", ["mcp-protocol-version", "Mcp-Method", "mcp-name"])
def test_a_routing_header_sent_twice_is_a_mismatch_before_anything_else(name: str) -> None:
    pairs = [*headers("tools/call", mcp_name="get_weather"), (name, "x")]
    assert outcome(request("tools/call", meta=None, name="get_weather"), pairs) == HEADER_MISMATCH
    assert sdk.find_duplicated_routing_header(pairs) == name.lower()


def test_an_unsupported_version_names_every_advertised_one_and_echoes_the_request() -> None:
    body = request(meta={**META, stateless.PROTOCOL_VERSION_KEY: "v999.0.0"})
    with pytest.raises(ProtocolError) as caught:
        stateless.classify(body, Headers.of(headers(version="v999.0.0")))
    assert caught.value.data == {"supported": list(versions.ADVERTISED), "requested": "v999.0.0"}
    assert versions.ADVERTISED[0] == versions.LATEST_STATELESS


def test_the_missing_envelope_keys_are_named() -> None:
    with pytest.raises(ProtocolError) as caught:
        stateless.classify(request(meta={}), None)
    assert caught.value.message == (
        "params._meta is missing the required envelope key(s): "
        "io.modelcontextprotocol/protocolVersion, io.modelcontextprotocol/clientCapabilities"
    )


def test_an_envelope_carries_capabilities_client_info_and_log_level() -> None:
    meta = {**META, stateless.LOG_LEVEL_KEY: "warning"}
    assert stateless.classify(request(meta=meta), Headers.of(headers())) == Envelope(
        V, {"sampling": {}}, {"name": "t", "version": "1"}, "warning"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [(stateless.LOG_LEVEL_KEY, "verbose"), (stateless.CLIENT_CAPABILITIES_KEY, ["sampling"])],
)
def test_an_unknown_log_level_or_capabilities_that_are_no_object_are_invalid_params(
    key: str, value: Any
) -> None:
    assert outcome(request(meta={**META, key: value}), headers()) == INVALID_PARAMS


def test_the_envelope_is_recognised_by_its_protocol_version() -> None:
    assert stateless.has_envelope(request())
    assert not stateless.has_envelope(request(meta=without(stateless.PROTOCOL_VERSION_KEY)))
    assert not stateless.has_envelope({"jsonrpc": "2.0", "id": 1, "method": "ping"})


def test_stripping_the_envelope_keeps_the_rest_of_meta() -> None:
    params = request(meta={**META, stateless.LOG_LEVEL_KEY: "info", "progressToken": "p", "traceparent": "t"})
    assert stateless.strip_envelope(params["params"]) == {"_meta": {"progressToken": "p", "traceparent": "t"}}
    assert stateless.strip_envelope({"name": "x", "_meta": META}) == {"name": "x"}
    assert stateless.strip_envelope({"name": "x"}) == {"name": "x"}


# ---- statuses --------------------------------------------------------------------------------

STATUSES = [
    (PARSE_ERROR, 400),
    (INVALID_REQUEST, 400),
    (INVALID_PARAMS, 400),
    (HEADER_MISMATCH, 400),
    (MISSING_CAPABILITY, 400),
    (UNSUPPORTED_VERSION, 400),
    (METHOD_NOT_FOUND, 404),
    (INTERNAL_ERROR, 200),
    (RATE_LIMITED, 200),
    (-32000, 200),
]


@pytest.mark.parametrize(("code", "status"), STATUSES)
def test_each_error_code_has_its_http_status(code: int, status: int) -> None:
    assert stateless.http_status(jsonrpc.error_response(1, code, "x")) == status
    assert sdk.ERROR_CODE_HTTP_STATUS.get(code, 200) == status


def test_a_result_goes_out_with_200() -> None:
    assert stateless.http_status(jsonrpc.result_response(1, {})) == 200


def test_an_unknown_resource_is_invalid_params_for_a_modern_caller_only() -> None:
    missing = ResourceNotFound("resource not found: x://y", data={"uri": "x://y"})
    assert wire_error(missing, 3, stateless=True)["error"] == {
        "code": INVALID_PARAMS,
        "message": "resource not found: x://y",
        "data": {"uri": "x://y"},
    }
    assert wire_error(missing, 3)["error"]["code"] == -32002
    relayed = RemoteError("s", {"code": -32002, "message": "nope"})
    assert wire_error(relayed, 3, stateless=True)["error"]["code"] == INVALID_PARAMS
    assert wire_error(relayed, 3)["error"]["code"] == -32002
