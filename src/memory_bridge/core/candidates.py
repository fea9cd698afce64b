"""What a source hands the forge: candidates with their lineage and their scores, and what
the forge hands back: each candidate's fate, for the prompt and for the trace."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Candidate:
    """One recalled item. Ranks are 1-based positions in a source's own ranked list (dense
    or sparse); a list the candidate is absent from leaves its rank None."""

    source: str  # "episodic", "longterm", …
    id: str  # the source's id (a point id, a memory id, a message id)
    text: str
    dense_rank: int | None = None
    sparse_rank: int | None = None
    graph_rank: int | None = None  # place in the relational fetch (entities of the query)
    dense_score: float | None = None
    sparse_score: float | None = None
    # Scores comparable across queries, for the relevance floor: the dense score is a cosine;
    # the sparse coverage is the fraction of the query's keyword terms the item contains.
    sparse_coverage: float | None = None
    query_terms: int = 0  # the query's keyword terms the coverage is a share of
    created_at: float | None = None  # epoch seconds, for recency
    importance: float | None = None  # 0..1 where the source has one
    vector: tuple[float, ...] | None = None  # for near-duplicate detection, when known
    lineage: dict[str, str] = field(default_factory=dict)  # event id, session, …

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()[:16]

    @property
    def key(self) -> str:
        """The item's identity across requests (source and id), e.g. for its access stats."""
        return f"{self.source}:{self.id}"

    @property
    def day(self) -> str | None:
        """The ISO date (UTC) the item was said or learned, when its source knows it."""
        return iso_day(self.created_at)


def iso_day(epoch: float | None) -> str | None:
    """An epoch time's ISO date in UTC (`2026-03-14`); None for an unknown time."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC).date().isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def importance_of(value: object) -> float | None:
    """An importance as a source or a stored event gives it: a number from 0 to 1, else None
    (the reader's default)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return None
    return float(value)


class Drop(StrEnum):
    THRESHOLD = "threshold"
    FLOOR = "below_floor"  # nothing of the request's candidates is relevant enough
    DUPLICATE = "duplicate"
    IN_PROMPT = "in_prompt"  # the history window or the request already carries it
    BUDGET = "budget"
    SUMMARISED = "summarised"  # a recalled session summary covers this raw turn
    FADED = "faded"  # not injected for so long that its fade factor is under the floor


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: Candidate
    fused: float  # weighted reciprocal-rank fusion of the dense and sparse ranks
    recency: float  # 0..1, 1 = now
    final: float
    rank: int = 0  # 1-based position after ranking
    fade: float = 1.0  # 0..1, 1 = fresh or fading off (`context.forge.fade`)
    last_used: float | None = None  # epoch seconds it was last injected, when fading knows


@dataclass(frozen=True, slots=True)
class Outcome:
    """A candidate's fate: kept (with its token count) or dropped (with the reason and, for
    a duplicate, what it duplicated)."""

    scored: Scored
    kept: bool
    tokens: int = 0
    reason: Drop | None = None
    duplicate_of: str | None = None
