"""The console's server pages: the overview (every server, its health and its recent calls as
a small chart), one server's detail (why it fails, its stderr tail), restart, and the reload
plan (validate a config, see what a reload would do, apply it).

Every value shown came from a server, a client or a file: it goes through
:func:`~proxy.console.markup.text`; server ids in links are URL-quoted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from proxy.console.backend import Answer, Backend
from proxy.console.markup import Html, definitions, form, link, sparkline, table, text, when
from proxy.console.shown import Build, Shown, after
from proxy.core.identity import Identity

_UP: Final = frozenset({"ready"})
_DOWN: Final = frozenset({"failing", "backoff"})

__all__ = ["drain", "overview_page", "reload_act", "reload_page", "restart", "server_page"]


def _state(value: object, *, drained: bool = False) -> Html:
    state = str(value or "unknown")
    kind = "up" if state in _UP else "down" if state in _DOWN else "other"
    held = " (drained: no new calls)" if drained else ""
    return Html(f'<span class="state-{kind}">{text(state)}</span>{text(held)}')


def _number(value: object, unit: str = "", digits: int = 1) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.{digits}f}{unit}"
    return "n/a"


def _server_link(server_id: object) -> Html:
    return Html(f'<a href="/admin/servers/{quote(str(server_id), safe="")}">{text(server_id)}</a>')


def _calls(server: Mapping[str, Any]) -> Mapping[str, Any]:
    calls = server.get("calls")
    return calls if isinstance(calls, Mapping) else {}


def _chart(server: Mapping[str, Any]) -> Html:
    calls = _calls(server)
    series = calls.get("series")
    values = [float(v) for v in series if isinstance(v, int | float)] if isinstance(series, Sequence) else []
    rate = _number(calls.get("per_second"), "/s", 2)
    return sparkline(values, label=f"calls to {server.get('id', '?')} over the last minute, now {rate}")


def _lists(server: Mapping[str, Any]) -> str:
    lists = server.get("lists")
    sizes = lists if isinstance(lists, Mapping) else {}
    return " / ".join(str(sizes.get(kind, 0)) for kind in ("tools", "prompts", "resources"))


def _row(server: Mapping[str, Any]) -> list[object]:
    calls = _calls(server)
    lists = _lists(server)
    return [
        _server_link(server.get("id", "?")),
        _state(server.get("state"), drained=bool(server.get("drained"))),
        "yes" if server.get("required") else "no",
        server.get("restarts", 0),
        lists,
        Html(f"{_chart(server)} {text(_number(calls.get('per_second'), '/s', 2))}"),
        _number(
            calls.get("error_rate", 0.0) * 100 if isinstance(calls.get("error_rate"), int | float) else None,
            "%",
        ),
        f"{_number(calls.get('p50_ms'), ' ms')} / {_number(calls.get('p99_ms'), ' ms')}",
        server.get("last_error") or "",
    ]


def _limits(limits: Answer) -> list[Html]:
    """Rate-limit buckets near their limit (this replica's memory) and the last refusals by a limit."""
    buckets = [
        [
            b.get("rule", ""),
            b.get("bucket", ""),
            f"{b.get('spent', '?')} of {b.get('burst', '?')}",
            b.get("rate", ""),
        ]
        for b in _items(limits.get("buckets"))
        if isinstance(b, Mapping)
    ]
    refusals = [
        [when(r.get("at")), r.get("limit", "")]
        for r in _items(limits.get("refusals"))[:50]
        if isinstance(r, Mapping)
    ]
    problem = limits.get("problem")
    return [
        Html('<h2 id="limits">Limits</h2>'),
        Html(f'<p class="status bad" id="buckets-problem">{text(problem)}</p>')
        if problem
        else table(
            "Rate-limit buckets near their limit",
            ["Rule", "Bucket", "Spent", "Rate"],
            buckets,
            empty="No rate-limit bucket is near its limit.",
        ),
        table(
            "Recent refusals by a limit, newest first",
            ["When", "Limit"],
            refusals,
            empty="No request was refused by a limit lately.",
        ),
    ]


def overview_page(grafana_url: str | None) -> Build:
    """The overview, linking to Grafana when its URL is configured."""

    async def build(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
        servers = await backend.servers()
        failing = [s for s in servers if str(s.get("state")) in _DOWN]
        headers = [
            "Server",
            "State",
            "Required",
            "Restarts",
            "Tools / prompts / resources",
            "Calls",
            "Errors",
            "p50 / p99",
            "Last error",
        ]
        body = [
            Html(
                f"<p>{len(servers)} servers, {len(failing)} failing. Calls are Manifold's own measurements "
                "over the last minute.</p>"
            ),
            table("Servers", headers, (_row(s) for s in servers), empty="No servers are configured."),
        ]
        body += _limits(await backend.limits())
        if grafana_url:
            body.append(Html(f"<p>Long-term metrics: {link(grafana_url, 'the Grafana dashboard')}.</p>"))
        return Shown("Overview", body, current="overview")

    return build


def _stderr(lines: object) -> Html:
    if not isinstance(lines, Sequence) or isinstance(lines, str) or not lines:
        return Html("<p>No stderr lines kept (not a stdio server, or it said nothing).</p>")
    shown = "\n".join(str(line) for line in lines)
    return Html(
        f'<h2 id="stderr">Stderr (last lines, redacted)</h2><pre tabindex="0" aria-labelledby="stderr">'
        f"{text(shown)}</pre>"
    )


async def server_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    server_id = query.get("server_id", "")
    server = await backend.server(server_id)
    if server is None:
        return Shown(
            "Server not found", [Html(f"<p>No server is configured as {text(server_id)}.</p>")], status=404
        )
    calls = _calls(server)
    facts = [
        ("State", _state(server.get("state"), drained=bool(server.get("drained")))),
        ("Required", "yes" if server.get("required") else "no"),
        ("Restarts", server.get("restarts", 0)),
        ("Tools / prompts / resources", _lists(server)),
        ("Calls in the last minute", Html(f"{_chart(server)} {text(calls.get('calls', 0))}")),
        (
            "Latency p50 / p99",
            f"{_number(calls.get('p50_ms'), ' ms')} / {_number(calls.get('p99_ms'), ' ms')}",
        ),
    ]
    body = [definitions(facts)]
    if server.get("last_error"):
        body.append(
            Html(f'<h2>Why it fails</h2><p class="status bad" id="reason">{text(server["last_error"])}</p>')
        )
    body.append(_stderr(server.get("stderr_tail")))
    here = f"/admin/servers/{quote(server_id, safe='')}"
    drained = bool(server.get("drained"))
    body.append(
        Html(
            '<h2>Act on every replica</h2><div class="actions">'
            + form(f"{here}/restart", csrf, "Restart this server", danger=True)
            + " "
            + form(
                f"{here}/drain",
                csrf,
                "Undrain: take new calls again" if drained else "Drain: no new calls, in-flight ones finish",
                [("on", "0" if drained else "1")],
                danger=not drained,
            )
            + "</div>"
        )
    )
    return Shown(f"Server {server_id}", body, current="overview")


async def restart(
    backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str
) -> Shown:
    answer = await backend.restart(fields.get("server_id", ""), by, address)
    return after(await server_page(backend, csrf, fields), answer)


async def drain(backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str) -> Shown:
    answer = await backend.drain(fields.get("server_id", ""), fields.get("on") != "0", by, address)
    return after(await server_page(backend, csrf, fields), answer)


_PLAN: Final = {
    "add": "server added",
    "remove": "server removed",
    "restart": "server restarted",
    "endpoints_added": "endpoint added",
    "endpoints_removed": "endpoint removed",
    "endpoints_changed": "endpoint changed",
    "needs_restart": "needs a process restart (not applied by a reload)",
    "held_back": "held back",
}


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _plan(plan: Answer) -> list[Html]:
    problems = plan.get("problems") or []
    if problems:
        items = "".join(f"<li>{text(p)}</li>" for p in problems)
        return [
            Html(
                f'<h2>Problems</h2><ul id="problems">{items}</ul>'
                "<p>This config cannot be applied until they are fixed.</p>"
            )
        ]
    rows = [[label, item] for key, label in _PLAN.items() for item in _items(plan.get(key))]
    return [table("Reload plan", ["What happens", "To"], rows, empty="Nothing would change.")]


def _reload_form(csrf: str, config_text: str) -> Html:
    return Html(
        '<form method="post" action="/admin/reload">'
        f'<input type="hidden" name="csrf" value="{text(csrf)}">'
        '<label for="config">A new config (YAML); leave empty to use the config file as it is now</label>'
        f'<textarea id="config" name="config" rows="14" cols="90">{text(config_text)}</textarea>'
        '<p><button type="submit" name="step" value="plan" class="primary" id="plan">'
        "Validate and show the plan</button> "
        '<button type="submit" name="step" value="apply" class="danger" id="apply">Apply</button></p>'
        "</form>"
    )


async def reload_page(backend: Backend, csrf: str, query: Mapping[str, str]) -> Shown:
    plan = await backend.reload_plan(None)
    body = [
        Html("<p>What a reload of the config file would do now:</p>"),
        *_plan(plan),
        _reload_form(csrf, ""),
    ]
    return Shown("Reload", body, current="reload")


async def reload_act(
    backend: Backend, csrf: str, fields: Mapping[str, str], by: Identity, address: str
) -> Shown:
    config_text = fields.get("config", "")
    given = config_text if config_text.strip() else None
    if fields.get("step") == "apply":
        answer = await backend.reload_apply(given, by, address)
        carried = answer.get("plan")
        body = [*_plan(carried if isinstance(carried, Mapping) else answer), _reload_form(csrf, config_text)]
        return after(Shown("Reload", body, "reload"), answer)
    plan = await backend.reload_plan(given)
    valid = not plan.get("problems")
    notice = (
        ("ok", "The config is valid: this is what applying it would do.")
        if valid
        else ("bad", "The config is not valid.")
    )
    return Shown(
        "Reload", [*_plan(plan), _reload_form(csrf, config_text)], "reload", notice, 200 if valid else 422
    )
