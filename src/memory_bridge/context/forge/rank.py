"""Rank: weighted reciprocal-rank fusion of each candidate's dense and sparse ranks, then a
final score with recency decay and importance.

RRF (Cormack et al., 2009) fuses lists by rank, not by score, so lists whose scores live on
different scales (cosine, BM25) combine without calibration; k=60 is the paper's constant and
what Qdrant uses. Candidates of different sources are comparable because every source ranks
its own lists the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from memory_bridge.core.candidates import Candidate, Scored

RRF_K = 60


# Episodic candidates have both lists, and with the small local model the keyword list is the
# stronger one: on the LoCoMo development split, dense 0.5 / sparse 1 in the ranking recalls
# more than 1/1, with nothing lost at @20 (docs/performance.md, "bench_recall.py"). The
# engine still fetches both lists at 1/1 (a broad candidate set); only the ranking leans.
# Sources with one list (Mem0's facts) keep the global weights, so their best item is worth as
# much as before against recency.
DEFAULT_PER_SOURCE: Mapping[str, tuple[float, float]] = MappingProxyType({"episodic": (0.5, 1.0)})


@dataclass(frozen=True, slots=True)
class RankWeights:
    dense: float = 1.0
    sparse: float = 1.0
    recency: float = 0.1  # how much a fresh item gains over an old one
    half_life_days: float = 30.0
    importance: float = 0.1
    # (dense, sparse) weights of a source's candidates, where they differ from the global ones.
    per_source: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: DEFAULT_PER_SOURCE
    )


def fused_score(candidate: Candidate, weights: RankWeights) -> float:
    dense, sparse = weights.per_source.get(candidate.source, (weights.dense, weights.sparse))
    score = 0.0
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


def rank(candidates: Sequence[Candidate], weights: RankWeights, now: float) -> list[Scored]:
    """Candidates scored and sorted best first (ties: newer first, then by source and id)."""
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
    # On equal scores the newer item first (then by source and id, so stable).
    scored.sort(key=_order)
    return [Scored(s.candidate, s.fused, s.recency, s.final, i) for i, s in enumerate(scored, 1)]


def _order(s: Scored) -> tuple[float, float, str, str]:
    created = s.candidate.created_at
    return (
        -s.final,
        -created if created is not None else math.inf,
        s.candidate.source,
        s.candidate.id,
    )
