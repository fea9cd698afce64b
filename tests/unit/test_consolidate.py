"""Consolidation's pure part: what is the same fact, the memory LLM's answer validated (never
guessed), the plans it leads to; and `memory.longterm` validated when a token is saved."""

from __future__ import annotations

import json

import pytest

from memory_bridge.sources.longterm.consolidate import (
    Fact,
    InvalidVerdict,
    messages,
    normalised,
    older_than,
    parse_verdicts,
    plan_from_verdicts,
    plan_without_llm,
    to_judge,
)
from memory_bridge.tenancy.errors import TokenConfigError
from memory_bridge.tenancy.memory_config import parse_memory_config

NEW = Fact("n", "I now live in Berlin")


def test_case_punctuation_and_spacing_do_not_make_another_fact() -> None:
    assert normalised("  My cat is called   Tom!") == normalised("my cat is called tom")
    assert normalised("I live in Paris") != normalised("I live in Berlin")
    said_again = Fact("n", "my CAT is called Tom.")
    older = [Fact("o", "My cat is called Tom", score=0.5)]  # the vectors need not agree
    plan = plan_without_llm(said_again, older, near_duplicate=0.95)
    assert plan is not None and plan.merge_into == older[0] and not plan.judged


def test_a_near_duplicate_by_cosine_merges_and_a_similar_fact_does_not() -> None:
    near = Fact("o1", "I live in Berlin now", score=0.97)
    similar = Fact("o2", "I live in Paris", score=0.7)
    plan = plan_without_llm(NEW, [near, similar], near_duplicate=0.95)
    assert plan is not None and plan.merge_into == near
    assert plan_without_llm(NEW, [similar], near_duplicate=0.95) is None
    # Only what is above the floor is judged, nearest first, at most `limit`.
    far = Fact("o3", "I like tea", score=0.2)
    assert to_judge(NEW, [similar, far], floor=0.6, limit=5) == [similar]
    assert to_judge(NEW, [similar, Fact("o4", "x", score=0.65)], floor=0.6, limit=1) == [similar]


def test_the_judgement_prompt_numbers_the_older_facts() -> None:
    sent = messages(NEW, [Fact("o", "I live in Paris"), Fact("p", "I like tea")])
    assert sent[0]["role"] == "system" and '"verdicts"' in sent[0]["content"]
    assert sent[1]["content"].endswith("EXISTING facts:\n1. I live in Paris\n2. I like tea")


def test_verdicts_lead_to_a_merge_a_supersession_or_nothing() -> None:
    judged = [Fact("a", "I live in Paris"), Fact("b", "I live in Lyon"), Fact("c", "I like tea")]
    answer = json.dumps(
        {
            "verdicts": [
                {"fact": 2, "relation": "update"},
                {"fact": 1, "relation": "update"},
                {"fact": 3, "relation": "unrelated"},
            ]
        }
    )
    relations = parse_verdicts(answer, 3)
    assert relations == ["update", "update", "unrelated"]
    plan = plan_from_verdicts(judged, relations)
    assert plan.supersede == (judged[0], judged[1]) and plan.merge_into is None and plan.judged
    merged = plan_from_verdicts(judged, ["unrelated", "duplicate", "update"])
    assert merged.merge_into == judged[1] and merged.supersede == ()
    assert plan_from_verdicts(judged, ["unrelated"] * 3).supersede == ()
    fenced = '```json\n{"verdicts": [{"fact": 1, "relation": "duplicate"}]}\n```'
    assert parse_verdicts(fenced, 1) == ["duplicate"]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("Berlin is newer.", "not JSON"),
        ("[]", "no 'verdicts' list"),
        ('{"verdicts": "update"}', "no 'verdicts' list"),
        ('{"verdicts": [1]}', "not an object"),
        ('{"verdicts": [{"fact": 3, "relation": "update"}]}', "names no listed fact"),
        ('{"verdicts": [{"fact": true, "relation": "update"}]}', "names no listed fact"),
        ('{"verdicts": [{"fact": 1, "relation": "newer"}]}', "relation"),
        ('{"verdicts": [{"fact": 1, "relation": "update"}]}', "have no verdict"),
        (
            '{"verdicts": [{"fact": 1, "relation": "update"}, {"fact": 1, "relation": "update"}]}',
            "two verdicts",
        ),
    ],
)
def test_an_answer_off_the_schema_is_refused_with_the_reason(answer: str, why: str) -> None:
    with pytest.raises(InvalidVerdict, match=why):
        parse_verdicts(answer, 2)


def test_memory_longterm_is_validated_when_a_token_is_saved() -> None:
    assert parse_memory_config(None).longterm.consolidation == "dedup"
    cfg = parse_memory_config(
        {"longterm": {"consolidation": "judge", "similarityFloor": 0.5, "maxJudged": 3}}
    )
    assert cfg.longterm.consolidation == "judge" and cfg.longterm.max_judged == 3
    assert not cfg.longterm.summaries
    assert parse_memory_config({"longterm": {"summaries": True}}).longterm.summaries
    for bad, field in (
        ({"consolidation": "always"}, "memory.longterm.consolidation"),
        ({"nearDuplicate": 2}, "memory.longterm.nearDuplicate"),
        ({"similarityFloor": "high"}, "memory.longterm.similarityFloor"),
        ({"similarityFloor": 0.99, "nearDuplicate": 0.9}, "memory.longterm.similarityFloor"),
        ({"maxJudged": 1000}, "memory.longterm.maxJudged"),
        ({"summaries": "yes"}, "memory.longterm.summaries"),
        ({"summaryTurns": 1}, "memory.longterm.summaryTurns"),
        ({"surprise": 1}, "memory.longterm"),
    ):
        with pytest.raises(TokenConfigError) as caught:
            parse_memory_config({"longterm": bad})
        assert str(caught.value).startswith(field), (bad, str(caught.value))
    with pytest.raises(TokenConfigError):
        parse_memory_config({"longterm": "judge"})


def test_only_facts_said_before_the_new_one_are_its_older_facts() -> None:
    """A turn's consolidation running after the next turn's extraction must not judge the
    earlier fact against the later one (an "update" would then supersede the newer)."""
    paris = Fact("b-paris", "I live in Paris", "2026-03-01T10:00:00+00:00")
    berlin = Fact("a-berlin", "I moved to Berlin", "2026-06-01T10:00:00")  # naive: UTC
    same_time = Fact("c-same", "I like tea", "2026-03-01T10:00:00+00:00")
    undated = Fact("d-undated", "I like jazz", None)
    assert older_than(berlin, [paris, same_time, undated, berlin]) == [paris, same_time, undated]
    assert older_than(paris, [berlin, same_time, undated]) == [undated]
    # Equal dates: the id decides, so exactly one of the two is the other's older fact.
    assert older_than(same_time, [paris]) == [paris]
    # A new fact whose date is unreadable keeps every other candidate (order unknown).
    assert older_than(undated, [paris, berlin, undated]) == [paris, berlin]
