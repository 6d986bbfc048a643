"""Secrets by their documented shapes: cloud, VCS, chat, payment and LLM provider keys, private
keys, JWTs and generic assignments.

Every provider key is anchored on its fixed prefix and exact alphabet and length, bounded on both
sides by a character outside that alphabet, and refused when it reads as a placeholder
(``AKIAIOSFODNN7EXAMPLE``, ``sk_test_XXXX...``). Where the format has a checksum or a structure,
it is checked: GitHub's and npm's CRC32, a JWT's JSON header with ``alg``, a Discord token's
user id. Generic assignments (``password=``, ``api_key:``) need a value that looks random:
Shannon entropy of at least :data:`GENERIC_ENTROPY` bits per character, letters and digits or
symbols mixed, not a code reference.
"""

from __future__ import annotations

import base64
import binascii
import string
from typing import Final

from proxy.guard.detect.checks import base62_crc32_ok, entropy, jwt_ok, placeholder
from proxy.guard.detect.engine import Check, Rule

__all__ = ["GENERIC_ENTROPY", "RULES"]

GENERIC_ENTROPY: Final = 3.0


_ALNUM: Final = string.ascii_letters + string.digits
_ALPHABETS: Final = {
    "A-Za-z0-9_-": _ALNUM + "_-",
    "A-Za-z0-9_": _ALNUM + "_",
    "A-Za-z0-9": _ALNUM,
}


def _token(
    detector: str,
    body: str,
    check: Check | None = None,
    alphabet: str = "A-Za-z0-9_-",
    needs: str = "",
) -> Rule:
    """``body`` bounded on each side by a character outside ``alphabet`` (or the text's edge).

    The right boundary is in the pattern; the left one is checked by the engine, so that the
    pattern starts with ``body``'s literal prefix (see :class:`~proxy.guard.detect.engine.Rule`).
    """
    pattern = f"({body})(?:[^{alphabet}]|$)"
    return Rule(detector, "secret", pattern, 1, check or _real, not_after=_ALPHABETS[alphabet], needs=needs)


def _real(text: str, start: int, end: int) -> bool:
    return not placeholder(text[start:end])


def _crc(text: str, start: int, end: int) -> bool:
    value = text[start:end]
    return base62_crc32_ok(value) and not placeholder(value)


def _jwt(text: str, start: int, end: int) -> bool:
    return jwt_ok(text[start:end])


def _discord(text: str, start: int, end: int) -> bool:
    head = text[start:end].split(".", 1)[0]
    try:
        user = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (ValueError, binascii.Error):
        return False
    return user.isdigit() and 17 <= len(user) <= 20


def _random_enough(text: str, start: int, end: int) -> bool:
    value = text[start:end]
    return not placeholder(value) and entropy(value) >= 3.5


_CODE_REFERENCE: Final = frozenset("._")


def _generic(text: str, start: int, end: int) -> bool:
    value = text[start:end].strip("\"'`")
    if len(value) < 8 or placeholder(value):
        return False
    # A dotted or call-like identifier (settings.SECRET_KEY, os.environ) is code, not a value.
    if value.replace(".", "").replace("_", "").isalpha() and any(c in _CODE_REFERENCE for c in value):
        return False
    letters = any(c.isalpha() for c in value)
    others = any(not c.isalpha() for c in value)
    return letters and others and entropy(value) >= GENERIC_ENTROPY


def _secret(detector: str, pattern: str, check: Check | None = _real, needs: str = "") -> Rule:
    return Rule(detector, "secret", pattern, 1, check, needs=needs)


_KEYWORD: Final = (
    r"(?:password|passwd|pwd|passphrase|secret|secret[_-]?key|api[_-]?key|apikey|access[_-]?key|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|bearer[_-]?token|client[_-]?secret|"
    r"private[_-]?key|token|credentials?)"
)
_VALUE: Final = r"([^\s\"'`,;<>(){}\[\]]{8,200})"
# What every generic assignment holds: a keyword's last word, then the assignment.
_ASSIGNED: Final = (
    r"(?i)(?:passw(?:or)?d|pwd|passphrase|secret|key|token|credentials?)[\"']?\s*(?::=|=>|[:=])"
)

RULES: Final[tuple[Rule, ...]] = (
    # Cloud.
    _token(
        "aws_access_key",
        r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}|A3T[A-Z0-9]{17}",
        None,
        "A-Za-z0-9",
        r"A(?:KIA|SIA|BIA|CCA|3T)[A-Z0-9]{4}",
    ),
    _secret(
        "aws_secret_key",
        r"(?i)(?:aws_?secret_?access_?key|secret_?access_?key|aws_?secret)[\"']?\s*[:=]\s*[\"']?"
        r"([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)",
        _random_enough,
        needs=r"(?i)secret_?access_?key|aws_?secret",
    ),
    _token("gcp_api_key", r"AIza[0-9A-Za-z_-]{35}", needs="AIza"),
    _secret("gcp_service_account", r"\"private_key_id\"\s*:\s*\"([0-9a-f]{40})\"", needs='"private_key_id"'),
    _secret(
        "azure_storage_key",
        r"(?i)(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{43,86}={0,2})(?:[^A-Za-z0-9+/=]|$)",
        _random_enough,
        needs=r"(?i)(?:Account|SharedAccess)Key\s*=",
    ),
    # A 512-bit base64 value (an Azure storage key's shape) given as a credential.
    _secret(
        "azure_storage_key",
        r"(?i)(?:key|token|secret|bearer|password|credential|auth|sig)[^\n]{0,30}?[^A-Za-z0-9+/]"
        r"([A-Za-z0-9+/]{86}==)(?:[^A-Za-z0-9+/=]|$)",
        _random_enough,
        needs=r"[A-Za-z0-9+/]==",
    ),
    # Version control and package registries.
    _token("github_token", r"gh[pousr]_[A-Za-z0-9]{36}", _crc, "A-Za-z0-9_", "gh[pousr]_"),
    _token("github_token", r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}", None, "A-Za-z0-9_", "github_pat_"),
    _token(
        "gitlab_token",
        r"gl(?:pat|dt|rt|ptt|ft|soat|agent|cbt|imt|oas)-[0-9A-Za-z_-]{20,300}(?:\.[0-9a-z]{2}\.[0-9a-z]{7,9})?"
        r"|GR1348941[0-9A-Za-z_-]{20}",
        needs=r"gl(?:pat|dt|rt|ptt|ft|soat|agent|cbt|imt|oas)-|GR1348941",
    ),
    _token("npm_token", r"npm_[A-Za-z0-9]{36}", _crc, "A-Za-z0-9_", "npm_"),
    _token("pypi_token", r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}", needs="pypi-AgE"),
    # Chat.
    _token("slack_token", r"xox[abeoprs]-[0-9]{6,}-[0-9A-Za-z-]{10,250}", needs="xox[abeoprs]-"),
    _token("slack_token", r"xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-f0-9]{32,}", needs="xapp-"),
    _secret(
        "slack_webhook",
        r"(https://hooks\.slack\.com/(?:services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,32}|"
        r"(?:workflows|triggers)/T[A-Z0-9]{6,12}/[A-Za-z0-9/]{20,120}))",
        needs=r"https://hooks\.slack\.com/",
    ),
    # A bot token's head is a user id in base64: digits encode to [MNO][DTjz][AEIMQUYcgk]...
    _token(
        "discord_token",
        r"[MNO][DTjz][AEIMQUYcgk][A-Za-z0-9_-]{20,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
        _discord,
        needs="[MNO][DTjz][AEIMQUYcgk]",
    ),
    _secret(
        "discord_webhook",
        r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/[A-Za-z0-9_-]{60,68})",
        needs=r"discord(?:app)?\.com/api/webhooks/",
    ),
    # Payments and messaging providers.
    _token(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{24,247}",
        None,
        "A-Za-z0-9_",
        "[sr]k_(?:live|test)_",
    ),
    _token("stripe_key", r"whsec_[A-Za-z0-9]{32,}", None, "A-Za-z0-9_", "whsec_"),
    _token("twilio_key", r"SK[0-9a-f]{32}", None, "A-Za-z0-9", r"SK[0-9a-f]{4}"),
    _token("sendgrid_key", r"SG\.[0-9A-Za-z_-]{22}\.[0-9A-Za-z_-]{43}", needs=r"SG\."),
    # LLM providers.
    _token(
        "openai_key",
        r"sk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_-]{16,200}T3BlbkFJ[A-Za-z0-9_-]{16,200}",
        needs="T3BlbkFJ",
    ),
    _token(
        "openai_key", r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,250}", needs="sk-(?:proj|svcacct|admin)-"
    ),
    _token("anthropic_key", r"sk-ant-(?:api|admin|oat|ort)[0-9]{2}-[A-Za-z0-9_-]{80,120}", needs="sk-ant-"),
    _token("huggingface_token", r"(?:hf_|api_org_)[A-Za-z]{34}", None, "A-Za-z0-9_", "hf_|api_org_"),
    # Keys and tokens by structure.
    _secret(
        "private_key",
        r"(-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
        r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----)",
        None,
        "-----BEGIN",
    ),
    # A block cut short (no END line): the header and the base64 that follows.
    _secret(
        "private_key",
        r"(-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----(?:\s|\\n|\\r)+[A-Za-z0-9+/=:\s\\-]{40,})",
        None,
        "-----BEGIN",
    ),
    _secret(
        "private_key",
        r"(PuTTY-User-Key-File-[0-9]+: [\s\S]{0,200}?Private-Lines: [0-9]+)",
        None,
        "PuTTY-User-Key-File-",
    ),
    _token("jwt", r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*", _jwt, needs="eyJ"),
    # Generic assignments: key = value, "key": "value", <key>value</key>, --key value.
    # The key starts a line or follows a delimiter (an assignment, not prose that names a word).
    _secret(
        "generic_secret",
        r"(?im)(?:^[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?|[{,;\"'(\[<&?|])[ \t]*[A-Za-z0-9_.-]*"
        + _KEYWORD
        + r"[\"']?\s*(?::=|=>|[:=])\s*[\"']?"
        + _VALUE,
        _generic,
        _ASSIGNED,
    ),
    _secret("generic_secret", r"(?i)<" + _KEYWORD + r">([^<\s]{8,200})</", _generic, f"(?i)<{_KEYWORD}>"),
    _secret(
        "generic_secret",
        r"(?i)--(?:password|secret|token|api-key|client-secret)[ =]" + _VALUE,
        _generic,
        r"(?i)--(?:password|secret|token|api-key|client-secret)[ =]",
    ),
)
