from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import InvalidRequest, ParseError
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
