"""Fading: memory that is not used loses weight, and past a point is no longer injected.

An item's fade factor halves every `fadeHalfLifeDays` since it was last injected (its
last-used time, `storage.access`), or, never injected, since it was made (its date). The
half-life is stretched by the item's importance (0..1; a source's own where it gives one,
`DEFAULT_IMPORTANCE` otherwise): an important memory fades more slowly, an unimportant one
faster, in the manner of MemoryBank's forgetting curve (Zhong et al., 2023), whose strength
grows with what makes a memory matter. The ranked score is multiplied by the factor, and an
item whose factor is under `fadeFloor` is dropped with the reason `faded`: it stays stored and
can come back (a restatement is a new, fresh memory). With a half-life of 0 (the default)
every factor is 1 and nothing is read or recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memory_bridge.core.candidates import Candidate, Scored
from memory_bridge.tenancy.ranking import RANKED_SOURCES, Ranking

__all__ = [
    "DEFAULT_IMPORTANCE",
    "FADED_SOURCES",
    "enabled",
    "fade",
    "faded",
    "importance",
    "reading",
]

# The sources whose items have a stable identity (a point id, a memory id) to keep stats of.
FADED_SOURCES = RANKED_SOURCES
# The importance of an item whose source gives none: the middle. Session summaries carry the
# memory LLM's (`sources.summaries`); Mem0's extraction returns plain facts, and turns have none.
DEFAULT_IMPORTANCE = 0.5


def enabled(rules: Ranking) -> bool:
    return rules.fade_half_life_days > 0


def importance(candidate: Candidate) -> float:
    """The item's importance, 0..1: its source's where it gives one, else the default."""
    own = candidate.importance
    if own is None or not math.isfinite(own):
        return DEFAULT_IMPORTANCE
    return min(1.0, max(0.0, own))


def fade(
    candidate: Candidate, used: Mapping[str, float], now: float, rules: Ranking
) -> tuple[float, float | None]:
    """(fade factor, last-used time) of a candidate; (1, None) with fading off, for a source
    without identities, or for an item of unknown age never used."""
    if not enabled(rules) or candidate.source not in FADED_SOURCES:
        return 1.0, None
    last_used = used.get(candidate.key)
    times = [t for t in (last_used, candidate.created_at) if t is not None]
    if not times:
        return 1.0, None
    idle_days = max(0.0, now - max(times)) / 86400.0
    # Importance 0.5 (the default) keeps the half-life as configured; 1 makes it 1.5 times
    # longer, 0 half as long.
    half_life = rules.fade_half_life_days * (0.5 + importance(candidate))
    return math.pow(0.5, idle_days / half_life), last_used


def faded(scored: Scored, rules: Ranking) -> bool:
    """True for an item that faded under the floor (never with fading off)."""
    return enabled(rules) and scored.fade < rules.fade_floor


def reading(
    source: str,
    item_id: str,
    created_at: float | None,
    own_importance: float | None,
    used: Mapping[str, float],
    now: float,
    rules: Ranking,
) -> dict[str, Any]:
    """An item's fading as the forge would read it now (for the console): when it was last
    used, its importance, its factor and whether that is under the floor."""
    item = Candidate(source, item_id, "", created_at=created_at, importance=own_importance)
    factor, last_used = fade(item, used, now, rules)
    return {
        "last_used": last_used,
        "importance": importance(item),
        "fade": factor,
        "faded": enabled(rules) and factor < rules.fade_floor,
    }
