"""The console's markup: every value is text, a URL is a link only when it is http(s), and the
page itself loads nothing but its own stylesheet."""

from __future__ import annotations

import re

import pytest

from proxy.console.markup import (
    CONSOLE_HEADERS,
    Html,
    definitions,
    form,
    link,
    page,
    sparkline,
    table,
    text,
    when,
    who,
)

HOSTILE = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>&"


def test_text_escapes_markup_and_both_quotes() -> None:
    shown = text(HOSTILE)
    assert "<" not in shown
    assert ">" not in shown
    assert '"' not in shown
    assert "'" not in shown
    assert "&amp;" in shown


def test_markup_built_here_passes_through_and_nothing_else_does() -> None:
    assert text(Html("<b>x</b>")) == "<b>x</b>"
    assert text("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
    assert text(None) == ""


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:x",
        "//evil.example/x",
        "/relative",
        "http:no-host",
        "https://ok.example/\nx",
    ],
)
def test_a_url_that_is_not_http_or_https_with_a_host_is_shown_as_text(url: str) -> None:
    shown = link(url)
    assert "<a" not in shown
    assert "<script>" not in shown


def test_an_http_url_is_a_link_with_its_quotes_escaped() -> None:
    shown = link('https://grafana.example/d/x?a="b"&c=<d>', "dashboard")
    assert shown.startswith('<a href="https://grafana.example/d/x?a=&quot;b&quot;&amp;c=&lt;d&gt;"')
    assert 'rel="noopener noreferrer"' in shown
    assert ">dashboard</a>" in shown


def test_tables_and_definitions_escape_every_cell_but_markup_built_here() -> None:
    shown = table("c", ["<h>"], [[HOSTILE], [Html("<em>ok</em>")]], empty="none")
    assert "<script>" not in shown
    assert "<img" not in shown
    assert "&lt;h&gt;" in shown
    assert "<em>ok</em>" in shown
    assert table("c", ["h"], [], empty="<none>") == '<p class="empty">&lt;none&gt;</p>'
    assert "<script>" not in definitions([(HOSTILE, HOSTILE)])


def test_a_form_carries_the_csrf_token_and_escapes_its_fields() -> None:
    shown = form("/admin/x", 'tok"en', "Go", [("session", HOSTILE)], label=HOSTILE)
    assert 'name="csrf" value="tok&quot;en"' in shown
    assert "<script>" not in shown
    assert "<img" not in shown
    assert shown.count("<form") == 1
    assert 'method="post"' in shown


def test_a_sparkline_is_an_svg_with_a_name_and_survives_odd_series() -> None:
    for values in ([], [3.0], [0.0, 0.0], [1.0, float("nan"), -5.0, 4.0]):
        shown = sparkline(values, label=HOSTILE)
        assert shown.startswith("<svg")
        assert "<title>" in shown
        assert "<script>" not in shown
        points = re.search(r'points="([^"]*)"', shown)
        assert points is not None
        assert "nan" not in points[1]


def test_a_time_reads_in_utc_and_anything_else_as_it_is() -> None:
    assert when(1_700_000_000.0) == "2023-11-14 22:13:20 UTC"
    assert when("2026-11-27T15:00:00+00:00") == "2026-11-27T15:00:00+00:00"
    assert when(None) == ""
    assert when(float("inf")) == "inf"
    assert when(True) == "True"


def test_an_identity_reads_as_name_roles_and_issuer() -> None:
    assert who({"name": "ann", "roles": ["admin", "ops"], "source": "api_key"}) == "ann [admin, ops]"
    assert who({"source": "jwt", "issuer": "https://idp", "subject": "u1"}) == "u1 (issuer https://idp)"
    assert who(None) == ""


def test_a_page_escapes_its_title_and_notice_and_loads_only_its_stylesheet() -> None:
    shown = page(HOSTILE, ["<b>plain text body</b>"], who=HOSTILE, csrf="c", notice=("bad", HOSTILE))
    assert "<script>" not in shown
    assert "<img" not in shown
    assert "&lt;b&gt;plain text body" in shown  # a plain string in the body is text, not markup
    assert re.findall(r'(?:src|href)="([^"#]*)"', shown) == [
        "/admin/console.css",
        "/admin/",
        "/admin/",
        "/admin/catalog",
        "/admin/policy",
        "/admin/sessions",
        "/admin/approvals",
        "/admin/credentials",
        "/admin/audit",
        "/admin/reload",
    ]
    assert 'role="alert"' in shown
    assert 'lang="en"' in shown


def test_the_headers_allow_no_script_and_no_framing() -> None:
    policy = CONSOLE_HEADERS["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy
    assert "frame-ancestors 'none'" in policy
    assert CONSOLE_HEADERS["x-frame-options"] == "DENY"
    assert CONSOLE_HEADERS["x-content-type-options"] == "nosniff"


def _luminance(colour: str) -> float:
    digits = colour.lstrip("#")
    if len(digits) == 3:
        digits = "".join(c * 2 for c in digits)
    channels = [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    high, low = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_every_text_colour_has_at_least_aa_contrast_on_its_background() -> None:
    """WCAG AA (4.5:1) for each rule's text colour, on its own background or else on the
    lightest and darkest the page has under it (white main, the grey table headers)."""
    from proxy.console.markup import STYLESHEET

    rules = re.findall(r"([^{}]+)\{([^}]*)\}", STYLESHEET)
    checked = 0
    for selector, body in rules:
        colour = re.search(r"(?<![-\w])color:(#[0-9a-fA-F]{3,6})", body)
        if colour is None:
            continue
        background = re.search(r"background:(#[0-9a-fA-F]{3,6})", body)
        grounds = [background[1]] if background else ["#ffffff", "#f0f2f5"]
        if selector.strip().startswith("header"):
            grounds = [background[1]] if background else ["#1b1f24"]
        for ground in grounds:
            assert _contrast(colour[1], ground) >= 4.5, (selector.strip(), colour[1], ground)
            checked += 1
    assert checked >= 8
