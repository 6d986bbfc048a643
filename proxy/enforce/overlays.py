"""Operators' overlays on the policy: a tool switched off, for everyone or for one role, until a
time (the admin API, :mod:`proxy.admin`). An overlay expires by itself; the policy files are not
touched, and ``explain`` shows an overlay as such.

Deciding is here (identity, tool, now in; the overlay that refuses out); keeping overlays in Redis
for every replica is :mod:`proxy.admin.overlay_store`. The call path asks :meth:`Overlays.refusing`
once per ``tools/call``: one dict lookup while nothing is switched off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from proxy.core.identity import Identity

__all__ = ["MAX_OVERLAYS", "Overlay", "Overlays"]

MAX_OVERLAYS: Final = 1000  # switched-off tools at once: an operator's list, bounded like any input


@dataclass(frozen=True, slots=True)
class Overlay:
    """``tool`` (a namespaced name) is switched off for ``role`` (None: everyone) until ``until``
    (seconds since the epoch), by ``by`` at ``at``, because ``reason``."""

    id: str
    tool: str
    role: str | None
    until: float
    by: str
    at: float
    reason: str = ""

    def applies(self, identity: Identity, now: float) -> bool:
        return now < self.until and (self.role is None or self.role in identity.roles)

    def describe(self) -> str:
        whom = "everyone" if self.role is None else f"role {self.role!r}"
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.until))
        why = f": {self.reason}" if self.reason else ""
        return f"switched off for {whom} by an operator ({self.by}) until {until}{why}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Overlay:
        """Raises: ValueError: ``data`` is not an overlay this module wrote."""
        if not isinstance(data, dict):
            raise ValueError("an overlay is an object")
        try:
            overlay = cls(**data)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(overlay.tool, str) or not isinstance(overlay.until, int | float):
            raise ValueError("an overlay names a tool and an expiry")
        return overlay


class Overlays:
    """The overlays in force in this process (the store keeps them in step across replicas)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._by_tool: dict[str, tuple[Overlay, ...]] = {}

    def refusing(self, identity: Identity, tool: str) -> Overlay | None:
        """The overlay that switches ``tool`` off for ``identity`` now, if any."""
        if not self._by_tool:
            return None
        found = self._by_tool.get(tool)
        if found is None:
            return None
        now = self._clock()
        return next((overlay for overlay in found if overlay.applies(identity, now)), None)

    def active(self) -> list[Overlay]:
        """Every overlay that has not expired, soonest to expire first."""
        now = self._clock()
        live = [o for found in self._by_tool.values() for o in found if o.until > now]
        return sorted(live, key=lambda o: (o.until, o.id))

    def replace(self, overlays: Iterable[Overlay]) -> None:
        """Put ``overlays`` in force instead of those before (expired ones are dropped)."""
        now = self._clock()
        by_tool: dict[str, list[Overlay]] = {}
        for overlay in overlays:
            if overlay.until > now:
                by_tool.setdefault(overlay.tool, []).append(overlay)
        self._by_tool = {tool: tuple(found) for tool, found in by_tool.items()}

    def add(self, overlay: Overlay) -> None:
        """Raises: ValueError: :data:`MAX_OVERLAYS` are in force already."""
        active = [o for o in self.active() if o.id != overlay.id]
        if len(active) >= MAX_OVERLAYS:
            raise ValueError(f"{MAX_OVERLAYS} overlays are in force already; switch some back on first")
        self.replace([*active, overlay])

    def remove_id(self, overlay_id: str) -> None:
        self.replace([o for o in self.active() if o.id != overlay_id])

    def remove(self, tool: str, role: str | None) -> list[Overlay]:
        """Drop the overlays on ``tool`` for ``role`` (None: every overlay on ``tool``); those dropped."""
        active = self.active()
        gone = [o for o in active if o.tool == tool and (role is None or o.role == role)]
        self.replace([o for o in active if o not in gone])
        return gone
