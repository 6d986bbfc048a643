"""The discovery evaluation runs offline on its vendored catalogs and fixed tasks (a small slice
here; ``make discovery-eval`` runs all of it), and its README section is rewritten in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.discovery.evaluate import BEGIN, END, evaluate, load_catalogs, load_tasks, write_readme

pytestmark = pytest.mark.slow


def test_every_task_names_a_tool_of_the_vendored_catalogs_and_there_are_at_least_fifty() -> None:
    slices, sources = load_catalogs()
    tools = {f"{piece.server_id}.{item['name']}" for piece in slices for item in piece.items}
    tasks = load_tasks()
    assert len(tasks) >= 50
    assert {task.tool for task in [*tasks, *load_tasks(part="held_out")]} <= tools
    assert {"everything", "filesystem", "fixture", "relay"} <= set(sources)  # the servers the tests run


def test_a_small_slice_reports_recall_tokens_and_speed() -> None:
    report = evaluate(task_count=8)
    assert "8 tasks and 8 held-out tasks" in report
    assert "| BM25F + synonym groups (Manifold's ranking) |" in report
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
