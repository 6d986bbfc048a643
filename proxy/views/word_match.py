"""Word-by-word nearness of a query to each tool: late interaction over static word vectors.

A tool's one mean vector (:class:`proxy.views.semantic.SemanticIndex`) blurs a long description
into its most common words; a task worded differently from it ("remember that…" for a tool that
*stores an observation in memory*) is near one or two of its words, not their mean. So each query
word is also matched against every word of the tool, and the tool scores, for each query word,
its nearest word's cosine: :meth:`WordMatch.scores` is the mean of those maxima over the query's
words, each weighted by how rare the word is in the catalog (``ln(1 + N / (1 + df))``), so
``file`` in a catalog of file tools counts less than ``remember``.

A word's vector is the normalised mean of its pieces' vectors in the same model. The catalog's
distinct words are embedded once per build into one matrix (float32: it is multiplied on every
query), and each tool is a run of row numbers into it: its first :data:`MAX_TOOL_WORDS` distinct
words, i.e. its name, title and the start of its description, where authors say what it does. A
tool cannot buy matches with a long text: one stuffed with every task's words takes the first
place on 2 of the 100 old tasks, against 11 when 80 words were read (``tests/benchmarks``). A query
is one matrix-vector product and one segmented maximum per word: linear in the catalog, no Python
loop per tool. Words are runs of letters and digits, lower-cased; stop words and numbers are left
out on both sides; a query reads its first :data:`MAX_QUERY_WORDS` distinct words.

Built off the event loop with its :class:`~proxy.views.semantic.SemanticIndex`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from proxy.catalog.search import STOP_WORDS, normalise

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

__all__ = ["MAX_QUERY_WORDS", "MAX_TOOL_WORDS", "WordMatch", "content_words"]

MAX_TOOL_WORDS: Final = 20  # distinct words of a tool's text that are matched
MAX_QUERY_WORDS: Final = 32  # distinct words of a query that are matched
_MAX_WORD_CHARS: Final = 40  # a longer "word" is cut: it is matched by its pieces anyway
_WORDS: Final = re.compile(r"[^\W_]+")  # runs of letters and digits, any script


class WordVectors(Protocol):
    """What :class:`WordMatch` needs of the model."""

    dimensions: int

    def word_vectors(self, words: Sequence[str]) -> Vectors: ...


def content_words(text: str, limit: int) -> list[str]:
    """The first ``limit`` distinct words of ``text`` that have a letter and are not stop words."""
    found: dict[str, None] = {}
    for match in _WORDS.finditer(normalise(text)):
        if len(found) >= limit:
            break
        word = match.group().lower()[:_MAX_WORD_CHARS]
        if word not in STOP_WORDS and not word.isdigit():
            found.setdefault(word)
    return list(found)


class WordMatch:
    """The catalog's word vectors and each tool's words; :meth:`scores` is pure and thread-safe."""

    __slots__ = ("_has_words", "_idf", "_model", "_rows", "_starts", "_vectors", "_words")

    def __init__(self, texts: Sequence[str], model: WordVectors) -> None:
        import numpy as np

        self._model = model
        index: dict[str, int] = {}
        rows: list[int] = []
        starts: list[int] = []
        frequency: list[int] = []
        for text in texts:
            starts.append(len(rows))
            for word in content_words(text, MAX_TOOL_WORDS):
                row = index.setdefault(word, len(index))
                if row == len(frequency):
                    frequency.append(0)
                frequency[row] += 1
                rows.append(row)
        self._words = index
        count = len(texts)
        self._idf = {word: math.log(1 + count / (1 + frequency[row])) for word, row in index.items()}
        self._vectors = model.word_vectors(list(index))
        self._rows = np.asarray(rows, dtype=np.intp)
        self._starts = np.asarray(starts, dtype=np.intp)
        self._has_words = np.diff(np.append(self._starts, len(rows))) > 0

    def __len__(self) -> int:
        return len(self._starts)

    def scores(self, query: str) -> Vectors | None:
        """Per tool, in build order: the rarity-weighted mean over the query's words of the
        cosine of the tool's nearest word; ``None`` for a query with no word to match."""
        import numpy as np

        words = content_words(query, MAX_QUERY_WORDS)
        if not words or not len(self._rows):
            return None
        vectors = self._model.word_vectors(words)
        known = [int(row) for row in np.flatnonzero(vectors.any(axis=1))]  # words with a known piece
        if not known:
            return None
        words = [words[row] for row in known]
        vectors = vectors[known]
        top = math.log(1 + len(self))  # a word no tool has is as rare as can be
        weights = np.asarray([self._idf.get(word, top) for word in words], dtype=np.float32)
        # Per query word: one matrix-vector product with the catalog's words (a product of two
        # matrices this small costs more in BLAS threads than in arithmetic), then each tool's
        # maximum over its words; one word at a time, so a 10,000-tool catalog's temporary is a
        # row of its words, not one per query word.
        starts = self._starts[self._has_words]
        total = np.zeros(len(starts), dtype=np.float32)
        for vector, weight in zip(vectors, weights.tolist(), strict=True):
            nearest = np.maximum.reduceat(np.take(self._vectors @ vector, self._rows), starts)
            total += weight * nearest
        out = np.zeros(len(self), dtype=np.float32)
        out[self._has_words] = total / weights.sum()
        return out
