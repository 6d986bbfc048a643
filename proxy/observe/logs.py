"""Logging: JSON lines for machines, plain lines for people, and no secrets in either.

:func:`setup_logging` installs one handler on the root logger, always on stderr (stdout may be
the MCP channel, ``manifold stdio``). With ``format: auto`` a terminal gets plain lines and
anything else (a container, systemd, a pipe) gets one JSON object per line::

    {"ts":"2025-01-31T12:00:00.123Z","level":"info","logger":"manifold.access","message":"POST /mcp 200 …",
     "method":"POST","path":"/mcp","status":200,"duration_ms":1.234,"bytes":512,"session":"Xk3v9QbA"}

Structured fields are passed as ``extra`` (``logger.info("...", extra={"server": "github"})``)
and become top-level keys.

Redaction happens in a filter on the handler, before either format sees the record:

* an ``extra`` whose name looks secret (``authorization``, ``cookie``, ``*token*``,
  ``*secret*``, ``*passw*``, ``*key*``, ``*credential*``) is replaced by ``[REDACTED]``,
  also inside nested dicts, lists and ``(name, value)`` header pairs;
* an ``extra`` named ``session``/``session_id`` keeps only its first 8 characters: a session id
  is a bearer credential for the session;
* in the message, tracebacks and string values, :func:`~proxy.core.redaction.redact_text`: every
  URL's userinfo, query values and fragment, ``Bearer``/``Basic`` credentials, ``name=value`` /
  ``name: value`` pairs whose name looks secret, and the configured secrets (server header and
  env values, URL credentials) wherever they appear.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import Any, Final, TextIO

import orjson

from proxy.config.observe import LogFormat
from proxy.core.redaction import REDACTED, redact_text, redact_url, remember_secrets

__all__ = [
    "ACCESS_FLUSH_BYTES",
    "ACCESS_FLUSH_SECONDS",
    "ACCESS_LOGGER",
    "REDACTED",
    "JsonFormatter",
    "PlainFormatter",
    "RedactingFilter",
    "access_line",
    "log_access",
    "redact_arguments",
    "redact_text",
    "redact_url",
    "redact_value",
    "remember_secrets",
    "setup_logging",
]


ACCESS_LOGGER: Final = "manifold.access"  # not a module name: proxy.enforce.access is the policy's logger
SESSION_PREFIX: Final = 8

_LEVELS: Final = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})
_SECRET_NAME: Final = re.compile(r"authorization|cookie|token|secret|passw|key|credential", re.IGNORECASE)
_SESSION_NAMES: Final = frozenset({"session", "session_id", "mcp-session-id", "mcp_session_id"})
_MAX_DEPTH: Final = 6

# Attributes every LogRecord has; anything else on a record came in through ``extra``.
_RECORD_ATTRS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colour codes
}
_CORE_KEYS: Final = ("ts", "level", "logger", "message")


# ---- redaction ----------------------------------------------------------------------------


def _is_secret_name(name: object) -> bool:
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    return isinstance(name, str) and _SECRET_NAME.search(name) is not None


def redact_value(name: str, value: Any, depth: int = 0) -> Any:
    """``value`` of the field ``name``, with anything secret in it redacted."""
    if _is_secret_name(name):
        return REDACTED
    if name.lower() in _SESSION_NAMES and isinstance(value, str):
        return value[:SESSION_PREFIX]
    return _scrub(value, depth)


def redact_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as any sink may keep or show them: the one redaction every sink
    applies (log lines, the audit log's ``arguments``, the approval page and question, traces):
    :func:`redact_value` on each (secret-looking names masked; in text, credentials, the configured
    secrets and Manifold's API keys, :func:`~proxy.core.redaction.redact_text`)."""
    return {str(name): redact_value(str(name), value) for name, value in arguments.items()}


def _scrub(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", "replace"))
    if depth >= _MAX_DEPTH:
        return value if isinstance(value, int | float | bool | None) else "…"
    if isinstance(value, Mapping):
        return {key: redact_value(str(key), item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if len(value) == 2 and _is_secret_name(value[0]):  # a (name, value) header pair
            return [_scrub(value[0], depth + 1), REDACTED]
        return [_scrub(item, depth + 1) for item in value]
    return value


class RedactingFilter(logging.Filter):
    """Rewrites a record in place so that no handler can write a secret from it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_manifold_redacted", False):
            return True
        record.msg = redact_text(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        for name, value in _extras(record).items():
            setattr(record, name, redact_value(name, value))
        setattr(record, "_manifold_redacted", True)  # noqa: B010  # once, however many handlers
        return True


# ---- formats ------------------------------------------------------------------------------


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")}


def _timestamp(created: float) -> str:
    """RFC 3339, UTC, milliseconds: ``2025-01-31T12:00:00.123Z``."""
    seconds = int(created)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((created - seconds) * 1000):03d}Z"
    )


def _details(record: logging.LogRecord) -> str | None:
    parts = [text for text in (record.exc_text, record.stack_info) if text]
    return "\n".join(parts) if parts else None


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, the extras, and ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        payload: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in _extras(record).items():
            payload[f"extra_{name}" if name in _CORE_KEYS else name] = value
        if (details := _details(record)) is not None:
            payload["exc"] = details
        try:
            return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # e.g. an int beyond 64 bits; the standard library copes
            return json.dumps(payload, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """``ts LEVEL logger: message key=value …`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        line = f"{_timestamp(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{name}={_plain_value(value)}" for name, value in extras.items())
        if (details := _details(record)) is not None:
            line += "\n" + details
        return line


def _plain_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and value.isprintable() and " " not in value else json.dumps(value)
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(value)


class _Handler(logging.StreamHandler[TextIO]):
    """Ours, so that a second setup_logging replaces it and leaves other handlers (pytest's) be.

    Access lines waiting in the :class:`_AccessWriter`'s buffer are written before any other
    record and on every flush (``logging.shutdown`` flushes at exit), so the stream keeps the order
    in which things happened.
    """

    pending: _AccessWriter | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.pending is not None:
            self.pending.flush()
        super().emit(record)

    def flush(self) -> None:
        if self.pending is not None:
            self.pending.flush()
        super().flush()

    def close(self) -> None:
        self.flush()  # a second setup_logging closes us: what is buffered is not lost
        super().close()


def setup_logging(
    level: str, fmt: LogFormat = "auto", *, access_log: bool = True, stream: TextIO | None = None
) -> None:
    """Send every logger's records to ``stream`` (stderr), redacted, in the chosen format.

    Calling it again replaces the previous setup.

    Raises:
        ValueError: ``level`` is not debug, info, warning, error or critical.
    """
    name = level.upper()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected debug, info, warning or error")
    stream = stream if stream is not None else sys.stderr
    if fmt == "auto":
        isatty = getattr(stream, "isatty", None)
        fmt = "plain" if isatty is not None and isatty() else "json"
    handler = _Handler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(name)
    # Off means off even at debug level; NOTSET inherits the root's level.
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.NOTSET if access_log else logging.WARNING)
    global _writer
    enabled = access_log and logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
    _writer = _AccessWriter(handler, json=fmt == "json") if enabled else None
    handler.pending = _writer


# ---- access log ---------------------------------------------------------------------------

_ACCESS: Final = logging.getLogger(ACCESS_LOGGER)
_MAX_PATH: Final = 256


def _printable(text: str, limit: int) -> str:
    text = text[:limit]
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def access_line(
    method: str, path: str, status: int, duration_ms: float, size: int, session_id: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The message and the structured fields of one access-log record.

    The query string is dropped (it may carry credentials), client-controlled text is made
    printable and bounded, and only the first 8 characters of the session id are kept.
    """
    if "?" in path:
        path = path.partition("?")[0]
    if len(path) > _MAX_PATH or not path.isprintable():  # (the common case: checked, not copied)
        path = _printable(path, _MAX_PATH)
    if not method.isprintable() or len(method) > 16:
        method = _printable(method, 16)
    session = session_id[:SESSION_PREFIX] if session_id else None
    message = f"{method} {path} {status} {duration_ms:.1f}ms {size}B"
    if session:
        message += f" session={session}"
    extra: dict[str, Any] = {
        "method": method,
        "path": path,
        "status": status,
        "duration_ms": round(duration_ms, 3),
        "bytes": size,
        "session": session,
    }
    return message, extra


class _AccessWriter:
    """The access log's fast path: one line per request on every call's path, so it skips the
    LogRecord, the filter chain and the formatter (about 100 µs a request) and writes what the
    formatter would have written. Its fields are safe by construction (no query string, a
    session prefix); a path that could hold a ``name=value`` secret is still redacted.

    Lines written on an event loop are buffered and written together (one ``write(2)`` instead
    of one a request, about 10 µs each), at most :data:`ACCESS_FLUSH_SECONDS` later or at
    :data:`ACCESS_FLUSH_BYTES`, and before any other record (:class:`_Handler`). Off a loop (a
    test, a tool) a line is written at once.
    """

    def __init__(self, handler: logging.StreamHandler[TextIO], *, json: bool) -> None:
        self._handler = handler
        assert handler.lock is not None  # (logging.Handler.__init__ creates it)
        self._lock = handler.lock  # the handler's own, held without acquire()'s Python call
        self._json = json
        self._second = -1
        self._stamp = ""
        self._buffer: list[str] = []
        self._buffered = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, message: str, extra: dict[str, Any]) -> None:
        now = time.time()
        second = int(now)
        if second != self._second:  # the date and time formatted once a second
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        ts = f"{self._stamp}.{int((now - second) * 1000):03d}Z"
        if self._json:
            line = orjson.dumps(
                {"ts": ts, "level": "info", "logger": ACCESS_LOGGER, "message": message, **extra}
            ).decode()
        else:
            fields = " ".join(f"{k}={_plain_value(v)}" for k, v in extra.items())
            line = f"{ts} INFO {ACCESS_LOGGER}: {message} {fields}"
        with self._lock:  # flush() may run on another thread (any record written there)
            self._buffer.append(line)
            self._buffered += len(line)
        if self._buffered >= ACCESS_FLUSH_BYTES:
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop here
            self.flush()
            return
        if self._timer is None or self._timer_loop is not loop:  # (a test's loop may be gone)
            self._timer = loop.call_later(ACCESS_FLUSH_SECONDS, self._due)
            self._timer_loop = loop

    def _due(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write the buffered lines, if any, in one write. Safe on any thread."""
        handler = self._handler
        handler.acquire()
        try:
            if not self._buffer:
                return
            lines, self._buffer, self._buffered = self._buffer, [], 0
            handler.stream.write("\n".join(lines) + "\n")
            logging.StreamHandler.flush(handler)
        finally:
            handler.release()


_writer: _AccessWriter | None = None
ACCESS_FLUSH_SECONDS: Final = 0.05  # how late a buffered access line may be written
ACCESS_FLUSH_BYTES: Final = 16_384  # ... or written once this much is buffered


def log_access(
    method: str, path: str, status: int, duration_ms: float, size: int, session_id: str | None = None
) -> None:
    """Write one access-log record on ``manifold.access`` (nothing is built when it is off)."""
    writer = _writer
    if writer is None and not _ACCESS.isEnabledFor(logging.INFO):
        return
    if "=" in path or ":" in path:
        path = redact_text(path)
    message, extra = access_line(method, path, status, duration_ms, size, session_id)
    if writer is not None:
        writer(message, extra)
    else:  # logging is not set up by us (a library user, a test with caplog): the normal path
        _ACCESS.info(message, extra=extra)
