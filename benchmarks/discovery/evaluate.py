"""Does progressive discovery find the right tool, how fast, and what does it save a client?

Offline and deterministic: the catalogs are vendored JSON (``catalogs/``: dumps of the npm and
fixture servers the tests run, and hand-written catalogs labelled as such), the tasks a fixed
list (``tasks.json``: a task in words and the one tool that does it). The catalogs are merged as
Manifold merges them (:func:`proxy.catalog.merge.build_catalog`, prefix = server id, ``.``), the
search is Manifold's own (:class:`proxy.catalog.search.ToolIndex`) and the results are rendered
by the meta-tools' own code (:mod:`proxy.catalog.meta_tools`).

Measured:

* **recall@1 / recall@5**: the share of tasks whose tool is the first / among the first five
  results; and the mean reciprocal rank (MRR, first 20 results).
* **tokens**: a client that lists everything pays for every definition (the ``tools/list``
  result, as JSON) in every prompt; with discovery it pays for the three meta-tool definitions,
  plus, for a task, one ``search_tools`` result (5 hits) and one ``describe_tools`` result (the
  tool it picked). Tokens ≈ characters / 4 (no tokenizer is installed; the ratio is what
  matters, and it holds for JSON-heavy text within ±25% on the common BPE tokenizers).
* **speed**: the index build and the µs per query, over this catalog and over a larger one (the
  same catalog under 4 server ids: ~600 tools).

``python -m benchmarks.discovery.evaluate`` prints the report and rewrites its section of
``benchmarks/README.md``; ``--tasks N`` runs on the first N tasks only (the smoke test),
``--no-write`` leaves the README alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxy.catalog.merge import Catalog, ServerSlice, build_catalog
from proxy.catalog.meta_tools import MetaNames, describe_result, meta_definitions, search_result
from proxy.catalog.naming import NamingCodec
from proxy.catalog.search import FIELDS, Field, ToolIndex
from proxy.config.discovery import DiscoverySettings

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"
BEGIN, END = "<!-- discovery-eval:begin -->", "<!-- discovery-eval:end -->"
CHARS_PER_TOKEN = 4
SEARCH_LIMIT = 5
COPIES = 4  # of the catalog, under distinct server ids, for the speed at ~600 tools

# The same fields, all weighted alike and normalised alike: what the field weights add.
FLAT = tuple(Field(field.name, 1.0, 0.75) for field in FIELDS)
NAME_ONLY = (Field("name", 1.0, 0.3),)


@dataclass(frozen=True)
class Task:
    task: str
    tool: str


@dataclass(frozen=True)
class Quality:
    label: str
    recall_at_1: float
    recall_at_5: float
    mrr: float
    misses: tuple[tuple[str, str, tuple[str, ...]], ...]  # task, expected, top-3 found


def load_catalogs(directory: Path = HERE / "catalogs") -> tuple[list[ServerSlice], dict[str, str]]:
    slices, sources = [], {}
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        slices.append(ServerSlice(path.stem, path.stem, document["tools"]))
        sources[path.stem] = document["source"]
    return slices, sources


def load_tasks(path: Path = HERE / "tasks.json", *, part: str = "tasks") -> list[Task]:
    """``tasks``: written before the ranking was tuned; ``held_out``: written after, not tuned on."""
    return [Task(**task) for task in json.loads(path.read_text())[part]]


def quality(label: str, index: ToolIndex, tasks: Sequence[Task], *, synonyms: bool = True) -> Quality:
    at_1 = at_5 = 0
    reciprocal = 0.0
    misses = []
    for task in tasks:
        found = [hit.name for hit in index.search(task.task, 20, synonyms=synonyms)]
        rank = found.index(task.tool) + 1 if task.tool in found else None
        at_1 += rank == 1
        at_5 += rank is not None and rank <= 5
        reciprocal += 1 / rank if rank else 0.0
        if rank != 1:
            misses.append((task.task, task.tool, tuple(found[:3])))
    n = len(tasks)
    return Quality(label, at_1 / n, at_5 / n, reciprocal / n, tuple(misses))


def tokens(value: Any) -> int:
    return -(-len(orjson.dumps(value)) // CHARS_PER_TOKEN)


def token_costs(catalog: Catalog, index: ToolIndex, tasks: Sequence[Task]) -> dict[str, float]:
    settings = DiscoverySettings(mode="search")
    names = MetaNames.with_separator(".")
    meta = meta_definitions(
        names,
        default_limit=settings.default_results,
        max_limit=settings.max_results,
        max_names=settings.max_describe,
    )
    definitions: Mapping[str, Mapping[str, Any]] = {e.name: e.definition for e in catalog.entries}
    per_task = []
    for task in tasks:
        hits = index.search(task.task, SEARCH_LIMIT)
        chosen = hits[0].name if hits else task.tool
        per_task.append(
            tokens(search_result(hits, definitions)) + tokens(describe_result([chosen], definitions))
        )
    full = tokens({"tools": list(catalog.definitions)})
    listed = tokens({"tools": list(meta)})
    mean_task = statistics.fmean(per_task)
    return {
        "full_list": full,
        "meta_list": listed,
        "per_task": mean_task,
        "saved_per_prompt": 1 - listed / full,
        "saved_first_task": 1 - (listed + mean_task) / full,
    }


def speed(tools: Sequence[Mapping[str, Any]], tasks: Sequence[Task], rounds: int = 20) -> dict[str, float]:
    started = time.perf_counter()
    index = ToolIndex.build(tools)
    build_ms = (time.perf_counter() - started) * 1000
    queries = [task.task for task in tasks]
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        for query in queries:
            index.search(query, SEARCH_LIMIT)
        timings.append((time.perf_counter() - started) / len(queries) * 1e6)
    return {"tools": len(index), "build_ms": build_ms, "query_us": statistics.median(timings)}


def copies(slices: Sequence[ServerSlice], count: int) -> list[ServerSlice]:
    return [
        ServerSlice(f"{piece.server_id}{n}", f"{piece.server_id}{n}", piece.items)
        for n in range(count)
        for piece in slices
    ]


def evaluate(task_count: int | None = None) -> str:
    slices, sources = load_catalogs()
    codec = NamingCodec()
    catalog = build_catalog(slices, codec)
    tasks = load_tasks()[:task_count]
    held_out = load_tasks(part="held_out")[:task_count]
    unknown = [task.tool for task in [*tasks, *held_out] if task.tool not in catalog.by_name]
    if unknown:
        raise SystemExit(f"tasks name tools no catalog has: {unknown}")
    definitions = list(catalog.definitions)
    index = ToolIndex.build(definitions)
    results = [
        quality("BM25F + synonym groups (Manifold's ranking)", index, tasks),
        quality("BM25F, no synonym groups", index, tasks, synonyms=False),
        quality(
            "BM25, every field alike, no synonyms", ToolIndex.build(definitions, FLAT), tasks, synonyms=False
        ),
        quality(
            "BM25 over names only, no synonyms",
            ToolIndex.build(definitions, NAME_ONLY),
            tasks,
            synonyms=False,
        ),
    ]
    held = [
        quality("BM25F + synonym groups (Manifold's ranking)", index, held_out),
        quality("BM25F, no synonym groups", index, held_out, synonyms=False),
    ]
    costs = token_costs(catalog, index, tasks)
    small = speed(definitions, tasks)
    large = speed(build_catalog(copies(slices, COPIES), codec).definitions, tasks)
    return report(catalog, sources, tasks, results, held_out, held, costs, [small, large])


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def report(
    catalog: Catalog,
    sources: Mapping[str, str],
    tasks: Sequence[Task],
    results: Sequence[Quality],
    held_out: Sequence[Task],
    held: Sequence[Quality],
    costs: Mapping[str, float],
    speeds: Sequence[Mapping[str, float]],
) -> str:
    counts: dict[str, int] = {}
    for entry in catalog.entries:
        counts[entry.server_id] = counts.get(entry.server_id, 0) + 1
    lines = [
        f"{len(catalog)} tools from {len(sources)} servers, {len(tasks)} tasks and {len(held_out)} "
        "held-out tasks (`python -m benchmarks.discovery.evaluate`; `make discovery-eval`).",
        "",
        "| server | tools | catalog |",
        "|---|---:|---|",
        *(f"| `{sid}` | {counts.get(sid, 0)} | {source} |" for sid, source in sources.items()),
        "",
        f"The {len(tasks)} tasks (written before the ranking was tuned; the synonym groups were added "
        "after seeing their misses):",
        "",
        "| ranking | recall@1 | recall@5 | MRR |",
        "|---|---:|---:|---:|",
        *(f"| {q.label} | {_pct(q.recall_at_1)} | {_pct(q.recall_at_5)} | {q.mrr:.2f} |" for q in results),
        "",
        f"The {len(held_out)} held-out tasks (written after that tuning, not tuned on):",
        "",
        "| ranking | recall@1 | recall@5 | MRR |",
        "|---|---:|---:|---:|",
        *(f"| {q.label} | {_pct(q.recall_at_1)} | {_pct(q.recall_at_5)} | {q.mrr:.2f} |" for q in held),
        "",
        f"Tokens (≈ characters / {CHARS_PER_TOKEN}): listing every tool costs "
        f"**{costs['full_list']:.0f}** tokens in every prompt; the three meta-tools cost "
        f"**{costs['meta_list']:.0f}** ({_pct(costs['saved_per_prompt'])} less), and a task adds "
        f"{costs['per_task']:.0f} on average (one search of {SEARCH_LIMIT} results and one "
        f"describe_tools of the tool picked): {_pct(costs['saved_first_task'])} less than the "
        "full list even for the first task.",
        "",
        "| catalog | index build | per query |",
        "|---|---:|---:|",
        *(f"| {s['tools']:.0f} tools | {s['build_ms']:.1f} ms | {s['query_us']:.0f} µs |" for s in speeds),
        "",
        f"Tasks whose tool was not first ({len(results[0].misses) + len(held[0].misses)}; "
        "expected → top 3 found):",
        "",
        *(
            f"- {task!r}: `{tool}` → {', '.join(f'`{n}`' for n in found) or 'nothing'}"
            for task, tool, found in [*results[0].misses, *held[0].misses]
        ),
    ]
    return "\n".join(lines)


def write_readme(text: str, path: Path = README) -> None:
    readme = path.read_text()
    section = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in readme and END in readme:
        head, rest = readme.split(BEGIN, 1)
        readme = head + section + rest.split(END, 1)[1]
    else:
        readme = (
            readme.rstrip("\n")
            + "\n\n## Progressive discovery: search quality and savings\n\n"
            + section
            + "\n"
        )
    path.write_text(readme)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=None, help="the first N tasks only")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite benchmarks/README.md")
    args = parser.parse_args()
    text = evaluate(args.tasks)
    print(text)
    if not args.no_write and args.tasks is None:
        write_readme(text)


if __name__ == "__main__":
    main()
