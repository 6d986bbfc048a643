"""Word-by-word nearness: each query word against each tool word (the shipped model's word
vectors), rarer words counting more, bounded on both sides, and mixed into the semantic ranking."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from proxy.views.semantic import WORD_SHARE, SemanticIndex, StaticModel, VectorCache, tool_text
from proxy.views.word_match import MAX_QUERY_WORDS, MAX_TOOL_WORDS, WordMatch, content_words


@pytest.fixture(scope="module")
def model() -> StaticModel:
    return StaticModel.load()


def tool(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


FILLER = " ".join(f"alpha{n} beta{n} gamma{n}" for n in range(20))  # long text, nothing meaningful


def test_content_words_leave_out_stop_words_numbers_and_repeats_and_are_capped() -> None:
    assert content_words("What is the weather in Paris, the 2 of May? weather!", 10) == [
        "weather",
        "paris",
        "may",
    ]
    assert content_words("one two three four", 2) == ["one", "two"]
    assert content_words("the of 42 🙂", 5) == []
    assert len(content_words("word " * 100_000 + " ".join(f"w{n}x" for n in range(500)), 32)) == 32


def test_one_near_word_in_a_long_text_finds_its_tool(model: StaticModel) -> None:
    texts = [
        f"keeps an observation in memory {FILLER}",  # the meaning, buried in a long text
        "reads a spreadsheet of numbers",
        "sends an email message to a person",
    ]
    scores = WordMatch(texts, model).scores("please remember that I parked on level three")
    assert scores is not None
    assert int(np.argmax(scores)) == 0


def test_a_word_every_tool_has_counts_less_than_a_rare_one(model: StaticModel) -> None:
    texts = ["file upload to storage", "file memory note", "file delete"]
    scores = WordMatch(texts, model).scores("file remember")
    assert scores is not None
    assert int(np.argmax(scores)) == 1
    uniform = WordMatch(texts, model)
    uniform._idf = dict.fromkeys(uniform._idf, 1.0)  # no rarity: "file" alone ties every tool
    flat = uniform.scores("file file")
    assert flat is not None
    assert np.allclose(flat, flat[0])


def test_queries_with_nothing_to_match_and_tools_without_words(model: StaticModel) -> None:
    match = WordMatch(["the of and", "directions between two places"], model)
    assert match.scores("") is None
    assert match.scores("the of 🙂 42") is None
    scores = match.scores("how do I drive to the museum")
    assert scores is not None
    assert scores[0] == 0.0
    assert scores[1] > 0.0
    assert WordMatch([], model).scores("anything") is None


def test_sizes_are_bounded(model: StaticModel) -> None:
    huge = " ".join(f"word{n}x" for n in range(5_000))
    match = WordMatch([huge, "time zone"], model)
    assert len(match._rows) == MAX_TOOL_WORDS + 2
    query = " ".join(f"query{n}y" for n in range(5_000)) + " timezone"
    assert len(content_words(query, MAX_QUERY_WORDS)) == MAX_QUERY_WORDS
    scores = match.scores(query * 20)  # a long query: its first words only
    assert scores is not None
    assert scores.shape == (2,)


def test_the_semantic_ranking_mixes_mean_vectors_and_word_match(model: StaticModel) -> None:
    catalog = [
        tool("memory.create_entities", "Create entities in the knowledge graph " + FILLER),
        tool("time.get_current_time", "Get current time in a specific timezone"),
        tool("maps.maps_directions", "Get directions between two points"),
    ]
    index = SemanticIndex.build(catalog, VectorCache(model))
    query = "remember that Alice is my manager"
    mixed = dict(index.ranking(query, 3))
    mean = dict(index.mean_only().ranking(query, 3))
    by_word = WordMatch([tool_text(t) for t in catalog], model).scores(query)
    assert by_word is not None
    for row, definition in enumerate(catalog):
        name = definition["name"]
        expected = WORD_SHARE * by_word[row] + (1 - WORD_SHARE) * mean[name]
        assert mixed[name] == pytest.approx(expected, abs=1e-5)
