"""The commands that look inside a configured gateway: ``tools``, ``explain``, ``pins accept``.

Each starts every server (as ``serve`` would), answers from the live catalog and exits; but
``explain`` decides on a name the config alone resolves without starting any
(:mod:`proxy.offline_subjects`). Reports go to stdout, logs to stderr only.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import orjson

from proxy.app.gateway import Gateway
from proxy.config.model import Config
from proxy.config.policy_files import load_pins, save_pins
from proxy.core.errors import InvalidParams
from proxy.enforce.access import Access
from proxy.enforce.offline_subjects import Resolved, resolve
from proxy.openapi.tools import OPERATION_KEY
from proxy.policy import Identity, Subject, accept, compare
from proxy.protocol.uris import normalize_uri

__all__ = ["explain", "identity_from", "pins_accept", "tools"]


def identity_from(args: argparse.Namespace) -> Identity | None:
    """The identity named by ``--identity/--role/--source/--issuer``, or None when none was named."""
    if args.identity is None:
        return None
    return Identity(args.identity, frozenset(args.role or ()), args.source, issuer=args.issuer or "")


def _hints(annotations: dict[str, Any]) -> str:
    return ",".join(
        f"{k.removesuffix('Hint')}={str(v).lower()}" for k, v in annotations.items() if k.endswith("Hint")
    )


async def tools(config: Config, args: argparse.Namespace) -> int:
    """The merged catalog (as one identity sees it, with ``--identity``); exit 1 if a server is down."""
    identity = identity_from(args)
    async with Gateway(config).running() as gateway:
        served = gateway.catalogs.served
        entries = [
            e
            for e in served.catalog.entries
            if identity is None or gateway.access.tool_visible(served, e.name, identity)
        ]
        counts = Counter(entry.server_id for entry in served.catalog.entries)
        servers = {
            sid: {"state": conn.state.value, "reason": conn.reason, "tools": counts[sid]}
            for sid, conn in gateway.connections.shared.items()
        }
        rows: list[dict[str, Any]] = [
            {
                "name": e.name,
                "server": e.server_id,
                "original_name": e.original_name,
                "canonical_name": e.canonical,  # what the policy's globs see
                "annotations": dict(served.definitions[e.name].get("annotations") or {}),
                "annotations_source": served.effective[e.name].source,
                # An OpenAPI server's tool: the operation it calls (proxy.openapi.tools).
                "operation": (served.definitions[e.name].get("_meta") or {}).get(OPERATION_KEY),
                "blocked": e.name in served.blocked,
            }
            for e in entries
        ]
        collisions = list(served.catalog.collisions)
        skipped = list(served.catalog.invalid)
    if args.json:
        report = {
            "tools": rows,
            "servers": servers,
            "collisions": [
                {"name": c.name, "first": c.first, "second": c.second, "renamed_to": c.renamed_to}
                for c in collisions
            ],
            "skipped": [{"server": server, "reason": reason} for server, reason in skipped],
        }
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        table = [("NAME", "SERVER", "ORIGINAL NAME", "ANNOTATIONS")]
        for r in rows:
            note = f" ({r['annotations_source']})" + (" BLOCKED: pin drift" if r["blocked"] else "")
            if r["canonical_name"] != r["name"]:
                note += f" policy name: {r['canonical_name']}"
            if isinstance(r["operation"], str):
                note += f" operation: {r['operation'][:200]}"
            table.append((r["name"], r["server"], r["original_name"], _hints(r["annotations"]) + note))
        widths = [max(len(row[i]) for row in table) for i in range(3)]
        for row in table:
            print(
                "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
                + "  "
                + row[3]
            )
        print()
        for sid, state in servers.items():
            why = f" ({state['reason']})" if state["reason"] else ""
            print(f"server {sid}: {state['state']}{why}, {state['tools']} tools")
        for collision in collisions:
            print(f"collision: {collision.describe()}")
        for server, reason in skipped:
            print(f"skipped: server {server}: {reason}")
    return 1 if any(s["state"] != "ready" for s in servers.values()) else 0


async def explain(config: Config, args: argparse.Namespace) -> int:
    """Print the decision for one identity and one tool/prompt/resource/server log level, and the
    rules behind it. A name the config alone resolves (:mod:`proxy.offline_subjects`) is decided
    on without starting a server; any other (and every one with ``--live``) from the live catalog."""
    identity = identity_from(args)
    assert identity is not None
    report: dict[str, Any] = {
        "identity": identity.name,
        "roles": sorted(identity.roles),
        "source": identity.source,
        "issuer": identity.issuer,
    }
    kind = "tool" if args.tool else "prompt" if args.prompt else "server" if args.log_level_of else "resource"
    offline = None if args.live else _offline(config, args)
    subject: Subject | None
    shown_as: str | None
    if offline is not None:
        access = Access(config.policy, {s.id: s for s in config.enabled_servers()})
        access.load()
        subject, shown_as, name = offline.subject, offline.shown_as, offline.shown_as
        if offline.annotations is not None:
            report["annotations"] = {**offline.annotations.hints(), "source": offline.annotations.source}
        report["servers_started"] = False  # decided on the name: whether a server lists it is not checked
    else:
        async with Gateway(config).running() as gateway:
            access = gateway.access
            subject, shown_as, name = _live(gateway, args, report)
        report["servers_started"] = True
    if subject is None:
        print(f"manifold: no such {kind}: {name}", file=sys.stderr)
        return 1
    decision = access.decide(identity, subject)
    report |= {
        # name: the canonical name the policy matched; shown_as: what clients call it.
        "subject": {
            "kind": subject.kind,
            "name": subject.name,
            "server": subject.server_id,
            "shown_as": shown_as,
        },
        "effect": decision.effect,
        "enforced": decision.enforced_effect(config.policy.dry_run),
        "rules": list(decision.rule_ids),
        "reason": decision.reason,
    }
    if access.guard is not None and subject.kind != "log_level":
        # The guardrail rules that read what flows to and from it, per direction.
        report["guardrails"] = access.guard.inspector.engine.explain(
            identity, subject.server_id, subject.kind, subject.name
        )
        if shown_as is not None and (shown_as in access.quarantined or shown_as in access.held_keys):
            report["quarantined"] = True  # known from a live catalog only
    if decision.confirm is not None:  # allowed once a person approves: who, how long, remembered
        confirm = decision.confirm
        report["confirm"] = {
            "approver_roles": sorted(confirm.approver_roles),  # empty: the caller approves
            "timeout": confirm.timeout,
            "remember": confirm.remember,
            "remember_minutes": confirm.remember_minutes,
            "remember_any_arguments": confirm.remember_any_arguments,
            "reasons": list(confirm.reasons),
        }
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        target = f"{subject.kind} {subject.name} (server {subject.server_id})"
        if shown_as not in (None, subject.name):
            target += f", shown to clients as {shown_as}"
        print(f"{report['effect'].upper()}: {identity.name} -> {target}")
        print(f"  rules:  {', '.join(report['rules']) or '(none: the default applies)'}")
        print(f"  reason: {report['reason']}")
        if "annotations" in report:
            print(f"  effective annotations: {report['annotations']}")
        if "confirm" in report:
            roles = report["confirm"]["approver_roles"]
            print(f"  asks:   {'an approver with role ' + ' or '.join(roles) if roles else 'the caller'}")
        if report.get("quarantined"):
            print("  quarantined: a guardrail rule holds its definition (manifold pins accept)")
        for direction, applying in report.get("guardrails", {}).items():
            listed = ", ".join(f"{g['rule']} ({g['effect']}: {', '.join(g['detectors'])})" for g in applying)
            print(f"  guardrails on {direction}: {listed}")
        if report["enforced"] != report["effect"]:
            print("  dry_run is on: this is logged, not enforced")
        if not report["servers_started"]:
            print("  decided on the name from the config; no server was started (--live checks it is listed)")
    return {"allow": 0, "confirm": 4}.get(decision.effect, 3)


def _offline(config: Config, args: argparse.Namespace) -> Resolved | None:
    """The subject the config alone resolves the asked name to, if it does."""
    if args.tool is not None:
        return resolve(config, "tool", args.tool)
    if args.prompt is not None:
        return resolve(config, "prompt", args.prompt)
    if args.log_level_of is not None:
        return resolve(config, "log_level", args.log_level_of)
    return None  # a resource URI is routed by what the servers list


def _live(
    gateway: Gateway, args: argparse.Namespace, report: dict[str, Any]
) -> tuple[Subject | None, str | None, str]:
    """The subject, its shown name and the name asked, from the live catalog (tools: the
    annotations and pin state go into ``report``)."""
    subject: Subject | None = None
    shown_as: str | None = None
    if args.tool is not None:
        catalog = gateway.catalogs.served.catalog
        # The name a client is shown, or else the canonical name a policy is written against.
        entry = catalog.by_name.get(args.tool) or next(
            (e for e in catalog.entries if e.canonical == args.tool), None
        )
        if entry is not None:
            subject = gateway.catalogs.served.subject(entry.name)
            shown_as = entry.name
            effective = gateway.catalogs.served.effective[entry.name]
            report["annotations"] = {**effective.hints(), "source": effective.source}
            report["blocked_by_pin_drift"] = entry.name in gateway.catalogs.served.blocked
        return subject, shown_as, args.tool
    if args.log_level_of is not None:
        name = args.log_level_of
        return (Subject.log_level(name) if name in gateway.connections.shared else None), None, name
    if args.prompt is not None:
        prompts = gateway.catalogs.prompts
        prompt = prompts.by_name.get(args.prompt) or next(
            (e for e in prompts.entries if e.canonical == args.prompt), None
        )
        subject = Subject.prompt(prompt) if prompt is not None else None
        return subject, (prompt.name if prompt is not None else None), args.prompt
    # Decided on as a client's read is: normalized (a malformed URI is no resource).
    try:
        name = normalize_uri(args.resource)
    except InvalidParams:
        return None, args.resource, args.resource
    server = gateway.catalogs.resources.route(name)
    return (Subject.resource(name, server) if server is not None else None), name, name


async def pins_accept(config: Config, args: argparse.Namespace) -> int:
    """Accept drifted tool definitions (all, or those named) into the pins file, and definitions
    a guardrail rule quarantined (they are kept there as ``quarantine:<server>/<tool>``)."""
    settings = config.policy.pins
    async with Gateway(config).running() as gateway:
        entries = gateway.catalogs.tools.entries
        held = {**gateway.access.held_keys, **gateway.access.quarantined}  # prompts, resources; tools
        quarantined = {name: key for name, key in held.items() if not args.tool or name in args.tool}
    pins = load_pins(settings.path)
    drifts = []
    if settings.mode != "off":
        drifts = [d for d in compare(pins, entries) if not args.tool or d.name in args.tool]
    elif not quarantined:
        print("manifold: pins are off (policy.pins.mode: off); nothing to accept", file=sys.stderr)
        return 2
    if not drifts and not quarantined:
        print("no pin drift or quarantined tool to accept")
        return 0
    pins = accept(pins, drifts)
    pins.update(dict(quarantined.values()))
    save_pins(settings.path, pins)
    for drift in drifts:
        where = f"{drift.server}/{drift.original_name}"
        print(f"accepted: {drift.name} ({where}) now pinned at {drift.new_hash[:19]}…")
    for name, (key, digest) in sorted(quarantined.items()):
        print(f"accepted out of quarantine: {name} ({key.removeprefix('quarantine:')}) at {digest[:19]}…")
    print("a running Manifold picks this up on SIGHUP or restart")
    return 0
