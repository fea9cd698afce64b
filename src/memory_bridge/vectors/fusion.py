"""Weighted reciprocal-rank fusion of ranked lists, done here rather than in the engine.

Qdrant can fuse prefetches itself (`Fusion.Rrf`), but it returns only the fused score: the
Forge needs each list's rank and score to rank further and to write its trace. Fusing here also
makes both adapters fuse identically. The formula is Cormack et al.'s, with 1-based ranks:
``fused = sum(weight / (k + rank))`` over the lists a point is in. (Qdrant's own RRF uses
0-based positions, i.e. k - 1 in this formula, and scales the rank by the weight instead of
the term: not the same numbers, so do not compare the two.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Fused", "rrf_fuse"]


@dataclass(frozen=True, slots=True)
class Fused:
    id: str
    fused_score: float
    # list name -> (1-based rank, engine score) for each list the point is in
    ranks: Mapping[str, tuple[int, float]]


def rrf_fuse(
    lists: Mapping[str, Sequence[tuple[str, float]]],
    *,
    k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Fuse ranked lists of (id, score), best first, into one ranking, best first.

    Every point of every list is kept ("full rankings"); the caller cuts. Ties are broken by
    the best single rank, then by id, so the order is deterministic. A list whose weight is 0
    still reports its ranks but adds nothing to the score.
    """
    if k < 1:
        raise ValueError(f"rrf k must be >= 1, got {k}")
    weights = weights or {}
    for name, weight in weights.items():
        if weight < 0:
            raise ValueError(f"fusion weight of {name!r} must be >= 0, got {weight}")
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, tuple[int, float]]] = {}
    for name, ranked in lists.items():
        weight = weights.get(name, 1.0)
        seen: set[str] = set()
        position = 0
        for point_id, score in ranked:
            # An engine list never repeats an id; if one did, its first place counts.
            if point_id in seen:
                continue
            seen.add(point_id)
            position += 1
            scores[point_id] = scores.get(point_id, 0.0) + weight / (k + position)
            ranks.setdefault(point_id, {})[name] = (position, score)
    order = sorted(
        scores,
        key=lambda pid: (-scores[pid], min(r for r, _ in ranks[pid].values()), pid),
    )
    return [Fused(pid, scores[pid], ranks[pid]) for pid in order]
