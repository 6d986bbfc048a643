"""Credentials out of text: URLs anywhere, configured values verbatim, linear on any input."""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Iterator

import pytest

from proxy.config.loading import config_from_mapping
from proxy.core.errors import ConfigError, ServerProtocolError, ServerUnavailable
from proxy.core.redaction import (
    REDACTED,
    redact_text,
    redact_url,
    remember_key_digests,
    remember_secrets,
    url_secrets,
)
from proxy.observe.logs import JsonFormatter, RedactingFilter

R = REDACTED


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    yield
    remember_secrets(())
    remember_key_digests(())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://alice:pw@h.example:8443/mcp", f"https://{R}@h.example:8443/mcp"),
        ("https://ghp_token@h.example/mcp", f"https://{R}@h.example/mcp"),
        ("https://u:p@ss@h/x", f"https://{R}@h/x"),  # an unencoded @ in the password
        ("http://h/mcp?access_token=t&page=2&flag", f"http://h/mcp?access_token={R}&page={R}&{R}"),
        ("http://h/cb#access_token=t", f"http://h/cb#{R}"),
        ("http://h/a?b=1#", f"http://h/a?b={R}#"),
        ("http://h:9/mcp", "http://h:9/mcp"),
        ("redis://:pw@redis:6379/0", f"redis://{R}@redis:6379/0"),
        ("http://h/users/@me", "http://h/users/@me"),  # an @ in the path is no userinfo
        ("not a url", "not a url"),
    ],
)
def test_a_url_keeps_its_scheme_host_port_path_and_parameter_names_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "POST http://alice:s3cret@127.0.0.1:9/mcp?access_token=t0k&sig=abc failed: ClientConnectorError",
            f"POST http://{R}@127.0.0.1:9/mcp?access_token={R}&sig={R} failed: ClientConnectorError",
        ),
        ("url=URL('https://u:p@h/x?code=1')", f"url=URL('https://{R}@h/x?code={R}')"),
        ('{"url":"https://h/x?k=v"}', f'{{"url":"https://h/x?k={R}"}}'),
        ("GET /x?access_token=abc&y=1", f"GET /x?access_token={R}&y=1"),  # no scheme: by name only
        ("endpoint http://h/messages?session_id=42", f"endpoint http://h/messages?session_id={R}"),
        ("GET https://h/sse?k=v: too big", f"GET https://h/sse?k={R}: too big"),
        ("(see http://u:p@h/x).", f"(see http://{R}@h/x)."),
    ],
)
def test_urls_anywhere_in_a_text_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_redacting_twice_changes_nothing_more() -> None:
    once = redact_text("GET http://u:p@h/x?access_token=t token=abc Bearer xyz")
    assert redact_text(once) == once


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "text",
    [
        "a" * 300_000,
        "a:" * 150_000,
        "http:/" * 50_000,
        "a://" * 75_000,
        "x://@" * 60_000,
        "?&=" * 100_000,
        "a://" + "." * 300_000,
        "a://." * 60_000,
        "a://:" * 60_000 + " ",
    ],
)
def test_url_redaction_stays_linear_on_adversarial_text(text: str) -> None:
    redact_text(text)  # a quadratic pattern takes minutes here


def test_remembered_secrets_are_redacted_verbatim_anywhere_but_short_ones_are_not() -> None:
    remember_secrets(["hdr-value-123456", "abc", "/srv/token-dir"])
    text = "server echoed hdr-value-123456 from /srv/token-dir; abc stays"
    assert redact_text(text) == f"server echoed {R} from {R}; abc stays"


def test_a_configured_urls_secrets_are_its_userinfo_password_and_query_values_decoded_too() -> None:
    secrets = url_secrets("https://alice:p%40ss@h/mcp?access_token=t%2Fk&x=1#frag")
    assert {"alice:p%40ss", "p%40ss", "p@ss", "t%2Fk", "t/k", "1", "frag"} <= set(secrets)
    assert "alice" not in secrets


def test_a_server_unavailable_reason_is_redacted_wherever_it_travels() -> None:
    error = ServerUnavailable("s", "POST https://u:pw999@h/mcp?access_token=tok999 failed")
    assert "pw999" not in str(error)
    assert "tok999" not in error.reason
    assert "tok999" not in str(ServerProtocolError("s", "GET https://h/sse?access_token=tok999: too big"))


def test_a_config_error_about_a_url_does_not_echo_its_credentials() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"servers": {"s": {"url": "ftp://alice:pw999@h/x?token=tok999"}}})
    assert "pw999" not in str(caught.value)
    assert "tok999" not in str(caught.value)


def test_a_logged_exception_quoting_a_url_is_redacted_in_message_and_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("proxy.test.redaction")
    log.addHandler(handler)
    log.propagate = False
    try:
        raise OSError("connect to https://bob:pw999@h/mcp?sig=sig999 failed")
    except OSError as exc:
        log.error("failed: %s", exc, exc_info=True)
    finally:
        log.removeHandler(handler)
    written = stream.getvalue()
    assert written.count(R) >= 4  # message and traceback, userinfo and query each
    assert "pw999" not in written
    assert "sig999" not in written


def test_secrets_learned_at_run_time_are_redacted_and_outlive_a_new_configured_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import proxy.core.redaction as redaction

    monkeypatch.setattr(redaction, "_learned", {})
    monkeypatch.setattr(redaction, "_LEARNED_AT_MOST", 2)
    remember_secrets(["configured-value-1"])
    redaction.remember_more(["alice-pat-000001", "short"])
    remember_secrets(["configured-value-2"])  # replaces the configured set, not the learned one
    assert redact_text("alice-pat-000001 configured-value-1 configured-value-2 short") == (
        f"{R} configured-value-1 {R} short"
    )
    redaction.remember_more(["bob-pat-0000002", "carol-pat-000003"])  # past the bound: oldest forgotten
    assert redact_text("alice-pat-000001 bob-pat-0000002 carol-pat-000003") == f"alice-pat-000001 {R} {R}"
    monkeypatch.setattr(redaction, "_learned", {})
    remember_secrets(())


def test_bearer_tokens_are_redacted_by_shape_without_being_remembered() -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"
    assert redact_text(f"the server said: invalid token {jwt}!") == f"the server said: invalid token {R}!"
    assert redact_text(f'{{"id_token": "{jwt}"}}') == f'{{"id_token": "{R}"}}'
    assert redact_text("headers: {'Authorization': 'Bearer opaque-token-123'}") == (
        f"headers: {{'Authorization': '{R}'}}"
    )
    assert redact_text("sent Bearer opaque-token-123 to it") == f"sent Bearer {R} to it"
    assert redact_text("eyJ alone, or eyJabc.def is not a token") == "eyJ alone, or eyJabc.def is not a token"


@pytest.mark.parametrize("text", ["eyJ" + "a" * 200_000 + ".", ("eyJa.b" * 50_000) + ".", "eyJ." * 80_000])
def test_jwt_redaction_stays_linear_on_adversarial_text(text: str) -> None:
    redact_text(text)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@pytest.mark.parametrize(
    "key",
    ["ci-key-not-in-mfd-shape-0123456789", "k3y+with/other=chars~0123456789"],
)
def test_an_api_key_the_config_holds_only_hashed_is_recognised_by_its_digest(key: str) -> None:
    text = f'deploy with {key}, then "{key}" or ({key})'
    assert redact_text(text) == text  # nothing known yet
    remember_key_digests([_digest(key)])
    shown = redact_text(text)
    assert key not in shown
    assert shown.startswith(f"deploy with {R}")


def test_a_word_that_merely_looks_like_a_key_is_kept() -> None:
    remember_key_digests([_digest("ci-key-not-in-mfd-shape-0123456789")])
    text = "ci-key-not-in-mfd-shape-0123456780 is another word"
    assert redact_text(text) == text


def test_any_manifold_shaped_key_is_redacted_without_being_configured() -> None:
    key = "mfd_" + "A" * 43
    assert redact_text(f"use {key} now") == f"use {R} now"
    assert redact_text("mfd_short") == "mfd_short"


@pytest.mark.parametrize("text", ["a" * 300_000, "a-" * 150_000, ("x" * 600 + " ") * 500, "mfd_" * 75_000])
def test_key_recognition_stays_linear_on_adversarial_text(text: str) -> None:
    remember_key_digests([_digest("ci-key-not-in-mfd-shape-0123456789")])
    redact_text(text)  # a quadratic pattern takes minutes here


@pytest.mark.parametrize(
    "text",
    [
        "https://id.example/.well-known/oauth-authorization-server: PKCE with S256 is not supported",
        "https://id.example/.well-known/oauth-authorization-server: no answer in 10 s",
        "http://127.0.0.1:9/token: HTTP 400",
        "/.well-known/oauth-authorization-server/realms/acme: not JSON",
    ],
)
def test_a_url_path_ending_in_a_secret_looking_word_keeps_the_reason_after_it(text: str) -> None:
    assert redact_text(text) == text


def test_a_header_after_a_url_is_still_redacted() -> None:
    text = "POST https://id.example/token failed; Authorization: Basic dXNlcjpwYXNz, token=abc123"
    assert (
        redact_text(text)
        == f"POST https://id.example/token failed; Authorization: {REDACTED}, token={REDACTED}"
    )
