from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, LimitExceeded, MessageTooDeep, ParseError, Unencodable
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import MessageKind


def test_parse_classifies_requests_notifications_and_responses() -> None:
    assert jsonrpc.kind_of(jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')) is MessageKind.REQUEST
    assert jsonrpc.kind_of(jsonrpc.parse(b'{"jsonrpc":"2.0","method":"n"}')) is MessageKind.NOTIFICATION
    assert jsonrpc.kind_of(jsonrpc.parse(b'{"jsonrpc":"2.0","id":"a","result":{}}')) is MessageKind.RESPONSE
    error = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}'
    assert jsonrpc.kind_of(jsonrpc.parse(error)) is MessageKind.RESPONSE


def test_bytes_that_are_not_json_are_a_parse_error() -> None:
    with pytest.raises(ParseError):
        jsonrpc.parse(b"{nope")


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        ([], "must be an object"),
        ({"id": 1, "method": "ping"}, '"jsonrpc" must be exactly "2.0"'),
        ({"jsonrpc": "2.0", "id": 1, "method": ""}, '"method"'),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, '"id"'),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, '"id"'),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}, '"params"'),
        ({"jsonrpc": "2.0", "id": 1}, 'exactly one of "result" and "error"'),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, 'exactly one of "result" and "error"'),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, "integer"),
        ({"jsonrpc": "2.0", "result": {}}, '"id"'),
    ],
)
def test_invalid_messages_are_rejected_with_the_reason(message: Any, complaint: str) -> None:
    with pytest.raises(InvalidRequest, match=complaint.replace("(", r"\(")):
        jsonrpc.validate(message)


def test_builders_produce_messages_that_validate() -> None:
    for message in (
        jsonrpc.request(1, "tools/list", {"cursor": "c"}),
        jsonrpc.notification("notifications/initialized"),
        jsonrpc.result_response("x", {"tools": []}),
        jsonrpc.error_response(None, -32700, "bad", {"detail": 1}),
    ):
        assert jsonrpc.parse(jsonrpc.encode(message)) == message


# ---------------------------------------------------------------------------- nesting depth


def nested(depth: int, *, request_id: int = 1) -> bytes:
    """A request nested exactly ``depth`` levels: the message, its params, then arrays."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"m","params":{{"a":{inner}}}}}'.encode()


def test_a_message_nested_exactly_to_the_limit_is_accepted() -> None:
    assert jsonrpc.parse(nested(jsonrpc.DEFAULT_MAX_DEPTH))["id"] == 1
    assert jsonrpc.parse(nested(8), max_depth=8)["id"] == 1


def test_one_level_past_the_limit_is_refused_with_32600_naming_the_limit() -> None:
    with pytest.raises(MessageTooDeep) as refused:
        jsonrpc.parse(nested(jsonrpc.DEFAULT_MAX_DEPTH + 1))
    assert isinstance(refused.value, InvalidRequest)
    assert refused.value.code == -32600
    assert refused.value.message == "message nested deeper than 64 levels (limits.max_depth)"
    with pytest.raises(MessageTooDeep, match="nested deeper than 8 levels"):
        jsonrpc.decode(nested(9), max_depth=8)


def test_a_300_level_message_orjson_could_decode_but_not_encode_is_refused_with_its_id() -> None:
    with pytest.raises(MessageTooDeep) as refused:
        jsonrpc.parse(nested(300, request_id=7))
    assert (refused.value.request_id, refused.value.method) == (7, "m")


@pytest.mark.parametrize("depth", [1025, 2000, 100_000])
def test_a_message_deeper_than_the_decoder_itself_goes_is_refused_naming_our_limit(depth: int) -> None:
    with pytest.raises(MessageTooDeep, match="nested deeper than 64 levels") as refused:
        jsonrpc.decode(b"[" * depth + b"]" * depth)
    assert refused.value.request_id is None


def test_brackets_inside_strings_do_not_count() -> None:
    text = "[{" * 5000
    message = jsonrpc.parse(orjson.dumps(jsonrpc.request(1, "m", {"text": text})))
    assert message["params"]["text"] == text
    assert jsonrpc.decode(orjson.dumps({"text": text}).decode()) == {"text": text}  # str in, too


def test_a_message_with_few_brackets_is_never_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    def walked(value: Any, limit: int) -> bool:
        raise AssertionError("the byte count alone shows it cannot be too deep")

    monkeypatch.setattr(jsonrpc, "_deeper_than", walked)
    assert jsonrpc.parse(nested(jsonrpc.DEFAULT_MAX_DEPTH))["method"] == "m"


def test_a_wide_shallow_message_is_walked_and_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[int] = []
    walk = jsonrpc._deeper_than

    def counted(value: Any, limit: int) -> bool:
        walks.append(limit)
        return walk(value, limit)

    monkeypatch.setattr(jsonrpc, "_deeper_than", counted)
    wide = jsonrpc.request(1, "tools/call", {"items": [{"a": [1]} for _ in range(500)]})
    assert jsonrpc.parse(orjson.dumps(wide)) == wide
    assert walks == [64]


def test_validate_bounds_depth_only_when_asked() -> None:
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    message = jsonrpc.request(1, "m", {"deep": deep})
    assert jsonrpc.validate(message) is message  # what decode returned is bounded already
    with pytest.raises(MessageTooDeep, match="deeper than 64"):
        jsonrpc.validate(message, max_depth=64)


def test_what_the_highest_allowed_limit_accepts_still_encodes_inside_a_batch() -> None:
    value: Any = []
    for _ in range(jsonrpc.MAX_DEPTH_CEILING - 2):
        value = [value]
    decoded = jsonrpc.parse(
        orjson.dumps(jsonrpc.result_response(1, value)), max_depth=jsonrpc.MAX_DEPTH_CEILING
    )
    assert jsonrpc.encode([jsonrpc.result_response(2, {"wrapped": decoded})])


def test_a_message_that_cannot_be_encoded_is_our_error_not_a_type_error() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(Unencodable, match="cannot encode"):
        jsonrpc.encode(jsonrpc.request(1, "m", {"deep": deep}))
    with pytest.raises(Unencodable):
        jsonrpc.encode(jsonrpc.request(1, "m", {"big": 2**70}))


# ---- objects and arrays in one client message (limits.max_containers) ----------------------


def test_a_message_with_more_objects_and_arrays_than_the_limit_is_refused_naming_it() -> None:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": [{}] * 2000}})
    with pytest.raises(LimitExceeded) as refused:
        jsonrpc.decode(body, max_containers=1000)
    assert refused.value.limit == "max_containers"
    assert "limits.max_containers is 1000" in refused.value.message
    assert jsonrpc.decode(body, max_containers=3000)["id"] == 1
    assert jsonrpc.decode(body)["id"] == 1  # a server's message: no container limit


def test_braces_inside_strings_are_not_objects() -> None:
    text = "{[" * 5000 + '\\"{"'  # braces, and an escaped quote that must not end the string
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"t": text}})
    assert jsonrpc.decode(body, max_containers=1000)["params"]["t"] == text
    assert jsonrpc.decode(body.decode(), max_containers=1000)["params"]["t"] == text  # str in, too


def test_the_container_limit_is_checked_before_the_message_is_decoded() -> None:
    # Not JSON at all past the braces: only a check made before decoding can name the limit.
    with pytest.raises(LimitExceeded):
        jsonrpc.decode(b"[" + b"{}," * 2000 + b" not json", max_containers=1000)


def test_counting_the_braces_of_hostile_strings_stays_linear() -> None:
    # Many escaped quotes in one unterminated string: a scan that restarted at each would be
    # quadratic (minutes for this); a linear one takes milliseconds.
    hostile = b'["' + b'\\"{' * 400_000
    started = time.perf_counter()
    with pytest.raises(ParseError):
        jsonrpc.decode(hostile, max_containers=1000)
    assert time.perf_counter() - started < 2.0
