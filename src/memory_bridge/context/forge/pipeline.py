"""The forge between recall and placement: every source's candidates ranked together,
filtered against each other and against what the prompt already carries, fitted to the token
budget; the kept ones handed back to their sources' recalls, and a trace of it all.

Sources that give ranked candidates (`Recall.candidates`) are fused by their dense and sparse
ranks; a source that gives plain `memories` (in its own order) counts as one dense list. The
Gateway's reference stays a separate, labelled block (the hybrid design's contract): it is
counted in the trace but never merged or deduplicated with other memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory_bridge.context.forge.fade import enabled as fading
from memory_bridge.context.forge.fade import faded
from memory_bridge.context.forge.floor import gate_open
from memory_bridge.context.forge.rank import rank
from memory_bridge.context.forge.select import select
from memory_bridge.context.forge.summarised import drop_summarised
from memory_bridge.context.forge.trace import build
from memory_bridge.core.candidates import Candidate, Outcome
from memory_bridge.core.messages import Message
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking


@dataclass(frozen=True, slots=True)
class Forged:
    recalls: list[Recall]
    trace: dict[str, Any]
    # The kept candidates with their scores, in rank order (what `recalls` now holds as text).
    kept: tuple[Outcome, ...] = ()


def _candidates(recall: Recall) -> list[Candidate]:
    if recall.candidates:
        return list(recall.candidates)
    return [
        Candidate(source=recall.source, id=str(i), text=text, dense_rank=i)
        for i, text in enumerate(recall.memories, 1)
    ]


def weighed(candidate: Candidate, ranking: Ranking) -> bool:
    """False for a memory only the relational fetch reached while its weight is 0, or while
    the graph rank only boosts what the searches found (`graphReach` false)."""
    only_graph = candidate.dense_rank is None and candidate.sparse_rank is None
    unranked = ranking.graph_weight == 0 or not ranking.graph_reach
    return not (only_graph and candidate.graph_rank is not None and unranked)


def forge(
    recalls: Sequence[Recall],
    request: Sequence[Message],
    ranking: Ranking,
    count_tokens: Callable[[str], int],
    now: float,
    intent: str | None = None,
    used: Mapping[str, float] | None = None,
) -> Forged:
    """`used`: when each candidate (by `Candidate.key`) was last injected, read for fading
    (`fade`) when the ranking has a half-life; nothing otherwise."""
    candidates = [c for r in recalls for c in _candidates(r) if weighed(c, ranking)]
    in_prompt = [m.text() for r in recalls for m in r.history] + [m.text() for m in request]
    outcomes: list[Outcome] = []
    gate = False
    if candidates:
        ranked, summarised = drop_summarised(rank(candidates, ranking, now, used), ranking)
        gate = gate_open([s for s in ranked if not faded(s, ranking)], ranking)
        outcomes = select(ranked, ranking, count_tokens, in_prompt, gate)
        outcomes = sorted([*outcomes, *summarised], key=lambda o: o.scored.rank)
    kept: dict[str, list[Candidate]] = {}
    for outcome in outcomes:
        if outcome.kept:
            c = outcome.scored.candidate
            kept.setdefault(c.source, []).append(c)
    forged = [
        _kept(r, kept.get(r.source, [])) if (r.memories or r.candidates) else r for r in recalls
    ]
    trace = build(
        outcomes, _blocks(recalls, count_tokens), ranking.memory_token_budget, fading(ranking)
    )
    if intent is not None:
        trace["intent"] = intent
    trace["weights"] = _weights(ranking)
    trace["floor"] = {
        "dense": ranking.dense_floor,
        "sparse": ranking.sparse_floor,
        "noise_share": ranking.noise_share,
        "cleared": gate,
    }
    if fading(ranking):
        trace["fading"] = {
            "half_life_days": ranking.fade_half_life_days,
            "floor": ranking.fade_floor,
        }
    return Forged(forged, trace, tuple(o for o in outcomes if o.kept))


def _weights(ranking: Ranking) -> dict[str, Any]:
    """The weights the request was ranked with (for the trace)."""
    return {
        "dense": ranking.dense_weight,
        "sparse": ranking.sparse_weight,
        "graph": ranking.graph_weight,
        "per_source": {s: {"dense": d, "sparse": sp} for s, (d, sp) in ranking.per_source.items()},
        "recency": ranking.recency_weight,
        "half_life_days": ranking.half_life_days,
        "importance": ranking.importance_weight,
    }


def _kept(recall: Recall, kept: Sequence[Candidate]) -> Recall:
    """A source's recall reduced to what the forge kept, each item with its date."""
    dates = tuple(c.created_at for c in kept)
    return dataclasses.replace(
        recall,
        memories=tuple(c.text for c in kept),
        dates=dates if any(d is not None for d in dates) else (),
        candidates=(),
    )


def _blocks(recalls: Sequence[Recall], count_tokens: Callable[[str], int]) -> list[dict[str, Any]]:
    """What is placed as it comes (not ranked): history, curated blocks, the reference."""
    blocks: list[dict[str, Any]] = []
    for r in recalls:
        if r.history:
            blocks.append(
                {
                    "source": r.source,
                    "kind": "history",
                    "messages": len(r.history),
                    "tokens": sum(count_tokens(m.text()) for m in r.history),
                }
            )
        for text in r.system_blocks:
            blocks.append({"source": r.source, "kind": "system", "tokens": count_tokens(text)})
        if r.reference is not None:
            blocks.append(
                {
                    "source": r.source,
                    "kind": "reference",
                    "tokens": count_tokens(r.reference.text()),
                }
            )
    return blocks
