"""Reading the id of a broken answer from its first and last bytes only."""

from __future__ import annotations

import pytest

from proxy.protocol.salvage import KEEP, answer_id

BIG = b"x" * 100_000


def ends(line: bytes) -> tuple[bytes, bytes]:
    return line[:KEEP], line[-KEEP:]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"t":"' + BIG + b'"}}', 7),  # Python SDK: id first
        (b'{"result":{"t":"' + BIG + b'"},"jsonrpc":"2.0","id":7}', 7),  # TypeScript SDK: id last
        (b'{"result":{"t":"' + BIG + b'"},"jsonrpc":"2.0","id":"a\\"b"}  \r', 'a"b'),
        (b'{ "jsonrpc" : "2.0" , "id" : -3 , "error" : {"message":"' + BIG + b'"}}', -3),
        (b'{"meta":{"id":1,"s":"}"},"id":2,"result":"' + BIG + b'"}', 2),  # nested ids are not its own
    ],
)
def test_the_id_is_read_from_whichever_end_holds_it(line: bytes, expected: int | str) -> None:
    assert answer_id(*ends(line)) == expected


@pytest.mark.parametrize(
    "line",
    [
        b'{"method":"sampling/createMessage","params":{"t":"' + BIG + b'"},"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"2.0","id":7,"method":"roots/list","params":{"t":"' + BIG + b'"}}',
        b'{"jsonrpc":"2.0","result":{"t":"' + BIG + b'","id":7}}',  # an id, but inside the result
        b'{"jsonrpc":"2.0","result":{"t":"' + BIG + b'"}}',
        b'{"result":"' + BIG + b'","id":"' + BIG + b'"}',  # an id too long to be one of ours
        b'{"result":"' + BIG + b'","id":true}',
        b"x" * 100_000,
        b"[1, 2]",
        b"",
    ],
)
def test_no_id_is_made_up_for_a_request_or_a_line_that_does_not_say(line: bytes) -> None:
    assert answer_id(*ends(line)) is None


def test_an_undecodable_answer_still_names_its_request() -> None:
    assert answer_id(*ends(b'{"jsonrpc":"2.0","id":12,"result":{"t":"\xff\xfe"}}')) == 12
