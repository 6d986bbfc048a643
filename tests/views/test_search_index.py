"""The search index of a view: words always, meaning when the model is installed, fused; lexical
only (and the same answer shape) without the model; bounded on 10,000-tool catalogs."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.catalog.merge import ServerSlice, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.enforce.access import ServedTools
from proxy.views import search_index
from proxy.views.search_index import Semantic, build_index, warm
from proxy.views.semantic import SemanticUnavailable, StaticModel
from tests.enforce.test_access import make_access
from tests.views.test_semantic import CATALOG, tool


def test_without_the_model_installed_search_is_lexical_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wordllama" else real(name, *a)
    )
    monkeypatch.setattr(StaticModel, "load", StaticModel.read)  # not the model read before
    with pytest.raises(SemanticUnavailable, match="not installed"):
        StaticModel.load()
    missing = Semantic()
    assert missing.cache() is None
    view = build_index(CATALOG, {}, missing)
    assert view.semantic is None
    assert [hit.name for hit in view.search("read a file", 1)] == ["fs.read_file"]
    assert view.search("what hour is it in Tokyo", 3) == ()  # no shared word, no meaning: nothing


def test_the_hybrid_finds_by_words_and_by_meaning_and_says_which() -> None:
    view = build_index(CATALOG, {name["name"]: name["name"].split(".")[0] for name in CATALOG}, Semantic())
    assert view.semantic is not None
    (by_words, *_) = view.search("read a file", 3)
    assert by_words.name == "fs.read_file"
    assert {"name", "description", "meaning"} <= set(by_words.fields)
    (by_meaning, *_) = view.search("route from the station to the museum", 3)
    assert (by_meaning.name, by_meaning.fields) == ("maps.maps_directions", ("meaning",))


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """The work in the block took at most ``seconds`` (checked after: it is CPU-bound and sync)."""
    started = time.perf_counter()
    yield
    assert time.perf_counter() - started < seconds


@pytest.mark.slow  # about two seconds of CPU
def test_a_ten_thousand_tool_catalog_is_indexed_and_searched_within_bounds() -> None:
    tools = [
        tool(f"s{i % 50}.tool_{i}", f"does thing {i} with widgets for team {i % 97} " * 20, path={})
        for i in range(10_000)
    ]
    semantic = Semantic()
    assert semantic.cache() is not None
    with within(30):  # generous: a shared 2-core machine; the benchmark has the figure
        view = build_index(tools, {}, semantic)
        hits = view.search("widgets for team 42 " * 5_000, 5)  # and a 100 KB query
    assert len(hits) == 5
    assert view.semantic is not None
    assert len(view.semantic) == 10_000


class FakeCatalogs:
    """What :func:`warm` reads of the catalogs: the served tools, and a follower of changes."""

    def __init__(self, served: ServedTools) -> None:
        self.served = served
        self.followers: list[Callable[[bool], None]] = []

    def follow(self, follower: Callable[[bool], None]) -> None:
        self.followers.append(follower)

    def change(self, served: ServedTools) -> None:
        self.served = served
        for follower in self.followers:
            follower(False)


def served_tools(tools: list[dict[str, Any]], tmp_path: Path) -> ServedTools:
    slices: dict[str, list[dict[str, Any]]] = {}
    for definition in tools:
        server, _, name = definition["name"].partition(".")
        slices.setdefault(server, []).append({**definition, "name": name})
    catalog = build_catalog([ServerSlice(s, s, items) for s, items in slices.items()], NamingCodec())
    return make_access(tmp_path).serve_tools(catalog)


@pytest.mark.anyio
async def test_the_catalog_is_embedded_off_the_loop_at_start_and_again_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    semantic = Semantic()
    cache = semantic.cache()
    assert cache is not None
    passes: list[tuple[int, int]] = []  # (thread, texts embedded so far) after each pass
    passed = [anyio.Event()]
    real = search_index._embed_catalog

    def embedding(served: ServedTools, model: Semantic) -> None:
        real(served, model)
        passes.append((threading.get_ident(), cache.embedded))
        anyio.from_thread.run_sync(passed[0].set)

    monkeypatch.setattr(search_index, "_embed_catalog", embedding)
    before = cache.embedded
    catalogs = FakeCatalogs(served_tools(CATALOG, tmp_path))
    changed = [*CATALOG, tool("notes.append_note", "Add a line to the notes file", text={})]
    async with anyio.create_task_group() as tg:
        tg.start_soon(warm, catalogs, semantic)
        with anyio.fail_after(10):
            await passed[0].wait()  # the first pass: the whole catalog
            passed[0] = anyio.Event()
            catalogs.change(served_tools(changed, tmp_path))
            await passed[0].wait()  # after the change: only the new tool
        tg.cancel_scope.cancel()
    assert [embedded - before for _, embedded in passes] == [len(CATALOG), len(CATALOG) + 1]
    assert all(thread != threading.get_ident() for thread, _ in passes)  # never on the loop
    assert len(catalogs.followers) == 1  # one follower for the task's whole life
