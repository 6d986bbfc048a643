"""What the admin API shows: each read is a function of the running gateway that returns plain,
JSON-ready data (dicts and lists of str, int, float, bool, None) and never a secret.

Every value that came from a server or a client (tool names, descriptions, stderr lines, audit
fields) is untrusted text: the console escapes it, and this module never builds markup.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread

from proxy.core.redaction import redact_text
from proxy.policy import Identity, Subject

if TYPE_CHECKING:
    from proxy.app.gateway import Gateway

__all__ = [
    "SHOWN_ID",
    "catalog_as",
    "credentials",
    "endpoints",
    "explain",
    "limit_refusals",
    "near_limit",
    "policy_rules",
    "server",
    "servers",
    "sessions",
]

SHOWN_ID: Final = 12  # characters of a session id shown: enough to name it, too few to present it
_STDERR_SHOWN: Final = 20
_NEAR: Final = 0.8  # a bucket is "near its limit" once this share of its burst is spent


def _list_sizes(gateway: Gateway, server_id: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for kind in ("tools", "prompts", "resources", "resourceTemplates"):
        for piece in gateway.catalogs.slices(kind):
            if piece.server_id == server_id:
                sizes[kind] = len(piece.items)
    return sizes


def server(gateway: Gateway, server_id: str, *, drained: Iterable[str] = ()) -> dict[str, Any] | None:
    """One server as the admin sees it, or None if no such server runs."""
    connection = gateway.connections.shared.get(server_id)
    configured = gateway.config.servers.get(server_id)
    if connection is None or configured is None:
        return None
    stats = gateway.metrics.recent.stats(server_id)
    reason = connection.reason
    return {
        "id": server_id,
        "kind": configured.kind,
        "state": connection.state.value,
        "required": configured.required,
        "session_mode": configured.session_mode,
        "drained": server_id in set(drained),
        "restarts": connection.restarts,
        "in_flight": connection.in_flight,
        "last_error": redact_text(reason) if reason else None,
        "stderr_tail": [redact_text(line) for line in connection.stderr_tail(_STDERR_SHOWN)],
        "protocol_version": connection.protocol_version,
        "server_info": {k: v for k, v in connection.server_info.items() if k in ("name", "version", "title")},
        "lists": _list_sizes(gateway, server_id),
        "capped": dict(connection.capped),
        "calls": {
            "window_seconds": 60,
            "calls": stats.calls,
            "errors": stats.errors,
            "per_second": round(stats.per_second, 3),
            "error_rate": round(stats.error_rate, 4),
            "p50_ms": None if stats.p50_ms is None else round(stats.p50_ms, 3),
            "p99_ms": None if stats.p99_ms is None else round(stats.p99_ms, 3),
            "series": list(stats.series),
        },
    }


def servers(gateway: Gateway, *, drained: Iterable[str] = ()) -> list[dict[str, Any]]:
    held = set(drained)
    found = [server(gateway, sid, drained=held) for sid in list(gateway.connections.shared)]
    return [entry for entry in found if entry is not None]


def endpoints(gateway: Gateway) -> list[dict[str, Any]]:
    """``/mcp`` and each named endpoint: which servers, tools and roles its view has."""
    shown = [{"name": "", "path": "/mcp", "servers": None, "tools": None, "roles": None}]
    for name, endpoint in gateway.config.endpoints.items():
        settings = endpoint.model_dump(mode="json", include={"servers", "tools", "roles"})
        shown.append(
            {
                "name": name,
                "path": f"/mcp/{name}",
                **{k: settings.get(k) for k in ("servers", "tools", "roles")},
            }
        )
    return shown


def catalog_as(gateway: Gateway, identity: Identity) -> dict[str, Any]:
    """The tools, prompts and resources ``identity`` is shown on ``/mcp``, with where each name
    and annotation came from."""
    served = gateway.catalogs.served
    tools = []
    for definition in gateway.access.tools_view(served, identity):
        name = str(definition.get("name", ""))
        entry = served.catalog.by_name.get(name)
        effective = served.effective.get(name)
        overlay = gateway.access.overlays.refusing(identity, name)
        tools.append(
            {
                "name": name,
                "server": entry.server_id if entry is not None else None,
                "original_name": entry.original_name if entry is not None else None,
                "renamed": entry is not None and entry.canonical != name,
                "description": definition.get("description"),
                "annotations": None
                if effective is None
                else {**effective.hints(), "source": effective.source},
                "switched_off": None if overlay is None else overlay.describe(),
            }
        )
    prompts = gateway.access.prompts_view(gateway.catalogs.prompts, identity)
    return {
        "identity": _who(identity),
        "tools": tools,
        "prompts": [{"name": p.get("name"), "description": p.get("description")} for p in prompts],
        "resources": len(
            gateway.access.resources_view(gateway.catalogs.resources, identity, templates=False)
        ),
    }


def _who(identity: Identity) -> dict[str, Any]:
    return {"name": identity.name, "roles": sorted(identity.roles), "source": identity.source}


def explain(gateway: Gateway, identity: Identity, tool: str) -> dict[str, Any] | None:
    """The decision for ``identity`` calling ``tool`` (a namespaced name), overlays included;
    None if the live catalog has no such tool."""
    served = gateway.catalogs.served
    entry = served.catalog.by_name.get(tool) or next(
        (e for e in served.catalog.entries if e.canonical == tool), None
    )
    if entry is None:
        return None
    subject: Subject = served.subject(entry.name)
    decision = gateway.access.decide(identity, subject)
    effective = served.effective.get(entry.name)
    overlay = gateway.access.overlays.refusing(identity, entry.name)
    report: dict[str, Any] = {
        "identity": _who(identity),
        "subject": {
            "kind": "tool",
            "name": subject.name,
            "server": subject.server_id,
            "shown_as": entry.name,
        },
        "effect": "deny" if overlay is not None else decision.effect,
        "policy_effect": decision.effect,
        "enforced": "deny"
        if overlay is not None
        else decision.enforced_effect(gateway.config.policy.dry_run),
        "rules": list(decision.rule_ids),
        "reason": decision.reason,
        "overlay": None if overlay is None else {**overlay.to_json(), "description": overlay.describe()},
        "annotations": None if effective is None else {**effective.hints(), "source": effective.source},
        "blocked_by_pin_drift": entry.name in served.blocked,
        "quarantined": entry.name in gateway.access.quarantined,
    }
    return report


async def policy_rules(gateway: Gateway) -> list[dict[str, Any]]:
    """Every rule of the policy files, in file order, with the file and line it is written at."""
    files = list(gateway.access.settings.files)
    return await anyio.to_thread.run_sync(_rules_in, files)  # reading files: off the loop


def _rules_in(files: list[str]) -> list[dict[str, Any]]:
    import yaml

    found: list[dict[str, Any]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                root = yaml.compose(handle, Loader=yaml.SafeLoader)
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            found.append({"file": path, "line": None, "problem": f"cannot be read now: {type(exc).__name__}"})
            continue
        rules = _child(root, "rules")
        if not isinstance(rules, yaml.SequenceNode):
            continue
        for index, node in enumerate(rules.value):
            data = yaml.safe_load(yaml.serialize(node)) if isinstance(node, yaml.MappingNode) else None
            rule = data if isinstance(data, dict) else {}
            found.append(
                {
                    "file": path,
                    "line": node.start_mark.line + 1,
                    "index": index,
                    "id": rule.get("id"),
                    "effect": rule.get("effect"),
                    "description": rule.get("description"),
                    "match": rule.get("match"),
                    "unless": rule.get("unless"),
                }
            )
    return found


def _child(node: Any, key: str) -> Any:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    return next((value for name, value in node.value if getattr(name, "value", None) == key), None)


def sessions(gateway: Gateway) -> list[dict[str, Any]]:
    """Open sessions on this replica, per identity; ids shortened to :data:`SHOWN_ID` characters."""
    now = time.monotonic()
    shown = []
    for session in list(gateway.sessions):
        info = session.client_info if isinstance(session.client_info, Mapping) else {}
        shown.append(
            {
                "id": session.id[:SHOWN_ID],
                "identity": _who(session.identity),
                "transport": session.transport,
                "endpoint": session.endpoint,
                "protocol_version": session.protocol_version,
                "client": {k: info.get(k) for k in ("name", "version") if isinstance(info.get(k), str)},
                "idle_seconds": round(max(0.0, now - session.last_seen), 1) if session.last_seen else None,
                "in_flight": len(session.in_flight),
            }
        )
    return shown


async def credentials(gateway: Gateway) -> list[dict[str, Any]]:
    """The per-identity credentials held: server, kind and whose; never a value."""
    store = gateway.credential_store
    if store is None:
        return []
    entries = await store.entries()
    return [
        {
            "server": e.server,
            "kind": e.kind,
            "holder": {"source": e.holder[0], "issuer": e.holder[1], "subject": e.holder[2]},
        }
        for e in entries
    ]


async def near_limit(gateway: Gateway, share: float = _NEAR) -> dict[str, Any]:
    """Rate-limit buckets (in memory, or in Redis when they are kept there: the first 1000 found)
    with at least ``share`` of their burst spent.

    Raises:
        ConnectionError: the Redis backend could not be asked.
    """
    limiter = gateway.limiter
    if limiter is None:
        return {"backend": None, "buckets": []}
    backend = gateway.config.rate_limits.backend
    buckets: list[dict[str, Any]] = []
    for key, until_full in await limiter.buckets(1000):
        rule = gateway.access.limit(key.split(":", 1)[0])
        if rule is None:
            continue
        spent = until_full / rule.rate.interval
        if spent >= share * rule.burst:
            shown = {"rule": rule.id, "bucket": key, "spent": round(spent, 2), "burst": rule.burst}
            buckets.append({**shown, "rate": str(rule.rate)})
    buckets.sort(key=lambda b: -float(b["spent"]) / float(b["burst"]))
    return {"backend": backend, "buckets": buckets[:200]}


def limit_refusals(gateway: Gateway) -> list[dict[str, Any]]:
    """The last refusals by a limit on this replica, newest first."""
    return [{"at": r.at, "limit": r.limit} for r in reversed(list(gateway.metrics.refusals))]
