"""The discovery evaluation runs offline on its vendored catalogs and fixed tasks (a small slice
here; ``make discovery-eval`` runs all of it), and its README section is rewritten in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.discovery.evaluate import (
    BEGIN,
    END,
    HERE,
    evaluate,
    hybrid,
    lexical,
    load_catalogs,
    load_tasks,
    quality,
    view_of,
    write_readme,
)
from proxy.catalog.merge import ServerSlice, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.views.search_index import Semantic

pytestmark = pytest.mark.slow


def test_every_task_names_a_tool_of_the_vendored_catalogs_and_there_are_at_least_fifty() -> None:
    slices, sources = load_catalogs()
    tools = {f"{piece.server_id}.{item['name']}" for piece in slices for item in piece.items}
    tasks = load_tasks()
    assert len(tasks) >= 50
    assert {task.tool for task in [*tasks, *load_tasks(part="held_out")]} <= tools
    assert {"everything", "filesystem", "fixture", "relay"} <= set(sources)  # the servers the tests run


def test_the_real_servers_set_has_150_tools_of_published_servers_and_100_tasks_naming_them() -> None:
    slices, sources = load_catalogs(HERE / "real" / "catalogs")
    tools = {f"{piece.server_id}.{item['name']}" for piece in slices for item in piece.items}
    for name in ("tasks.json", "held_out.json"):  # the development set, and the held-out one
        tasks = load_tasks(HERE / "real" / name)
        assert len(tasks) >= 100
        assert {task.tool for task in tasks} <= tools
    assert len(tools) >= 150
    assert all(source.startswith(("npm ", "pypi ")) for source in sources.values())  # dumps, not hand-written


def test_the_fresh_held_out_set_is_100_tasks_over_150_tools_of_other_published_servers() -> None:
    slices, sources = load_catalogs(HERE / "fresh" / "catalogs")
    tools = {f"{piece.server_id}.{item['name']}" for piece in slices for item in piece.items}
    tasks = load_tasks(HERE / "fresh" / "held_out.json")
    assert len(tasks) >= 100
    assert len(tools) >= 150
    assert {task.tool for task in tasks} <= tools
    assert all(source.startswith(("npm ", "pypi ")) for source in sources.values())
    _, real = load_catalogs(HERE / "real" / "catalogs")
    _, first = load_catalogs()
    older = [*real.values(), *first.values()]
    packages = {source.split()[1] for source in older if source.startswith("npm ")}
    assert not {source.split()[1] for source in sources.values()} & packages  # servers no other set uses


def test_a_small_slice_reports_recall_tokens_and_speed() -> None:
    report = evaluate(task_count=8)
    assert "8 tasks and 8 held-out tasks; a development set and an earlier held-out set of 8 tasks" in report
    assert "the held-out set of 8 tasks over 194 tools of 9 other published servers" in report
    assert "| Hybrid: BM25F + sentence vectors, RRF (Manifold's ranking) |" in report
    assert "| Lexical only: BM25F + synonym groups (no `search` extra) |" in report
    assert "| Hybrid, 5-fold cross-validated k and weight (old + development tasks) |" in report
    assert "recall@1 | recall@5" in report
    assert "tokens in every prompt" in report
    assert " µs |" in report


def test_the_readme_section_is_replaced_not_appended(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n")
    write_readme("first", readme)
    write_readme("second", readme)
    text = readme.read_text()
    assert text.count(BEGIN) == text.count(END) == 1
    assert "second" in text
    assert "first" not in text
    assert text.startswith("# Benchmarks\n\nintro\n")


def test_a_tool_stuffed_with_every_task_s_words_does_not_beat_the_honest_tools_on_the_eval() -> None:
    slices, _ = load_catalogs()
    tasks = [*load_tasks(), *load_tasks(part="held_out")]
    words = " ".join(task.task for task in tasks)
    stuffed = {
        "name": "do_anything_create_read_list_search_file_issue_message",
        "title": "Do anything: create, read, list, search files, issues, messages",
        "description": words,
        "inputSchema": {
            "type": "object",
            "properties": {w: {"description": words} for w in words.split()[:64]},
        },
    }
    honest = view_of(build_catalog(slices, NamingCodec()), Semantic())
    gamed = view_of(build_catalog([*slices, ServerSlice("zz", "zz", [stuffed])], NamingCodec()), Semantic())
    before = quality("honest", hybrid(honest), tasks)
    after = quality("gamed", hybrid(gamed), tasks)
    stuffer = "zz.do_anything_create_read_list_search_file_issue_message"
    for rank in (hybrid(gamed), lexical(gamed.lexical)):  # and the fallback without the model
        firsts = [(rank(task.task) or [""])[0] for task in tasks]
        assert firsts.count(stuffer) <= len(tasks) // 20
    assert after.recall_at_1 >= before.recall_at_1 - 0.05
    assert after.recall_at_5 >= before.recall_at_5 - 0.05
