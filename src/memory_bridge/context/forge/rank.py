"""Rank: weighted reciprocal-rank fusion of each candidate's dense and sparse ranks, then a
final score with recency decay and importance.

RRF (Cormack et al., 2009) fuses lists by rank, not by score, so lists whose scores live on
different scales (cosine, BM25) combine without calibration; k=60 is the paper's constant and
what Qdrant uses. Candidates of different sources are comparable because every source ranks
its own lists the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memory_bridge.candidates import Candidate, Scored

RRF_K = 60


@dataclass(frozen=True, slots=True)
class RankWeights:
    dense: float = 1.0
    sparse: float = 1.0
    recency: float = 0.1  # how much a fresh item gains over an old one
    half_life_days: float = 30.0
    importance: float = 0.1


def fused_score(candidate: Candidate, weights: RankWeights) -> float:
    score = 0.0
    if candidate.dense_rank is not None:
        score += weights.dense / (RRF_K + candidate.dense_rank)
    if candidate.sparse_rank is not None:
        score += weights.sparse / (RRF_K + candidate.sparse_rank)
    return score


def recency(created_at: float | None, now: float, half_life_days: float) -> float:
    """1 for an item made now, halving every `half_life_days`; 0 when its age is unknown."""
    if created_at is None:
        return 0.0
    age_days = max(0.0, now - created_at) / 86400.0
    return math.pow(0.5, age_days / half_life_days)


def rank(candidates: Sequence[Candidate], weights: RankWeights, now: float) -> list[Scored]:
    """Candidates scored and sorted best first (ties: by source and id, so stable)."""
    # The recency and importance terms are scaled to the fused scores' range: a first place in
    # both lists is worth 2/61; recency can move an item by a fraction of that, not more.
    scale = (weights.dense + weights.sparse) / (RRF_K + 1)
    scored = []
    for candidate in candidates:
        fused = fused_score(candidate, weights)
        fresh = recency(candidate.created_at, now, weights.half_life_days)
        final = (
            fused
            + weights.recency * scale * fresh
            + weights.importance * scale * (candidate.importance or 0.0)
        )
        scored.append(Scored(candidate, fused, fresh, final))
    scored.sort(key=lambda s: (-s.final, s.candidate.source, s.candidate.id))
    return [Scored(s.candidate, s.fused, s.recency, s.final, i) for i, s in enumerate(scored, 1)]
