"""Reciprocal rank fusion of the lexical and the semantic rankings: ranks, weights, depth, the
similarity floor for tools only the semantic ranking found, and why each hit matched."""

from __future__ import annotations

from proxy.catalog.fusion import MEANING, Fusion, fuse
from proxy.catalog.search import Hit


def lexical(*names: str) -> list[Hit]:
    return [Hit(name, 10.0 - i, ("name",)) for i, name in enumerate(names)]


def semantic(*names: str, similarity: float = 0.5) -> list[tuple[str, float]]:
    return [(name, similarity) for name in names]


def test_a_tool_both_rankings_place_high_beats_one_that_only_one_ranking_places_first() -> None:
    fused = fuse(lexical("a", "b", "c", "d"), semantic("d", "b", "c", "a"), 4, Fusion(k=5, semantic_weight=1))
    assert fused[0].name == "b"  # 1/7 + 1/7 > 1/6 + 1/9


def test_the_score_is_the_weighted_sum_of_reciprocal_ranks() -> None:
    (hit,) = fuse(lexical("a"), semantic("a"), 1, Fusion(k=5, semantic_weight=2))
    assert hit.score == round(1 / 6 + 2 / 6, 6)


def test_the_semantic_weight_tips_a_disagreement() -> None:
    rankings = (lexical("a", "b"), semantic("b", "a"))
    assert fuse(*rankings, 1, Fusion(semantic_weight=0.5))[0].name == "a"
    assert fuse(*rankings, 1, Fusion(semantic_weight=2.0))[0].name == "b"


def test_hits_keep_their_lexical_fields_and_say_meaning_when_the_semantic_ranking_had_them() -> None:
    fused = {hit.name: hit.fields for hit in fuse(lexical("a", "b"), semantic("c", "a"), 3)}
    assert fused == {"a": ("name", MEANING), "c": (MEANING,), "b": ("name",)}


def test_a_tool_only_the_semantic_ranking_found_must_be_near_enough() -> None:
    far = [("far", 0.1)]
    assert fuse([], far, 5, Fusion(min_similarity=0.2)) == ()
    assert [hit.name for hit in fuse(lexical("far"), far, 5, Fusion(min_similarity=0.2))] == ["far"]
    assert [hit.name for hit in fuse([], far, 5, Fusion(min_similarity=0.0))] == ["far"]


def test_only_the_first_depth_places_count_and_the_limit_holds() -> None:
    deep = fuse(lexical(*(f"t{i}" for i in range(10))), [], 20, Fusion(depth=3))
    assert [hit.name for hit in deep] == ["t0", "t1", "t2"]
    assert fuse(lexical("a", "b"), semantic("a", "b"), 0) == ()
    assert len(fuse(lexical("a", "b", "c"), semantic("d", "e"), 2)) == 2


def test_ties_keep_the_lexical_order_then_the_semantic_one() -> None:
    fused = fuse(lexical("a"), semantic("b"), 2, Fusion(k=5, semantic_weight=1))
    assert [hit.name for hit in fused] == ["a", "b"]
