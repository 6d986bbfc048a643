"""What a tool is *about*: sentence vectors from a static embedding model shipped in a wheel.

The model is WordLlama's ``l2_supercat`` (MIT), whose weights (a 32,000 by 256 table of token
vectors, float16, trained so that a text's vector is the mean of its tokens' vectors) and
tokenizer vocabulary ship inside the ``wordllama`` wheel: nothing is downloaded, ever. Only those
two files are read; the ``wordllama`` package itself is never imported (its loader would fetch any
other size from a hub). It is the optional ``search`` extra; without it
:meth:`StaticModel.load` raises :class:`SemanticUnavailable` and discovery ranks lexically.

Memory is what bounds this (idle RSS with the model loaded ≤ +40 MiB, numpy's own ~20 MiB
included): the table is cut to its first :data:`DIMENSIONS` columns (the model was trained
Matryoshka-style, so a prefix of a vector is a coarser vector) and kept in float16 (8 MiB). The
tokenizer is a greedy longest match over the model's own vocabulary, word by word (the vocabulary
is a SentencePiece BPE's; greedy matching gives the same pieces for the common words and nearly
the same for the rest, for 3 MiB instead of the 20 MiB of the ``tokenizers`` library with the
merge table). Texts are cut to :data:`MAX_TEXT_CHARS`.

:class:`SemanticIndex` holds one vector per tool; :class:`VectorCache` keeps the vectors of tool
texts already embedded (by a hash of the text), so a catalog change embeds only what changed.
Both are built off the event loop by their caller (:mod:`proxy.views.discovery`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import struct
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cachetools import LRUCache

from proxy.catalog.search import normalise
from proxy.views.word_match import WordMatch

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

__all__ = [
    "DIMENSIONS",
    "MAX_TEXT_CHARS",
    "SemanticIndex",
    "SemanticUnavailable",
    "StaticModel",
    "WORD_SHARE",
    "VectorCache",
    "tool_text",
]

DIMENSIONS: Final = 128  # of the model's 256: half the memory, most of the meaning
WORD_SHARE: Final = 0.4  # of a tool's nearness that is its word-by-word match
MAX_TEXT_CHARS: Final = 2000  # of a tool's text or of a query that is embedded
_MAX_PIECE: Final = 24  # characters of the longest vocabulary piece tried
_CACHED_WORD_CHARS: Final = 32  # longer words are tokenized every time, never kept in the cache
_WEIGHTS: Final = ("weights", "l2_supercat_256.safetensors")
_VOCABULARY: Final = ("tokenizers", "l2_supercat_tokenizer_config.json")
_SPACE: Final = "\u2581"  # SentencePiece's word-start mark


class SemanticUnavailable(Exception):
    """The ``search`` extra (numpy and the model's wheel) is not installed, or its files are not
    what this module reads."""


def _model_files() -> tuple[Path, Path]:
    spec = importlib.util.find_spec("wordllama")  # finds the files without running the package
    if spec is None or not spec.submodule_search_locations:
        raise SemanticUnavailable("the model's package (wordllama, the 'search' extra) is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root.joinpath(*_WEIGHTS), root.joinpath(*_VOCABULARY)


def _read_table(path: Path, dimensions: int) -> Vectors:
    """The first ``dimensions`` columns of the safetensors file's one float16 matrix.

    The format is a little-endian u64 header length, a JSON header and the raw tensor bytes."""
    import numpy as np

    with path.open("rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
        tensor = header["embedding.weight"]
        rows, columns = tensor["shape"]
        start, end = tensor["data_offsets"]
        if tensor["dtype"] != "F16" or end - start != rows * columns * 2 or dimensions > columns:
            raise SemanticUnavailable(f"unexpected model table in {path.name}: {tensor}")
        file.seek(8 + size + start)
        table = np.fromfile(file, dtype="<f2", count=rows * columns).reshape(rows, columns)
    return np.ascontiguousarray(table[:, :dimensions])  # a copy: the full table is freed


def _read_vocabulary(path: Path) -> dict[str, int]:
    """The ``model.vocab`` object of a ``tokenizers`` JSON file, parsed alone: neither the merge
    table beside it (61k pairs) nor the whole file as text is ever built, which keeps the peak of
    the process's heap (and so its resident size for good) small."""
    data = path.read_bytes()
    start = data.index(b"{", data.index(b'"vocab"', data.index(b'"model"')))
    merges = data.find(b'"merges"', start)
    piece = data[start : merges if merges > start else len(data)].decode("utf-8")
    del data
    vocab, _ = json.JSONDecoder().raw_decode(piece)
    if not isinstance(vocab, dict):
        raise ValueError("model.vocab is not an object")
    return {str(key): int(index) for key, index in vocab.items()}


class StaticModel:
    """Token vectors and a vocabulary; :meth:`embed` is pure and thread-safe."""

    __slots__ = ("_pieces", "_table", "dimensions")

    def __init__(self, table: Vectors, pieces: Mapping[str, int]) -> None:
        self._table = table
        self._pieces = pieces
        self.dimensions: int = int(table.shape[1])

    @classmethod
    def load(cls, dimensions: int = DIMENSIONS) -> StaticModel:
        """The shipped model, read once per process (a few hundred ms; call it off the loop).

        Raises:
            SemanticUnavailable: the ``search`` extra is not installed or its files are not the
                expected ones.
        """
        return _load(dimensions)

    @classmethod
    def read(cls, dimensions: int = DIMENSIONS) -> StaticModel:
        """The shipped model, read now (:meth:`load` reads it once and keeps it).

        Raises:
            SemanticUnavailable: as :meth:`load`.
        """
        try:
            import numpy  # noqa: F401
        except ImportError as exc:
            raise SemanticUnavailable("numpy (the 'search' extra) is not installed") from exc
        weights, vocabulary = _model_files()
        try:
            table = _read_table(weights, dimensions)
            pieces = _read_vocabulary(vocabulary)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SemanticUnavailable(f"the model's files could not be read: {exc}") from exc
        return cls(table, pieces)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text (zero for a text with no known piece)."""
        import numpy as np

        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            ids = self._ids(text)
            if ids:
                vectors[row] = self._table[ids].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def word_vectors(self, words: Sequence[str]) -> Vectors:
        """One unit vector per word (already normalised, one word each): the mean of its pieces'
        vectors; zero for a word with no known piece."""
        import numpy as np

        vectors = np.zeros((len(words), self.dimensions), dtype=np.float32)
        for row, word in enumerate(words):
            ids = self._word(word)
            if ids:
                vectors[row] = self._table[list(ids)].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in normalise(text[:MAX_TEXT_CHARS]).split():
            ids += self._word(word)
        return ids

    def _word(self, word: str) -> tuple[int, ...]:
        if len(word) > _CACHED_WORD_CHARS:  # a long "word" (rare, or hostile): matched, not kept
            return _greedy(self._pieces, _SPACE + word)
        return _cached_pieces(_Vocabulary(self._pieces), _SPACE + word)


@functools.lru_cache(maxsize=4)
def _load(dimensions: int) -> StaticModel:
    return StaticModel.read(dimensions)  # a failure raises, and is not kept: the next call tries again


class _Vocabulary:
    """Hashable by identity, so the per-word cache is shared by the one loaded model."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: Mapping[str, int]) -> None:
        self.pieces = pieces

    def __hash__(self) -> int:
        return id(self.pieces)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Vocabulary) and other.pieces is self.pieces


@functools.lru_cache(maxsize=1 << 15)
def _cached_pieces(vocabulary: _Vocabulary, word: str) -> tuple[int, ...]:
    return _greedy(vocabulary.pieces, word)


def _greedy(pieces: Mapping[str, int], word: str) -> tuple[int, ...]:
    """Greedy longest-match of ``word`` over ``pieces``; characters no piece covers are skipped
    (the vocabulary's byte fallbacks add nothing to a mean of meanings). Linear in the word."""
    found: list[int] = []
    start, length = 0, len(word)
    while start < length:
        for end in range(min(length, start + _MAX_PIECE), start, -1):
            piece = pieces.get(word[start:end])
            if piece is not None:
                found.append(piece)
                start = end
                break
        else:
            start += 1  # no piece starts here
    return tuple(found)


def tool_text(definition: Mapping[str, Any], server: str = "") -> str:
    """The text a tool is embedded from: its name in words, title, description and argument names."""
    name = definition.get("name")
    words = _words(name) if isinstance(name, str) else ""
    parts = [words]
    title = definition.get("title")
    if isinstance(title, str):
        parts.append(title)
    description = definition.get("description")
    if isinstance(description, str):
        parts.append(description)
    schema = definition.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping):
        parts.append(" ".join(_words(str(key)) for key in list(properties)[:32]))
    if server:
        parts.append(server)
    return " ".join(parts)[:MAX_TEXT_CHARS]


def _words(name: str) -> str:
    """``github.create_issue`` -> ``github create issue``; ``createIssue`` -> ``create Issue``."""
    out: list[str] = []
    previous = ""
    for char in name:
        if not (char.isalnum()):
            out.append(" ")
        elif previous.islower() and char.isupper():
            out.append(" " + char)
        else:
            out.append(char)
        previous = char
    return unicodedata.normalize("NFKC", "".join(out))


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class VectorCache:
    """Vectors of texts already embedded, by a hash of the text, at most ``size`` (least recently
    used go first): a catalog change embeds only the tools whose text changed. Thread-safe: the
    catalog's warm-up and a view's index build may embed at once."""

    def __init__(self, model: StaticModel, size: int = 16_384) -> None:
        self.model = model
        self.embedded = 0  # texts embedded so far (the others were found here)
        self._vectors: LRUCache[bytes, Vectors] = LRUCache(size)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Vectors:
        with self._lock:
            return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        keys = [_digest(text) for text in texts]
        out = np.empty((len(texts), self.model.dimensions), dtype=np.float32)
        missing: list[int] = []
        for row, key in enumerate(keys):  # read before any insertion can evict what was found
            found = self._vectors.get(key)
            if found is None:
                missing.append(row)
            else:
                out[row] = found
        if missing:
            # Kept in float16 (half the memory), and answered as kept, so a ranking is the same
            # whether its vectors were just embedded or found here.
            fresh = self.model.embed([texts[row] for row in missing]).astype(np.float16)
            self.embedded += len(missing)
            out[missing] = fresh
            for i, row in enumerate(missing):
                self._vectors[keys[row]] = fresh[i]
        return out


class SemanticIndex:
    """One unit vector per tool, and its words (:class:`~proxy.views.word_match.WordMatch`):
    :meth:`ranking` mixes the cosine of the query's and the tool's mean vectors with the word-by-word
    match, :data:`WORD_SHARE` of the latter (chosen by 5-fold cross-validation on the development
    sets of ``benchmarks/discovery``)."""

    __slots__ = ("_matrix", "_model", "_words", "names")

    def __init__(
        self, names: tuple[str, ...], matrix: Vectors, model: StaticModel, words: WordMatch | None = None
    ) -> None:
        self.names = names
        self._matrix = matrix
        self._model = model
        self._words = words

    @classmethod
    def build(
        cls,
        tools: Sequence[Mapping[str, Any]],
        cache: VectorCache,
        *,
        servers: Mapping[str, str] | None = None,
    ) -> SemanticIndex:
        servers = servers or {}
        named = [tool for tool in tools if isinstance(tool.get("name"), str)]
        names = tuple(str(tool["name"]) for tool in named)
        texts = [tool_text(tool, servers.get(name, "")) for tool, name in zip(named, names, strict=True)]
        return cls(names, cache.embed(texts), cache.model, WordMatch(texts, cache.model))

    def __len__(self) -> int:
        return len(self.names)

    def mean_only(self) -> SemanticIndex:
        """The same vectors without the word-by-word match (what the evaluation compares with)."""
        return SemanticIndex(self.names, self._matrix, self._model)

    def ranking(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` tools nearest ``query`` in meaning, nearest first, with their cosine
        similarity; nothing for a query with no known word."""
        import numpy as np

        if limit <= 0 or not self.names:
            return []
        vector = self._model.embed([query])[0]
        if not vector.any():
            return []
        similarities = self._matrix @ vector
        by_word = self._words.scores(query) if self._words is not None else None
        if by_word is not None:
            similarities = WORD_SHARE * by_word + (1 - WORD_SHARE) * similarities
        limit = min(limit, len(self.names))
        top = np.argpartition(-similarities, limit - 1)[:limit]
        order = top[np.lexsort((top, -similarities[top]))]  # ties: catalog order
        return [(self.names[i], float(similarities[i])) for i in order]
