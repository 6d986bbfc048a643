"""CursorCodec and paginate: signed, scoped, generation-bound pagination."""

from __future__ import annotations

import base64
import re
import string
from collections.abc import Mapping
from typing import Any

import pytest

from proxy.catalog.cursors import MIN_KEY_BYTES, CursorCodec, Page, paginate
from proxy.core.errors import INVALID_PARAMS, InvalidParams

KEY = b"k" * 32
CODEC = CursorCodec(KEY)
GEN = "0123456789abcdef"
_URL_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")
_ALPHABET = string.ascii_letters + string.digits + "-_"


def reason_of(excinfo: pytest.ExceptionInfo[InvalidParams]) -> str:
    data = excinfo.value.data
    assert isinstance(data, dict)
    reason = data["reason"]
    assert isinstance(reason, str)
    return reason


def items(count: int) -> list[Mapping[str, Any]]:
    return [{"name": f"t{i}"} for i in range(count)]


@pytest.mark.parametrize("offset", [0, 1, 10, 95, 2**32 - 1])
@pytest.mark.parametrize("scope", ["", "alice", "team:ops/ünïcode"])
def test_cursor_round_trips_its_offset(offset: int, scope: str) -> None:
    cursor = CODEC.encode(GEN, offset, scope)
    assert _URL_SAFE.match(cursor)
    assert CODEC.decode(cursor, GEN, scope) == offset


def test_replicas_sharing_a_key_accept_each_others_cursors() -> None:
    assert CursorCodec(KEY).decode(CursorCodec(KEY).encode(GEN, 7, "bob"), GEN, "bob") == 7


def test_cursor_encoding_is_deterministic() -> None:
    assert CODEC.encode(GEN, 3, "s") == CursorCodec(KEY).encode(GEN, 3, "s")


def test_scope_is_bound_but_not_readable_in_the_cursor() -> None:
    cursor = CODEC.encode(GEN, 1, "alice@example.com")
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    assert b"alice" not in raw
    assert CODEC.encode(GEN, 1, "other") != cursor


def test_changing_any_single_character_of_a_cursor_is_rejected() -> None:
    cursor = CODEC.encode(GEN, 5, "alice")
    for position, char in enumerate(cursor):
        for replacement in {_ALPHABET[(_ALPHABET.index(char) + step) % 64] for step in (1, 32)}:
            tampered = cursor[:position] + replacement + cursor[position + 1 :]
            with pytest.raises(InvalidParams) as excinfo:
                CODEC.decode(tampered, GEN, "alice")
            assert reason_of(excinfo) in {"bad_mac", "malformed"}, (position, replacement)


def test_a_cursor_with_a_valid_shape_but_a_forged_body_fails_verification() -> None:
    cursor = CODEC.encode(GEN, 5)
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[4] ^= 0x01  # the low byte of the offset: still well-formed, but not what was signed
    forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()

    with pytest.raises(InvalidParams, match="fails verification") as excinfo:
        CODEC.decode(forged, GEN)
    assert reason_of(excinfo) == "bad_mac"


def test_a_cursor_signed_with_another_key_is_rejected() -> None:
    cursor = CursorCodec(b"x" * 32).encode(GEN, 5)
    with pytest.raises(InvalidParams, match="different cursor key") as excinfo:
        CODEC.decode(cursor, GEN)
    assert reason_of(excinfo) == "bad_mac"


def test_a_cursor_from_an_older_generation_is_stale() -> None:
    cursor = CODEC.encode(GEN, 5)
    with pytest.raises(InvalidParams, match="stale cursor") as excinfo:
        CODEC.decode(cursor, "fedcba9876543210")
    assert reason_of(excinfo) == "stale"
    assert excinfo.value.code == INVALID_PARAMS


def test_a_cursor_issued_for_another_scope_is_rejected() -> None:
    cursor = CODEC.encode(GEN, 5, "alice")
    with pytest.raises(InvalidParams, match="another endpoint, another identity") as excinfo:
        CODEC.decode(cursor, GEN, "bob")
    assert reason_of(excinfo) == "wrong_scope"


def test_a_cursor_of_another_scope_and_generation_is_refused_as_another_lists_not_as_stale() -> None:
    # Another endpoint's view has a generation of its own: "the list changed" would be untrue.
    cursor = CODEC.encode(GEN, 5, "e|tools|alice")
    with pytest.raises(InvalidParams, match="belongs to another list") as excinfo:
        CODEC.decode(cursor, "fedcba9876543210", "tools|alice")
    assert reason_of(excinfo) == "wrong_scope"
    assert "stale" not in str(excinfo.value)


@pytest.mark.parametrize(
    "garbage",
    ["", "a", "abcd", "!!!!", "not a cursor", "é" * 8, "A" * 10_000, "AAAA====", "AQ"],
)
def test_garbage_strings_are_rejected_as_malformed(garbage: str) -> None:
    with pytest.raises(InvalidParams, match="invalid cursor") as excinfo:
        CODEC.decode(garbage, GEN)
    assert reason_of(excinfo) == "malformed"


def test_a_cursor_with_padding_or_stray_characters_is_not_accepted() -> None:
    cursor = CODEC.encode(GEN, 5)
    for variant in (cursor + "=", cursor + "==", f" {cursor}", f"{cursor[:4]}.{cursor[4:]}"):
        with pytest.raises(InvalidParams) as excinfo:
            CODEC.decode(variant, GEN)
        assert reason_of(excinfo) == "malformed", variant


@pytest.mark.parametrize("value", [None, 5, 1.5, b"bytes", ["x"], {"offset": 1}, True])
def test_a_cursor_that_is_not_a_string_is_rejected(value: object) -> None:
    with pytest.raises(InvalidParams, match="expected a string") as excinfo:
        CODEC.decode(value, GEN)
    assert reason_of(excinfo) == "not_a_string"


def test_encode_refuses_offsets_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="offset"):
        CODEC.encode(GEN, -1)
    with pytest.raises(ValueError, match="offset"):
        CODEC.encode(GEN, 2**32)


def test_codec_refuses_a_short_key() -> None:
    with pytest.raises(ValueError, match="key"):
        CursorCodec(b"k" * (MIN_KEY_BYTES - 1))


def collect(all_items: list[Mapping[str, Any]], page_size: int, scope: str = "") -> list[Page]:
    pages = [paginate(all_items, cursor=None, page_size=page_size, codec=CODEC, generation=GEN, scope=scope)]
    while pages[-1].next_cursor is not None:
        assert len(pages) <= len(all_items) + 1, "pagination does not terminate"
        pages.append(
            paginate(
                all_items,
                cursor=pages[-1].next_cursor,
                page_size=page_size,
                codec=CODEC,
                generation=GEN,
                scope=scope,
            )
        )
    return pages


@pytest.mark.parametrize(
    ("count", "page_size"), [(0, 10), (1, 10), (10, 10), (11, 10), (95, 10), (95, 1), (7, 3)]
)
def test_pages_together_hold_every_item_once_in_order(count: int, page_size: int) -> None:
    all_items = items(count)

    pages = collect(all_items, page_size, scope="alice")

    assert [item for page in pages for item in page.items] == all_items
    assert len(pages) == max(1, -(-count // page_size))
    assert all(len(page.items) == page_size for page in pages[:-1])
    assert pages[-1].next_cursor is None
    assert all(page.items for page in pages) or count == 0


def test_every_page_size_and_length_combination_covers_the_list_exactly() -> None:
    for page_size in range(1, 8):
        for count in range(0, 20):
            all_items = items(count)
            seen = [item["name"] for page in collect(all_items, page_size) for item in page.items]
            assert seen == [item["name"] for item in all_items], (count, page_size)


def test_a_cursor_pointing_at_the_end_or_beyond_is_rejected() -> None:
    all_items = items(20)
    for offset in (20, 21, 1000):
        with pytest.raises(InvalidParams, match="past the end") as excinfo:
            paginate(all_items, cursor=CODEC.encode(GEN, offset), page_size=10, codec=CODEC, generation=GEN)
        assert reason_of(excinfo) == "past_end"


def test_paginate_rejects_a_cursor_after_the_catalog_changed() -> None:
    first = paginate(items(20), cursor=None, page_size=10, codec=CODEC, generation=GEN)
    assert first.next_cursor is not None
    with pytest.raises(InvalidParams) as excinfo:
        paginate(
            items(21), cursor=first.next_cursor, page_size=10, codec=CODEC, generation="newgeneration000"
        )
    assert reason_of(excinfo) == "stale"


def test_paginate_rejects_an_empty_string_cursor_instead_of_restarting() -> None:
    with pytest.raises(InvalidParams) as excinfo:
        paginate(items(5), cursor="", page_size=10, codec=CODEC, generation=GEN)
    assert reason_of(excinfo) == "malformed"


def test_paginate_refuses_a_page_size_below_one() -> None:
    with pytest.raises(ValueError, match="page_size"):
        paginate(items(5), cursor=None, page_size=0, codec=CODEC, generation=GEN)
