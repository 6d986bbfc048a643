"""Credentials out of text: what every log line, error message and report passes through.

Pure: strings in, strings out. :func:`redact_text` is the entry point (re-exported by
:mod:`proxy.observe.logs`); it replaces with ``[REDACTED]``:

* in every URL anywhere in the text (``scheme://…``): the userinfo (``user:pass@``, also a lone
  token before ``@``), the value of **every** query parameter (names are kept) and the fragment.
  All query values, not a list of secret-looking names: a secret rides under any name
  (``sig``, ``X-Amz-Signature``, ``code``, ``k``), and a log reader needs which parameters a URL
  had far more often than their values;
* ``Bearer``/``Basic`` credentials, JWT-shaped strings (``eyJ…​.….…``: access and ID tokens
  wherever they appear), and ``name=value`` / ``name: value`` pairs whose name looks
  secret (``authorization``, ``cookie``, ``token``, ``secret``, ``password``, ``api_key``,
  ``credential``);
* the configured secrets Manifold was told about (:func:`remember_secrets`: server header and
  env values, the credentials in server URLs) and those it loaded since (:func:`remember_more`:
  long-lived per-identity secrets to servers, at most :data:`LEARNED_AT_MOST`), wherever they
  appear verbatim. Short-lived tokens (OAuth access tokens, exchanged tokens) are *not* added:
  each addition recompiles the verbatim pattern, which at thousands of values costs a second
  of the event loop; they are caught by the patterns above (an ``Authorization`` header,
  ``Bearer …``, a JWT);
* Manifold's own API keys, which the config holds only as SHA-256 digests
  (:func:`remember_key_digests`): every word of the text between 20 and 512 characters
  (a run of ``[A-Za-z0-9_-]``, and a run of anything but blanks, quotes, brackets, commas and
  semicolons) is hashed and looked up, so a key pasted
  into a tool's arguments is caught though its text was never configured; and any
  ``mfd_``-prefixed key (``manifold keygen``'s shape, this deployment's or another's).

Every pattern is linear in the text: a name or a scheme starts only where a run of its
characters starts, and is matched atomically.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote, urlsplit

__all__ = [
    "LEARNED_AT_MOST",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "redact_text",
    "redact_url",
    "remember_key_digests",
    "remember_more",
    "remember_secrets",
    "url_secrets",
]

REDACTED: Final = "[REDACTED]"
# A configured value shorter than this is not searched for verbatim: "1", "on" or "dev" would
# redact ordinary words everywhere. (Such values are still kept out of reprs and config errors.)
MIN_SECRET_LENGTH: Final = 6

# In free text "key" alone is too common ("missing key: name"); only the unambiguous words.
# A name starts only where a run of [\w.-] starts (the lookbehind) and is matched atomically,
# so each run is scanned once: long dotted or repeated text stays linear, never quadratic.
_TEXT_SECRET_WORD: Final = r"(?:authorization|cookie|token|secret|passw(?:or)?d|api[_-]?key|credential)"
_TEXT_SECRET_NAME: Final = rf"(?<![\w.-])[\"']?(?>[\w.-]*{_TEXT_SECRET_WORD}[\w.-]*)"
_TEXT_PAIR: Final = re.compile(
    rf"""(?P<name>{_TEXT_SECRET_NAME}["']?)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>\[REDACTED\]|"[^"]*"|'[^']*'|(?:(?:bearer|basic|token)\s+)?[^\s"',;&}\]]+)""",
    re.IGNORECASE,
)
_JWT: Final = re.compile(r"(?<![A-Za-z0-9_-])eyJ(?>[A-Za-z0-9_-]+)\.(?>[A-Za-z0-9_-]+)\.(?>[A-Za-z0-9_-]*)")
_SCHEME_CREDENTIAL: Final = re.compile(r"\b(?P<scheme>bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
# A URL: a scheme (starting where a run of scheme characters starts), "://", then everything up
# to whitespace, a quote or an angle bracket (how URLs are delimited in prose, reprs and JSON),
# less the punctuation that ends a sentence or a clause ("… failed: …", "(see http://h/x).").
_URL: Final = re.compile(
    r"(?<![A-Za-z0-9+.-])(?>[A-Za-z][A-Za-z0-9+.-]*)://(?:[^\s\"'<>`]*[^\s\"'<>`.,:;!?)])?"
)
_AUTHORITY_END: Final = re.compile(r"[/?#]")
# Manifold's key shape (proxy.auth.apikeys.KEY_PREFIX and 43 characters of base64url).
_MANIFOLD_KEY: Final = re.compile(r"(?<![A-Za-z0-9_-])mfd_(?>[A-Za-z0-9_-]{20,})")
# Words that may be a configured key, hashed and looked up: the shortest key an operator may
# configure is 20 characters (proxy.auth.apikeys.MIN_ENV_KEY_LENGTH); longer than 512 is no key.
_KEY_WORDS: Final = (
    re.compile(r"(?<![A-Za-z0-9_-])(?>[A-Za-z0-9_-]{20,512})(?![A-Za-z0-9_-])"),
    re.compile(r"(?<![^\s\"'`<>()\[\]{},;])(?>[^\s\"'`<>()\[\]{},;]{20,512})(?![^\s\"'`<>()\[\]{},;])"),
)
_key_digests: frozenset[bytes] = frozenset()

_known: re.Pattern[str] | None = None
_configured: frozenset[str] = frozenset()  # remember_secrets: replaced as a whole
_learned: dict[str, None] = {}  # remember_more: added to while Manifold runs, oldest first
# Past it the oldest learned are forgotten (rotated secrets). Each addition recompiles the pattern
# (about 0.5 ms per value here): bounded so that costs milliseconds, not seconds.
LEARNED_AT_MOST: Final = 256
_LEARNED_AT_MOST = LEARNED_AT_MOST


def redact_url(url: str) -> str:
    """``url`` with its userinfo, every query value and its fragment replaced by ``[REDACTED]``
    (parameter names, scheme, host, port and path are kept)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    tail, hashmark, fragment = tail.partition("#")
    path, qmark, query = tail.partition("?")
    if query:
        query = "&".join(_redact_parameter(parameter) for parameter in query.split("&"))
    shown = f"{scheme}://{authority}{path}{qmark}{query}"
    return f"{shown}#{REDACTED}" if hashmark and fragment else shown + hashmark


def _redact_parameter(parameter: str) -> str:
    if not parameter:
        return parameter
    name, equals, _ = parameter.partition("=")
    return f"{name}={REDACTED}" if equals else REDACTED


def _redact_pair(match: re.Match[str]) -> str:
    if match.start() and match.string[match.start() - 1] == "/" and ":" in match["sep"]:
        # A path segment: "name=value" there is a pair, "…/oauth-authorization-server: no answer"
        # is a URL and what went wrong with it, not an Authorization header.
        return match[0]
    value = match["value"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['name']}{match['sep']}{quote}{REDACTED}{quote}"


def redact_text(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]`` (see the module docstring)."""
    known = _known
    if known is not None:
        text = known.sub(REDACTED, text)
    if "://" in text:
        text = _URL.sub(lambda match: redact_url(match[0]), text)
    text = _TEXT_PAIR.sub(_redact_pair, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
    if "mfd_" in text:
        text = _MANIFOLD_KEY.sub(REDACTED, text)
    if _key_digests:
        for words in _KEY_WORDS:
            text = words.sub(_redact_key, text)
    return _JWT.sub(REDACTED, text) if "eyJ" in text else text  # last: the pairs take theirs whole


def _redact_key(match: re.Match[str]) -> str:
    word = match[0]
    return REDACTED if hashlib.sha256(word.encode()).digest() in _key_digests else word


def url_secrets(url: str) -> list[str]:
    """The secrets a configured URL carries: its userinfo (whole, and the password alone) and
    its query values, as written and percent-decoded."""
    parts = urlsplit(url)
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        found += [userinfo, userinfo.partition(":")[2]]
    for parameter in parts.query.split("&"):
        found.append(parameter.partition("=")[2])
    found.append(parts.fragment)
    return [value for raw in found if raw for value in {raw, unquote(raw)}]


def remember_secrets(values: Iterable[str]) -> None:
    """Redact these values verbatim from now on, wherever :func:`redact_text` runs (replacing any
    remembered before by this function; those of :func:`remember_more` stay). Values shorter than
    :data:`MIN_SECRET_LENGTH` are left out."""
    global _configured
    _configured = frozenset(value for value in values if len(value) >= MIN_SECRET_LENGTH)
    _compile()


def remember_more(values: Iterable[str]) -> None:
    """Redact these values too, from now on: secrets loaded while Manifold runs (an identity's
    credential to a server, as it is looked up). Cheap when they are known already."""
    new = {value for value in values if len(value) >= MIN_SECRET_LENGTH} - _learned.keys() - _configured
    if new:
        _learned.update(dict.fromkeys(new))
        for oldest in list(_learned)[: max(0, len(_learned) - _LEARNED_AT_MOST)]:
            del _learned[oldest]
        _compile()


def remember_key_digests(digests: Iterable[bytes]) -> None:
    """Redact, from now on, every word whose SHA-256 is one of ``digests`` (Manifold's API keys,
    stored as digests: ``auth.api_keys[].key: sha256:…``), replacing any remembered before."""
    global _key_digests
    _key_digests = frozenset(digests)


def _compile() -> None:
    global _known
    kept = sorted(_configured | _learned.keys(), key=len, reverse=True)
    _known = re.compile("|".join(map(re.escape, kept))) if kept else None
