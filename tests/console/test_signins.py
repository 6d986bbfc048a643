"""Console sign-ins: a fresh random id each time, ids not minted here sign nobody in, bounded
in count and time, and the form token compared in constant time."""

from __future__ import annotations

import pytest

from proxy.console.signins import SignIns, csrf_ok

pytestmark = pytest.mark.anyio


async def test_each_sign_in_gets_a_new_unguessable_id_and_its_own_form_token() -> None:
    signed = SignIns()
    first, one = await signed.start("key-1", now=0.0)
    second, two = await signed.start("key-1", now=0.0)
    assert first != second
    assert len(first) >= 40
    assert one.csrf != two.csrf
    assert await signed.get(first, now=1.0) is one


async def test_an_id_this_process_did_not_mint_signs_nobody_in() -> None:
    signed = SignIns()
    await signed.start("key", now=0.0)
    assert await signed.get("attacker-chosen-id", now=0.0) is None
    assert await signed.get("", now=0.0) is None
    assert await signed.get(None, now=0.0) is None
    assert await signed.get("x" * 10_000, now=0.0) is None


async def test_a_sign_in_ends_when_idle_past_its_limit_or_past_its_lifetime() -> None:
    signed = SignIns(idle=10.0, lifetime=25.0)
    idle, _ = await signed.start("k", now=0.0)
    assert await signed.get(idle, now=11.0) is None
    busy, _ = await signed.start("k", now=100.0)
    for at in (108.0, 116.0, 124.0):
        assert await signed.get(busy, now=at) is not None
    assert await signed.get(busy, now=126.0) is None


async def test_sign_out_forgets_the_id() -> None:
    signed = SignIns()
    sign_in_id, _ = await signed.start("k", now=0.0)
    await signed.end(sign_in_id)
    await signed.end("unknown")
    await signed.end(None)
    assert await signed.get(sign_in_id, now=0.0) is None


async def test_the_number_of_sign_ins_is_bounded_and_the_oldest_goes_first() -> None:
    signed = SignIns(limit=3)
    ids = [(await signed.start("k", now=float(i)))[0] for i in range(5)]
    assert len(signed) == 3
    assert await signed.get(ids[0], now=5.0) is None
    assert await signed.get(ids[1], now=5.0) is None
    assert [await signed.get(i, now=5.0) is not None for i in ids[2:]] == [True, True, True]


async def test_the_form_token_must_match_exactly() -> None:
    signed = SignIns()
    _, record = await signed.start("k", now=0.0)
    assert csrf_ok(record, record.csrf)
    assert not csrf_ok(record, "")
    assert not csrf_ok(record, record.csrf[:-1])
    assert not csrf_ok(record, record.csrf + "é")


async def test_the_credential_is_not_in_the_records_repr() -> None:
    _, record = await SignIns().start("mfd_secret-value", now=0.0)
    assert "mfd_secret-value" not in repr(record)
    assert record.csrf not in repr(record)
