"""The Context Forge's stages on small fixtures: fusion order, recency decay, threshold,
dedup across sources and against the prompt, the budget filled and never exceeded, and a
trace in which every candidate has its lineage and fate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.forge.rank import RRF_K, rank, recency
from memory_bridge.context.forge.select import select
from memory_bridge.core.candidates import Candidate, Drop
from memory_bridge.core.messages import Message
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking

DAY = 86400.0
NOW = 1_800_000_000.0


def words(text: str) -> int:
    return len(text.split())


def test_an_item_high_in_both_lists_beats_one_first_in_a_single_list() -> None:
    both = Candidate("notes", "both", "x", dense_rank=2, sparse_rank=2)
    dense_only = Candidate("notes", "dense", "y", dense_rank=1)
    sparse_only = Candidate("notes", "sparse", "z", sparse_rank=1)
    ranked = rank([dense_only, sparse_only, both], Ranking(recency_weight=0), NOW)
    assert [s.candidate.id for s in ranked] == ["both", "dense", "sparse"]
    assert ranked[0].fused == 2 / (RRF_K + 2)
    assert [s.rank for s in ranked] == [1, 2, 3]


def test_episodic_candidates_lean_on_the_keyword_list_by_default() -> None:
    dense = Candidate("episodic", "d", "x", dense_rank=1)
    sparse = Candidate("episodic", "s", "y", sparse_rank=1)
    fact = Candidate("longterm", "f", "z", dense_rank=1)
    ranked = rank([dense, sparse, fact], Ranking(recency_weight=0), NOW)
    # The keyword hit and the fact tie (ties go by source name); the dense-only hit is last.
    assert [s.candidate.id for s in ranked] == ["s", "f", "d"]
    assert ranked[2].fused == 0.5 / (RRF_K + 1)  # episodic dense weighs half
    assert ranked[1].fused == 1 / (RRF_K + 1)  # a one-list source keeps the global weight


def test_weights_tilt_the_fusion() -> None:
    dense = Candidate("episodic", "d", "x", dense_rank=1)
    sparse = Candidate("episodic", "s", "y", sparse_rank=1)
    ranked = rank(
        [dense, sparse], Ranking(dense_weight=1.0, sparse_weight=2.0, recency_weight=0), NOW
    )
    assert ranked[0].candidate.id == "s"


def test_recency_halves_every_half_life_and_breaks_ties() -> None:
    assert recency(NOW, NOW, 30) == 1.0
    assert abs(recency(NOW - 30 * DAY, NOW, 30) - 0.5) < 1e-9
    assert recency(None, NOW, 30) == 0.0
    # A token that weighs recency (0 by default): the fresher of two near-ties wins …
    weighed = Ranking(recency_weight=0.1)
    old = Candidate("longterm", "old", "a", dense_rank=1, created_at=NOW - 365 * DAY)
    new = Candidate("longterm", "new", "b", dense_rank=2, created_at=NOW - DAY)
    ranked = rank([old, new], weighed, NOW)
    assert ranked[0].candidate.id == "new"
    assert rank([old, new], Ranking(), NOW)[0].candidate.id == "old"  # the default: relevance
    # … but recency never lifts an item over a clearly better ranked one.
    fresh_but_weak = Candidate("longterm", "weak", "c", dense_rank=20, created_at=NOW)
    ranked = rank([old, fresh_but_weak], weighed, NOW)
    assert ranked[0].candidate.id == "old"


def test_threshold_duplicates_and_prompt_contents_are_dropped_with_reasons() -> None:
    items = [
        Candidate("episodic", "e1", "Alice likes  tea", dense_rank=1, sparse_rank=1),
        Candidate("longterm", "m1", "alice likes tea", dense_rank=1),  # same, other source
        Candidate("longterm", "m2", "Alice lives in Oslo", dense_rank=2, vector=(1.0, 0.0)),
        Candidate("episodic", "e2", "Alice's home is Oslo", dense_rank=3, vector=(0.99, 0.01)),
        Candidate("episodic", "e3", "what did I say?", dense_rank=4),
        Candidate("episodic", "e4", "weak", dense_rank=500),
    ]
    ranked = rank(items, Ranking(recency_weight=0), NOW)
    rules = Ranking(memory_token_budget=100, min_score=1 / (RRF_K + 100))
    outcomes = {o.scored.candidate.id: o for o in select(ranked, rules, words, ["What did I say?"])}
    assert outcomes["e1"].kept
    assert outcomes["m1"].reason == Drop.DUPLICATE and outcomes["m1"].duplicate_of == "episodic:e1"
    assert outcomes["m2"].kept
    assert outcomes["e2"].reason == Drop.DUPLICATE and outcomes["e2"].duplicate_of == "longterm:m2"
    assert outcomes["e3"].reason == Drop.IN_PROMPT
    assert outcomes["e4"].reason == Drop.THRESHOLD


@settings(max_examples=200, derandomize=True, deadline=None)  # no wall-clock limit in tests
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30),
    budget=st.integers(min_value=0, max_value=200),
)
def test_the_budget_is_never_exceeded_and_filled_greedily(sizes: list[int], budget: int) -> None:
    items = [
        Candidate("episodic", str(i), " ".join(f"w{i}x{j}" for j in range(n)), dense_rank=i + 1)
        for i, n in enumerate(sizes)
    ]
    # A budget of 0 is refused in a token's config; the selection still copes with it.
    rules = Ranking().model_copy(update={"memory_token_budget": budget})
    outcomes = select(rank(items, Ranking(recency_weight=0), NOW), rules, words)
    spent = sum(o.tokens for o in outcomes if o.kept)
    assert spent <= budget
    # Every dropped item was dropped for the budget, and truly did not fit when its turn came.
    running = 0
    for o in outcomes:
        if o.kept:
            running += o.tokens
        else:
            assert o.reason == Drop.BUDGET
            assert running + o.tokens > budget


def test_the_pipeline_keeps_the_best_across_sources_and_traces_every_candidate() -> None:
    episodic = Recall(
        source="episodic",
        candidates=(
            Candidate(
                "episodic",
                "p1",
                "Bob adopted a cat named Tom",
                dense_rank=1,
                sparse_rank=1,
                dense_score=0.8,
                sparse_score=7.1,
                lineage={"event_id": "ev-1"},
            ),
            Candidate(
                "episodic", "p2", "the weather was nice", dense_rank=2, lineage={"event_id": "ev-2"}
            ),
        ),
    )
    longterm = Recall(
        source="longterm", memories=("Bob has a cat named Tom", "Bob adopted a cat named Tom")
    )
    history = Recall(source="history", history=(Message(role="user", content="hello"),))
    gateway = Recall(source="gateway", reference=Message(role="user", content="ref text here"))
    rules = Ranking(recency_weight=0, memory_token_budget=12)
    forged = forge(
        [episodic, longterm, history, gateway],
        [Message(role="user", content="cat?")],
        rules,
        words,
        NOW,
    )
    by_source = {r.source: r for r in forged.recalls}
    assert by_source["episodic"].memories == ("Bob adopted a cat named Tom",)
    assert by_source["longterm"].memories == ("Bob has a cat named Tom",)
    assert by_source["history"].history == history.history  # placed as it is
    assert by_source["gateway"].reference == gateway.reference  # never merged or deduplicated
    trace = forged.trace
    assert trace["budget_tokens"] == 12 and trace["recalled_tokens"] == 6 + 6
    fates = {(c["source"], c["id"]): c for c in trace["candidates"]}
    assert len(fates) == 4
    assert fates[("episodic", "p1")]["kept"] and fates[("episodic", "p1")]["lineage"] == {
        "event_id": "ev-1"
    }
    assert fates[("episodic", "p1")]["scores"]["dense"] == 0.8
    assert fates[("longterm", "2")]["dropped"] == "duplicate"
    assert fates[("episodic", "p2")]["dropped"] == "budget"
    assert all(len(c["digest"]) == 16 and c["rank"] >= 1 for c in trace["candidates"])
    assert [b["kind"] for b in trace["blocks"]] == ["history", "reference"]
