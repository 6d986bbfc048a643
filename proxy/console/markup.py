"""The console's HTML, built from untrusted text. Pure: values in, a string out.

Everything shown on a console page came from somebody else: tool names, descriptions and
annotations from servers, stderr lines from server processes, identities and arguments from
clients, audit fields from both. So every value goes through :func:`text` (HTML-escaped, quotes
included, so it is safe in an attribute too), and a URL becomes a link only through
:func:`link`, which takes ``http`` and ``https`` and nothing else (``javascript:``, ``data:``
and the rest are shown as text). Markup the console writes itself is the only markup there is.

The pages load one stylesheet from the console itself and no script
(:data:`CONSOLE_HEADERS`' Content-Security-Policy has no ``script-src`` at all): a value that
got past the escaping still could not run.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "CONSOLE_HEADERS",
    "STYLESHEET",
    "Html",
    "definitions",
    "form",
    "link",
    "page",
    "sparkline",
    "table",
    "text",
    "when",
    "who",
]

CONSOLE_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # not no-referrer: a form post would carry "Origin: null"
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}

# Contrast: every text colour on its background is at least 4.5:1 (WCAG AA).
STYLESHEET: Final = """\
body{font:15px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
a{color:#0550ae}a:focus-visible,button:focus-visible,input:focus-visible,select:focus-visible,
textarea:focus-visible{
outline:3px solid #1f6feb;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:.5rem;background:#fff;padding:.25rem}
header{background:#1b1f24;color:#fff;padding:.5rem 1.5rem;display:flex;gap:1.5rem;align-items:center;
flex-wrap:wrap}header a{color:#fff}header nav ul{list-style:none;display:flex;gap:1rem;margin:0;
padding:0;flex-wrap:wrap}header [aria-current=page]{font-weight:700;text-decoration-thickness:3px}
header form{margin-left:auto}header button{padding:.2rem .8rem}
main{max-width:72rem;margin:1.5rem auto;padding:1rem 2rem;overflow-x:auto;background:#fff;border-radius:8px;
box-shadow:0 1px 3px #0002}
h1{font-size:1.5rem;margin-top:0}table{border-collapse:collapse;width:100%;margin:1rem 0}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #d0d7de;vertical-align:top;
word-break:break-word}th{background:#f0f2f5;word-break:normal}
pre{background:#f0f2f5;padding:.75rem;border-radius:6px;white-space:pre-wrap;word-break:break-word;
max-height:24rem;overflow:auto}
label{display:block;font-weight:600;margin:.75rem 0 .25rem}
input,select,textarea{font:inherit;padding:.4rem;border:1px solid #6e7781;border-radius:6px}
form.inline{display:inline}form.filters{display:flex;gap:1rem;flex-wrap:wrap;align-items:end}
button{font:inherit;padding:.4rem 1rem;border-radius:6px;border:1px solid #1b1f24;background:#fff;
color:#1b1f24;cursor:pointer}button.danger{background:#a40e26;color:#fff;border-color:#a40e26}
button.primary{background:#0550ae;color:#fff;border-color:#0550ae}
.status{padding:.6rem;border-radius:6px;background:#fff8c5;border:1px solid #9a6700}
.status.ok{background:#dafbe1;border-color:#1a7f37}.status.bad{background:#ffebe9;border-color:#a40e26}
.state-up{color:#116329;font-weight:600}.state-down{color:#a40e26;font-weight:600}
.state-other{color:#7d4e00;font-weight:600}
.state-up,.state-down,.state-other,svg.spark{white-space:nowrap}td:has(svg.spark){min-width:9rem}
dl{display:grid;grid-template-columns:max-content auto;gap:.25rem 1.5rem}dd{margin:0}
svg.spark{vertical-align:middle}.actions{display:flex;gap:1rem;flex-wrap:wrap}
"""

_NAV: Final = (
    ("overview", "Overview", ""),
    ("catalog", "Catalog", "catalog"),
    ("policy", "Policy", "policy"),
    ("sessions", "Sessions", "sessions"),
    ("approvals", "Approvals", "approvals"),
    ("credentials", "Credentials", "credentials"),
    ("audit", "Audit", "audit"),
    ("reload", "Reload", "reload"),
)


class Html(str):
    """Markup the console wrote itself (and escaped what it holds): passed through as is."""

    __slots__ = ()


def text(value: object) -> Html:
    """``value`` as text in HTML (escaped, quotes too); markup already built passes unchanged."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def when(value: object) -> str:
    """Seconds since the epoch as a UTC time; any other value (an ISO time already) as it is."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11:
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def who(value: object) -> str:
    """An identity as the service layer gives it (``{name, roles, source}``, or a credential's
    holder ``{source, issuer, subject}``) as one line of plain text (escaped where shown)."""
    if not isinstance(value, Mapping):
        return "" if value is None else str(value)
    name = value.get("name") or value.get("subject") or "?"
    roles = value.get("roles")
    shown = str(name)
    if value.get("issuer"):
        shown += f" (issuer {value['issuer']})"
    if isinstance(roles, Sequence) and not isinstance(roles, str) and roles:
        shown += f" [{', '.join(str(r) for r in roles)}]"
    return shown


def link(url: object, label: object | None = None) -> Html:
    """A link to ``url`` when it is ``http(s)`` with a host; any other URL is shown as text."""
    shown = text(url if label is None else label)
    if not isinstance(url, str) or any(c in url for c in "\x00\r\n\t"):
        return shown
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return shown
    return Html(f'<a href="{text(url.strip())}" rel="noopener noreferrer">{shown}</a>')


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[object]], *, empty: str) -> Html:
    """A table with a caption (what it lists) and column headers; ``empty`` when no rows."""
    body = "".join("<tr>" + "".join(f"<td>{text(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return Html(f'<p class="empty">{text(empty)}</p>')
    head = "".join(f'<th scope="col">{text(h)}</th>' for h in headers)
    return Html(
        f"<table><caption>{text(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def definitions(pairs: Iterable[tuple[str, object]]) -> Html:
    """A ``<dl>`` of label/value pairs."""
    return Html("<dl>" + "".join(f"<dt>{text(k)}</dt><dd>{text(v)}</dd>" for k, v in pairs) + "</dl>")


def form(
    action: str,
    csrf: str,
    button: str,
    fields: Iterable[tuple[str, object]] = (),
    *,
    danger: bool = False,
    inline: bool = True,
    label: str = "",
) -> Html:
    """A POST form to ``action`` (a console path) with the session's CSRF token, hidden
    ``fields`` and one submit button; ``label`` names the button for assistive technology
    when the same button text repeats down a table."""
    hidden = "".join(f'<input type="hidden" name="{text(k)}" value="{text(v)}">' for k, v in fields)
    kind = "danger" if danger else "primary"
    aria = f' aria-label="{text(label)}"' if label else ""
    return Html(
        f'<form method="post" action="{text(action)}"{" class=inline" if inline else ""}>'
        f'<input type="hidden" name="csrf" value="{text(csrf)}">{hidden}'
        f'<button type="submit" class="{kind}"{aria}>{text(button)}</button></form>'
    )


def sparkline(values: Sequence[float], *, label: str, width: int = 120, height: int = 28) -> Html:
    """A small inline SVG line of ``values`` (oldest first), scaled to its own maximum;
    ``label`` is its accessible name (what it shows, with the latest value)."""
    points = [max(0.0, float(v)) for v in values if v == v]  # NaN dropped
    top = max(points, default=0.0) or 1.0
    if len(points) < 2:
        points = [points[0] if points else 0.0] * 2
    step = width / (len(points) - 1)
    line = " ".join(
        f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(points)
    )
    return Html(
        f'<svg class="spark" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{text(label)}"><title>{text(label)}</title>'
        f'<polyline fill="none" stroke="#0550ae" stroke-width="1.5" points="{line}"/></svg>'
    )


def page(
    title: str,
    body: Iterable[str],
    *,
    current: str = "",
    who: str = "",
    csrf: str = "",
    notice: tuple[str, str] | None = None,
) -> str:
    """A whole console page: the header (navigation, who is signed in, sign-out), ``notice``
    (``(kind, message)``: kind ``ok`` or ``bad``) and ``body`` (markup built here)."""
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<title>{text(title)} · Manifold console</title><link rel="stylesheet" href="/admin/console.css">',
        '</head><body><a class="skip" href="#main">Skip to content</a><header>',
        '<strong><a href="/admin/">Manifold console</a></strong>',
    ]
    if who:
        items = "".join(
            f'<li><a href="/admin/{path}"{" aria-current=page" if key == current else ""}>{name}</a></li>'
            for key, name, path in _NAV
        )
        parts.append(f'<nav aria-label="Console"><ul>{items}</ul></nav>')
        parts.append(f'<span id="who">Signed in as {text(who)}</span>')
        parts.append(form("/admin/signout", csrf, "Sign out"))
    parts.append(f'</header><main id="main"><h1>{text(title)}</h1>')
    if notice is not None:
        kind, message = notice
        role = "alert" if kind == "bad" else "status"
        parts.append(f'<p class="status {text(kind)}" role="{role}" id="notice">{text(message)}</p>')
    parts.extend(text(part) for part in body)
    parts.append("</main></body></html>")
    return "".join(parts)
