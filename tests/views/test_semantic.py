"""The shipped static embedding model: read from the wheel's files (never the package, never a
download), unit vectors, a vector cache that embeds only what changed, nearest-in-meaning
rankings, bounded inputs, and lexical-only search when the model is not installed."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pytest

from proxy.views import semantic
from proxy.views.semantic import (
    MAX_TEXT_CHARS,
    SemanticIndex,
    StaticModel,
    VectorCache,
    tool_text,
)


@pytest.fixture(scope="module")
def model() -> StaticModel:
    return StaticModel.load()


def tool(name: str, description: str, **properties: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
    }


CATALOG = [
    tool("time.get_current_time", "Get current time in a specific timezone", timezone={}),
    tool("fs.read_file", "Read the complete contents of a file from the file system", path={}),
    tool("maps.maps_directions", "Get directions between two points", origin={}, destination={}),
    tool("slack.post_message", "Post a new message to a Slack channel", channel_id={}, text={}),
]


def test_the_model_is_read_from_the_wheel_s_files_without_importing_the_package(model: StaticModel) -> None:
    assert model.dimensions == semantic.DIMENSIONS
    assert "wordllama" not in sys.modules  # its loader would download other sizes
    vectors = model.embed(["what time is it in Tokyo", "", "🙂🙂"])
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, semantic.DIMENSIONS)
    assert np.isclose(np.linalg.norm(vectors[0]), 1.0)
    assert not vectors[1].any()  # nothing known: a zero vector, not a NaN


def test_texts_in_other_words_are_nearest_the_tool_that_does_it(model: StaticModel) -> None:
    index = SemanticIndex.build(CATALOG, VectorCache(model))
    assert index.ranking("what hour is it in Tokyo right now", 1)[0][0] == "time.get_current_time"
    assert index.ranking("how do I drive from the station to the museum", 1)[0][0] == "maps.maps_directions"
    assert index.ranking("tell the team channel the deploy is done", 1)[0][0] == "slack.post_message"
    assert index.ranking("", 3) == []
    assert index.ranking("time", 0) == []


def test_the_cache_embeds_only_texts_it_has_not_seen(model: StaticModel) -> None:
    cache = VectorCache(model)
    first = SemanticIndex.build(CATALOG, cache)
    assert cache.embedded == 4
    changed = [*CATALOG[:3], tool("slack.post_message", "Post a message, now with threads", channel_id={})]
    second = SemanticIndex.build(changed, cache)
    assert cache.embedded == 5  # the catalog change embedded the one changed tool
    assert len(first) == len(second) == 4


def test_tool_texts_and_queries_are_bounded(model: StaticModel) -> None:
    huge = tool("x.big", "word " * 100_000, **{f"a{i}": {} for i in range(10_000)})
    assert len(tool_text(huge)) <= MAX_TEXT_CHARS
    index = SemanticIndex.build([huge, *CATALOG], VectorCache(model))
    assert len(index.ranking("time " * 50_000, 5)) == 5  # a 250 KB query: only its first part is read


def test_long_words_are_matched_but_never_kept_in_the_word_cache(model: StaticModel) -> None:
    before = semantic._cached_pieces.cache_info().currsize
    model.embed([" ".join(f"{'x' * 500}{i}" for i in range(200))])
    assert semantic._cached_pieces.cache_info().currsize == before
    model.embed([f"an unseen word: fresh{time.time_ns()}"])  # a short word is kept
    assert semantic._cached_pieces.cache_info().currsize > before


def test_a_catalog_larger_than_the_cache_is_embedded_whole_and_alike_from_the_cache(
    model: StaticModel,
) -> None:
    cache = VectorCache(model, size=8)
    texts = [f"tool number {i} reads files" for i in range(20)]  # more texts than the cache keeps
    first = cache.embed(texts)
    assert first.shape == (20, model.dimensions)
    assert np.all(np.isclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-2))
    again = VectorCache(model)
    again.embed(texts[:5])
    assert np.array_equal(again.embed(texts), first)  # cached or fresh: the same vectors
