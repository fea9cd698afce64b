"""Filter and budget: what of the ranked candidates goes into the prompt, and why not the rest.

Filter: faded (not injected for so long that its fade factor is under `fadeFloor`, `fade`);
below the relevance threshold on the final score, or below the relevance floor
(`floor`: nothing of the request is relevant, or this item is noise); an exact duplicate
(same normalised text) or a near duplicate (cosine of their vectors at or above the
threshold) of an item ranked higher, across
sources; or already in the prompt (the history window, the request's own messages). Budget:
kept items fill the token budget in rank order; an item that does not fit is dropped and
smaller ones after it may still fit (the budget is filled, never exceeded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

from memory_bridge.context.forge.fade import faded
from memory_bridge.context.forge.floor import clears, gate_open
from memory_bridge.core.candidates import Drop, Outcome, Scored
from memory_bridge.tenancy.ranking import Ranking

_SPACE = re.compile(r"\s+")


def normalised(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def select(
    ranked: Sequence[Scored],
    rules: Ranking,
    count_tokens: Callable[[str], int],
    in_prompt: Iterable[str] = (),
    gate: bool | None = None,
) -> list[Outcome]:
    """Every ranked candidate's outcome, in rank order. `gate`: whether the request's
    candidates clear the relevance floor (`floor.gate_open`; computed when not given)."""
    if gate is None:
        gate = gate_open([s for s in ranked if not faded(s, rules)], rules)
    share = rules.noise_share if gate else 1.0
    # A message is as relevant as the rest of its exchange: the reply to a question that
    # matches shares none of the question's words, yet answers it.
    relevant_events = {
        s.candidate.lineage["event_id"]
        for s in ranked
        if "event_id" in s.candidate.lineage
        and clears(s.candidate, rules, share)
        and not faded(s, rules)
    }
    carried = {normalised(t) for t in in_prompt if t.strip()}
    seen: dict[str, str] = {}  # normalised text -> id of the kept or earlier item
    vectors: list[tuple[str, Sequence[float]]] = []
    spent = 0
    out: list[Outcome] = []
    for item in ranked:
        c = item.candidate
        key = normalised(c.text)
        if faded(item, rules):
            out.append(Outcome(item, False, reason=Drop.FADED))
            continue
        if item.final < rules.min_score:
            out.append(Outcome(item, False, reason=Drop.THRESHOLD))
            continue
        if clears(c, rules, share) is False and c.lineage.get("event_id") not in relevant_events:
            out.append(Outcome(item, False, reason=Drop.FLOOR))
            continue
        if key in carried:
            out.append(Outcome(item, False, reason=Drop.IN_PROMPT))
            continue
        if key in seen:
            out.append(Outcome(item, False, reason=Drop.DUPLICATE, duplicate_of=seen[key]))
            continue
        near = _near(c.vector, vectors, rules.near_duplicate)
        if near is not None:
            out.append(Outcome(item, False, reason=Drop.DUPLICATE, duplicate_of=near))
            continue
        seen[key] = f"{c.source}:{c.id}"
        if c.vector is not None:
            vectors.append((f"{c.source}:{c.id}", c.vector))
        tokens = count_tokens(c.text)
        if spent + tokens > rules.memory_token_budget:
            out.append(Outcome(item, False, tokens=tokens, reason=Drop.BUDGET))
            continue
        spent += tokens
        out.append(Outcome(item, True, tokens=tokens))
    return out


def _near(
    vector: Sequence[float] | None, kept: list[tuple[str, Sequence[float]]], threshold: float
) -> str | None:
    if vector is None:
        return None
    for name, other in kept:
        if cosine(vector, other) >= threshold:
            return name
    return None
