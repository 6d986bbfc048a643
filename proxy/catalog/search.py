"""A lexical ranking of tools for a task described in words: BM25F over a tool's fields.

:meth:`ToolIndex.build` reads each tool definition's fields, each a bag of terms with its own
weight and length normalisation (BM25F):

==============  ======  =====  ==========================================================
field           weight  ``b``  text
==============  ======  =====  ==========================================================
``name``        3.0     0.3    the namespaced name, split on separators and case changes
``title``       2.0     0.5    ``title`` and ``annotations.title``
``description`` 1.0     0.75   ``description``
``arguments``   1.0     0.5    top-level argument names (twice) and their descriptions
==============  ======  =====  ==========================================================

A term's pseudo-frequency in a tool is the weighted sum of its length-normalised frequency in
each field; its score is ``idf * tf / (k1 + tf)``. Every (term, tool) contribution is computed
once, when the index is built, so a query only adds up postings: a few microseconds per term
over hundreds of tools. A query term the catalog does not have matches, at half weight, the
catalog terms it is a prefix of (``repo`` → ``repository``), or that are a prefix of it; and
every query term also matches, at half weight, the other words of its group in a small fixed
table of words tool authors use for the same thing (``folder``/``directory``,
``create``/``add``/``new``/``make``, ``rename``/``move`` …: :data:`_GROUPS`).

Terms are words and numbers, Unicode-aware: ``createIssue``, ``create_issue``,
``create-issue`` and ``Create issue`` all give ``creat``, ``issu``: a light suffix stripping
(plurals, ``-ing``, ``-ed``, a final ``e``) lets ``files`` find ``file`` and ``created`` find
``create``. Nothing here is learned or downloaded, and nothing is a regular expression built from
input: tokenizing is linear in the text, and the texts a tool contributes are capped.

Pure: definitions in, ranked names out. The same definitions give the same ranking (ties keep
catalog order).
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["FIELDS", "Field", "Hit", "ToolIndex", "terms"]

_WORDS: Final = re.compile(r"[^\W_]+")  # runs of letters and digits, any script
# Words too common in task descriptions and tool texts to tell tools apart.
_STOP: Final = frozenset(
    {
        *("a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "for", "from", "get"),
        *("i", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "please", "some"),
        *("that", "the", "their", "them", "this", "to", "using", "via", "want", "we", "what"),
        *("which", "with", "you", "your"),
    }
)
_K1: Final = 1.2
_PREFIX_WEIGHT: Final = 0.5  # a query term matched only as a prefix counts half
_MAX_EXPANSIONS: Final = 8  # catalog terms one query term may expand to
_MIN_PREFIX: Final = 3  # shorter query terms are matched exactly only
_MAX_FIELD_CHARS: Final = 4096  # of one field of one tool: a hostile description costs no more
_MAX_ARGUMENTS: Final = 64  # argument names (and descriptions) read per tool
_MAX_QUERY_TERMS: Final = 64  # distinct terms of a query that are scored
_SYNONYM_WEIGHT: Final = 0.5  # a query term's synonym counts half
# Words that name the same action or thing in tool catalogs: a query term also matches the others
# of its group (query side only, at half weight). General English of tool catalogs, not a
# thesaurus: a group holds words one tool author uses where another uses the next.
_GROUPS: Final = (
    "create add new make",
    "delete remove erase destroy drop",
    "fetch retrieve read show view display",
    "list enumerate",
    "update edit modify change set patch replace",
    "search find lookup locate query",
    "send post publish",
    "write save store put",
    "move rename",
    "folder directory dir",
    "file document",
    "run execute exec invoke trigger start",
    "stop kill cancel terminate abort",
    "user member people person account",
    "comment reply respond",
    "image picture photo screenshot",
    "info information detail metadata stat",
    "size big large length",
    "copy duplicate clone",
    "download fetch",
)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    weight: float
    b: float  # how much the field's length normalises its term frequency (0: not at all)


FIELDS: Final = (
    Field("name", 3.0, 0.3),
    Field("title", 2.0, 0.5),
    Field("description", 1.0, 0.75),
    Field("arguments", 1.0, 0.5),
)


@dataclass(frozen=True, slots=True)
class Hit:
    name: str
    score: float


def _stem(word: str) -> str:
    """A light, deterministic suffix stripping: the same stem for a word's common inflections."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running -> run
            break
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]  # create, created, creates, creating -> creat
    return word


def _split_case(word: str) -> Iterable[str]:
    """``createIssue`` -> ``create``, ``Issue``; ``HTTPServer`` -> ``HTTP``, ``Server``."""
    start = 0
    for i in range(1, len(word)):
        previous, current = word[i - 1], word[i]
        nxt = word[i + 1] if i + 1 < len(word) else ""
        if (previous.islower() and current.isupper()) or (
            previous.isupper() and current.isupper() and nxt.islower()
        ):
            yield word[start:i]
            start = i
    yield word[start:]


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order: words split on case changes, case-folded, stemmed,
    stop words left out."""
    found: list[str] = []
    for run in _WORDS.findall(text):
        for word in _split_case(run) if not run.islower() else (run,):
            folded = word.casefold()
            if folded not in _STOP:
                found.append(_stem(folded))
    return found


def _synonym_table() -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    for group in _GROUPS:
        stems = list(dict.fromkeys(_stem(word) for word in group.split()))
        for stem in stems:
            table.setdefault(stem, []).extend(other for other in stems if other != stem)
    return {stem: tuple(dict.fromkeys(others)) for stem, others in table.items()}


_SYNONYMS: Final = _synonym_table()


def _text(value: object) -> str:
    return value[:_MAX_FIELD_CHARS] if isinstance(value, str) else ""


def _fields(tool: Mapping[str, Any]) -> tuple[list[str], ...]:
    """The terms of each of :data:`FIELDS` of one tool definition."""
    annotations = tool.get("annotations")
    title = _text(tool.get("title"))
    if isinstance(annotations, Mapping) and isinstance(annotations.get("title"), str):
        title = f"{title} {_text(annotations['title'])}"
    arguments: list[str] = []
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping):
        for index, (key, spec) in enumerate(properties.items()):
            if index >= _MAX_ARGUMENTS:
                break
            named = terms(_text(key))
            arguments += named + named  # an argument's name says more than its description
            if isinstance(spec, Mapping):
                arguments += terms(_text(spec.get("description")))
    return (
        terms(_text(tool.get("name"))),
        terms(title),
        terms(_text(tool.get("description"))),
        arguments,
    )


class ToolIndex:
    """An immutable BM25F index over one list of tool definitions; build once per list."""

    __slots__ = ("_names", "_postings", "_vocabulary")

    def __init__(
        self,
        names: tuple[str, ...],
        postings: dict[str, tuple[tuple[int, float], ...]],
    ) -> None:
        self._names = names
        self._postings = postings
        self._vocabulary = sorted(postings)  # for prefix matches, by bisection

    @classmethod
    def build(cls, tools: Sequence[Mapping[str, Any]], fields: Sequence[Field] = FIELDS) -> ToolIndex:
        """Index ``tools`` (definitions as clients see them; ones without a string name are
        skipped). Costs about a millisecond per hundred tools."""
        names: list[str] = []
        bags: list[list[Counter[str]]] = []
        lengths: list[list[int]] = []
        for tool in tools:
            name = tool.get("name")
            if not isinstance(name, str):
                continue
            names.append(name)
            per_field = _fields(tool)[: len(fields)]
            bags.append([Counter(field_terms) for field_terms in per_field])
            lengths.append([len(field_terms) for field_terms in per_field])
        count = len(names)
        averages = [(sum(doc[f] for doc in lengths) / count) if count else 0.0 for f in range(len(fields))]
        pseudo: dict[str, list[tuple[int, float]]] = {}
        for doc, doc_bags in enumerate(bags):
            weighted: dict[str, float] = {}
            for f, bag in enumerate(doc_bags):
                field = fields[f]
                norm = 1.0 - field.b + field.b * (lengths[doc][f] / averages[f] if averages[f] else 0.0)
                for term, frequency in bag.items():
                    weighted[term] = weighted.get(term, 0.0) + field.weight * frequency / norm
            for term, tf in weighted.items():
                pseudo.setdefault(term, []).append((doc, tf))
        postings: dict[str, tuple[tuple[int, float], ...]] = {}
        for term, docs in pseudo.items():
            idf = math.log(1.0 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            postings[term] = tuple((doc, idf * tf / (_K1 + tf)) for doc, tf in docs)
        return cls(tuple(names), postings)

    def __len__(self) -> int:
        return len(self._names)

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def search(self, query: str, limit: int, *, synonyms: bool = True) -> tuple[Hit, ...]:
        """The at most ``limit`` best tools for ``query``, best first; tools that share no term
        with it are left out (an empty or all-stop-word query finds nothing). ``synonyms``:
        also match the words of a query term's group (:data:`_GROUPS`), at half weight."""
        scores: dict[int, float] = {}
        wanted = list(dict.fromkeys(terms(query)))[:_MAX_QUERY_TERMS]  # distinct, in order
        weights: dict[str, float] = {}
        for term in wanted:
            for matched, weight in self._matches(term):
                weights[matched] = max(weights.get(matched, 0.0), weight)
        if synonyms:
            for term in wanted:
                for other in _SYNONYMS.get(term, ()):
                    if other in self._postings and other not in weights:
                        weights[other] = _SYNONYM_WEIGHT
        for matched, weight in weights.items():
            for doc, contribution in self._postings[matched]:
                scores[doc] = scores.get(doc, 0.0) + weight * contribution
        if limit <= 0 or not scores:
            return ()
        best = heapq.nsmallest(limit, scores.items(), key=lambda item: (-item[1], item[0]))
        return tuple(Hit(self._names[doc], round(score, 6)) for doc, score in best)

    def _matches(self, term: str) -> list[tuple[str, float]]:
        """The catalog terms ``term`` matches, each with its weight."""
        if term in self._postings:
            return [(term, 1.0)]
        if len(term) < _MIN_PREFIX:
            return []
        vocabulary = self._vocabulary
        found: list[tuple[str, float]] = []
        start = bisect.bisect_left(vocabulary, term)
        for candidate in vocabulary[start : start + _MAX_EXPANSIONS]:
            if not candidate.startswith(term):
                break
            found.append((candidate, _PREFIX_WEIGHT))
        # Catalog terms that are a prefix of the query term (``configuration`` -> ``config``).
        for cut in range(len(term) - 1, _MIN_PREFIX, -1):
            if len(found) >= _MAX_EXPANSIONS:
                break
            if term[:cut] in self._postings:
                found.append((term[:cut], _PREFIX_WEIGHT))
                break
        return found
