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

from proxy.guard.detect import content, personal, secret_shapes, signals
from proxy.guard.detect.decode import encoded_runs
from proxy.guard.detect.engine import ALL_KINDS, Compiled, Prefilter, Rule, compile_rule, literal
from proxy.guard.detect.findings import BlockFinding, Finding
from proxy.guard.detect.normalise import normalise

__all__ = ["KINDS", "Scanner", "ScannerSettings"]

KINDS: Final = ALL_KINDS
_MIN_OWN_SECRET: Final = 8
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
        rules = [*_builtin_rules(settings), *_custom_rules(settings)]
        known = self.DETECTORS | {rule.detector for rule in rules}
        unknown = (detectors or frozenset()) - known
        if unknown:
            raise ValueError(f"unknown detectors: {', '.join(sorted(unknown))}")
        self.settings = settings
        self.detectors: frozenset[str] = known if detectors is None else detectors
        chosen = [rule for rule in rules if rule.detector in self.detectors]
        compiled = [compile_rule(rule) for rule in chosen]
        self._by_kind: dict[str, tuple[Compiled, ...]] = {
            kind: tuple(c for c in compiled if kind in c.rule.kinds) for kind in KINDS
        }
        self._prefilters = {kind: Prefilter(rules) for kind, rules in self._by_kind.items()}
        self._hidden = "hidden_text" in self.detectors

    def scan(self, text: str, *, kind: str = "text") -> tuple[Finding, ...]:
        """The findings in ``text``, sorted by start; spans in ``text`` as given.

        Raises:
            ValueError: ``kind`` is not one of :data:`KINDS`.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(sorted(KINDS))}")
        if not self.settings.decode and text.isascii():
            # ASCII (most texts; O(1) to tell): nothing to normalise, nothing hidden, spans as
            # they are.
            matched = self._match(text, kind)
            return _resolve([Finding(r.detector, r.category, start, end) for r, start, end in matched])
        norm = normalise(text, json_escapes=self.settings.decode)
        matched = self._match(norm.text, kind)
        if not matched and not norm.hidden and not self.settings.decode:
            return ()  # nothing found: no lists built, nothing to resolve
        found: list[Finding] = [
            Finding(rule.detector, rule.category, *norm.span(start, end)) for rule, start, end in matched
        ]
        if self._hidden:
            found.extend(Finding("hidden_text", "injection", start, end) for start, end in norm.hidden)
        if self.settings.decode:
            for start, end, decoded in encoded_runs(norm.text):
                inner = normalise(decoded).text
                span = norm.span(start, end)
                found.extend(
                    Finding(rule.detector, rule.category, *span)
                    for rule, _, _ in self._match(inner, kind)
                    if rule.detector != "binary_content"
                )
        return _resolve(found)

    def _match(self, text: str, kind: str) -> list[tuple[Rule, int, int]]:
        encoded = text.encode("utf-8", "surrogatepass")
        candidates = self._prefilters[kind].candidates(encoded)
        if not candidates:
            return []
        return [
            (compiled.rule, start, end)
            for compiled in candidates
            for start, end in compiled.spans(text, encoded)
        ]

    def scan_blocks(
        self, blocks: Sequence[str], *, kind: str = "text", separator: str = "\n"
    ) -> tuple[BlockFinding, ...]:
        """Scan ``blocks`` (a result's text content blocks, say) as one text joined by
        ``separator``, so an instruction or a secret split across blocks is still found; each
        finding comes back per block it touches, with its span in that block."""
        if len(blocks) == 1:  # the common case (one text block): no joining, no mapping back
            alone = self.scan(blocks[0], kind=kind)
            return tuple(BlockFinding(0, finding) for finding in alone) if alone else ()
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


def _builtin_rules(settings: ScannerSettings) -> list[Rule]:
    return [
        *secret_shapes.RULES,
        *personal.RULES,
        *signals.injection_rules(),
        *signals.poisoning_rules(),
        *signals.hidden_rules(),
        *signals.exfil_rules(settings.allowed_hosts),
        *content.RULES,
    ]


def _custom_rules(settings: ScannerSettings) -> list[Rule]:
    rules: list[Rule] = []
    own = sorted({s for s in settings.own_secrets if len(s) >= _MIN_OWN_SECRET}, key=len, reverse=True)
    if own:
        alternatives = "|".join(literal(s) for s in own)
        rules.append(Rule("manifold_secret", "secret", alternatives, needs=alternatives))
    for name, pattern in settings.custom_patterns.items():
        rules.append(Rule(f"custom:{name}", "pii", pattern))
    for name, words in settings.word_lists.items():
        alternatives = "|".join(literal(w) for w in sorted(set(words), key=len, reverse=True) if w.strip())
        if alternatives:
            edge = r"[^\pL\pN_]"
            pattern = f"(?i)(?:^|{edge})({alternatives})(?:{edge}|$)"
            rules.append(Rule(f"custom:{name}", "pii", pattern, 1, needs=f"(?i){alternatives}"))
    return rules


def _resolve(found: list[Finding]) -> tuple[Finding, ...]:
    """Sorted, without duplicates; a generic assignment that a named secret detector also found
    is left to the named one, and matches inside a private-key block are the block's."""
    if not found:
        return ()
    unique = sorted(set(found), key=lambda f: (f.start, -f.end, f.detector))
    named = [f for f in unique if f.category == "secret" and f.detector != "generic_secret"]
    blocks = [f for f in unique if f.detector == "private_key"]
    kept: list[Finding] = []
    for f in unique:
        if f.detector == "generic_secret" and any(n.start < f.end and f.start < n.end for n in named):
            continue
        inside = any(b.start <= f.start and f.end <= b.end for b in blocks)
        if f.category == "secret" and f.detector != "private_key" and inside:
            continue
        kept.append(f)
    return tuple(kept)
