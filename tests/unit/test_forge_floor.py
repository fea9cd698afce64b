"""The relevance floor: a request whose candidates are all unrelated gets none of them; a
related one gets its relevant items and not the noise; sources without comparable scores are
never judged by it."""

from __future__ import annotations

from memory_bridge.context.forge.floor import clears, gate_open
from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.forge.rank import rank
from memory_bridge.context.forge.select import select
from memory_bridge.core.candidates import Candidate, Drop
from memory_bridge.core.messages import Message
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking, preset

NOW = 1_800_000_000.0
RULES = Ranking(dense_floor=0.5, sparse_floor=0.7, noise_share=0.5)


def words(text: str) -> int:
    return len(text.split())


def _c(id_: str, dense: float | None, coverage: float | None, rank_: int) -> Candidate:
    return Candidate(
        "episodic",
        id_,
        f"text {id_}",
        dense_rank=rank_,
        sparse_rank=rank_,
        dense_score=dense,
        sparse_coverage=coverage,
    )


def _fates(candidates: list[Candidate], rules: Ranking = RULES) -> dict[str, str]:
    outcomes = select(rank(candidates, rules, NOW), rules, words)
    return {o.scored.candidate.id: "kept" if o.kept else str(o.reason) for o in outcomes}


def test_unrelated_candidates_are_all_left_out() -> None:
    # Top-ranked, but nothing is close in meaning or shares most of the query's words.
    fates = _fates([_c("a", 0.44, 0.5, 1), _c("b", 0.3, 0.25, 2), _c("c", 0.1, 0.0, 3)])
    assert fates == {"a": "below_floor", "b": "below_floor", "c": "below_floor"}


def test_one_relevant_item_opens_the_gate_and_noise_stays_out() -> None:
    fates = _fates([_c("a", 0.62, 0.5, 1), _c("b", 0.3, 0.0, 2), _c("c", 0.1, 0.2, 3)])
    assert fates == {"a": "kept", "b": "kept", "c": "below_floor"}
    # Keyword coverage alone opens it too (a token without an embedder has no dense score).
    fates = _fates([_c("a", None, 0.75, 1), _c("b", None, 0.4, 2), _c("c", None, 0.25, 3)])
    assert fates == {"a": "kept", "b": "kept", "c": "below_floor"}


def test_candidates_without_comparable_scores_are_not_judged() -> None:
    plain = Candidate("longterm", "f", "a fact", dense_rank=1)
    assert clears(plain, RULES) is None
    low = _c("a", 0.1, 0.0, 1)
    fates = _fates([plain, low])
    assert fates == {"f": "kept", "a": "below_floor"}
    assert gate_open(rank([plain], RULES, NOW), RULES)


def test_floors_of_zero_keep_everything_ranked() -> None:
    rules = preset("no_floor", RULES)
    fates = _fates([_c("a", 0.01, 0.0, 1), _c("b", -0.2, 0.0, 2)], rules)
    assert fates == {"a": "kept", "b": "kept"}


def test_the_trace_says_whether_the_floor_was_cleared() -> None:
    episodic = Recall(source="episodic", candidates=(_c("a", 0.2, 0.0, 1),))
    forged = forge([episodic], [Message(role="user", content="q")], RULES, words, NOW)
    assert forged.recalls[0].memories == ()
    assert forged.trace["floor"] == {
        "dense": 0.5,
        "sparse": 0.7,
        "noise_share": 0.5,
        "cleared": False,
    }
    assert forged.trace["candidates"][0]["dropped"] == str(Drop.FLOOR)
    assert forged.trace["recalled_tokens"] == 0


def test_the_reply_to_a_matching_question_comes_with_it() -> None:
    question = Candidate(
        "episodic",
        "q",
        "What is the answer to everything?",
        dense_rank=1,
        sparse_rank=1,
        dense_score=0.8,
        sparse_coverage=1.0,
        lineage={"event_id": "e1"},
    )
    # Shares no word with the request: only its exchange makes it relevant.
    reply = Candidate(
        "episodic",
        "r",
        "Forty-two, obviously.",
        dense_rank=5,
        sparse_rank=2,
        dense_score=0.05,
        sparse_coverage=0.0,
        lineage={"event_id": "e1"},
    )
    stranger = Candidate(
        "episodic",
        "s",
        "The weather was nice",
        dense_rank=6,
        sparse_rank=9,
        dense_score=0.05,
        sparse_coverage=0.0,
        lineage={"event_id": "e2"},
    )
    assert _fates([question, reply, stranger]) == {"q": "kept", "r": "kept", "s": "below_floor"}


def test_a_short_question_may_miss_one_of_its_terms() -> None:
    def hit(coverage: float, terms: int) -> Candidate:
        return Candidate(
            "episodic",
            "k",
            "I bought a red kayak",
            sparse_coverage=coverage,
            query_terms=terms,
            sparse_rank=1,
        )

    # "What kayak did I buy?": two terms, "buy" is not "bought".
    assert clears(hit(0.5, 2), RULES) is True
    assert clears(hit(0.6667, 3), RULES) is True
    assert clears(hit(0.5, 4), RULES) is False  # four terms: 70% of them
    assert clears(hit(0.75, 4), RULES) is True
    assert clears(hit(0.0, 1), RULES) is False
