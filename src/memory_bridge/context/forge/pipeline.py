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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_bridge.context.forge.rank import RankWeights, rank
from memory_bridge.context.forge.select import SelectRules, select
from memory_bridge.context.forge.summarised import drop_summarised
from memory_bridge.context.forge.trace import build
from memory_bridge.core.candidates import Candidate, Outcome
from memory_bridge.core.messages import Message
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.forge_config import ForgeConfig


@dataclass(frozen=True, slots=True)
class ForgeRules:
    weights: RankWeights = field(default_factory=RankWeights)
    rules: SelectRules = field(default_factory=SelectRules)

    def for_token(self, overrides: ForgeConfig | None) -> ForgeRules:
        """These rules with a token's `memory.forge` overrides (the same object without)."""
        if overrides is None:
            return self
        o, w, r = overrides, self.weights, self.rules
        weights = RankWeights(
            dense=w.dense if o.dense_weight is None else o.dense_weight,
            sparse=w.sparse if o.sparse_weight is None else o.sparse_weight,
            recency=w.recency if o.recency_weight is None else o.recency_weight,
            half_life_days=w.half_life_days if o.half_life_days is None else o.half_life_days,
            importance=w.importance if o.importance_weight is None else o.importance_weight,
            per_source={**w.per_source, **o.per_source},
        )
        rules = SelectRules(
            budget_tokens=(
                r.budget_tokens if o.memory_token_budget is None else o.memory_token_budget
            ),
            min_score=r.min_score if o.min_score is None else o.min_score,
            near_duplicate=r.near_duplicate if o.near_duplicate is None else o.near_duplicate,
        )
        return ForgeRules(weights, rules)


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


def forge(
    recalls: Sequence[Recall],
    request: Sequence[Message],
    forge_rules: ForgeRules,
    count_tokens: Callable[[str], int],
    now: float,
) -> Forged:
    candidates = [c for r in recalls for c in _candidates(r)]
    in_prompt = [m.text() for r in recalls for m in r.history] + [m.text() for m in request]
    outcomes: list[Outcome] = []
    if candidates:
        ranked, summarised = drop_summarised(rank(candidates, forge_rules.weights, now))
        outcomes = select(ranked, forge_rules.rules, count_tokens, in_prompt)
        outcomes = sorted([*outcomes, *summarised], key=lambda o: o.scored.rank)
    kept: dict[str, list[Candidate]] = {}
    for outcome in outcomes:
        if outcome.kept:
            c = outcome.scored.candidate
            kept.setdefault(c.source, []).append(c)
    forged = [
        _kept(r, kept.get(r.source, [])) if (r.memories or r.candidates) else r for r in recalls
    ]
    trace = build(outcomes, _blocks(recalls, count_tokens), forge_rules.rules.budget_tokens)
    return Forged(forged, trace, tuple(o for o in outcomes if o.kept))


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
