"""W3C Trace Context and Baggage as a hostile peer would write them: what is kept, rebuilt or dropped."""

from __future__ import annotations

import pytest

from proxy.tracing.w3c import (
    MAX_BAGGAGE_BYTES,
    MAX_BAGGAGE_MEMBERS,
    TRACESTATE_LIMIT,
    Parent,
    clean_meta,
    from_headers,
    parse_baggage,
    parse_traceparent,
    parse_tracestate,
    read_carrier,
)

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE, SPAN = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331


def test_a_valid_traceparent_names_its_parent_and_sampled_flag() -> None:
    assert parse_traceparent(TP) == (TRACE, SPAN, True)
    assert parse_traceparent(TP[:-2] + "00") == (TRACE, SPAN, False)
    assert parse_traceparent(TP[:-2] + "03") == (TRACE, SPAN, True)  # other flags: only sampled counts


def test_a_later_version_is_read_as_version_00_with_the_rest_ignored() -> None:
    assert parse_traceparent("01" + TP[2:] + "-what-comes-later") == (TRACE, SPAN, True)
    assert parse_traceparent("01" + TP[2:] + "x") is None  # a later field starts with a dash


@pytest.mark.parametrize(
    "value",
    [
        TP.upper(),
        "ff" + TP[2:],
        TP + "-extra",  # version 00 is exactly 55 characters
        "00-" + "0" * 32 + TP[35:],
        TP[:36] + "0" * 16 + TP[52:],
        TP.replace("-", "_"),
        TP[:-1],
        "00-" + "g" * 32 + TP[35:],
        "0" * 10_000,
        None,
        55,
        {"traceparent": TP},
        "",
    ],
)
def test_a_malformed_traceparent_is_ignored(value: object) -> None:
    assert parse_traceparent(value) is None


def test_tracestate_keeps_valid_members_and_drops_empty_ones() -> None:
    assert (
        parse_tracestate("rojo=00f067aa0ba902b7, ,congo=t61rcWkgMzE")
        == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    )
    assert parse_tracestate("tenant@vendor=x") == "tenant@vendor=x"


@pytest.mark.parametrize(
    "value",
    [
        "a=1,a=2",  # a key twice
        "UPPER=1",
        "k=has,comma",
        "k=v=w",
        "noequals",
        "k=bad\x7f",
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
        "k=" + "v" * 10_000,
        "",
        7,
    ],
)
def test_a_tracestate_that_does_not_parse_is_dropped_whole(value: object) -> None:
    assert parse_tracestate(value) is None


def test_a_long_tracestate_is_truncated_long_members_first_then_from_the_end() -> None:
    long_member = "big=" + "x" * 200
    members = [f"v{i}=" + "y" * 40 for i in range(15)]
    kept = parse_tracestate(",".join([members[0], long_member, *members[1:]]))
    assert kept is not None
    assert len(kept) <= TRACESTATE_LIMIT
    assert "big=" not in kept
    assert kept.startswith(members[0] + "," + members[1])


def test_baggage_keeps_valid_members_in_order_and_drops_the_rest() -> None:
    assert parse_baggage('userId=alice, serverNode=DF%2028 ;prop ;p2=v,bad key=x,k="quoted"') == (
        "userId=alice,serverNode=DF%2028;prop;p2=v"
    )
    assert parse_baggage(";;;,=,") is None
    assert parse_baggage(None) is None


def test_baggage_is_bounded_in_members_and_bytes() -> None:
    many = parse_baggage(",".join(f"k{i}=v" for i in range(500)))
    assert many is not None
    assert many.count(",") == MAX_BAGGAGE_MEMBERS - 1
    big = parse_baggage(",".join(f"k{i}=" + "v" * 1000 for i in range(40)))
    assert big is not None
    assert len(big.encode()) <= MAX_BAGGAGE_BYTES


def test_a_carrier_without_a_valid_parent_keeps_its_baggage_but_no_tracestate() -> None:
    carried = read_carrier({"traceparent": "bad", "tracestate": "a=1", "baggage": "k=v"})
    assert carried.parent is None
    assert carried.baggage == "k=v"
    assert read_carrier({"traceparent": TP, "tracestate": "a=1"}).parent == Parent(TRACE, SPAN, True, "a=1")


def test_clean_meta_copies_nothing_when_no_trace_context_is_there() -> None:
    assert clean_meta({"progressToken": 1}) is None


def test_clean_meta_drops_what_does_not_parse_and_keeps_the_rest_of_meta() -> None:
    cleaned = clean_meta({"traceparent": "00-" + "a" * 10_240, "tracestate": "a=1", "progressToken": 3})
    assert cleaned == {"progressToken": 3}
    assert clean_meta({"traceparent": TP, "tracestate": "a=1,a=2", "baggage": "k=v"}) == {
        "traceparent": TP,
        "baggage": "k=v",
    }


def test_trace_headers_are_collected_and_two_traceparents_name_no_parent() -> None:
    pairs = [(b"host", b"x"), (b"tracestate", b"a=1"), (b"tracestate", b"b=2"), (b"traceparent", TP.encode())]
    assert from_headers(pairs) == {"tracestate": "a=1,b=2", "traceparent": TP}
    assert from_headers([(b"host", b"x")]) is None
    twice = from_headers([(b"traceparent", TP.encode()), (b"traceparent", TP.encode())])
    assert twice is not None
    assert read_carrier(twice).parent is None
