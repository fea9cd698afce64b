"""Rank: weighted reciprocal-rank fusion of each candidate's dense and sparse ranks, then a
final score with recency decay and importance; on equal scores the newer item first.

RRF (Cormack et al., 2009) fuses lists by rank, not by score, so lists whose scores live on
different scales (cosine, BM25) combine without calibration; k=60 is the paper's constant and
what Qdrant uses. Candidates of different sources are comparable because every source ranks
its own lists the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from memory_bridge.context.forge.fade import fade, importance
from memory_bridge.core.candidates import Candidate, Scored
from memory_bridge.tenancy.ranking import Ranking

RRF_K = 60
# Final scores are ~1e-2; two that agree to this many decimals are a tie.
TIE_DIGITS = 12


def fused_score(candidate: Candidate, weights: Ranking) -> float:
    dense, sparse = weights.per_source.get(
        candidate.source, (weights.dense_weight, weights.sparse_weight)
    )
    return _fused(candidate, dense, sparse, weights.graph_weight)


def _fused(candidate: Candidate, dense: float, sparse: float, graph: float) -> float:
    score = 0.0
    if candidate.graph_rank is not None:
        score += graph / (RRF_K + candidate.graph_rank)
    if candidate.dense_rank is not None:
        score += dense / (RRF_K + candidate.dense_rank)
    if candidate.sparse_rank is not None:
        score += sparse / (RRF_K + candidate.sparse_rank)
    return score


def recency(created_at: float | None, now: float, half_life_days: float) -> float:
    """1 for an item made now, halving every `half_life_days`; 0 when its age is unknown."""
    if created_at is None:
        return 0.0
    age_days = max(0.0, now - created_at) / 86400.0
    return math.pow(0.5, age_days / half_life_days)


def rank(
    candidates: Sequence[Candidate],
    weights: Ranking,
    now: float,
    used: Mapping[str, float] | None = None,
) -> list[Scored]:
    """Candidates scored and sorted best first (ties: newer first, then by source and id).
    `used`: when each item was last injected (by `Candidate.key`), for fading."""
    # The recency and importance terms are scaled to the fused scores' range: a first place in
    # both lists is worth 2/61; recency can move an item by a fraction of that, not more.
    # Recency weighs 0 by default: then the date only breaks ties (`_order`). An item without
    # an importance of its own counts as the default one, as fading reads it: the same
    # constant for all of them, so only an item whose source gives one moves.
    scale = (weights.dense_weight + weights.sparse_weight) / (RRF_K + 1)
    per_source = weights.per_source
    default = (weights.dense_weight, weights.sparse_weight)
    scored = []
    for candidate in candidates:
        fused = _fused(candidate, *per_source.get(candidate.source, default), weights.graph_weight)
        fresh = recency(candidate.created_at, now, weights.half_life_days)
        final = (
            fused
            + weights.recency_weight * scale * fresh
            + weights.importance_weight * scale * importance(candidate)
        )
        # 1 with fading off: the score is then exactly what it was without fading.
        factor, last_used = fade(candidate, used or {}, now, weights)
        scored.append(Scored(candidate, fused, fresh, final * factor, 0, factor, last_used))
    # On equal scores the newer item first (then by source and id, so stable): with dates on,
    # what was said last of two equally relevant items comes first.
    scored.sort(key=_order)
    return [
        Scored(s.candidate, s.fused, s.recency, s.final, i, s.fade, s.last_used)
        for i, s in enumerate(scored, 1)
    ]


def _order(s: Scored) -> tuple[float, float, str, str]:
    created = s.candidate.created_at
    return (
        # Rounded: scores equal but for the order of a float sum are equal (the date decides).
        -round(s.final, TIE_DIGITS),
        -created if created is not None else math.inf,
        s.candidate.source,
        s.candidate.id,
    )
