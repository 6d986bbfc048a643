"""Logging: JSON lines that parse and carry extras, plain lines for terminals, no secrets."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from proxy.config.observe import LogFormat, LogSettings
from proxy.observe.logs import (
    ACCESS_FLUSH_BYTES,
    ACCESS_FLUSH_SECONDS,
    ACCESS_LOGGER,
    REDACTED,
    access_line,
    log_access,
    redact_text,
    setup_logging,
)

Setup = Callable[..., io.StringIO]
log = logging.getLogger("proxy.test_logs")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def setup() -> Iterator[Setup]:
    """``setup(fmt, ...)`` runs setup_logging into a buffer; the root logger is restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    access_level = logging.getLogger(ACCESS_LOGGER).level

    def run(fmt: LogFormat = "json", level: str = "info", *, tty: bool = False, **kwargs: Any) -> io.StringIO:
        stream = _Terminal() if tty else io.StringIO()
        setup_logging(level, fmt, stream=stream, **kwargs)
        return stream

    yield run
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger(ACCESS_LOGGER).setLevel(access_level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# ---- formats ------------------------------------------------------------------------------


def test_json_lines_parse_and_carry_the_core_fields_and_extras(setup: Setup) -> None:
    stream = setup("json")
    log.info("server %s ready", "github", extra={"server": "github", "status": 200, "duration_ms": 1.5})
    (record,) = lines(stream)
    assert record["message"] == "server github ready"
    assert (record["level"], record["logger"]) == ("info", "proxy.test_logs")
    assert (record["server"], record["status"], record["duration_ms"]) == ("github", 200, 1.5)
    assert record["ts"].endswith("Z")
    stamp = datetime.fromisoformat(record["ts"])
    assert stamp.tzinfo == UTC
    assert abs((datetime.now(UTC) - stamp).total_seconds()) < 60


def test_an_extra_named_like_a_core_field_does_not_replace_it(setup: Setup) -> None:
    stream = setup("json")
    log.info("hello", extra={"ts": "yesterday", "level": "none"})
    (record,) = lines(stream)
    assert (record["extra_ts"], record["extra_level"], record["level"]) == ("yesterday", "none", "info")


def test_exceptions_go_into_the_same_json_line(setup: Setup) -> None:
    stream = setup("json")
    try:
        raise RuntimeError("the server went away")
    except RuntimeError:
        log.exception("request failed")
    (record,) = lines(stream)
    assert record["level"] == "error"
    assert "RuntimeError: the server went away" in record["exc"]


def test_values_json_cannot_encode_are_written_as_text(setup: Setup) -> None:
    stream = setup("json")
    log.info("odd", extra={"thing": object(), "huge": 2**70})
    (record,) = lines(stream)
    assert record["thing"].startswith("<object object")
    assert record["huge"] == 2**70


def test_auto_is_plain_on_a_terminal_and_json_elsewhere(setup: Setup) -> None:
    stream = setup("auto", tty=True)
    log.info("hello", extra={"server": "github", "note": "two words"})
    line = stream.getvalue()
    assert ' INFO proxy.test_logs: hello server=github note="two words"' in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)
    stream = setup("auto", tty=False)
    log.info("hello")
    assert lines(stream)[0]["message"] == "hello"


def test_a_forced_format_wins_over_the_terminal(setup: Setup) -> None:
    stream = setup("json", tty=True)
    log.info("hello")
    assert lines(stream)[0]["message"] == "hello"


def test_the_level_filters_and_a_bad_level_is_refused(setup: Setup) -> None:
    stream = setup("json", "warning")
    log.info("quiet")
    log.warning("loud")
    assert [r["message"] for r in lines(stream)] == ["loud"]
    with pytest.raises(ValueError, match="unknown log level"):
        setup_logging("chatty")


def test_setting_up_again_replaces_the_handler_and_leaves_others(setup: Setup) -> None:
    root = logging.getLogger()
    others = list(root.handlers)  # pytest's capture handlers, which must stay
    first = setup("json")
    second = setup("json")
    assert root.handlers[: len(others)] == others
    assert len(root.handlers) == len(others) + 1
    log.info("once")
    assert first.getvalue() == ""
    assert len(lines(second)) == 1


# ---- redaction ----------------------------------------------------------------------------


def test_secrets_in_extras_are_redacted_at_any_depth(setup: Setup) -> None:
    stream = setup("json")
    log.info(
        "calling",
        extra={
            "token": "tok-123",
            "Authorization": "Bearer abc.def",
            "headers": {"Authorization": "Bearer s3cr3t", "Accept": "application/json"},
            "asgi_headers": [(b"cookie", b"sid=c00kie"), (b"host", b"gw")],
            "client_secret": "shh",
            "api_key": "k-1",
        },
    )
    text = stream.getvalue()
    for secret in ("tok-123", "abc.def", "s3cr3t", "c00kie", "shh", "k-1"):
        assert secret not in text
    (record,) = lines(stream)
    assert record["token"] == record["Authorization"] == record["client_secret"] == REDACTED
    assert record["headers"] == {"Authorization": REDACTED, "Accept": "application/json"}
    assert record["asgi_headers"] == [["cookie", REDACTED], ["host", "gw"]]


def test_bearer_tokens_in_messages_and_tracebacks_are_redacted(setup: Setup) -> None:
    stream = setup("json")
    log.info("sending Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig to %s", "search")
    log.info("retrying with bearer %s", "opaque-token-42")
    try:
        raise ValueError("login failed for password=hunter2")
    except ValueError:
        log.exception("oops")
    text = stream.getvalue()
    for secret in ("eyJhbGciOiJIUzI1NiJ9", "opaque-token-42", "hunter2"):
        assert secret not in text
    messages = [r["message"] for r in lines(stream)]
    assert messages[0] == f"sending Authorization: {REDACTED} to search"
    assert messages[1] == f"retrying with bearer {REDACTED}"


def test_plain_lines_are_redacted_too(setup: Setup) -> None:
    stream = setup("plain")
    log.info("Bearer abc123", extra={"password": "pw"})
    text = stream.getvalue()
    assert "abc123" not in text
    assert "pw" not in text.split("password=", 1)[1]


def test_a_session_id_in_an_extra_is_cut_to_its_prefix(setup: Setup) -> None:
    stream = setup("json")
    log.info("expired", extra={"session": "Xk3v9QbA" + "z" * 35})
    assert lines(stream)[0]["session"] == "Xk3v9QbA"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET /x?access_token=abc&y=1", f"GET /x?access_token={REDACTED}&y=1"),
        ("{'Cookie': 'a=b; c=d'}", f"{{'Cookie': '{REDACTED}'}}"),
        ('{"X-Api-Key": "k123"}', f'{{"X-Api-Key": "{REDACTED}"}}'),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: {REDACTED}"),
        (
            "server github: skipped a tool: missing key: name",
            "server github: skipped a tool: missing key: name",
        ),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "text", ["token." * 60_000, "token-" * 60_000, "tokentoken " * 40_000, "'" * 300_000]
)
def test_redaction_stays_linear_on_adversarial_text(text: str) -> None:
    redact_text(text)  # a quadratic regex takes minutes here


# ---- access log ---------------------------------------------------------------------------


def test_an_access_line_has_the_fields_and_only_a_session_prefix() -> None:
    message, extra = access_line("POST", "/mcp?token=x", 200, 1.23456, 512, "Xk3v9QbA" + "q" * 35)
    assert message == "POST /mcp 200 1.2ms 512B session=Xk3v9QbA"
    assert extra == {
        "method": "POST",
        "path": "/mcp",
        "status": 200,
        "duration_ms": 1.235,
        "bytes": 512,
        "session": "Xk3v9QbA",
    }


def test_an_access_line_makes_client_text_printable_and_bounded() -> None:
    message, extra = access_line("GET\n", "/a\nfake line" + "x" * 1000, 404, 0.1, 0)
    assert "\n" not in message
    assert extra["session"] is None
    assert len(extra["path"]) < 300


def test_access_records_go_to_the_access_logger_unless_turned_off(setup: Setup) -> None:
    stream = setup("json")
    log_access("DELETE", "/mcp", 200, 0.5, 0, "abcdefghijkl")
    (record,) = lines(stream)
    assert (record["logger"], record["method"], record["session"]) == (ACCESS_LOGGER, "DELETE", "abcdefgh")
    stream = setup("json", "debug", access_log=False)
    log_access("DELETE", "/mcp", 200, 0.5, 0)
    log.debug("still here")
    assert [r["message"] for r in lines(stream)] == ["still here"]


def test_log_settings_are_frozen_and_strict() -> None:
    settings = LogSettings()
    assert (settings.format, settings.access_log) == ("auto", True)
    with pytest.raises(ValidationError):
        LogSettings(format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        LogSettings(colour=True)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        settings.access_log = False


def test_the_access_fast_path_writes_what_the_json_formatter_would() -> None:
    stream = io.StringIO()
    setup_logging("info", "json", stream=stream)
    try:
        log_access("POST", "/mcp?token=abc", 200, 1.25, 512, "Xk3v9QbA-rest-of-the-session-id")
        logging.getLogger("proxy.other").info("a normal record")
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    access, other = (json.loads(line) for line in stream.getvalue().splitlines())
    assert set(access) == {
        "ts",
        "level",
        "logger",
        "message",
        "method",
        "path",
        "status",
        "duration_ms",
        "bytes",
        "session",
    }
    assert set(other) >= {"ts", "level", "logger", "message"}
    assert (access["logger"], access["path"], access["session"]) == ("manifold.access", "/mcp", "Xk3v9QbA")
    assert access["ts"].endswith("Z")
    assert len(access["ts"]) == len(other["ts"])


class _Writes(io.StringIO):
    """Counts write calls: buffered access lines go out together."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_access_lines_on_an_event_loop_go_out_together_and_soon() -> None:
    stream = _Writes()
    setup_logging("info", "json", stream=stream)

    async def serve() -> int:
        for i in range(5):
            log_access("POST", "/mcp", 200, 1.0, i)
        assert stream.writes == 0  # buffered
        await asyncio.sleep(ACCESS_FLUSH_SECONDS * 4)
        return stream.writes

    try:
        written = asyncio.run(serve())
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    assert written == 1
    assert [json.loads(line)["bytes"] for line in stream.getvalue().splitlines()] == [0, 1, 2, 3, 4]


def test_buffered_access_lines_are_written_before_the_next_record_and_on_flush() -> None:
    stream = _Writes()
    setup_logging("info", "json", stream=stream)

    async def serve() -> None:
        log_access("POST", "/mcp", 200, 1.0, 1)
        logging.getLogger("proxy.other").warning("after the request")
        log_access("POST", "/mcp", 200, 1.0, 2)
        for handler in logging.getLogger().handlers:
            handler.flush()  # what logging.shutdown does at exit
        assert len(stream.getvalue().splitlines()) == 3

    try:
        asyncio.run(serve())
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    first, other, last = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (first["bytes"], other["message"], last["bytes"]) == (1, "after the request", 2)


def test_a_flood_of_access_lines_is_written_once_the_buffer_is_full() -> None:
    stream = _Writes()
    setup_logging("info", "json", stream=stream)

    async def serve() -> int:
        for i in range(2000):
            log_access("POST", "/mcp", 200, 1.0, i)
        return stream.writes

    try:
        written = asyncio.run(serve())
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    assert 0 < written < 2000 * 200 // ACCESS_FLUSH_BYTES + 2
    assert len(stream.getvalue().splitlines()) == 2000


def test_the_access_fast_path_redacts_a_secret_in_the_path() -> None:
    stream = io.StringIO()
    setup_logging("info", "plain", stream=stream)
    try:
        log_access("GET", "/mcp/api_key=hunter2", 404, 0.5, 0)
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    assert "hunter2" not in stream.getvalue()
    assert "manifold.access: GET /mcp/api_key=[REDACTED] 404" in stream.getvalue()


def test_uvicorns_coloured_copy_of_the_message_is_not_logged() -> None:
    stream = io.StringIO()
    setup_logging("info", "json", stream=stream)
    try:
        logging.getLogger("uvicorn.error").info("Started", extra={"color_message": "\x1b[36mStarted\x1b[0m"})
    finally:
        setup_logging("info", "json", stream=io.StringIO())
    assert "color_message" not in json.loads(stream.getvalue())
