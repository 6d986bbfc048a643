"""MCP's request headers: the value codec and the x-mcp-header rules, as transcripts, each case
also fed to the official SDK's ``mcp.shared.inbound`` (a test-only dependency) so both agree."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import pytest
from mcp.shared import inbound as sdk

from proxy.core.errors import HEADER_MISMATCH, ProtocolError
from proxy.protocol import headers
from proxy.protocol.headers import Headers, ParamHeader

# ---- the header value codec -------------------------------------------------------------------

# The spec's own examples (transports, "Value Encoding").
ENCODED = [
    ("us-west1", "us-west1"),
    ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
    (" padded ", "=?base64?IHBhZGRlZCA=?="),
    ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
    ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
]


@pytest.mark.parametrize(("value", "encoded"), ENCODED)
def test_values_encode_as_the_spec_shows_and_decode_back(value: str, encoded: str) -> None:
    assert headers.encode_header_value(value) == encoded == sdk.encode_header_value(value)
    assert headers.decode_header_value(encoded) == value


DECODED = [
    ("=?base64?SGVsbG8=?=", "Hello"),
    ("=?base64?SGVsbG8?=", None),  # bad padding (the suite's case)
    ("=?base64?SGVs!!!bG8=?=", None),  # not the alphabet (the suite's case)
    ("SGVsbG8=", "SGVsbG8="),  # no wrapper: a literal
    ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # no suffix: a literal
    ("=?BASE64?SGVsbG8=?=", "=?BASE64?SGVsbG8=?="),  # the markers are case-sensitive
    ("=?base64?SGl=?=", None),  # non-canonical: trailing bits set
    ("=?base64?" + base64.b64encode(b"\xff").decode() + "?=", None),  # not UTF-8
    (None, None),
]


@pytest.mark.parametrize(("raw", "value"), DECODED)
def test_malformed_sentinels_decode_to_nothing_and_bare_ones_are_literal(
    raw: str | None, value: str | None
) -> None:
    assert headers.decode_header_value(raw) == value == sdk.decode_header_value(raw)


# ---- x-mcp-header ---------------------------------------------------------------------------


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


REGION = {"type": "string", "x-mcp-header": "Region"}
SCHEMAS: list[tuple[str, Any, bool]] = [
    ("a string property", schema(region=REGION), True),
    (
        "integer and boolean too",
        schema(n={"type": "integer", "x-mcp-header": "N"}, b={"type": "boolean", "x-mcp-header": "B"}),
        True,
    ),
    (
        "nested through properties",
        schema(where=schema(zone={"type": "string", "x-mcp-header": "Zone"})),
        True,
    ),
    ("no annotation at all", schema(q={"type": "string"}), True),
    ("not a schema", None, True),
    ("a number property", schema(x={"type": "number", "x-mcp-header": "X"}), False),
    ("an object property", schema(x={"type": "object", "x-mcp-header": "X"}), False),
    ("not a token", schema(x={"type": "string", "x-mcp-header": "Re gion"}), False),
    ("empty", schema(x={"type": "string", "x-mcp-header": ""}), False),
    ("not a string", schema(x={"type": "string", "x-mcp-header": 7}), False),
    ("repeated ignoring case", schema(a=REGION, b={"type": "string", "x-mcp-header": "REGION"}), False),
    ("under items", schema(xs={"type": "array", "items": REGION}), False),
    ("under anyOf", {"type": "object", "anyOf": [schema(region=REGION)]}, False),
    ("under $defs", {"type": "object", "$defs": {"r": REGION}}, False),
    ("on the root", {"type": "string", "x-mcp-header": "Root"}, False),
]


@pytest.mark.parametrize(("what", "input_schema", "valid"), SCHEMAS, ids=[case[0] for case in SCHEMAS])
def test_x_mcp_header_rules_are_the_spec_s_and_the_sdk_s(what: str, input_schema: Any, valid: bool) -> None:
    assert (headers.x_mcp_header_problem(input_schema) is None) == valid
    assert (sdk.find_invalid_x_mcp_header(input_schema) is None) == valid


def test_a_schema_with_a_broken_annotation_declares_no_headers() -> None:
    bad = schema(region=REGION, x={"type": "number", "x-mcp-header": "X"})
    assert headers.x_mcp_headers(bad) == ()
    nested = schema(region=REGION, where=schema(zone={"type": "integer", "x-mcp-header": "Zone"}))
    assert set(headers.x_mcp_headers(nested)) == {
        ParamHeader(("region",), "Region", "string"),
        ParamHeader(("where", "zone"), "Zone", "integer"),
    }


PARAMS_SCHEMA = schema(
    region=REGION,
    count={"type": "integer", "x-mcp-header": "Count"},
    flag={"type": "boolean", "x-mcp-header": "Flag"},
    where=schema(zone={"type": "string", "x-mcp-header": "Zone"}),
)
SPECS = headers.x_mcp_headers(PARAMS_SCHEMA)
ALL = {"region": "us-west1", "count": 42, "flag": True, "where": {"zone": "a"}}
ALL_HEADERS = {
    "Mcp-Param-Region": "us-west1",
    "Mcp-Param-Count": "42",
    "Mcp-Param-Flag": "true",
    "Mcp-Param-Zone": "a",
}


def test_arguments_are_mirrored_into_headers_as_the_sdk_does() -> None:
    arguments = {**ALL, "region": "Hello, 世界"}
    expected = {**ALL_HEADERS, "Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}
    assert headers.param_headers(SPECS, arguments) == expected
    assert sdk.mcp_param_headers(sdk.x_mcp_header_map(PARAMS_SCHEMA), arguments) == expected
    assert headers.param_headers(SPECS, {"region": None}) == {}


def with_headers(**changes: str | None) -> dict[str, str]:
    merged: dict[str, str | None] = {**ALL_HEADERS, **{f"Mcp-Param-{k}": v for k, v in changes.items()}}
    return {k: v for k, v in merged.items() if v is not None}


def param_outcome(arguments: dict[str, Any], sent: Iterable[tuple[str, str]]) -> int | None:
    try:
        headers.check_param_headers(SPECS, arguments, Headers.of(sent))
    except ProtocolError as exc:
        return exc.code
    return None


PARAM_CASES: list[tuple[str, dict[str, Any], dict[str, str], bool]] = [
    ("all present and equal", ALL, ALL_HEADERS, True),
    ("a header missing while its argument is there", ALL, with_headers(Region=None), False),
    ("a header while its argument is absent", {**ALL, "region": None}, ALL_HEADERS, False),
    ("a null argument and no header", {**ALL, "region": None}, with_headers(Region=None), True),
    ("a nested argument missing its header", ALL, with_headers(Zone=None), False),
    ("a different value", ALL, with_headers(Region="eu-west1"), False),
    ("an integer compared numerically", ALL, with_headers(Count="42.0"), True),
    ("an integer that is not equal", ALL, with_headers(Count="42.5"), False),
    ("an integer in exponent form", ALL, with_headers(Count="4.2e1"), False),
    ("a boolean is lower case", ALL, with_headers(Flag="True"), False),
    ("a base64 value decoded", ALL, with_headers(Region="=?base64?dXMtd2VzdDE=?="), True),
    ("a malformed sentinel", ALL, with_headers(Region="=?base64?dXMtd2VzdDE?="), False),
    ("an unknown Mcp-Param header is ignored", ALL, {**ALL_HEADERS, "Mcp-Param-Other": "x"}, True),
]


@pytest.mark.parametrize(
    ("what", "arguments", "sent", "ok"), PARAM_CASES, ids=[case[0] for case in PARAM_CASES]
)
def test_param_headers_must_agree_with_their_arguments(
    what: str, arguments: dict[str, Any], sent: dict[str, str], ok: bool
) -> None:
    assert param_outcome(arguments, sent.items()) == (None if ok else HEADER_MISMATCH)
    assert (sdk.validate_mcp_param_headers(PARAMS_SCHEMA, arguments, sent) is None) == ok


@pytest.mark.parametrize(
    ("region", "sent"),
    [
        ("us-west1", [*ALL_HEADERS.items(), ("mcp-param-region", "us-west1")]),  # twice
        ("us-wést1", [*with_headers(Region=None).items(), ("Mcp-Param-Region", "us-wést1")]),  # not safe
    ],
)
def test_a_param_header_sent_twice_or_with_unsafe_characters_is_refused(
    region: str, sent: list[tuple[str, str]]
) -> None:
    assert param_outcome({**ALL, "region": region}, sent) == HEADER_MISMATCH
