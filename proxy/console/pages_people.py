"""The console's pages about who is connected and what they did: open sessions (and ending
one), approvals (linking each to its approval page), credentials held (and revoking one), and
the audit trail with filters.

Identities, tool names, arguments and audit fields come from clients and servers: every one is
shown through :func:`~proxy.console.markup.text`, and a URL is a link only when it is
``http(s)`` (:func:`~proxy.console.markup.link`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from proxy.console.backend import Backend
from proxy.console.markup import Html, form, link, table, text, when, who
from proxy.console.shown import Shown, after
from proxy.core.identity import Identity

__all__ = ["approvals_page", "audit_page", "credentials_page", "end_session", "revoke", "sessions_page"]

AUDIT_FILTERS: Final = ("identity", "tool", "outcome", "since")


def _idle(value: object) -> str:
    return f"{value} s" if isinstance(value, int | float) and not isinstance(value, bool) else ""


async def sessions_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    rows = [
        [
            s.get("id", ""),
            who(s.get("identity")),
            f"{s.get('transport', '')} {s.get('endpoint') or ''}".strip(),
            _idle(s.get("idle_seconds")),
            s.get("replica", ""),
            form(
                "/admin/sessions/end",
                csrf,
                "End",
                [("session", s.get("id", ""))],
                danger=True,
                label=f"End session {s.get('id', '')} of {who(s.get('identity'))}",
            ),
        ]
        for s in await backend.sessions()
    ]
    headers = ["Session", "Identity", "Transport", "Idle", "Replica", ""]
    return Shown("Sessions", [table("Open sessions", headers, rows, empty="No session is open.")], "sessions")


async def end_session(
    backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str
) -> Shown:
    answer = await backend.end_session(fields.get("session", ""), by, address)
    return after(await sessions_page(backend, csrf, {}), answer)


def _approval_link(approval: Mapping[str, Any]) -> Html:
    """The approval's own link when it is http(s) (``policy.approvals_url``), else its page here."""
    linked = link(approval.get("link"), "open the approval page")
    if linked.startswith("<a "):
        return linked
    approval_id = str(approval.get("id", ""))
    return Html(f'<a href="/approvals/{quote(approval_id, safe="")}">open the approval page</a>')


async def approvals_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    rows = [
        [
            a.get("id", ""),
            a.get("tool", ""),
            who(a.get("caller")),
            a.get("state", ""),
            when(a.get("deadline")),
            _approval_link(a),
        ]
        for a in await backend.approvals()
    ]
    body = [
        Html(
            "<p>Calls waiting for an approver, and calls parked until their caller comes back. "
            "Approving happens on each call's own approval page, as the approver.</p>"
        ),
        table(
            "Approvals",
            ["Approval", "Tool", "Caller", "State", "Answer needed by", ""],
            rows,
            empty="Nothing is waiting for approval.",
        ),
    ]
    return Shown("Approvals", body, "approvals")


_HOLDER: Final = ("source", "issuer", "subject")


def _credential_row(credential: Mapping[str, Any], csrf: str) -> list[object]:
    holder = credential.get("holder")
    held = holder if isinstance(holder, Mapping) else {}
    server, kind = credential.get("server", ""), credential.get("kind", "")
    fields = [("server", server), ("kind", kind), *((part, held.get(part, "")) for part in _HOLDER)]
    label = f"Revoke the {kind} credential of {who(held)} for {server}"
    return [
        server,
        kind,
        who(held),
        form("/admin/credentials/revoke", csrf, "Revoke", fields, danger=True, label=label),
    ]


async def credentials_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    rows = [_credential_row(c, csrf) for c in await backend.credentials()]
    body = [
        Html("<p>Credentials Manifold holds to reach servers on someone's behalf (never their values).</p>"),
        table("Credentials held", ["Server", "Kind", "Held for", ""], rows, empty="No credential is held."),
    ]
    return Shown("Credentials", body, "credentials")


async def revoke(backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str) -> Shown:
    holder = {part: fields.get(part, "") for part in _HOLDER}
    answer = await backend.revoke(fields.get("server", ""), fields.get("kind", ""), holder, by, address)
    return after(await credentials_page(backend, csrf, {}), answer)


def _audit_form(filters: Mapping[str, str]) -> Html:
    hint = {"since": ' placeholder="e.g. 1h, 15m"'}
    fields = "".join(
        f'<div><label for="audit-{name}">{name.capitalize()}</label>'
        f'<input id="audit-{name}" name="{name}" value="{text(filters.get(name, ""))}"'
        f"{hint.get(name, '')}></div>"
        for name in AUDIT_FILTERS
    )
    return Html(
        f'<form method="get" action="/admin/audit" class="filters">{fields}'
        '<div><button type="submit" class="primary" id="filter">Filter</button></div></form>'
    )


def _audit_row(entry: Mapping[str, Any]) -> list[object]:
    action = entry.get("action")
    what = f"{action} {entry.get('target', '')}" if action else entry.get("name", "")
    rules = entry.get("rules")
    shown_rules = ", ".join(str(r) for r in rules) if isinstance(rules, list) else (rules or "")
    return [
        when(entry.get("ts")),
        entry.get("identity", ""),
        what,
        entry.get("outcome", ""),
        shown_rules,
        entry.get("reason", ""),
        entry.get("from", ""),
    ]


async def audit_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    filters = {k: v for k, v in query.items() if k in AUDIT_FILTERS and v}
    entries = await backend.audit(filters)
    rows = [_audit_row(e) for e in entries]
    headers = ["When", "Identity", "Tool or action", "Outcome", "Rules", "Reason", "From"]
    body = [
        _audit_form(filters),
        table("Audit entries, newest first", headers, rows, empty="No audit entry matches."),
    ]
    return Shown("Audit", body, "audit")
