"""The encoder comparison's scoring and cross-validation (``benchmarks/discovery/encoders.py``):
the figures in docs/reference/search.md come from these functions."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.discovery.encoders import (
    Missing,
    Row,
    VectorRanker,
    _package_dir,
    corpora,
    cross_validate,
    load,
    scores,
    texts_of,
)
from benchmarks.discovery.evaluate import Task
from proxy.catalog.search import Hit


def test_scores_count_first_place_top_five_and_reciprocal_rank() -> None:
    found = [
        (Task("a", "x"), ["x", "y"]),  # first
        (Task("b", "x"), ["y", "z", "w", "v", "x"]),  # fifth
        (Task("c", "x"), ["y", "z", "w", "v", "u", "x"]),  # sixth: not in the top five
        (Task("d", "x"), ["y"]),  # not found
    ]
    at_1, at_5, mrr = scores(found)
    assert at_1 == 0.25
    assert at_5 == 0.5
    assert mrr == pytest.approx((1 + 1 / 5 + 1 / 6) / 4)


def test_cross_validation_follows_the_ranking_that_is_right() -> None:
    # The lexical ranking always puts a wrong tool first, the semantic one the right tool: the grid
    # point chosen on the other folds must weight meaning enough to rank the right tool first.
    rows: list[Row] = [
        (
            Task(f"task {i}", "right"),
            (Hit("wrong", 2.0, ("name",)), Hit("right", 1.0, ("name",))),
            [("right", 0.9)],
        )
        for i in range(10)
    ]
    (at_1, at_5, mrr), chosen = cross_validate(rows)
    assert (at_1, at_5, mrr) == (1.0, 1.0, 1.0)
    assert len(chosen) == 5
    assert all(fusion.semantic_weight > 1 for fusion in chosen)


def test_a_candidate_not_installed_is_reported_missing() -> None:
    with pytest.raises(Missing):
        _package_dir("no_such_encoder_package_for_manifold")
    if importlib.util.find_spec("static_model") is None:
        with pytest.raises(Missing):
            load("potion-10k-64d")


def test_todays_model_ranks_an_obvious_task_near_the_top() -> None:
    pytest.importorskip("numpy")
    try:
        embed = load("wordllama")
    except Missing:
        pytest.skip("the search extra is not installed")
    old = corpora()[0]
    names, texts = texts_of(old.catalog)
    ranking = [name for name, _ in VectorRanker(names, texts, embed).ranking("list the files in a folder", 5)]
    assert "filesystem.list_directory" in ranking
