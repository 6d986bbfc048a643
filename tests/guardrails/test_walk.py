"""Text inside JSON: every string and key found in order, bounded in characters and depth (and
saying so), binary payloads left out, and edits written back without touching the rest."""

from __future__ import annotations

from types import MappingProxyType

from proxy.guardrails.walk import KEY, one_text, replace, texts


def test_every_string_and_key_is_a_block_with_its_path() -> None:
    found = texts({"a": ["x", {"b": "y"}], "n": 3}, max_chars=100, max_depth=10)
    assert found.blocks == ["a", "x", "b", "y", "n"]
    assert found.paths == [((KEY, "a"),), ("a", 0), ("a", 1, (KEY, "b")), ("a", 1, "b"), ((KEY, "n"),)]
    assert not found.truncated


def test_any_mapping_and_tuple_is_walked_like_a_dict_and_a_list() -> None:
    """Plain dicts and lists take a fast type check; other mappings and tuples the same path."""
    plain = texts({"a": ["x", {"b": "y"}], "n": 3}, max_chars=100, max_depth=10)
    value = MappingProxyType({"a": ("x", MappingProxyType({"b": "y"})), "n": 3})
    other = texts(value, max_chars=100, max_depth=10)
    assert (other.blocks, other.paths) == (plain.blocks, plain.paths)
    deep: object = MappingProxyType({"k": "v"})
    for _ in range(20):
        deep = (deep,)
    assert texts(deep, max_chars=100, max_depth=5).why == "depth"


def test_the_character_bound_cuts_the_block_that_crosses_it_and_says_so() -> None:
    found = texts(["abcdef", "ghi"], max_chars=4, max_depth=10)
    assert found.blocks == ["abcd"]
    assert (found.truncated, found.why, found.cut) == (True, "bytes", "abcdef")


def test_the_depth_bound_stops_the_walk_and_says_so() -> None:
    deep: object = "secret"
    for _ in range(20):
        deep = [deep]
    found = texts(deep, max_chars=100, max_depth=5)
    assert found.blocks == []
    assert (found.truncated, found.why) == (True, "depth")


def test_image_data_and_blobs_are_not_text() -> None:
    content = [
        {"type": "image", "data": "QUtJQQ==" * 10, "mimeType": "image/png"},
        {"uri": "file:///x", "blob": "AAAA"},
    ]
    found = texts(content, max_chars=1000, max_depth=10, keys=False, content=True)
    assert found.blocks == ["file:///x"]
    assert found.skipped_bytes == 84


def test_in_arguments_nothing_is_binary_or_structure() -> None:
    arguments = {"type": "image", "data": "AKIA", "uri": "u", "blob": "b"}
    found = texts(arguments, max_chars=1000, max_depth=10, keys=False)
    assert found.blocks == ["image", "AKIA", "u", "b"]


def test_replace_edits_values_and_keys_and_shares_the_rest() -> None:
    untouched = {"deep": [1, 2]}
    value = {"a": ["x", "y"], "k": untouched, "secret-key": "v"}
    edited = replace(value, {("a", 1): "Y", ((KEY, "secret-key"),): "[REDACTED]"})
    assert edited == {"a": ["x", "Y"], "k": untouched, "[REDACTED]": "v"}
    assert edited["k"] is untouched
    assert value == {"a": ["x", "y"], "k": untouched, "secret-key": "v"}  # the original is unchanged


def test_a_bare_string_is_replaced_whole() -> None:
    assert replace("abc", {(): "x"}) == "x"


def test_a_flood_of_tiny_strings_stops_at_the_block_count_and_says_so() -> None:
    from proxy.guardrails.walk import MAX_BLOCKS

    found = texts(["a"] * (MAX_BLOCKS + 10), max_chars=10 * MAX_BLOCKS, max_depth=10)
    assert len(found.blocks) == MAX_BLOCKS
    assert (found.truncated, found.why) == (True, "count")


def test_one_text_is_the_string_of_content_that_is_one_text_block_and_nothing_else() -> None:
    assert one_text([{"type": "text", "text": "hi"}]) == "hi"
    assert one_text([{"text": "hi", "type": "text"}]) == "hi"
    for other in (
        [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}],
        [{"type": "text", "text": "hi", "annotations": {}}],
        [{"type": "resource", "text": "hi"}],
        [{"type": "text", "text": ["hi"]}],
        ({"type": "text", "text": "hi"},),
        {"type": "text", "text": "hi"},
        [],
        "hi",
    ):
        assert one_text(other) is None, other
