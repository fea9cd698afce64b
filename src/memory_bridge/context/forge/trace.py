"""The context trace of one request: every candidate the forge saw, kept or dropped, with its
lineage, scores, rank, tokens and the reason it was dropped; and the blocks placed as they are
(history, curated, the Gateway reference). Never a secret; texts only as far as an admin may
read memories anyway, and cut short."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory_bridge.context.forge.fade import importance
from memory_bridge.core.candidates import Outcome, iso_day

MAX_TEXT = 500


def item(outcome: Outcome, fading: bool = False) -> dict[str, Any]:
    scored = outcome.scored
    c = scored.candidate
    entry: dict[str, Any] = {
        "source": c.source,
        "id": c.id,
        "digest": c.digest,
        "text": c.text[:MAX_TEXT],
        "date": c.day,
        "rank": scored.rank,
        "scores": {
            "dense": c.dense_score,
            "sparse": c.sparse_score,
            "dense_rank": c.dense_rank,
            "sparse_rank": c.sparse_rank,
            "sparse_coverage": c.sparse_coverage,
            "graph_rank": c.graph_rank,
            "fused": round(scored.fused, 6),
            "recency": round(scored.recency, 6),
            "final": round(scored.final, 6),
        },
        "tokens": outcome.tokens,
        "kept": outcome.kept,
    }
    if fading:  # the factor the final score was multiplied by, and what it was read from
        entry["scores"]["fade"] = round(scored.fade, 6)
        entry["last_used"] = iso_day(scored.last_used)
        entry["importance"] = importance(c)
    if c.lineage:
        entry["lineage"] = dict(c.lineage)
    if outcome.reason is not None:
        entry["dropped"] = str(outcome.reason)
    if outcome.duplicate_of is not None:
        entry["duplicate_of"] = outcome.duplicate_of
    return entry


def build(
    outcomes: Sequence[Outcome],
    blocks: Sequence[dict[str, Any]],
    budget_tokens: int,
    fading: bool = False,
) -> dict[str, Any]:
    kept = [o for o in outcomes if o.kept]
    return {
        "budget_tokens": budget_tokens,
        "recalled_tokens": sum(o.tokens for o in kept),
        "candidates": [item(o, fading) for o in outcomes],
        "blocks": list(blocks),
    }


def injected_per_source(trace: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Items and tokens injected per source: the forge's kept candidates, and the blocks
    placed as they come (history, curated, the Gateway reference)."""
    per_source: dict[str, tuple[int, int]] = {}
    for item in trace["candidates"]:
        if item["kept"]:
            items, tokens = per_source.get(item["source"], (0, 0))
            per_source[item["source"]] = (items + 1, tokens + item["tokens"])
    for block in trace["blocks"]:
        items, tokens = per_source.get(block["source"], (0, 0))
        per_source[block["source"]] = (items + block.get("messages", 1), tokens + block["tokens"])
    return per_source
