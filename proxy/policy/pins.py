"""Tool pinning: noticing when a server changes a tool after it was approved (a "rug pull").

A pin is a hash of what a client and a model rely on in a tool definition: the server's own
name for it, ``title``, ``description``, ``inputSchema``, ``outputSchema`` and ``annotations``
(canonical JSON, sorted keys, SHA-256). The namespaced name is left out on purpose: renaming a
prefix in the config is not a change of the tool. Pins are kept by ``"<server id>/<original
name>"`` (server ids cannot contain ``/``).

Trust on first use: a tool seen for the first time is pinned as it is (:func:`pin_new`); from
then on :func:`compare` reports every tool whose hash differs as a :class:`Drift`. What a drift
does is the operator's choice of mode:

* ``off``: no pins are computed or checked.
* ``warn`` (the suggested default): drifts are logged and audited; the tool is served changed.
* ``block``: a drifted tool is hidden from ``tools/list`` and calls to it are refused, with the
  drift as the reason, until the operator accepts the new definition (re-pins it with
  :func:`accept`, e.g. from a CLI command).
* ``confirm``: a drifted tool is served, but each identity is asked (like a ``confirm`` policy
  rule asks: :mod:`proxy.pipeline.stages.confirm`) before its first call of the new definition, with
  the change summarised (:func:`summarise_change`); an operator's accept ends the asking.

Pins are kept in a small JSON file, ``{"version": 1, "pins": {key: hash}}``. This module only
turns its bytes into pins (:func:`parse_pins`) and back (:func:`render_pins`); reading and
writing it (atomically) is :mod:`proxy.config.policy_files`' job, which keeps this package pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

import orjson

from proxy.catalog.merge import Entry
from proxy.core.errors import ConfigError

__all__ = [
    "PINNED_FIELDS",
    "Drift",
    "PinMode",
    "accept",
    "blocked_names",
    "compare",
    "current_pins",
    "parse_pins",
    "pin_key",
    "pin_new",
    "render_pins",
    "summarise_change",
    "tool_hash",
]

PinMode: TypeAlias = Literal["warn", "block", "confirm", "off"]
PINNED_FIELDS: Final = ("title", "description", "inputSchema", "outputSchema", "annotations")
_FILE_VERSION: Final = 1


def pin_key(server_id: str, original_name: str) -> str:
    """The key a tool is pinned under: ``"github/create_issue"``."""
    return f"{server_id}/{original_name}"


def tool_hash(entry: Entry) -> str:
    """``"sha256:<hex>"`` of the pinned fields of ``entry``'s definition (absent fields left out)."""
    pinned = {field: entry.definition[field] for field in PINNED_FIELDS if field in entry.definition}
    pinned["name"] = entry.original_name
    return "sha256:" + hashlib.sha256(orjson.dumps(pinned, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True)
class Drift:
    """A pinned tool whose definition changed since it was pinned."""

    name: str  # the namespaced name clients see
    server: str
    original_name: str
    old_hash: str
    new_hash: str

    @property
    def key(self) -> str:
        return pin_key(self.server, self.original_name)

    def describe(self) -> str:
        """One line for the log and for a blocked call's message."""
        return (
            f"tool {self.name!r} (server {self.server!r}, {self.original_name!r}) changed since it was "
            f"pinned ({self.old_hash[:19]}… → {self.new_hash[:19]}…); an operator must accept the change"
        )


_SHOWN_CHARS: Final = 160


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return repr(text[:_SHOWN_CHARS] + ("…" if len(text) > _SHOWN_CHARS else ""))


def summarise_change(old: Mapping[str, object] | None, new: Mapping[str, object]) -> str:
    """What changed between two definitions of a tool, in one bounded line, for the person asked.

    ``old`` is None when the approved definition is not known (only its hash is pinned): then
    only the fact of the change can be said.
    """
    if old is None:
        return "its definition differs from the pinned one (the approved text is not known here)"
    parts: list[str] = []
    for field in PINNED_FIELDS:
        before, after = old.get(field), new.get(field)
        if before == after:
            continue
        if (
            field in ("inputSchema", "outputSchema")
            and isinstance(before, Mapping)
            and isinstance(after, Mapping)
        ):
            was, now = set(before.get("properties") or {}), set(after.get("properties") or {})
            detail = [f"+{name}" for name in sorted(now - was)] + [f"-{name}" for name in sorted(was - now)]
            parts.append(f"{field} changed" + (f" ({', '.join(detail)[:_SHOWN_CHARS]})" if detail else ""))
        else:
            parts.append(f"{field}: {_shown(before)} → {_shown(after)}")
    return "; ".join(parts) if parts else "its definition changed"


def current_pins(entries: Iterable[Entry]) -> dict[str, str]:
    """The pins of ``entries`` as they are now (for ``accept everything``)."""
    return {pin_key(entry.server_id, entry.original_name): tool_hash(entry) for entry in entries}


def compare(pins: Mapping[str, str], entries: Iterable[Entry]) -> list[Drift]:
    """Every entry that is pinned with a different hash, in entry order.

    Entries not pinned yet are not drifts (see :func:`pin_new`); pins whose tool is gone are
    left alone (the server may be down; the pin still guards its return).
    """
    drifts = []
    for entry in entries:
        old = pins.get(pin_key(entry.server_id, entry.original_name))
        if old is None:
            continue
        new = tool_hash(entry)
        if new != old:
            drifts.append(Drift(entry.name, entry.server_id, entry.original_name, old, new))
    return drifts


def pin_new(pins: Mapping[str, str], entries: Iterable[Entry]) -> dict[str, str]:
    """``pins`` plus a pin for every entry not pinned yet (trust on first use).

    Existing pins are never changed here, so a drift stays a drift until it is accepted.
    """
    updated = dict(pins)
    for entry in entries:
        updated.setdefault(pin_key(entry.server_id, entry.original_name), tool_hash(entry))
    return updated


def accept(pins: Mapping[str, str], drifts: Iterable[Drift]) -> dict[str, str]:
    """``pins`` with the new hash of each of ``drifts``: the operator approved the change."""
    updated = dict(pins)
    for drift in drifts:
        updated[drift.key] = drift.new_hash
    return updated


def blocked_names(drifts: Iterable[Drift], mode: PinMode) -> frozenset[str]:
    """The namespaced names to hide and refuse: every drifted tool in ``block`` mode, else none."""
    return frozenset(drift.name for drift in drifts) if mode == "block" else frozenset()


# --- the file's contents ------------------------------------------------------------------------


def parse_pins(raw: bytes, source: str) -> dict[str, str]:
    """The pins in a pins file's bytes; ``source`` names the file in errors.

    Raises:
        ConfigError: the bytes are not JSON or not a pins file.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{source}: the pins file is not JSON ({exc})") from None
    if (
        not isinstance(data, dict)
        or data.get("version") != _FILE_VERSION
        or not isinstance(data.get("pins"), dict)
    ):
        raise ConfigError(f'{source}: not a pins file (expected {{"version": 1, "pins": {{...}}}})')
    pins: dict[str, object] = data["pins"]
    bad = [
        key for key, value in pins.items() if not isinstance(value, str) or not value.startswith("sha256:")
    ]
    if bad:
        raise ConfigError(f"{source}: pins.{bad[0]}: must be a 'sha256:…' string (got {pins[bad[0]]!r})")
    return {key: str(value) for key, value in pins.items()}


def render_pins(pins: Mapping[str, str]) -> bytes:
    """A pins file's bytes: sorted and indented, so a diff of two versions reads well."""
    body = orjson.dumps(
        {"version": _FILE_VERSION, "pins": dict(pins)}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
    )
    return body + b"\n"
