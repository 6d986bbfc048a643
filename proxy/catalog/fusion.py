"""One ranking from two: the lexical (BM25F) and the semantic (nearest in meaning), by weighted
reciprocal rank fusion.

A tool's fused score is ``1 / (k + lexical rank) + w / (k + semantic rank)`` over the first
``depth`` places of each ranking (a ranking a tool is not in adds nothing). Ranks, not scores, are
fused: BM25F scores and cosine similarities live on scales that mean nothing to each other, and a
rank is robust to a description built to inflate one of them. ``k`` and ``w`` were chosen by 5-fold
cross-validation on the development sets (``benchmarks/discovery``), never on a held-out one.

A fused hit keeps the fields its words matched in (from the lexical hit) and says ``meaning`` when
the semantic ranking alone would have returned it within the limit. A tool that only the semantic
ranking found must be at least ``min_similarity`` near the query, so a query about nothing the
catalog does finds nothing.

Pure: two rankings in, one ranking out; ties keep the lexical order, then the semantic one.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from proxy.catalog.search import Hit

__all__ = ["MEANING", "Fusion", "fuse"]

MEANING: Final = "meaning"  # the field name a hit carries when the semantic ranking found it


@dataclass(frozen=True, slots=True)
class Fusion:
    k: float = 5.0
    semantic_weight: float = 1.5
    depth: int = 50  # places of each ranking that count
    min_similarity: float = 0.2  # of a tool only the semantic ranking found


DEFAULT: Final = Fusion()


def fuse(
    lexical: Sequence[Hit],
    semantic: Sequence[tuple[str, float]],
    limit: int,
    fusion: Fusion = DEFAULT,
) -> tuple[Hit, ...]:
    """The at most ``limit`` best tools of both rankings, best first (each given best first)."""
    if limit <= 0:
        return ()
    scores: dict[str, float] = {}
    order: dict[str, int] = {}
    fields: dict[str, tuple[str, ...]] = {}
    for rank, hit in enumerate(lexical[: fusion.depth], 1):
        scores[hit.name] = 1.0 / (fusion.k + rank)
        order.setdefault(hit.name, len(order))
        fields[hit.name] = hit.fields
    for rank, (name, similarity) in enumerate(semantic[: fusion.depth], 1):
        if name not in scores and similarity < fusion.min_similarity:
            continue
        scores[name] = scores.get(name, 0.0) + fusion.semantic_weight / (fusion.k + rank)
        order.setdefault(name, len(order))
        if rank <= limit:
            fields[name] = (*fields.get(name, ()), MEANING)
    best = heapq.nsmallest(limit, scores, key=lambda name: (-scores[name], order[name]))
    return tuple(Hit(name, round(scores[name], 6), fields.get(name, ())) for name in best)
