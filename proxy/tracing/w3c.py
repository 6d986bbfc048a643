"""W3C Trace Context and Baggage, read defensively: strings in, a parent and clean values out.

Pure: no I/O, no OpenTelemetry. Whatever a client or a server puts in ``params._meta``
(``traceparent``, ``tracestate``, ``baggage``, unprefixed, as the MCP conventions say) or in the
HTTP headers of the same names is parsed here, and only what the W3C recommendations accept
goes on:

- ``traceparent``: version ``00`` exactly (55 characters), or a later version whose first 55
  characters read as ``00`` does (the rest is ignored, as the recommendation says); lowercase
  hex only; trace and parent ids not all zeros; version ``ff`` refused. Longer than
  :data:`MAX_TRACEPARENT` is refused unread. A refused ``traceparent`` takes its
  ``tracestate`` with it (a ``tracestate`` alone means nothing).
- ``tracestate``: at most :data:`MAX_TRACESTATE_MEMBERS` list-members of valid keys and values,
  no key twice, else the whole header is dropped (the recommendation: a vendor that fails to
  parse it must not propagate it). Past :data:`TRACESTATE_LIMIT` characters it is truncated as
  the recommendation says: members longer than 128 characters go first, then from the end.
- ``baggage``: members that do not parse are dropped one by one; at most
  :data:`MAX_BAGGAGE_MEMBERS` members and :data:`MAX_BAGGAGE_BYTES` bytes are kept, in order.

Nothing is ever forwarded as it came: a value that passes is rebuilt from what was parsed.
Every check is linear in the (bounded) input; nothing here raises on input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CARRIER_KEYS",
    "MAX_BAGGAGE_BYTES",
    "MAX_BAGGAGE_MEMBERS",
    "MAX_TRACEPARENT",
    "MAX_TRACESTATE_MEMBERS",
    "TRACESTATE_LIMIT",
    "Carried",
    "Parent",
    "clean_meta",
    "format_traceparent",
    "from_headers",
    "parse_baggage",
    "parse_traceparent",
    "parse_tracestate",
    "read_carrier",
]

CARRIER_KEYS: Final = ("traceparent", "tracestate", "baggage")

MAX_TRACEPARENT: Final = 512  # a later version may append fields; nothing legitimate is longer
MAX_TRACESTATE_MEMBERS: Final = 32
TRACESTATE_LIMIT: Final = 512  # what every vendor must propagate; past it, truncated
_TRACESTATE_READ: Final = 8192  # longer is not read at all
_LONG_MEMBER: Final = 128  # truncation drops members longer than this first
MAX_BAGGAGE_MEMBERS: Final = 64
MAX_BAGGAGE_BYTES: Final = 8192

_HEX: Final = frozenset("0123456789abcdef")
_KEY: Final = re.compile(
    r"[a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
)
_VALUE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}")
# RFC 7230 token, and the baggage-octets of a value (no space, '"', ',', ';' or '\').
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAGGAGE_VALUE: Final = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")


@dataclass(frozen=True, slots=True)
class Parent:
    """A remote parent span, as a valid ``traceparent`` (and its ``tracestate``) named it."""

    trace_id: int
    span_id: int
    sampled: bool
    tracestate: str | None = None

    @property
    def traceparent(self) -> str:
        return format_traceparent(self.trace_id, self.span_id, self.sampled)


@dataclass(frozen=True, slots=True)
class Carried:
    """What one carrier (a ``_meta`` object, or a request's headers) brought, cleaned."""

    parent: Parent | None = None
    baggage: str | None = None


def _hex(text: str) -> bool:
    return all(c in _HEX for c in text)


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(value: object) -> tuple[int, int, bool] | None:
    """``(trace_id, span_id, sampled)`` of a valid ``traceparent``; None for anything else."""
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT or len(value) < 55:
        return None
    version = value[:2]
    if not _hex(version) or version == "ff":
        return None
    if version == "00" and len(value) != 55:
        return None
    if len(value) > 55 and value[55] != "-":  # a later version appends only after a dash
        return None
    if value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    trace, span, flags = value[3:35], value[36:52], value[53:55]
    if not (_hex(trace) and _hex(span) and _hex(flags)):
        return None
    trace_id, span_id = int(trace, 16), int(span, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, bool(int(flags, 16) & 0x01)


def parse_tracestate(value: object) -> str | None:
    """The ``tracestate`` to propagate: rebuilt from valid members, truncated past
    :data:`TRACESTATE_LIMIT`; None when it is absent, empty or does not parse."""
    if not isinstance(value, str) or len(value) > _TRACESTATE_READ:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for raw in value.split(","):
        member = raw.strip(" \t")
        if not member:
            continue  # empty list-members are allowed, and dropped
        key, sep, val = member.partition("=")
        if not sep or not _KEY.fullmatch(key) or not _VALUE.fullmatch(val) or val.endswith(" "):
            return None
        if key in keys:
            return None
        keys.add(key)
        members.append(member)
        if len(members) > MAX_TRACESTATE_MEMBERS:
            return None
    if not members:
        return None
    return _truncated(members)


def _truncated(members: list[str]) -> str:
    joined = ",".join(members)
    if len(joined) <= TRACESTATE_LIMIT:
        return joined
    members = [m for m in members if len(m) <= _LONG_MEMBER]
    while members and len(",".join(members)) > TRACESTATE_LIMIT:
        members.pop()
    return ",".join(members)


def parse_baggage(value: object) -> str | None:
    """The ``baggage`` to propagate: valid members only, at most :data:`MAX_BAGGAGE_MEMBERS` and
    :data:`MAX_BAGGAGE_BYTES`, in order; None when nothing valid is left."""
    if not isinstance(value, str):
        return None
    kept: list[str] = []
    size = 0
    for raw in value[: MAX_BAGGAGE_BYTES * 2].split(","):
        member = _baggage_member(raw)
        if member is None:
            continue
        added = len(member.encode()) + (1 if kept else 0)
        if size + added > MAX_BAGGAGE_BYTES:
            break
        kept.append(member)
        size += added
        if len(kept) == MAX_BAGGAGE_MEMBERS:
            break
    return ",".join(kept) if kept else None


def _baggage_member(raw: str) -> str | None:
    pair, *properties = raw.split(";")
    key, sep, value = pair.partition("=")
    key, value = key.strip(" \t"), value.strip(" \t")
    if not sep or not _TOKEN.fullmatch(key) or not _BAGGAGE_VALUE.fullmatch(value):
        return None
    kept = [f"{key}={value}"]
    for prop in properties:
        name, psep, pvalue = prop.partition("=")
        name, pvalue = name.strip(" \t"), pvalue.strip(" \t")
        if not _TOKEN.fullmatch(name) or (psep and not _BAGGAGE_VALUE.fullmatch(pvalue)):
            return None
        kept.append(f"{name}={pvalue}" if psep else name)
    return ";".join(kept)


def read_carrier(carrier: Mapping[str, Any]) -> Carried:
    """The parent and baggage ``carrier`` (a ``_meta`` object or lower-cased headers) names."""
    parsed = parse_traceparent(carrier.get("traceparent"))
    parent = None
    if parsed is not None:
        parent = Parent(*parsed, tracestate=parse_tracestate(carrier.get("tracestate")))
    return Carried(parent, parse_baggage(carrier.get("baggage")))


def clean_meta(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """``meta`` with its trace context rebuilt from what parses (and what does not, dropped);
    None when there is nothing to change, so the common case copies nothing."""
    if "traceparent" not in meta and "tracestate" not in meta and "baggage" not in meta:
        return None
    carried = read_carrier(meta)
    cleaned = {k: v for k, v in meta.items() if k not in CARRIER_KEYS}
    if carried.parent is not None:
        cleaned["traceparent"] = carried.parent.traceparent
        if carried.parent.tracestate is not None:
            cleaned["tracestate"] = carried.parent.tracestate
    if carried.baggage is not None:
        cleaned["baggage"] = carried.baggage
    return cleaned


_HEADER_NAMES: Final = {b"traceparent": "traceparent", b"tracestate": "tracestate", b"baggage": "baggage"}
_HEADER_READ: Final = MAX_BAGGAGE_BYTES * 2  # past this much of one header, the rest is not read


def from_headers(pairs: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The trace context headers among raw (lower-case) HTTP header ``pairs``, as a carrier for
    :func:`read_carrier`; None when there are none. ``tracestate`` and ``baggage`` may come as
    several headers (joined with commas, as HTTP says); a second ``traceparent`` makes it
    ambiguous, and neither is used."""
    carrier: dict[str, str] | None = None
    for raw_name, raw_value in pairs:
        name = _HEADER_NAMES.get(bytes(raw_name))
        if name is None:
            continue
        value = bytes(raw_value[:_HEADER_READ]).decode("latin-1")
        if carrier is None:
            carrier = {}
        if name in carrier:
            if name == "traceparent":
                carrier["traceparent"] = ""  # two parents: none
                continue
            value = f"{carrier[name]},{value}"[:_HEADER_READ]
        carrier[name] = value
    return carrier
