"""NamingCodec: namespaced names, shortening and disambiguation."""

from __future__ import annotations

import hashlib
import re

import pytest

from proxy.catalog.naming import MIN_MAX_LENGTH, NamingCodec

_HEX8_SUFFIX = re.compile(r"-[0-9a-f]{8}$")
_HEX6_SUFFIX = re.compile(r"-[0-9a-f]{6}$")


def test_render_joins_prefix_and_original_name_with_a_dot_by_default() -> None:
    assert NamingCodec().render("github", "create_issue") == "github.create_issue"


def test_render_with_an_empty_prefix_passes_the_original_name_through() -> None:
    assert NamingCodec().render("", "create_issue") == "create_issue"


def test_render_uses_a_configured_separator() -> None:
    assert NamingCodec(separator="__").render("github", "create_issue") == "github__create_issue"


def test_render_keeps_a_name_of_exactly_max_length_unchanged() -> None:
    codec = NamingCodec(max_length=32)
    original = "t" * (32 - len("srv."))
    assert codec.render("srv", original) == f"srv.{original}"


def test_render_shortens_a_long_name_to_exactly_max_length_with_a_hash_of_the_full_name() -> None:
    codec = NamingCodec(max_length=40)
    original = "a_really_long_tool_name_" * 5
    full = f"github.{original}"

    name = codec.render("github", original)

    assert len(name) == 40
    assert name == full[: 40 - 9] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]


def test_render_keeps_prefix_and_separator_visible_in_a_shortened_name() -> None:
    name = NamingCodec(separator="__", max_length=32).render("github", "x" * 100)
    assert name.startswith("github__")
    assert _HEX8_SUFFIX.search(name)


def test_render_gives_distinct_long_names_distinct_shortened_names() -> None:
    codec = NamingCodec(max_length=32)
    # Identical for far longer than the kept head: only the hash can tell them apart.
    originals = [f"{'common_head_' * 10}{i}" for i in range(500)]
    names = {codec.render("srv", original) for original in originals}
    assert len(names) == len(originals)
    assert all(len(name) == 32 for name in names)


def test_render_is_deterministic() -> None:
    original = "long_" * 40
    first = NamingCodec(max_length=64).render("srv", original)
    assert NamingCodec(max_length=64).render("srv", original) == first


def test_render_respects_max_length_even_when_the_prefix_alone_is_longer() -> None:
    name = NamingCodec(max_length=MIN_MAX_LENGTH).render("p" * 50, "tool")
    assert len(name) == MIN_MAX_LENGTH


def test_codec_rejects_a_max_length_too_small_for_the_hash_suffix() -> None:
    with pytest.raises(ValueError, match="max_length"):
        NamingCodec(max_length=MIN_MAX_LENGTH - 1)


def test_disambiguate_appends_a_hash_of_server_id_and_original_name() -> None:
    expected = hashlib.sha256(b"gitlab\0create_issue").hexdigest()[:6]
    assert NamingCodec().disambiguate("create_issue", "gitlab", "create_issue") == f"create_issue-{expected}"


def test_disambiguate_differs_for_different_servers_and_different_original_names() -> None:
    codec = NamingCodec()
    names = {
        codec.disambiguate("x", "a", "x"),
        codec.disambiguate("x", "b", "x"),
        codec.disambiguate("x", "a", "y"),
    }
    assert len(names) == 3
    assert all(name.startswith("x-") and _HEX6_SUFFIX.search(name) for name in names)


def test_disambiguate_gives_a_new_name_for_each_attempt() -> None:
    codec = NamingCodec()
    names = [codec.disambiguate("x", "a", "x", attempt=attempt) for attempt in range(20)]
    assert len(set(names)) == 20
    assert names == [codec.disambiguate("x", "a", "x", attempt=attempt) for attempt in range(20)]


def test_disambiguate_cuts_the_head_not_the_hash_to_respect_max_length() -> None:
    codec = NamingCodec(max_length=32)
    long_name = codec.render("srv", "y" * 100)
    assert len(long_name) == 32

    renamed = codec.disambiguate(long_name, "srv", "y" * 100)

    assert len(renamed) == 32
    assert renamed != long_name
    assert renamed.startswith(long_name[: 32 - 7])
    assert _HEX6_SUFFIX.search(renamed)


def test_the_canonical_name_is_the_full_name_never_shortened() -> None:
    codec = NamingCodec(max_length=16)
    long = "a_tool_name_far_longer_than_sixteen"
    assert codec.canonical("st", long) == f"st.{long}"
    assert codec.render("st", long) != codec.canonical("st", long)
    assert codec.canonical("", "plain") == "plain"
    assert (codec.namespace("st"), codec.namespace("")) == ("st.", "")
