"""The approved definitions kept beside the pins: a pins question after a restart still says
what changed (issue #27), within the documented bounds, and only for the pinned hash."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.enforce.pin_definitions import (
    MAX_DEFINITION_BYTES,
    MAX_DEFINITIONS,
    Definitions,
    definitions_path,
    fields_hash,
    save_definitions,
)
from tests.enforce.test_access import GH_TOOLS, changed, entry, make_access, tools


def test_a_pins_question_after_a_restart_says_what_changed(tmp_path: Path) -> None:
    before = make_access(tmp_path, pins="confirm")
    before.serve_tools(tools())  # pinned and approved as first seen; both saved now
    assert Path(definitions_path(tmp_path / "pins.json")).exists()

    after = make_access(tmp_path, pins="confirm")  # a restart: nothing of the above in memory
    rug_pull = tools(gh=changed(GH_TOOLS, "get_issue", "Read an issue, and more"))
    after.serve_tools(rug_pull)

    change = after.pin_change(entry(rug_pull, "gh.get_issue"))
    assert change is not None
    assert "not known" not in change.summary
    assert "description: " in change.summary
    assert "'Read an issue, and more'" in change.summary


def test_without_the_definitions_file_the_question_says_the_text_is_not_known(tmp_path: Path) -> None:
    make_access(tmp_path, pins="confirm").serve_tools(tools())
    Path(definitions_path(tmp_path / "pins.json")).unlink()
    after = make_access(tmp_path, pins="confirm")
    rug_pull = tools(gh=changed(GH_TOOLS, "get_issue", "Read an issue, and more"))
    after.serve_tools(rug_pull)
    change = after.pin_change(entry(rug_pull, "gh.get_issue"))
    assert change is not None
    assert "not known here" in change.summary


def test_a_stored_definition_counts_only_for_the_hash_it_was_stored_with(tmp_path: Path) -> None:
    store = Definitions(str(tmp_path / "d.json"))
    fields = {"description": "old"}
    pinned = fields_hash(fields, "t")
    assert store.keep("s/t", pinned, fields)
    assert store.approved("s/t", pinned, "t") == fields
    assert store.approved("s/t", fields_hash({"description": "accepted since"}, "t"), "t") is None
    assert store.approved("s/t", pinned, "another_name") is None


def test_a_tampered_file_is_not_believed(tmp_path: Path) -> None:
    path = str(tmp_path / "d.json")
    fields = {"description": "old"}
    pinned = fields_hash(fields, "t")
    forged = {"s/t": orjson.dumps({"hash": pinned, "fields": {"description": "forged"}}).decode()}
    save_definitions(path, forged)
    store = Definitions(path)
    store.load()
    assert store.approved("s/t", pinned, "t") is None  # its fields do not hash to the pin


def test_a_bad_file_is_ignored_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_bytes(b"not json")
    store = Definitions(str(path))
    store.load()
    assert store.stored == {}


def test_the_store_is_bounded_in_count_and_size(tmp_path: Path) -> None:
    store = Definitions(str(tmp_path / "d.json"))
    huge = {"description": "x" * MAX_DEFINITION_BYTES}
    assert not store.keep("s/huge", fields_hash(huge, "huge"), huge)
    for index in range(MAX_DEFINITIONS):
        fields = {"description": str(index)}
        assert store.keep(f"s/t{index}", fields_hash(fields, f"t{index}"), fields)
    one_more = {"description": "one more"}
    assert not store.keep("s/more", fields_hash(one_more, "more"), one_more)
    replaced = {"description": "replaced"}
    assert store.keep("s/t0", fields_hash(replaced, "t0"), replaced)  # a kept tool may change


def test_saved_definitions_read_back(tmp_path: Path) -> None:
    path = str(tmp_path / "d.json")
    store = Definitions(path)
    fields = {"description": "d", "inputSchema": {"type": "object"}}
    store.keep("s/t", fields_hash(fields, "t"), fields)
    save_definitions(path, store.stored)
    again = Definitions(path)
    again.load()
    assert again.approved("s/t", fields_hash(fields, "t"), "t") == fields
