"""Who may see what of Manifold's own state: ``/healthz``, ``/readyz`` and ``/metrics``.

These answer probes, scrapers and whoever else reaches a port, apart from MCP, so three rules
hold on every listener (the main one, and ``metrics.port``):

- **Host and Origin** are checked as on ``/mcp`` (DNS-rebinding protection), except that a Host
  that is an IP address (``10.1.2.3:8080``, ``[fd00::7]:9090``) is let in. A rebinding page's
  requests carry its own domain name in the Host; a page that asks for an address is
  cross-origin and says so in its Origin, which is checked. Kubelet probes and Prometheus
  (pod and DNS service discovery) address pods by IP and need no ``listen.allowed_hosts``
  entry; a probe or scraper that uses a name needs one.
- **/healthz and /readyz** tell everyone the status and how many servers are in each state.
  Per-server details (ids, why a server is down, its stderr lines, lists cut by a limit, which
  required servers are awaited) go only to an identity holding ``metrics.role``, with any
  credential in them redacted (:func:`proxy.observe.logs.redact_text`). Without a credential the
  counts; with a bad one, 401.
- **/metrics** needs a credential and ``metrics.role`` when ``metrics.require_auth`` says so;
  unset, that is once any credential (``auth.api_keys``, ``auth.jwt``) is configured. Its series
  name every server and tool, hidden ones included: scraping is an operator's business, not an
  MCP client's. ``require_auth: false`` with credentials configured is warned about at start.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.auth.authenticator import Authenticator, FailureReason, Rejected
from proxy.config.model import Config
from proxy.config.observe import MetricsSettings
from proxy.inbound.streamable_http import OriginPolicy
from proxy.observe.logs import redact_text
from proxy.outbound.health import ServerState

__all__ = [
    "Observers",
    "Refusal",
    "View",
    "detailed_health",
    "ip_literal",
    "metrics_require_auth",
    "public_health",
    "warnings",
]

_CREDENTIAL_HEADERS: Final = ("authorization", "x-api-key")


class View(enum.Enum):
    PUBLIC = "public"  # status and counts
    DETAILS = "details"  # and each server's state, reason, stderr lines (redacted)


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP refusal: its status, a plain-text message, and headers (a 401's challenge)."""

    status: int
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


def metrics_require_auth(config: Config) -> bool:
    """Whether ``/metrics`` needs a credential: ``metrics.require_auth``, or when unset, whether
    any credential is configured (then callers can be told apart, and a scraper can prove it is one)."""
    settings = config.metrics.require_auth
    return settings if settings is not None else config.auth.credentials_configured


def warnings(config: Config) -> list[str]:
    """What start-up and ``manifold check`` warn about in what is public."""
    metrics = config.metrics
    if metrics.enabled and metrics.require_auth is False and config.auth.credentials_configured:
        return [
            "metrics.require_auth is false while credentials are configured: anyone who can reach "
            f"{metrics.path} reads every server and tool name in it, those the policy hides included; "
            f"remove the setting to require a credential with role {metrics.role!r}"
        ]
    return []


def ip_literal(host: str) -> bool:
    """Whether a Host header names an IP address (with or without a port), not a domain."""
    if host.startswith("["):
        name = host[1:].split("]", 1)[0]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _counts(report: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    counts = {state.value: 0 for state in ServerState}
    for entry in report.values():
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    return {"total": len(report), **counts}


def public_health(
    report: Mapping[str, Mapping[str, Any]], waiting_for: list[str] | None = None
) -> dict[str, Any]:
    """What anyone may read: how many servers are in each state (and, for ``/readyz``, how many
    required ones are awaited); no server id, reason, address or stderr line."""
    body: dict[str, Any] = {"counts": _counts(report)}
    if waiting_for is not None:
        body["waiting"] = len(waiting_for)
    return body


def detailed_health(
    report: Mapping[str, Mapping[str, Any]], waiting_for: list[str] | None = None
) -> dict[str, Any]:
    """The public body plus each server's entry, credentials in its text redacted."""
    body = public_health(report, waiting_for)
    if waiting_for is not None:
        body["waiting_for"] = list(waiting_for)
    details: dict[str, Any] = {}
    for server_id, entry in report.items():
        shown = dict(entry)
        if isinstance(reason := shown.get("reason"), str):
            shown["reason"] = redact_text(reason)
        if "stderr" in shown:
            shown["stderr"] = [redact_text(str(line)) for line in shown["stderr"]]
        details[server_id] = shown
    body["servers"] = details
    return body


class Observers:
    """The three rules of the module docstring, for one gateway."""

    def __init__(
        self, auth: Authenticator, origins: OriginPolicy, settings: MetricsSettings, *, require_auth: bool
    ) -> None:
        self._auth = auth
        self._origins = origins
        self._role = settings.role
        self._require_auth = require_auth

    def admitted(self, headers: Mapping[str, str]) -> Refusal | None:
        """None when the request's Origin and Host pass (as on ``/mcp``, or the Host is an IP)."""
        if not self._origins.origin_ok(headers.get("origin")):
            return Refusal(403, "Forbidden: Origin not allowed")
        host = headers.get("host")
        if not (self._origins.host_ok(host) or (host is not None and ip_literal(host))):
            return Refusal(403, "Forbidden: Host not allowed")
        return None

    async def view(self, headers: Mapping[str, str]) -> View | Refusal:
        """What of the health reports this caller may see; a bad credential is refused (401)."""
        verdict = await self._auth.authenticate(self._credentials(headers))
        if isinstance(verdict, Rejected):
            if verdict.reason is FailureReason.MISSING:
                return View.PUBLIC  # probes send nothing: they get the status
            return self._unauthorized(verdict)
        return View.DETAILS if self._role in verdict.identity.roles else View.PUBLIC

    async def may_scrape(self, headers: Mapping[str, str]) -> Refusal | None:
        """None when the caller may read ``/metrics``."""
        if not self._require_auth:
            return None
        verdict = await self._auth.authenticate(self._credentials(headers))
        if isinstance(verdict, Rejected):
            return self._unauthorized(verdict)
        if self._role not in verdict.identity.roles:
            return Refusal(
                403, f"Forbidden: metrics need an identity with role {self._role!r} (metrics.role)"
            )
        return None

    @staticmethod
    def _credentials(headers: Mapping[str, str]) -> dict[str, str]:
        return {name: value for name in _CREDENTIAL_HEADERS if (value := headers.get(name)) is not None}

    @staticmethod
    def _unauthorized(verdict: Rejected) -> Refusal:
        return Refusal(verdict.status, f"Unauthorized: {verdict.message}", dict(verdict.headers()))
