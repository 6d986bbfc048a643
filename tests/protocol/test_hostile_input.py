"""Every decoder, fed whatever a hostile peer could send: it returns messages or raises one of ours.

Nothing else may come out of them (a TypeError from a message too deep to re-encode once ended
the whole process), and what they return must go out again: ``jsonrpc.encode`` takes it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.errors import ManifoldError, MessageTooDeep, MessageTooLarge
from proxy.protocol import jsonrpc
from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.protocol.sse import SSEDecoder

# Moderate: a few seconds per test on a busy two-core machine; no example database in the tree.
hostile = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
# JSON values as a decoder can produce them, nested past every limit now and then.
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=30,
)
ids = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=8) | st.none() | st.booleans()


@st.composite
def deeply(draw: st.DrawFn, inner: st.SearchStrategy[bytes]) -> bytes:
    """``inner`` wrapped in up to 2500 arrays and objects: past our limits, and past orjson's own."""
    depth = draw(st.integers(min_value=0, max_value=2500) | st.integers(min_value=55, max_value=260))
    shape = draw(st.sampled_from([(b"[", b"]"), (b'{"k":', b"}"), (b'{"k":[', b"]}")]))
    return shape[0] * depth + draw(inner) + shape[1] * depth


def message_around(body: bytes, request_id: Any, method: str | None) -> bytes:
    head = {"jsonrpc": "2.0", "id": request_id} | ({"method": method} if method else {})
    key = b"params" if method else b"result"
    return orjson.dumps(head)[:-1] + b',"' + key + b'":' + body + b"}"


encoded_values = values.map(orjson.dumps)
messages = st.builds(
    message_around,
    deeply(encoded_values) | encoded_values,
    ids,
    st.none() | st.sampled_from(["tools/call", "notifications/progress", ""]),
)
# Bytes a peer could send for one message: JSON-RPC-shaped, deep, bare JSON, or anything at all.
payloads = messages | deeply(encoded_values) | encoded_values | st.binary(max_size=200)


def depth_of(value: Any) -> int:
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, dict | list)]:
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


def goes_out_again(value: Any) -> None:
    # As Manifold sends what it decoded: inside a response, inside a batch.
    assert jsonrpc.encode([jsonrpc.result_response(1, {"wrapped": value})])


@hostile
@given(payloads, st.integers(min_value=8, max_value=jsonrpc.MAX_DEPTH_CEILING))
def test_decode_returns_a_bounded_value_or_raises_ours(data: bytes, max_depth: int) -> None:
    try:
        value = jsonrpc.decode(data, max_depth=max_depth)
    except MessageTooDeep as exc:
        if exc.request_id is not None:  # it could be decoded: and it is too deep indeed
            assert depth_of(orjson.loads(data)) > max_depth
        return
    except ManifoldError:
        return
    assert depth_of(value) <= max_depth
    goes_out_again(value)


@hostile
@given(payloads | payloads.map(lambda b: b.decode(errors="replace")))
def test_parse_returns_a_message_that_encodes_or_raises_ours(data: bytes | str) -> None:
    try:
        message = jsonrpc.parse(data)
    except ManifoldError:
        return
    assert isinstance(message, dict)
    jsonrpc.kind_of(message)
    goes_out_again(message)
    assert jsonrpc.parse(jsonrpc.encode(message)) == message


@st.composite
def nested_values(draw: st.DrawFn) -> Any:
    value = draw(values)
    for _ in range(draw(st.integers(min_value=0, max_value=400))):
        value = draw(st.sampled_from([lambda v: [v], lambda v: {"k": v}]))(value)
    return value


@hostile
@given(
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0") | scalars, "id": ids},
        optional={
            "method": st.text(max_size=10) | scalars,
            "params": nested_values(),
            "result": nested_values(),
        },
    )
    | nested_values()
)
def test_validate_with_a_limit_returns_a_message_that_encodes_or_raises_ours(value: Any) -> None:
    try:
        message = jsonrpc.validate(value, max_depth=jsonrpc.DEFAULT_MAX_DEPTH)
    except ManifoldError:
        return
    goes_out_again(message)


@st.composite
def chunked(draw: st.DrawFn, data: st.SearchStrategy[bytes]) -> list[bytes]:
    raw = draw(data)
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=8)))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


lines = st.lists(payloads | st.sampled_from([b"", b"\r", b" ", b"\r\r"]), max_size=6).map(b"\n".join)


def expected_lines(data: bytes, max_line: int) -> list[bytes | None]:
    """What a line buffer must hand out for ``data``, however chunked: None for a refused line."""
    *complete, rest = data.split(b"\n")
    out: list[bytes | None] = []
    for raw in complete:
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if len(line) > max_line:
            out.append(None)
        elif line.strip():
            out.append(line)
    if len(rest) > max_line + 1:
        out.append(None)
    return out


@hostile
@given(chunked(lines), st.integers(min_value=1, max_value=64))
def test_the_line_buffer_refuses_each_overlong_line_once_however_the_bytes_are_chunked(
    chunks: list[bytes], max_line: int
) -> None:
    buffer = LineBuffer(max_line)
    got: list[bytes | None] = []
    for chunk in chunks:
        for line in buffer.feed(chunk):
            if isinstance(line, LineTooLong):
                assert isinstance(line, ManifoldError)
                assert f"exceeded {max_line} bytes" in line.message
                got.append(None)
            else:
                assert b"\n" not in line
                assert len(line) <= max_line
                got.append(line)
    assert got == expected_lines(b"".join(chunks), max_line)


@hostile
@given(chunked(lines))
def test_every_line_decodes_to_a_message_that_encodes_or_raises_ours(chunks: list[bytes]) -> None:
    buffer = LineBuffer()
    for chunk in chunks:
        for line in buffer.feed(chunk):
            assert not isinstance(line, LineTooLong)
            with contextlib.suppress(ManifoldError):
                goes_out_again(jsonrpc.parse(line))


sse_streams = st.lists(
    payloads.map(lambda b: b"data: " + b.replace(b"\n", b"\ndata: ") + b"\n\n")
    | st.sampled_from([b": ping\n", b"id: 1\n", b"event: message\n", b"retry: 10\n", b"\r\n", b"\r"])
    | st.just(b"retry: " + b"9" * 5000 + b"\n")  # more digits than int() takes
    | st.binary(max_size=40),
    max_size=6,
).map(b"".join) | st.binary(max_size=300)


@hostile
@given(chunked(sse_streams), st.integers(min_value=1, max_value=4096))
def test_the_sse_decoder_yields_events_or_refuses_one_too_large(chunks: list[bytes], limit: int) -> None:
    decoder = SSEDecoder(max_event_size=limit)
    events = []
    refused: MessageTooLarge | None = None
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
    except MessageTooLarge as exc:
        refused = exc
    if refused is not None:
        assert f"exceeded {limit} bytes" in refused.message
        return
    # However the bytes were cut, the same events come out.
    assert SSEDecoder(max_event_size=2**30).feed(b"".join(chunks)) == events
    for event in events:
        assert len(event.data) <= limit
        with contextlib.suppress(ManifoldError):
            goes_out_again(jsonrpc.parse(event.data))
