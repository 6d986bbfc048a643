"""The admin service layer: one :class:`Admin` per running gateway, what the HTTP routes
(:mod:`proxy.admin.routes`), ``manifold admin`` and the console call. Reads are in
:mod:`proxy.admin.reads`; the acts are here, each audited with who asked and from where.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import anyio.to_thread

from proxy.admin import reads
from proxy.admin.replicas import Replicas, Unshared, replicas_for
from proxy.config.admin import AdminSettings
from proxy.config.model import Config
from proxy.config.reload_plan import Plan, diff
from proxy.core.errors import ConfigError
from proxy.enforce.overlays import Overlay
from proxy.policy import Identity

if TYPE_CHECKING:
    from proxy.app.gateway import Gateway
    from proxy.app.reloader import Reloader

__all__ = ["AUDIT_KEPT", "Actor", "Admin", "AdminError"]

logger = logging.getLogger("proxy.admin")

AUDIT_KEPT: Final = 1000  # admin actions kept in memory for the audit view
MAX_OVERLAY_MINUTES: Final = 7 * 24 * 60  # a tool is switched off for at most a week at a time
RESTARTED: Final = "it was restarted by an operator"
_PER_REPLICA: Final = ("servers", "sessions")  # what each replica holds for itself, read everywhere
_MAX_ROWS: Final = 500  # rows of one replica's answer to a read everywhere


class AdminError(Exception):
    """A request the admin service refuses; ``status`` is the HTTP status, the message is safe to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asks for an act, and from where (what the audit records)."""

    identity: Identity
    address: str


class Admin:
    """The admin API's service layer over one running gateway."""

    def __init__(self, gateway: Gateway, reloader: Reloader | None = None) -> None:
        self.gateway = gateway
        self._reloader = reloader
        self.actions: deque[dict[str, Any]] = deque(maxlen=AUDIT_KEPT)
        self.replicas: Replicas = replicas_for(gateway.config, gateway.access.overlays, self._here)

    @property
    def settings(self) -> AdminSettings:
        settings = self.gateway.config.admin
        assert settings is not None, "the admin API runs only with admin: configured"
        return settings

    def is_admin(self, identity: Identity) -> bool:
        """Whether ``identity`` may use the admin API (and console): authenticated, holding one of
        ``admin.roles``."""
        return identity.authenticated and not identity.roles.isdisjoint(self.settings.roles)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the other replicas until cancelled (returns at once without Redis)."""
        await self.replicas.run(task_status=task_status)

    async def aclose(self) -> None:
        await self.replicas.aclose()

    # ---- reads --------------------------------------------------------------------------

    def servers(self) -> list[dict[str, Any]]:
        return reads.servers(self.gateway, drained=self.gateway.connections.drained)

    def server(self, server_id: str) -> dict[str, Any]:
        """Raises: AdminError: no such server (404)."""
        found = reads.server(self.gateway, server_id, drained=self.gateway.connections.drained)
        if found is None:
            raise AdminError(404, f"no server {server_id!r} is configured")
        return found

    def endpoints(self) -> list[dict[str, Any]]:
        return reads.endpoints(self.gateway)

    def catalog_as(self, identity: Identity) -> dict[str, Any]:
        return reads.catalog_as(self.gateway, identity)

    def explain(self, identity: Identity, tool: str) -> dict[str, Any]:
        """Raises: AdminError: the live catalog has no such tool (404)."""
        found = reads.explain(self.gateway, identity, tool)
        if found is None:
            raise AdminError(404, f"the live catalog has no tool {tool!r}")
        return found

    async def policy(self) -> dict[str, Any]:
        return {
            "files": list(self.gateway.access.settings.files),
            "dry_run": self.gateway.config.policy.dry_run,
            "rules": await reads.policy_rules(self.gateway),
            "overlays": self.overlays(),
        }

    def overlays(self) -> list[dict[str, Any]]:
        return [{**o.to_json(), "description": o.describe()} for o in self.gateway.access.overlays.active()]

    def sessions(self) -> list[dict[str, Any]]:
        return reads.sessions(self.gateway)

    async def credentials(self) -> list[dict[str, Any]]:
        return await reads.credentials(self.gateway)

    async def near_limit(self) -> dict[str, Any]:
        """Raises: AdminError: the Redis rate-limit store could not be asked (503)."""
        try:
            return await reads.near_limit(self.gateway)
        except ConnectionError as exc:
            raise AdminError(503, f"the rate-limit store could not be asked ({exc})") from None

    def refusals(self) -> list[dict[str, Any]]:
        return reads.limit_refusals(self.gateway)

    async def approvals(self) -> dict[str, Any]:
        """Approvals kept now (pending and decided; from Redis when they are kept there), and
        how many calls are parked on this replica for a 2026-07-28 caller to come back."""
        approvals = self.gateway.approvals
        kept = await approvals.store.listed(500)
        kept.sort(key=lambda a: a.deadline)
        return {
            "parked": len(self.gateway.parked),
            "approvals": [
                {
                    "id": a.id,
                    "link": approvals.link(a.id),
                    "tool": a.tool,
                    "server": a.server,
                    "caller": a.caller,
                    "roles": list(a.roles),
                    "reason": a.reason,
                    "deadline": a.deadline,
                    "state": a.state,
                    "decided_by": a.decided_by,
                }
                for a in kept
            ],
        }

    def audit(
        self,
        *,
        identity: str | None = None,
        tool: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        """Recent audit entries (the calls' and the admin actions'), newest first, filtered."""
        log = self.gateway.audit
        records = [*(log.recent() if log is not None else ()), *self.actions]
        shown = []
        for record in records:
            if identity is not None and record.get("identity") != identity:
                continue
            if tool is not None and record.get("name") != tool and record.get("target") != tool:
                continue
            if outcome is not None and record.get("outcome") != outcome:
                continue
            if since is not None and _seconds(record.get("ts")) < since:
                continue
            shown.append(record)
        shown.sort(key=lambda r: str(r.get("ts", "")), reverse=True)
        return shown[: max(1, min(limit, AUDIT_KEPT))]

    # ---- acts ---------------------------------------------------------------------------

    def _audited(self, actor: Actor, action: str, target: str, outcome: str, **details: Any) -> None:
        identity = actor.identity
        record: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "kind": "admin",
            "identity": identity.name,
            "roles": sorted(identity.roles),
            "source": identity.source,
            "issuer": identity.issuer,
            "subject": identity.subject,
            "from": actor.address,
            "action": action,
            "target": target,
            "outcome": outcome,
            **details,
        }
        self.actions.append(record)
        if self.gateway.audit is not None:
            self.gateway.audit.write(dict(record))
        logger.info("admin %s %s by %s from %s: %s", action, target, identity.name, actor.address, outcome)

    def refused(self, actor: Actor, action: str, target: str, why: str) -> None:
        """Audit a write that was refused (a bad body, an unknown server, a full store …)."""
        self._audited(actor, action, target, "refused", reason=why[:500])

    async def everywhere(self, what: str) -> dict[str, Any]:
        """This replica's ``what`` (servers or sessions) and every other replica's, each under
        its name; ``unanswered`` counts those asked that did not answer in time.

        Raises:
            AdminError: ``what`` is not kept per replica (404).
        """
        if what not in _PER_REPLICA:
            raise AdminError(404, f"{what!r} is not read per replica: give servers or sessions")
        return await self.replicas.act("read", {"target": what})

    async def _here(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Do a per-process ``action`` on this replica (asked here or by another replica)."""
        gateway = self.gateway
        target = arguments.get("target")
        if not isinstance(target, str):
            return {"acted": False, "problem": "no target"}
        if action == "read":
            if target not in _PER_REPLICA:
                return {"acted": False, "problem": f"{target!r} is not read per replica"}
            rows = self.servers() if target == "servers" else self.sessions()
            return {"acted": True, target: rows[:_MAX_ROWS], "truncated": len(rows) > _MAX_ROWS}
        if action == "restart":
            with gateway.notices.held():  # clients hear one list_changed, as for a reload
                if not gateway.connections.restart(target, RESTARTED):
                    return {"acted": False, "problem": "no such server here"}
                gateway.catalogs.servers_changed()
                if gateway.per_client_catalogs is not None:
                    gateway.per_client_catalogs.servers_changed()
            return {"acted": True}
        if action in ("drain", "undrain"):
            if target not in gateway.connections.shared:
                return {"acted": False, "problem": "no such server here"}
            if action == "drain":
                gateway.connections.drained.add(target)
            else:
                gateway.connections.drained.discard(target)
            return {"acted": True}
        if action == "end_session":
            held = [s for s in list(gateway.sessions) if s.id.startswith(target)]
            if not held:
                return {"acted": False, "problem": "no such session here"}
            if len(held) > 1:
                return {"acted": False, "problem": "the id names several sessions here; give more of it"}
            await gateway.sessions.end(held[0])
            return {"acted": True}
        return {"acted": False, "problem": f"unknown action {action!r}"}

    async def _everywhere(self, actor: Actor, action: str, target: str) -> dict[str, Any]:
        answer = await self.replicas.act(action, {"target": target})
        acted = [r["replica"] for r in answer["replicas"] if r.get("acted")]
        self._audited(actor, action, target, "done" if acted else "nothing done", replicas=acted)
        return answer

    async def restart(self, actor: Actor, server_id: str) -> dict[str, Any]:
        """Raises: AdminError: no such server (404)."""
        self.server(server_id)
        return await self._everywhere(actor, "restart", server_id)

    async def drain(self, actor: Actor, server_id: str, *, on: bool = True) -> dict[str, Any]:
        """Raises: AdminError: no such server (404)."""
        self.server(server_id)
        return await self._everywhere(actor, "drain" if on else "undrain", server_id)

    async def end_session(self, actor: Actor, session_id: str) -> dict[str, Any]:
        """Raises: AdminError: the id is too short to name one session (400)."""
        if len(session_id) < 8:
            raise AdminError(400, "give at least 8 characters of the session id")
        return await self._everywhere(actor, "end_session", session_id)

    async def revoke_credential(
        self, actor: Actor, server: str, kind: str, holder: tuple[str, str, str]
    ) -> dict[str, Any]:
        """Forget a held credential (every replica reads the same store). OAuth tokens of a
        server in ``oauth`` mode are first revoked at its authorization server, as ``manifold
        credentials revoke`` does; ``at_issuer`` says whether that worked.

        Raises:
            AdminError: no credential store (404), or the store cannot be written (409).
        """
        from proxy.credentials.revoke import revoke_at_issuer
        from proxy.credentials.store import StoreError
        from proxy.credentials.token_modes import OAUTH_KIND

        store = self.gateway.credential_store
        if store is None:
            raise AdminError(404, "no credential store is configured")
        answer: dict[str, Any] = {}
        configured = self.gateway.config.servers.get(server)
        if kind == OAUTH_KIND and configured is not None and configured.credentials.mode == "oauth":
            revocation = await revoke_at_issuer(self.gateway.config, store, server, holder)
            answer["at_issuer"] = {"revoked": revocation.problem is None}
            if revocation.problem is not None:
                answer["at_issuer"]["problem"] = revocation.problem
            if revocation.note is not None:
                answer["at_issuer"]["note"] = revocation.note
        try:
            removed = await store.delete(kind, server, holder)
        except StoreError as exc:
            raise AdminError(409, str(exc)) from None
        target = f"{server}/{kind}/{'/'.join(holder)}"
        outcome = "done" if removed else "not held"
        if removed and answer.get("at_issuer", {}).get("revoked") is False:
            outcome = "forgotten here, not revoked at the authorization server"
        self._audited(actor, "revoke_credential", target, outcome)
        return {"revoked": removed, **answer}

    async def switch_off(
        self, actor: Actor, tool: str, role: str | None, minutes: float, reason: str
    ) -> dict[str, Any]:
        """Raises: AdminError: bad duration (400), or too many overlays (409)."""
        if not 0 < minutes <= MAX_OVERLAY_MINUTES:
            raise AdminError(400, f"minutes must be above 0 and at most {MAX_OVERLAY_MINUTES}")
        now = time.time()
        overlay = Overlay(
            secrets.token_hex(8), tool, role, now + minutes * 60, actor.identity.name, now, reason
        )
        try:
            await self.replicas.switch_off(overlay)
        except ValueError as exc:
            raise AdminError(409, str(exc)) from None
        except Unshared as exc:
            raise AdminError(503, f"Redis could not be reached ({exc}); nothing was switched off") from None
        self._audited(actor, "tool_off", tool, "done", role=role, minutes=minutes, reason=reason)
        return {**overlay.to_json(), "description": overlay.describe()}

    async def switch_on(self, actor: Actor, tool: str, role: str | None) -> dict[str, Any]:
        """Raises: AdminError: Redis could not be reached (503)."""
        try:
            gone = await self.replicas.switch_on(tool, role)
        except Unshared as exc:
            raise AdminError(503, f"Redis could not be reached ({exc}); nothing was switched on") from None
        self._audited(actor, "tool_on", tool, "done" if gone else "was not off", role=role)
        return {"removed": [o.to_json() for o in gone]}

    async def accept_pins(self, actor: Actor, tools: Iterable[str] | None) -> dict[str, Any]:
        """Accept drifted and quarantined definitions (all, or ``tools``) into the pins file and
        read the policy again, as ``manifold pins accept`` then SIGHUP do."""
        from proxy.config.policy_files import load_pins, save_pins
        from proxy.policy.pins import accept, compare

        gateway = self.gateway
        wanted = set(tools) if tools is not None else None
        settings = gateway.config.policy.pins
        held = {**gateway.access.held_keys, **gateway.access.quarantined}
        quarantined = {n: key for n, key in held.items() if wanted is None or n in wanted}
        entries = gateway.catalogs.tools.entries

        def write() -> list[str]:
            pins = load_pins(settings.path)
            drifts = (
                []
                if settings.mode == "off"
                else [d for d in compare(pins, entries) if wanted is None or d.name in wanted]
            )
            if not drifts and not quarantined:
                return []
            pins = accept(pins, drifts)
            pins.update(dict(quarantined.values()))
            save_pins(settings.path, pins)
            return sorted({*(d.name for d in drifts), *quarantined})

        accepted = await anyio.to_thread.run_sync(write)
        if accepted:
            gateway.reload_policy()
        self._audited(
            actor, "accept_pins", ",".join(accepted) or "-", "done" if accepted else "nothing to accept"
        )
        return {"accepted": accepted}

    async def _proposed(self, text: str | None) -> Config:
        if self._reloader is None:
            raise AdminError(409, "this Manifold was not started from a config file it can reload")
        try:
            return await self._reloader.read(text)
        except ConfigError as exc:
            raise AdminError(400, f"invalid config:\n{exc}") from None

    def _plan(self, new: Config) -> Plan:
        return diff(self.gateway.config, new, per_client_ready=self.gateway.per_client_catalogs is not None)

    async def plan_reload(self, text: str | None) -> dict[str, Any]:
        """The reload plan for ``text`` (None: the config file as it is now); nothing changes.

        Raises:
            AdminError: the config is not valid (400), or there is no file to reload (409).
        """
        return _plan_json(self._plan(await self._proposed(text)))

    async def apply_reload(self, actor: Actor, text: str | None) -> dict[str, Any]:
        """Apply ``text`` (None: the file) through the same path as a file reload.

        Raises:
            AdminError: as :meth:`plan_reload`.
        """
        new = await self._proposed(text)
        plan = self._plan(new)
        assert self._reloader is not None
        outcome = await self._reloader.reload("the admin API", new)
        self._audited(actor, "reload", "config", outcome, plan=plan.describe())
        return {"outcome": outcome, "plan": _plan_json(plan)}


def _plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "add": list(plan.add),
        "remove": list(plan.remove),
        "restart": list(plan.restart),
        "endpoints_added": list(plan.endpoints_added),
        "endpoints_removed": list(plan.endpoints_removed),
        "endpoints_changed": list(plan.endpoints_changed),
        "needs_restart": list(plan.needs_restart),
        "held_back": list(plan.held_back),
        "changes_anything": plan.changes_anything,
        "description": plan.describe(),
    }


def _seconds(ts: Any) -> float:
    try:
        return datetime.fromisoformat(str(ts)).timestamp()
    except ValueError:
        return 0.0
