"""What a config reload changes: the old config and the new one in, a :class:`Plan` out. Pure.

The applier (:mod:`proxy.app.reloader`) carries a plan out on the running gateway. What can change
at run time is the ``servers`` and the ``endpoints``; every other setting (where Manifold
listens, the session secret, the metrics port, the naming profile, limits, auth, policy settings
...) is wired into parts that live as long as the process, so a change there is reported as
*needs a restart* and the old value stays in force (:meth:`Plan.in_force`).

A server is *added*, *removed* (gone, or ``enabled: false``), or *restarted* (any setting of it
changed: it is stopped and started anew with its new settings); a server that did not change is
not touched. A ``per_client`` server cannot join a gateway that started without one (each
client's own catalog is wired at start): such a server is *held back* and needs a restart.

Credentials are wired at start too (each server's credential source, the sign-in pages, the
token store: :mod:`proxy.credentials`). A change of a server's ``credentials`` (or of the
top-level ``credentials``, like every other top-level setting) is reported as needing a restart,
``servers.<id>.credentials``, and the server's old credentials stay in force (its other
settings apply); a new server that is not ``shared`` is held back. Nothing runs with a credential
source built for other settings, or with none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from pydantic import BaseModel

__all__ = ["LIVE_SETTINGS", "Plan", "Settings", "diff"]

# The top-level settings a reload applies; every other one needs a restart.
LIVE_SETTINGS = ("servers", "endpoints")


class _Server(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def session_mode(self) -> str: ...


class Settings(Protocol):
    """What a plan reads of a config (:class:`proxy.config.model.Config`, which reads files itself)."""

    @property
    def servers(self) -> Mapping[str, Any]: ...

    @property
    def endpoints(self) -> Mapping[str, Any]: ...

    def enabled_servers(self) -> Sequence[_Server]: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


C = TypeVar("C", bound=Settings)


@dataclass(frozen=True)
class Plan:
    """What a reload does: each tuple in config order (the new config's, the old one's for removals)."""

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()
    endpoints_added: tuple[str, ...] = ()
    endpoints_removed: tuple[str, ...] = ()
    endpoints_changed: tuple[str, ...] = ()
    needs_restart: tuple[str, ...] = ()  # settings (dotted paths) that changed and are kept as they were
    held_back: tuple[str, ...] = ()  # servers left as they were (see the module docstring)
    credentials_kept: tuple[str, ...] = ()  # servers whose old credentials stay in force

    @property
    def servers_changed(self) -> bool:
        return bool(self.add or self.remove or self.restart)

    @property
    def endpoints_moved(self) -> bool:
        return bool(self.endpoints_added or self.endpoints_removed or self.endpoints_changed)

    @property
    def changes_anything(self) -> bool:
        """Whether applying it changes anything at run time."""
        return self.servers_changed or self.endpoints_moved

    def describe(self) -> str:
        """One line for the log and the audit: what changed, and what needs a restart."""
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("servers added", self.add),
                ("servers removed", self.remove),
                ("servers restarted", self.restart),
                ("endpoints added", self.endpoints_added),
                ("endpoints removed", self.endpoints_removed),
                ("endpoints changed", self.endpoints_changed),
            )
            if names
        ]
        if not parts:
            parts.append("nothing to change")
        if self.held_back:
            parts.append(
                f"servers left as they were (a per_client server needs a restart to join a gateway "
                f"started without one): {', '.join(self.held_back)}"
            )
        if self.needs_restart:
            parts.append(f"needs a restart, the old value stays: {', '.join(self.needs_restart)}")
        return "; ".join(parts)

    def in_force(self, old: C, new: C) -> C:
        """The config in force once this plan is applied: ``new``'s servers and endpoints (but
        the servers held back, as they were), ``old``'s every other setting."""
        servers = dict(new.servers)
        for sid in self.held_back:
            if sid in old.servers:
                servers[sid] = old.servers[sid]
            else:
                servers.pop(sid, None)
        for sid in self.credentials_kept:
            if sid in servers and sid in old.servers:
                servers[sid] = _with_credentials_of(servers[sid], old.servers[sid])
        kept = {name: getattr(old, name) for name in _fields(old) if name not in LIVE_SETTINGS}
        return new.model_copy(update={**kept, "servers": servers})


def diff(old: Settings, new: Settings, *, per_client_ready: bool) -> Plan:
    """What reloading ``old`` as ``new`` does.

    ``per_client_ready``: whether the running gateway has each client's own catalog wired (it
    started with a ``per_client`` server); without it a ``per_client`` server is held back.
    """
    before = {s.id: s for s in old.enabled_servers()}
    after = {s.id: s for s in new.enabled_servers()}
    kept = tuple(
        sid
        for sid, server in after.items()
        if sid in before and _credentials(server) != _credentials(before[sid])
    )
    after.update({sid: _with_credentials_of(after[sid], before[sid]) for sid in kept})
    new_with_credentials = tuple(
        sid for sid, server in after.items() if sid not in before and _mode(server) != "shared"
    )
    held = tuple(
        sid
        for sid, server in after.items()
        if sid in new_with_credentials
        or (not per_client_ready and server.session_mode == "per_client" and before.get(sid) != server)
    )
    # A held-back server stays as it was: running with its old settings, or not at all.
    after = {
        sid: before[sid] if sid in held else server
        for sid, server in after.items()
        if sid not in held or sid in before
    }
    return Plan(
        add=tuple(sid for sid in after if sid not in before),
        remove=tuple(sid for sid in before if sid not in after),
        restart=tuple(sid for sid, s in after.items() if sid in before and _changed(before[sid], s)),
        endpoints_added=tuple(n for n in new.endpoints if n not in old.endpoints),
        endpoints_removed=tuple(n for n in old.endpoints if n not in new.endpoints),
        endpoints_changed=tuple(
            n for n, e in new.endpoints.items() if n in old.endpoints and old.endpoints[n] != e
        ),
        needs_restart=(
            *_restart_only_changes(old, new),
            *(f"servers.{sid}.credentials" for sid in (*kept, *new_with_credentials)),
        ),
        held_back=held,
        credentials_kept=kept,
    )


def _credentials(server: object) -> object:
    return getattr(server, "credentials", None)


def _mode(server: object) -> str:
    return str(getattr(_credentials(server), "mode", "shared"))


def _with_credentials_of(server: Any, old: Any) -> Any:
    """``server`` with ``old``'s credentials (a settings model: copied, not changed)."""
    if isinstance(server, BaseModel):
        return server.model_copy(update={"credentials": _credentials(old)})
    return server


def _changed(old: _Server, new: _Server) -> bool:
    return old != new


def _fields(model: object) -> list[str]:
    assert isinstance(model, BaseModel), f"{type(model).__name__} is no settings model"
    return list(type(model).model_fields)


def _restart_only_changes(old: Settings, new: Settings) -> list[str]:
    """The dotted paths of the settings outside :data:`LIVE_SETTINGS` that differ (never their
    values: a secret is among them)."""
    changed: list[str] = []
    for name in _fields(old):
        if name in LIVE_SETTINGS:
            continue
        a, b = getattr(old, name), getattr(new, name)
        if a == b:
            continue
        if isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b):
            inner = _fields_differing(a, b)
            changed += [f"{name}.{field}" for field in inner] or [name]
        else:
            changed.append(name)
    return changed


def _fields_differing(a: BaseModel, b: BaseModel) -> list[str]:
    return [field for field in _fields(a) if getattr(a, field) != getattr(b, field)]
