"""The console's :class:`~proxy.console.backend.Backend` over the admin service layer
(:class:`proxy.admin.service.Admin`): the same reads and acts ``/admin/api/`` answers, audited
there as the signed-in admin from the browser's address. A refusal of the service
(:class:`~proxy.admin.service.AdminError`) becomes a page's notice, never an error page.

Also :func:`console_mount`: the console as the ASGI app ``manifold serve`` mounts at ``/admin``
next to the API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from starlette.applications import Starlette

from proxy.admin.service import Actor, Admin, AdminError
from proxy.console.backend import Answer, Refused, Rows
from proxy.console.routes import PREFIX, console_routes
from proxy.console.shared_signins import SharedSignIns
from proxy.core.identity import Identity
from proxy.inbound.streamable_http import OriginPolicy

__all__ = ["LiveBackend", "console_mount"]

logger = logging.getLogger("proxy.console.live")

_VIEWED_AS: Final = "console-view"  # the name a "view as" without one is decided under
_APPLIED: Final = {
    "applied": "The new config is applied.",
    "unchanged": "Nothing to change: the config is applied.",
}
_SINCE: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _since(value: str, now: float) -> float | None:
    """``"15m"``, ``"2h"``, ``"90"`` (seconds) ago -> an epoch time; None when unreadable."""
    value = value.strip().lower()
    unit = _SINCE.get(value[-1:], None)
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        return None
    return now - seconds if 0 <= seconds < 10 * 365 * 86400 else None


async def _everywhere(act: Awaitable[Mapping[str, Any]], what: str) -> Answer:
    """An act on every replica (``replicas: [{replica, acted, problem}]``) as a page notice."""
    try:
        answer = await act
    except AdminError as exc:
        return {"ok": False, "message": exc.message}
    replicas = [r for r in answer.get("replicas", []) if isinstance(r, Mapping)]
    acted = [str(r.get("replica")) for r in replicas if r.get("acted")]
    problems = sorted({str(r.get("problem")) for r in replicas if not r.get("acted") and r.get("problem")})
    if acted:
        return {"ok": True, "message": f"{what}.", "replicas": acted}
    return {"ok": False, "message": f"Nothing done: {'; '.join(problems) or 'no replica acted'}."}


@contextmanager
def _refusals() -> Iterator[None]:
    """A read the service refuses, as the console's :class:`Refused`."""
    try:
        yield
    except AdminError as exc:
        raise Refused(exc.status, exc.message) from None


class LiveBackend:
    """The console's reads and acts, answered by one :class:`Admin`."""

    def __init__(self, admin: Admin, *, clock: Any = time.time) -> None:
        self._admin = admin
        self._clock = clock

    async def servers(self) -> Rows:
        return self._admin.servers()

    async def limits(self) -> Answer:
        refusals = self._admin.refusals()
        try:
            near = await self._admin.near_limit()
        except AdminError as exc:  # the overview still shows the rest
            return {"buckets": [], "problem": exc.message, "refusals": refusals}
        return {"buckets": near.get("buckets", []), "refusals": refusals}

    async def server(self, server_id: str) -> Answer | None:
        try:
            return self._admin.server(server_id)
        except AdminError:
            return None

    async def catalog(self, roles: Sequence[str], name: str) -> Answer:
        return self._admin.catalog_as(Identity(name or _VIEWED_AS, frozenset(roles), "api_key"))

    async def policy(self) -> Answer:
        with _refusals():
            return await self._admin.policy()

    async def explain(self, name: str, roles: Sequence[str], who: str) -> Answer | None:
        try:
            return self._admin.explain(Identity(who or _VIEWED_AS, frozenset(roles), "api_key"), name)
        except AdminError:
            return None

    async def sessions(self) -> Rows:
        return self._admin.sessions()

    async def approvals(self) -> Rows:
        with _refusals():
            listed = (await self._admin.approvals()).get("approvals", [])
        return [a for a in listed if isinstance(a, Mapping)]

    async def credentials(self) -> Rows:
        with _refusals():
            return await self._admin.credentials()

    async def audit(self, filters: Mapping[str, str]) -> Rows:
        since = _since(filters["since"], self._clock()) if filters.get("since") else None
        return self._admin.audit(
            identity=filters.get("identity") or None,
            tool=filters.get("tool") or None,
            outcome=filters.get("outcome") or None,
            since=since,
        )

    async def restart(self, server_id: str, by: Identity, address: str) -> Answer:
        return await _everywhere(self._admin.restart(Actor(by, address), server_id), f"Restarted {server_id}")

    async def drain(self, server_id: str, on: bool, by: Identity, address: str) -> Answer:
        draining = self._admin.drain(Actor(by, address), server_id, on=on)
        return await _everywhere(draining, f"{'Drained' if on else 'Undrained'} {server_id}")

    async def end_session(self, session_id: str, by: Identity, address: str) -> Answer:
        ending = self._admin.end_session(Actor(by, address), session_id)
        return await _everywhere(ending, f"Ended session {session_id}")

    async def revoke(
        self, server_id: str, kind: str, holder: Mapping[str, str], by: Identity, address: str
    ) -> Answer:
        key = (holder.get("source", ""), holder.get("issuer", ""), holder.get("subject", ""))
        try:
            answer = await self._admin.revoke_credential(Actor(by, address), server_id, kind, key)
        except AdminError as exc:
            return {"ok": False, "message": exc.message}
        at_issuer = answer.get("at_issuer") or {}
        if answer.get("revoked") and at_issuer.get("revoked") is False:
            problem = at_issuer.get("problem", "")
            told = f"Forgotten here, but NOT revoked at the authorization server: {problem}"
            return {"ok": False, "message": told}
        if answer.get("revoked"):
            return {"ok": True, "message": f"Revoked the {kind} credential of {key[2]} for {server_id}."}
        return {"ok": False, "message": "That credential is not held (any more)."}

    async def tool_off(
        self, tool: str, role: str | None, minutes: float, reason: str, by: Identity, address: str
    ) -> Answer:
        try:
            answer = await self._admin.switch_off(Actor(by, address), tool, role, minutes, reason)
        except AdminError as exc:
            return {"ok": False, "message": exc.message}
        return {"ok": True, "message": f"{tool}: {answer.get('description', 'switched off')}."}

    async def tool_on(self, tool: str, role: str | None, by: Identity, address: str) -> Answer:
        try:
            answer = await self._admin.switch_on(Actor(by, address), tool, role)
        except AdminError as exc:
            return {"ok": False, "message": exc.message}
        if answer.get("removed"):
            return {"ok": True, "message": f"{tool} is switched on again."}
        return {"ok": False, "message": f"{tool} was not switched off."}

    async def reload_plan(self, config_text: str | None) -> Answer:
        try:
            return await self._admin.plan_reload(config_text)
        except AdminError as exc:
            return {"problems": [line for line in exc.message.splitlines() if line.strip()]}

    async def reload_apply(self, config_text: str | None, by: Identity, address: str) -> Answer:
        try:
            answer = await self._admin.apply_reload(Actor(by, address), config_text)
        except AdminError as exc:
            lines = [line for line in exc.message.splitlines() if line.strip()]
            return {"ok": False, "message": lines[0] if lines else "Refused.", "plan": {"problems": lines}}
        outcome = str(answer.get("outcome", ""))
        told = _APPLIED.get(outcome, f"The reload was {outcome}: the config in force stays (see the log).")
        return {**answer, "ok": outcome in _APPLIED, "message": told}


def console_mount(admin: Admin) -> tuple[str, Starlette]:
    """The console for ``admin``'s gateway, and where ``manifold serve`` mounts it (after the
    API's own ``/admin/api``, on the same listener: ``admin.listen`` when given). Its pages are
    served to the Host and Origin the API is."""
    config = admin.gateway.config
    settings = config.admin
    assert settings is not None
    listen = config.listen
    host = settings.listen.host if settings.listen is not None else listen.host
    origins = OriginPolicy(host, listen.allowed_origins, listen.allowed_hosts)
    routes = console_routes(
        LiveBackend(admin),
        admin.gateway.auth,
        origins,
        settings.roles,
        grafana_url=settings.grafana_url,
        requests=(settings.requests.rate.interval, settings.requests.burst),
        writes=(settings.writes.rate.interval, settings.writes.burst),
        sign_ins=_shared_sign_ins(admin),
    )
    return PREFIX, Starlette(routes=routes)


def _shared_sign_ins(admin: Admin) -> SharedSignIns | None:
    """Sign-ins in Redis when the replicas share one and ``sessions.secret`` (else this process's)."""
    client, secret = admin.replicas.client, admin.gateway.config.sessions.secret
    if client is None:
        return None
    if secret is None:
        logger.warning(
            "admin console: sign-ins stay in this replica (sharing them through Redis needs sessions.secret)"
        )
        return None
    return SharedSignIns(client, secret.get_secret_value().encode())
