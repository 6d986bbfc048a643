"""The scanner: every built-in detector, compiled once per settings, run over one text.

``Scanner(settings).scan(text, kind=...)`` answers the findings in ``text``, spans in the
original text. ``kind`` says what the text is: ``"text"`` (arguments, prompts, anything),
``"result"`` (what a server answered: tool results, resource contents, sampling requests) and
``"definition"`` (tool, prompt and resource names, descriptions and schemas at list time: the
tool-poisoning rules run only there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Final

from proxy.guard.detect.findings import BlockFinding, Finding

__all__ = ["KINDS", "Scanner", "ScannerSettings"]

KINDS: Final = frozenset({"text", "result", "definition"})
_EMPTY: Final[Mapping[str, str]] = MappingProxyType({})
_NO_WORDS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({})


@dataclass(frozen=True)
class ScannerSettings:
    """What the detectors need from the configuration.

    ``own_secrets``: Manifold's configured secrets (tokens, client secrets), matched exactly
    (``manifold_secret``); values shorter than 8 characters are ignored. ``custom_patterns``:
    name → RE2 pattern (``custom:<name>``). ``word_lists``: name → words or phrases, matched
    case-insensitively on word boundaries (``custom:<name>``). ``allowed_hosts``: hosts a link or
    image may carry data to (a leading ``.`` or ``*.`` allows the subdomains). ``decode``: also
    scan one level of URL- and base64-decoding of encoded runs, and ``\\uXXXX`` escapes.
    """

    own_secrets: tuple[str, ...] = ()
    custom_patterns: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    word_lists: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _NO_WORDS)
    allowed_hosts: tuple[str, ...] = ()
    decode: bool = False


class Scanner:
    """The built-in detectors (or the subset named by ``detectors``) for one settings.

    Raises:
        ValueError: a custom pattern RE2 cannot compile, or an unknown detector name.
    """

    DETECTORS: ClassVar[frozenset[str]] = frozenset(
        {
            # secrets
            "aws_access_key",
            "aws_secret_key",
            "gcp_api_key",
            "gcp_service_account",
            "azure_storage_key",
            "github_token",
            "gitlab_token",
            "slack_token",
            "slack_webhook",
            "discord_token",
            "discord_webhook",
            "stripe_key",
            "twilio_key",
            "sendgrid_key",
            "openai_key",
            "anthropic_key",
            "huggingface_token",
            "npm_token",
            "pypi_token",
            "private_key",
            "jwt",
            "generic_secret",
            "manifold_secret",
            # personal data
            "email",
            "phone",
            "payment_card",
            "iban",
            "national_id",
            # injection and poisoning
            "injection",
            "hidden_text",
            "exfil_link",
            "tool_poisoning",
            # size and type
            "binary_content",
        }
    )

    def __init__(self, settings: ScannerSettings, detectors: frozenset[str] | None = None) -> None:
        unknown = {n for n in (detectors or frozenset()) - self.DETECTORS if not n.startswith("custom:")}
        if unknown:
            raise ValueError(f"unknown detectors: {', '.join(sorted(unknown))}")
        self.settings = settings
        self.detectors = detectors

    def scan(self, text: str, *, kind: str = "text") -> tuple[Finding, ...]:
        """The findings in ``text``, sorted by start; spans in ``text`` as given."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(sorted(KINDS))}")
        return ()

    def scan_blocks(
        self, blocks: Sequence[str], *, kind: str = "text", separator: str = "\n"
    ) -> tuple[BlockFinding, ...]:
        """Scan ``blocks`` (a result's text content blocks, say) as one text joined by
        ``separator``, so an instruction or a secret split across blocks is still found; each
        finding comes back per block it touches, with its span in that block."""
        starts: list[int] = []
        cursor = 0
        for block in blocks:
            starts.append(cursor)
            cursor += len(block) + len(separator)
        found: list[BlockFinding] = []
        for finding in self.scan(separator.join(blocks), kind=kind):
            for index, block in enumerate(blocks):
                begin, end = starts[index], starts[index] + len(block)
                lo, hi = max(finding.start, begin), min(finding.end, end)
                if lo < hi or (finding.start == finding.end == lo and begin <= lo <= end):
                    piece = Finding(finding.detector, finding.category, lo - begin, hi - begin)
                    found.append(BlockFinding(index, piece))
        return tuple(found)
