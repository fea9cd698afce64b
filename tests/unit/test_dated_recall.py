"""Dated recall: every injected item carries the ISO date it was said or learned, labelled in
the template's language; the block lists dated items oldest first; on equal relevance the
newer item ranks first; the trace shows each candidate's date."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_bridge.context.assemble import Placement
from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.forge.rank import rank
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core.candidates import Candidate, iso_day
from memory_bridge.core.messages import Message
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking

MARCH = datetime(2026, 3, 14, 9, 30, tzinfo=UTC).timestamp()
JUNE = datetime(2026, 6, 2, 23, 59, tzinfo=UTC).timestamp()
NOW = datetime(2026, 7, 1, tzinfo=UTC).timestamp()


def test_on_equal_relevance_the_newer_item_ranks_first() -> None:
    old = Candidate("longterm", "a", "I live in Paris", dense_rank=1, created_at=MARCH)
    new = Candidate("longterm", "b", "I live in Berlin", dense_rank=1, created_at=JUNE)
    undated = Candidate("longterm", "0", "I like tea", dense_rank=1)
    weights = Ranking(recency_weight=0, importance_weight=0)
    ranked = rank([old, undated, new], weights, NOW)
    assert [s.candidate.id for s in ranked] == ["b", "a", "0"]


def test_with_the_defaults_the_date_breaks_ties_and_never_outweighs_relevance() -> None:
    # Ids ordered against the dates (ties otherwise go by id), so only the date can put the
    # newer first.
    new = Candidate("episodic", "b", "I live in Berlin", sparse_rank=3, created_at=JUNE)
    old = Candidate("episodic", "a", "I live in Paris", sparse_rank=3, created_at=MARCH)
    ranked = rank([old, new], Ranking(), NOW)
    assert [s.candidate.id for s in ranked] == ["b", "a"]
    assert ranked[0].final == ranked[1].final
    # One place better in the keyword list beats four months newer: the date is no weight.
    older_but_better = Candidate(
        "episodic", "c", "I moved to Paris", sparse_rank=2, created_at=MARCH
    )
    ranked = rank([new, older_but_better], Ranking(), NOW)
    assert [s.candidate.id for s in ranked] == ["c", "b"]


def test_scores_equal_but_for_float_rounding_are_a_tie_the_date_breaks() -> None:
    # 0.5/63 + 1/90 == 0.5/70 + 1/84 exactly, yet the two float sums differ in the last bit.
    old = Candidate("episodic", "a", "Paris", dense_rank=3, sparse_rank=30, created_at=MARCH)
    new = Candidate("episodic", "b", "Berlin", dense_rank=10, sparse_rank=24, created_at=JUNE)
    assert 0.5 / 63 + 1 / 90 != 0.5 / 70 + 1 / 84
    assert [s.candidate.id for s in rank([old, new], Ranking(), NOW)] == ["b", "a"]


def test_the_block_lists_dated_items_oldest_first_with_their_date() -> None:
    template = MemoryTemplate("M:\n{memories}")
    block = template.render(
        ("I live in Berlin", "I like tea", "I live in Paris"), (JUNE, None, MARCH)
    )
    assert block == (
        "M:\n- I like tea\n- [on 2026-03-14] I live in Paris\n- [on 2026-06-02] I live in Berlin"
    )
    chinese = MemoryTemplate("记忆：\n{memories}", "zh")
    assert chinese.render(("我住在柏林",), (JUNE,)) == "记忆：\n- [记于 2026-06-02] 我住在柏林"
    # No dates: the items as they were.
    assert template.render(("a", "b")) == "M:\n- a\n- b"


def test_the_forge_hands_each_kept_item_its_date_and_the_trace_shows_it() -> None:
    recalled = Recall(
        source="episodic",
        candidates=(
            Candidate("episodic", "p", "I live in Paris", dense_rank=1, created_at=MARCH),
            Candidate("episodic", "b", "I live in Berlin", dense_rank=2, created_at=JUNE),
        ),
    )
    plain = Recall(source="notes", memories=("I like tea",))
    forged = forge(
        [recalled, plain],
        [Message(role="user", content="where do I live?")],
        Ranking(),
        lambda text: len(text.split()),
        NOW,
    )
    by_source = {r.source: r for r in forged.recalls}
    episodic = by_source["episodic"]
    assert dict(zip(episodic.memories, episodic.dates, strict=True)) == {
        "I live in Paris": MARCH,
        "I live in Berlin": JUNE,
    }
    assert by_source["notes"].dates == ()
    dates = {c["text"]: c["date"] for c in forged.trace["candidates"]}
    assert dates == {
        "I live in Paris": "2026-03-14",
        "I live in Berlin": "2026-06-02",
        "I like tea": None,
    }
    placement = Placement.of(forged.recalls, MemoryTemplate("{memories}"))
    assert placement is not None
    assert placement.dynamic.splitlines() == [
        "- I like tea",
        "- [on 2026-03-14] I live in Paris",
        "- [on 2026-06-02] I live in Berlin",
    ]


def test_a_date_is_the_utc_day() -> None:
    assert iso_day(JUNE) == "2026-06-02"
    assert iso_day(None) is None
    assert iso_day(1e20) is None
