"""The console's access pages: the catalog "view as" a role set or identity, the policy (rules
with file and line, the overlays in force) with ``explain``, and switching a tool off (for
everyone or one role, for a while) and on again.

Tool names, descriptions and annotations come from servers; role and identity names from the
viewer's query. All of it is shown through :func:`~proxy.console.markup.text`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from proxy.console.backend import Answer, Backend
from proxy.console.markup import Html, form, table, text, when
from proxy.console.shown import Shown, after
from proxy.core.identity import Identity

__all__ = ["catalog_page", "policy_page", "tool_off", "tool_on"]

_MAX_ROLES: Final = 32
_MAX_MINUTES: Final = 7 * 24 * 60


def _roles(value: str) -> list[str]:
    """``"a, b c"`` -> ``["a", "b", "c"]`` (bounded)."""
    return [r for r in value.replace(",", " ").split() if r][:_MAX_ROLES]


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, str | bytes) else []


def _annotations(value: object) -> str:
    if not isinstance(value, Mapping) or not value:
        return ""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()


def _tool_row(tool: Mapping[str, Any]) -> list[object]:
    original = tool.get("original_name") or ""
    named = f"{original} (renamed)" if tool.get("renamed") else original
    off = tool.get("switched_off")
    return [
        tool.get("name", ""),
        tool.get("description") or "",
        _annotations(tool.get("annotations")),
        tool.get("server") or "",
        named,
        off if isinstance(off, str) else ("yes" if off else ""),
    ]


def _view_as_form(roles: str, name: str) -> Html:
    return Html(
        '<form method="get" action="/admin/catalog" class="filters">'
        f'<div><label for="roles">Roles (space or comma separated)</label>'
        f'<input id="roles" name="roles" value="{text(roles)}"></div>'
        f'<div><label for="identity">Identity name (optional)</label>'
        f'<input id="identity" name="identity" value="{text(name)}"></div>'
        '<div><button type="submit" class="primary" id="view-as">View as</button></div></form>'
    )


async def catalog_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    roles, name = query.get("roles", ""), query.get("identity", "")
    body = [
        Html(
            "<p>What a client holding these roles is shown, with where each name and annotation "
            "came from.</p>"
        ),
        _view_as_form(roles, name),
    ]
    if "roles" in query or "identity" in query:
        seen = await backend.catalog(_roles(roles), name)
        tools = [_tool_row(t) for t in _list(seen.get("tools")) if isinstance(t, Mapping)]
        who = f"{name or 'anyone'} with roles {', '.join(_roles(roles)) or '(none)'}"
        headers = ["Tool", "Description", "Annotations", "Server", "Named by the server", "Switched off"]
        body.append(table(f"Tools {who} sees", headers, tools, empty=f"{who} sees no tools."))
        prompts = [
            [p.get("name", ""), p.get("description", "")]
            for p in _list(seen.get("prompts"))
            if isinstance(p, Mapping)
        ]
        body.append(table(f"Prompts {who} sees", ["Prompt", "Description"], prompts, empty="No prompts."))
        resources = seen.get("resources")
        count = len(resources) if isinstance(resources, Sequence) else resources
        body.append(Html(f'<p id="resources">Resources {text(who)} sees: {text(count)}.</p>'))
    return Shown("Catalog", body, current="catalog")


def _explain_form(name: str, roles: str, who: str) -> Html:
    return Html(
        '<form method="get" action="/admin/policy" class="filters">'
        f'<div><label for="explain">Tool, prompt or resource</label>'
        f'<input id="explain" name="explain" value="{text(name)}" required></div>'
        f'<div><label for="explain-roles">As roles</label><input id="explain-roles" name="roles" '
        f'value="{text(roles)}"></div>'
        f'<div><label for="explain-who">As identity</label><input id="explain-who" name="identity" '
        f'value="{text(who)}"></div>'
        '<div><button type="submit" class="primary" id="explain-button">Explain</button></div></form>'
    )


def _switch_form(csrf: str) -> Html:
    return Html(
        '<form method="post" action="/admin/tools/off" class="filters">'
        f'<input type="hidden" name="csrf" value="{text(csrf)}">'
        '<div><label for="off-tool">Tool (namespaced name)</label>'
        '<input id="off-tool" name="tool" required></div>'
        '<div><label for="off-role">Only for role (empty: everyone)</label>'
        '<input id="off-role" name="role"></div>'
        '<div><label for="off-reason">Why (shown in explain and the audit)</label>'
        '<input id="off-reason" name="reason" maxlength="500"></div>'
        '<div><label for="off-minutes">For minutes</label>'
        f'<input id="off-minutes" name="minutes" type="number" min="1" max="{_MAX_MINUTES}" value="60"></div>'
        '<div><button type="submit" class="danger" id="switch-off">Switch off</button></div></form>'
    )


def _explained(answer: Answer | None, name: str) -> Html:
    if answer is None:
        return Html(
            f'<p class="status bad" id="explained">No tool is named {text(name)} in the live catalog.</p>'
        )
    rules = ", ".join(str(r) for r in _list(answer.get("rules"))) or "none"
    overlay = answer.get("overlay")
    switched = ""
    if isinstance(overlay, Mapping):
        switched = f"<p>Switched off by an overlay: {text(overlay.get('description', ''))}</p>"
    return Html(
        '<section aria-labelledby="explained">'
        f'<h2 id="explained">Decision: {text(answer.get("effect", "?"))}</h2>'
        f"<p>The policy alone says {text(answer.get('policy_effect', answer.get('effect', '?')))}; "
        f"rules: {text(rules)}.</p><p>{text(answer.get('reason') or '')}</p>{switched}</section>"
    )


async def policy_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    policy = await backend.policy()
    name, roles, who = query.get("explain", ""), query.get("roles", ""), query.get("identity", "")
    body: list[Html] = [_explain_form(name, roles, who)]
    if name:
        body.append(_explained(await backend.explain(name, _roles(roles), who), name))
    rules = [
        [
            r.get("id", ""),
            r.get("effect", ""),
            r.get("description", ""),
            f"{r.get('file', '')}:{r.get('line', '')}",
        ]
        for r in _list(policy.get("rules"))
        if isinstance(r, Mapping)
    ]
    body.append(table("Rules", ["Rule", "Effect", "Description", "Where"], rules, empty="No policy rules."))
    overlays = [
        [
            o.get("tool", ""),
            o.get("role") or "everyone",
            when(o.get("until")),
            o.get("by", ""),
            form(
                "/admin/tools/on",
                csrf,
                "Switch on",
                [("tool", o.get("tool", "")), ("role", o.get("role") or "")],
                label=f"Switch {o.get('tool', '')} on",
            ),
        ]
        for o in _list(policy.get("overlays"))
        if isinstance(o, Mapping)
    ]
    body.append(Html('<h2 id="overlays">Tools switched off</h2>'))
    body.append(
        table(
            "Tools switched off",
            ["Tool", "For", "Until", "By", ""],
            overlays,
            empty="No tool is switched off.",
        )
    )
    body.append(_switch_form(csrf))
    return Shown("Policy", body, current="policy")


def _minutes(value: str) -> float | None:
    try:
        minutes = float(value)
    except ValueError:
        return None
    return minutes if 0 < minutes <= _MAX_MINUTES else None


async def tool_off(
    backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str
) -> Shown:
    tool, role = fields.get("tool", "").strip(), fields.get("role", "").strip() or None
    minutes = _minutes(fields.get("minutes", ""))
    if not tool or minutes is None:
        notice = ("bad", f"Name a tool and a number of minutes from 1 to {_MAX_MINUTES}.")
        shown = await policy_page(backend, csrf, {})
        return Shown(shown.title, shown.body, shown.current, notice, 400)
    reason = fields.get("reason", "").strip()[:500]
    answer = await backend.tool_off(tool, role, minutes, reason, by, address)
    shown = await policy_page(backend, csrf, {})
    return after(shown, answer)


async def tool_on(
    backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str
) -> Shown:
    answer = await backend.tool_on(
        fields.get("tool", "").strip(), fields.get("role", "").strip() or None, by, address
    )
    shown = await policy_page(backend, csrf, {})
    return after(shown, answer)
