"""Injection and poisoning signals: instructions addressed to the model, hidden text, links that
carry data away, and tool descriptions that reach for other tools or for credentials.

These are signals, not proofs: the patterns name the moves an injected text makes (override the
instructions, impersonate the system, address the assistant, hide from the user, reach for
secrets) in the words attackers use, case-insensitively. A match that the text itself presents as
a quotation or an example (inside quotes, after "such as", "phrases like", "prompt injection")
is taken as talk *about* injection and dropped. The held-out numbers in
``docs/reference/guardrail-detectors.md`` say how well this holds.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from proxy.guard.detect.engine import ALL_KINDS, Check, Rule

__all__ = ["exfil_rules", "hidden_rules", "injection_rules", "poisoning_rules"]

_QUOTES: Final = "\"'`\u2018\u2019\u201c\u201d"
_META: Final = (
    "such as",
    "phrases like",
    "phrase like",
    "prompts like",
    "prompt like",
    "strings like",
    "e.g.",
    "for example",
    "for instance",
    "prompt injection",
    "jailbreak",
    "attackers",
    "attacker may",
    "detector",
    "our filter",
    "flags",
    "researchers",
    "study",
    "studies",
    "paper",
    "test case",
    "tells a model to",
    "tell a model to",
    "tells the model to",
)


def _sentence_before(text: str, start: int, width: int = 120) -> str:
    window = text[max(0, start - width) : start]
    cut = max(window.rfind(". "), window.rfind("\n"), window.rfind("! "), window.rfind("? "))
    return window[cut + 1 :].lower() if cut >= 0 else window.lower()


def _quoted(text: str, start: int, end: int) -> bool:
    before = text[max(0, start - 2) : start].rstrip()
    after = text[end : end + 40]
    return bool(before) and before[-1] in _QUOTES and any(q in after for q in _QUOTES)


_NAMED: Final = (" tag", " phrase", " string", " marker", " keyword", " token")


def _addressed(text: str, start: int, end: int) -> bool:
    """Not a quotation of, or an example of, an injection (see the module docstring)."""
    if _quoted(text, start, end) or text[end : end + 10].lower().startswith(_NAMED):
        return False
    before = _sentence_before(text, start)
    return not any(word in before for word in _META)


_WORD: Final = string.ascii_letters + string.digits + "_"


def _rule(
    detector: str, category: str, pattern: str, check: Check | None, kinds: frozenset[str], needs: str = ""
) -> Rule:
    """A case-insensitive rule; a leading ``\\b`` becomes the engine's left-boundary check (it
    would make RE2 step through every byte instead of skipping to the first literal).

    Its needs (see :class:`~proxy.guard.detect.engine.Rule`) is the pattern itself unless given:
    these are words and spaces, which the prefilter's set takes cheaply; a pattern with a counted
    part (``{0,40}``) names a needs without it, since counts multiply the set's states.
    """
    not_after = ""
    if pattern.startswith(r"\b"):
        pattern, not_after = pattern[2:], _WORD
    pattern = "(?i)" + pattern
    needs = "(?i)" + needs if needs else pattern
    return Rule(detector, category, pattern, 0, check, kinds, not_after=not_after, needs=needs)


_OVERRIDE_VERB: Final = r"(?:ignore|disregard|forget|override|bypass|skip|drop|abandon)"
_PRIOR: Final = (
    r"(?:previous|prior|above|earlier|preceding|former|original|initial|system|safety|existing|old|current)"
)
_GUIDANCE: Final = (
    r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|guidance|context|"
    r"messages?|commands?|constraints|programming|policies|restrictions)"
)
_MODEL: Final = r"(?:ai|assistant|model|llm|agent|chatbot|claude|gpt|chatgpt|copilot|gemini|bot)"
# Without "ai": two letters are too short for RE2's prefilter to use ("ai:" is spelled out instead).
_MODEL_LONG: Final = r"(?:assistant|model|llm|agent|chatbot|claude|gpt|chatgpt|copilot|gemini|bot)"
_MODEL_ORDER: Final = (
    r"(?:ignore|disregard|forget|you\s+must|do\s+not|reveal|send|call|run|approve|delete|stop|execute|forward|"
    r"email|open|read|print)"
)
_SENSITIVE: Final = (
    r"(?:\.env\b|api[ _-]?keys?|secrets|credentials|passwords?|session[ _-]?tokens?|access[ _-]?tokens?|"
    r"environment[ _-]variables?|ssh[ _-]keys?|private[ _-]keys?|id_rsa|cookies)"
)
_PATHS: Final = (
    r"(?:~/\.ssh|\.ssh/id_|~/\.aws|\.aws/credentials|/etc/passwd|/etc/shadow|\.netrc|"
    r"mcp\.json|claude_desktop_config|\.config/gcloud|\.kube/config|\.docker/config\.json|\.git-credentials|"
    r"\.npmrc|\.pypirc|\.env\b)"
)

_INJECTION: Final = (
    # Override the instructions.
    rf"\b{_OVERRIDE_VERB}\s+(?:(?:all|any|the|your|my|of|these|those|its|everything)\s+)*(?:{_PRIOR}\s+)+"
    rf"(?:\w+\s+)?{_GUIDANCE}\b",
    r"\b(?:ignore|disregard)\s+(?:all\s+of\s+|everything\s+)?the\s+above\b",
    r"\bforget\s+(?:everything|all|what)\s+(?:you\s+(?:were|have\s+been|'ve\s+been)\s+told|above|before|so\s+far)",
    r"\bforget\s+the\s+user'?s?\s+(?:question|request|instructions?|task)",
    r"\b(?:your|the)\s+(?:new|actual|real|true|only)\s+(?:instructions?|task|objective|goal|job|purpose|mission)"
    r"\s+(?:now\s+)?(?:is|are)\b",
    r"\b(?:the\s+)?previous\s+instructions\s+were\s+(?:a\s+test|fake|wrong|void)",
    r"\byou\s+are\s+no\s+longer\s+(?:bound|restricted|limited|required)",
    r"\byou\s+are\s+now\s+(?:in\s+)?(?:an?\s+)?(?:DAN|developer\s+mode|god\s+mode|jailbroken|unrestricted|"
    r"unfiltered|uncensored|maintenance\s+mode|admin(?:istrator)?\s+mode|free\s+of)",
    r"\bin\s+(?:developer|god|jailbreak|dan)\s+mode\s+now\b",
    r"\bfrom\s+now\s+on,?\s+you\s+(?:will|are|must|should|shall|answer|respond|reply)\b",
    r"\byou\s+must\s+now\s+(?:act|call|run|execute|ignore|obey|send|approve|delete|forget|reveal|respond|pretend)\b",
    r"\bpretend\s+(?:that\s+)?the\s+user\s+(?:said|agreed|approved|confirmed)\b",
    # Impersonate the system or the chat format.
    r"<\|im_start\|>\s*(?:system|assistant)|<\|(?:system|endoftext)\|>|\[/?INST\]|<<SYS>>",
    r"</?(?:system|tool_result|function_results?|tool_output)>",
    r"\[system\]\s*\(#",
    r"(?m)^\s*\[?(?:system|developer)\]?\s*:\s*(?:the\s+user|you\b|your\b|ignore|disregard|new\b|the\s+assistant|"
    r"from\s+now|override|all\s+previous)",
    r"\bnew\s+system\s+(?:message|prompt|instructions?|policy)\b|\bsystem\s+prompt\s+override\b",
    r"(?m)^\s*#{1,6}\s*(?:new|updated|real)\s+instructions?\s*$",
    r"\bnew\s+instructions?\s+from\s+the\s+(?:system|administrator|developer|admin)",
    r"<\s*important\s*>",
    # Address the model.
    rf"\b(?:note|message|attention|reminder|(?:hidden|secret)\s+instructions?)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?{_MODEL}s?\b",
    rf"\b(?:attention|hey|dear|hello)\s*,?\s+{_MODEL}\b(?:\s+agents?)?\s*[:,!]",
    rf"\bfor\s+the\s+{_MODEL}\s*,\s*not\s+(?:for\s+)?the\s+(?:human|user|reader)",
    rf"\b{_MODEL_LONG}\s*[:,]\s*(?:please\s+)?{_MODEL_ORDER}\b",
    rf"\bai[:,]\s*(?:please\s+)?{_MODEL_ORDER}\b",
    r"\bas\s+an\s+ai(?:\s+language\s+model)?,?\s+you\s+(?:are\s+required|must|should|will|have\s+to)\b",
    r"\bwhen\s+you\s+read\s+this\b",
    r"\b(?:reveal|print|output|repeat|show|leak|disclose|dump)\s+(?:your|the|its)\s+(?:hidden\s+|system\s+|"
    r"initial\s+|original\s+|secret\s+)+(?:prompt|instructions)\b",
    r"\b(?:override|disable|turn\s+off)\s+(?:your|the|all)\s+(?:safety\s+)?(?:guidelines|guardrails|filters|"
    r"confirmations|safeguards)\b",
    # Hide from the user.
    r"\b(?:do\s+not|don'?t|never|must\s+not)\s+(?:tell|inform|notify|alert|warn|let\s+on\s+to|"
    r"(?:mention|reveal|say|show|disclose)\s+(?:this\s+|it\s+|that\s+|anything\s+)?to)\s+(?:the\s+)?user\b",
    r"\bwithout\s+(?:telling|informing|notifying|alerting|asking|warning)\s+the\s+user\b",
    r"\bthe\s+user\s+(?:need\s+not|must\s+not|should\s+not|shouldn'?t|doesn'?t\s+need\s+to|must\s+never)\s+"
    r"(?:know|see|be\s+told|notice|find\s+out)",
    r"\b(?:silently|secretly|quietly|covertly|discreetly)\s+(?:add|append|send|forward|change|include|call|run|"
    r"execute|upload|copy|email|bcc|insert|replace|modify|approve|delete)\b",
)
# Reaching for secrets is an injection in text and results; in a definition it is poisoning.
_REACH: Final = (
    rf"\b(?:send|email|forward|post|upload|exfiltrate|paste|include|append|print|dump|leak|share|output|list)\s+"
    rf"(?:me\s+)?(?:the\s+user'?s|their|all(?:\s+the)?|every|your)\s+(?:\w+\s+){{0,2}}{_SENSITIVE}",
    rf"\b(?:read|cat|open|summari[sz]e|include|send|upload|attach|print)\b[^\n]{{0,40}}{_PATHS}",
)

_POISONING: Final = (
    _PATHS,
    r"\bid_(?:rsa|ed25519|ecdsa|dsa)\b",
    r"\bask(?:s|ing)?\s+(?:the\s+)?user\s+(?:for|to\s+(?:enter|provide|type|paste|share))\s+(?:their\s+|his\s+|"
    r"her\s+|your\s+|the\s+)?(?:\w+\s+){0,2}(?:password|passphrase|api\s+key|token|credentials|secret|pin|otp|"
    r"2fa|mfa|seed\s+phrase|private\s+key)",
    r"\b(?:any|every|all)\s+other\s+tools?\b",
    r"\bother\s+servers?'?\s*(?:'s\s+)?tools?\b|\b(?:from|on|of)\s+(?:the\s+)?other\s+server\b",
    r"\binstead\s+of\s+(?:the\s+)?[\w.-]+\s+tool\b",
    r"\b(?:supersedes?|replaces?|overrides?|shadows?)\s+(?:every|all|any|the)\s+(?:other\s+)?tools?\b",
    r"\bwhen(?:ever)?\s+(?:you\s+(?:call|use|invoke)|calling|using|the\s+user\s+asks)\b",
    r"\b[\w.-]+\s+tool\s+(?:must|should|shall)\s+(?:always|never|also|first)\b",
    r"\b(?:conversation|chat)\s+history\b",
    r"\bwithout\s+(?:asking|confirmation|confirming|telling|informing)\b",
    r"\bthe\s+user\s+(?:need\s+not|must\s+not|should\s+not|shouldn'?t)\s+(?:know|see|be\s+told)",
    r"\b(?:secretly|silently|quietly|covertly)\b",
    r"\b(?:do\s+not|don'?t|never)\s+(?:tell|mention|inform|reveal)",
    r"<\s*important\s*>",
    rf"\b(?:private\s+key|{_SENSITIVE})\b[^.\n]{{0,40}}\b(?:as|in|into|to)\s+(?:the\s+)?['\"`]?\w+['\"`]?\s+"
    r"(?:argument|parameter|field)",
)


# The needs of the patterns with a counted part: each its part before or after the count.
_REACH_CORE: Final = (
    r"(?:send|email|forward|post|upload|exfiltrate|paste|include|append|print|dump|leak|share|output|list)\s+"
    r"(?:me\s+)?(?:the\s+user'?s|their|all(?:\s+the)?|every|your)\s"
)
_CORES: Final = {
    _REACH[0]: _REACH_CORE,
    _REACH[1]: _PATHS,
    _POISONING[2]: r"ask(?:s|ing)?\s+(?:the\s+)?user\s+(?:for|to\s)",
    _POISONING[-1]: rf"(?:private\s+key|{_SENSITIVE})",
}


def injection_rules() -> tuple[Rule, ...]:
    """Instructions addressed to the model: every kind of text."""
    everywhere = tuple(_rule("injection", "injection", p, _addressed, ALL_KINDS) for p in _INJECTION)
    flowing = frozenset({"text", "result"})
    return everywhere + tuple(
        _rule("injection", "injection", p, _addressed, flowing, _CORES.get(p, "")) for p in _REACH
    )


def poisoning_rules() -> tuple[Rule, ...]:
    """Tool descriptions that reach for other tools, for the user's credentials or files, or
    hide from the user: definitions only (in a result these words are ordinary)."""
    kinds = frozenset({"definition"})
    return tuple(_rule("tool_poisoning", "injection", p, None, kinds, _CORES.get(p, "")) for p in _POISONING)


def _comment(text: str, start: int, end: int) -> bool:
    """An HTML comment that carries words (4 or more), not a marker like ``<!-- end nav -->``."""
    words = [w for w in text[start + 4 : end - 3].split() if sum(c.isalpha() for c in w) >= 2]
    return len(words) >= 4


def _styled(text: str, start: int, end: int) -> bool:
    close = text.find(">", start, end)
    inner = text[close + 1 : end] if close >= 0 else ""
    return len(inner.split()) >= 2


def hidden_rules() -> tuple[Rule, ...]:
    """Text a reader does not see: HTML comments with words in them, and elements styled
    invisible. (Invisible characters are found by the normalisation.)"""
    return (
        _rule("hidden_text", "injection", r"<!--(?s:.*?)-->", _comment, ALL_KINDS, "<!--"),
        _rule(
            "hidden_text",
            "injection",
            r"(?i)<[a-z][a-z0-9]*\s[^>]{0,300}style\s*=\s*[\"'][^\"'>]{0,300}(?:display\s*:\s*none|"
            r"visibility\s*:\s*hidden|font-size\s*:\s*0(?:\.0+)?(?:px|pt|em|rem)?\s*[;\"']|"
            r"opacity\s*:\s*0(?:\.0+)?\s*[;\"']|color\s*:\s*transparent)[^>]{0,300}>[^<]{1,1000}",
            _styled,
            ALL_KINDS,
            r"style\s*=\s*[\"']",
        ),
    )


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """``host`` is in ``allowed``: exact, or under an entry written ``.example.com`` or
    ``*.example.com`` (which allows ``example.com`` itself too)."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().removeprefix("*")
        if entry.startswith("."):
            if host == entry[1:] or host.endswith(entry):
                return True
        elif host == entry:
            return True
    return False


_DATA_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-%.")


def _carries_data(url: str, image: bool) -> bool:
    """Whether a URL's query or path could carry a payload: a query value (or, for an image,
    any query value of 8+ characters; a link needs 20+), or a path segment of 24+ data-like
    characters (hex, base64, percent-encoding)."""
    if "?" not in url and "#" not in url and max(map(len, url.split("/"))) < 24:
        return False  # the common case, decided without parsing
    try:
        parts = urlsplit(url)
    except ValueError:
        return True  # a URL Python cannot parse is not one to trust
    least = 8 if image else 20
    if any(len(value) >= least for _, value in parse_qsl(parts.query, keep_blank_values=True)):
        return True
    if not image and len(parts.query) >= 40:
        return True
    for segment in parts.path.split("/"):
        stem = segment.rsplit(".", 1)[0] if image else segment
        if len(stem) >= 24 and set(stem) <= _DATA_CHARS and sum(c.isdigit() for c in stem) >= 3:
            return True
    return False


def exfil_rules(allowed_hosts: Sequence[str]) -> tuple[Rule, ...]:
    """Markdown links and images (and HTML images) whose URL goes to a host outside
    ``allowed_hosts`` and carries data; the span is the URL."""
    allowed = tuple(allowed_hosts)

    def check(image: bool) -> Check:
        def exfil(text: str, start: int, end: int) -> bool:
            url = text[start:end]
            if not _carries_data(url, image):
                return False
            try:
                host = urlsplit(url).hostname or ""
            except ValueError:
                host = ""
            return not host_allowed(host, allowed)

        return exfil

    def markdown(text: str, start: int, end: int) -> bool:
        close = text.rfind("](", max(0, start - 1010), start)
        line_start = text.rfind("\n", 0, close) + 1
        opening = text.rfind("[", max(line_start, close - 300), close)
        if close < 0 or opening < 0:
            return False
        image = opening > 0 and text[opening - 1] == "!"
        return check(image)(text, start, end)

    return (
        # The span is the URL of a markdown link or image: found by its "](", then the opening
        # "[" looked for on the same line (so the scan skips from "](" to "](", not "[" to "[").
        Rule(
            "exfil_link",
            "injection",
            r"\]\(\s*<?(https?://[^\s)>]{1,1000})",
            1,
            markdown,
            ALL_KINDS,
            needs=r"\]\(\s*<?https?://",
        ),
        Rule(
            "exfil_link",
            "injection",
            r"(?i)<img\b[^>]{0,300}\bsrc\s*=\s*[\"']?(https?://[^\s\"'>]{1,1000})",
            1,
            check(True),
            ALL_KINDS,
            needs=r"(?i)<img\b",
        ),
    )
