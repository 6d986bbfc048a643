"""``PartBounds``: the capabilities, ``_meta`` and arguments of a client's message, by size."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import LimitExceeded
from proxy.protocol.bounds import PartBounds
from proxy.protocol.stateless import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY

BOUNDS = PartBounds(max_capabilities_bytes=1024, max_meta_bytes=2048, max_argument_bytes=4096)
BIG = "x" * 5000
ENVELOPE = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {"x": BIG}}


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def refused_by(message: dict[str, Any]) -> str | None:
    """The limit that refused ``message`` (its message names it with its value), or None."""
    try:
        BOUNDS.check(message, len(orjson.dumps(message)))
    except LimitExceeded as exc:
        return exc.limit if f"limits.{exc.limit} is" in exc.message else "unnamed"
    return None


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        (request("initialize", {"capabilities": {"x": BIG}, "clientInfo": {}}), "max_capabilities_bytes"),
        (request("initialize", {"capabilities": {}, "clientInfo": {"name": BIG}}), "max_capabilities_bytes"),
        (request("tools/list", {"_meta": ENVELOPE}), "max_capabilities_bytes"),
        (request("tools/list", {"_meta": {"trace": BIG}}), "max_meta_bytes"),
        (request("tools/call", {"name": "a.echo", "arguments": {"a": BIG * 2}}), "max_argument_bytes"),
    ],
)
def test_each_part_past_its_limit_is_refused_naming_that_limit(message: dict[str, Any], limit: str) -> None:
    assert refused_by(message) == limit


def test_parts_within_their_limits_pass() -> None:
    assert refused_by(request("tools/call", {"name": "a.echo", "arguments": {"a": BIG[:3000]}})) is None
    assert refused_by(request("tools/list", {"_meta": {"trace": BIG[:1500]}})) is None
    assert refused_by(request("initialize", {"capabilities": {"roots": {}}, "clientInfo": {}})) is None


def test_a_message_no_bigger_than_the_smallest_limit_is_not_measured_at_all() -> None:
    # The size given is what the message took on the wire: a part is never bigger, so a message
    # that says it is small is passed without encoding anything (here, what it says is a lie).
    BOUNDS.check(request("initialize", {"capabilities": {"x": BIG}}), 1024)
    with pytest.raises(LimitExceeded):
        BOUNDS.check(request("initialize", {"capabilities": {"x": BIG}}), 1025)
