"""Fading in the forge's pure stages: the factor (half-life from the last use or the date,
stretched by importance), the score multiplied by it, the `faded` drop under the floor, a faded
item opening no gate and covering no turns, and fading off changing nothing at all."""

from __future__ import annotations

import pytest

from memory_bridge.context.forge.fade import DEFAULT_IMPORTANCE, fade
from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.forge.rank import rank
from memory_bridge.context.forge.select import select
from memory_bridge.context.forge.summarised import drop_summarised
from memory_bridge.core.candidates import Candidate, Drop
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking

DAY = 86400.0
NOW = 1_800_000_000.0
ON = Ranking(fade_half_life_days=30)


def words(text: str) -> int:
    return len(text.split())


def _item(item_id: str, days_old: float, **kw: object) -> Candidate:
    return Candidate(
        "episodic", item_id, f"text {item_id}", dense_rank=1, created_at=NOW - days_old * DAY, **kw
    )  # type: ignore[arg-type]


def test_the_factor_halves_every_half_life_since_the_last_use_or_the_date() -> None:
    old = _item("a", 60)
    assert fade(old, {}, NOW, ON) == (pytest.approx(0.25), None)
    used = {old.key: NOW - 30 * DAY}
    assert fade(old, used, NOW, ON) == (pytest.approx(0.5), NOW - 30 * DAY)
    # A use older than the item's date (a restated fact) does not age it.
    assert fade(old, {old.key: NOW - 90 * DAY}, NOW, ON)[0] == pytest.approx(0.25)
    assert fade(Candidate("episodic", "x", "t"), {}, NOW, ON) == (1.0, None)  # no age known


def test_importance_stretches_the_half_life() -> None:
    assert DEFAULT_IMPORTANCE == 0.5
    assert fade(_item("a", 45, importance=1.0), {}, NOW, ON)[0] == pytest.approx(0.5)
    assert fade(_item("a", 15, importance=0.0), {}, NOW, ON)[0] == pytest.approx(0.5)


def test_items_without_an_identity_and_fading_off_do_not_fade() -> None:
    plain = Candidate("curated", "1", "t", dense_rank=1, created_at=NOW - 900 * DAY)
    assert fade(plain, {}, NOW, ON) == (1.0, None)
    assert fade(_item("a", 900), {}, NOW, Ranking()) == (1.0, None)


def test_the_score_decays_and_an_item_under_the_floor_is_dropped_as_faded() -> None:
    fresh, old = _item("fresh", 1), _item("old", 400)
    ranked = rank([old, fresh], ON, NOW)
    by_id = {s.candidate.id: s for s in ranked}
    assert by_id["old"].fade < 0.1 < by_id["fresh"].fade
    undecayed = {s.candidate.id: s.final for s in rank([old, fresh], Ranking(), NOW)}
    assert by_id["old"].final == pytest.approx(undecayed["old"] * by_id["old"].fade)
    assert [s.candidate.id for s in ranked] == ["fresh", "old"]
    outcomes = {o.scored.candidate.id: o for o in select(ranked, ON, words)}
    assert outcomes["fresh"].kept
    assert outcomes["old"].reason == Drop.FADED
    # Used recently, the same old item is back.
    used = rank([old], ON, NOW, {old.key: NOW - DAY})
    assert select(used, ON, words)[0].kept


def test_a_faded_item_opens_no_gate() -> None:
    relevant_but_faded = _item("old", 400, dense_score=0.9)
    noise = _item("noise", 1, dense_score=0.3)
    ranked = rank([relevant_but_faded, noise], ON, NOW)
    reasons = {o.scored.candidate.id: o.reason for o in select(ranked, ON, words)}
    assert reasons == {"old": Drop.FADED, "noise": Drop.FLOOR}


def test_a_faded_summary_covers_nothing() -> None:
    lineage = {"type": "summary", "covers": "e1"}
    summary = _item("s", 400, lineage=lineage)
    turn = _item("t", 1, lineage={"event_id": "e1"})
    ranked = rank([summary, turn], ON, NOW)
    left, dropped = drop_summarised(ranked, ON)
    assert dropped == [] and len(left) == 2
    fresh_summary = _item("s", 1, lineage=lineage)
    _, dropped = drop_summarised(rank([fresh_summary, turn], ON, NOW), ON)
    assert [o.reason for o in dropped] == [Drop.SUMMARISED]


def test_fading_off_changes_nothing() -> None:
    items = [_item(str(i), i * 37.0, sparse_rank=i + 1) for i in range(8)]
    recall = [Recall(source="episodic", candidates=tuple(items))]
    used = {c.key: NOW for c in items}
    plain = forge(recall, [], Ranking(), words, NOW)
    with_used = forge(recall, [], Ranking(), words, NOW, used=used)
    assert plain.trace == with_used.trace
    assert "fading" not in plain.trace
    assert all("fade" not in c["scores"] for c in plain.trace["candidates"])
    assert [s.final for s in rank(items, Ranking(), NOW)] == [
        s.final for s in rank(items, Ranking(), NOW, used)
    ]


def test_the_trace_shows_each_item_s_fade() -> None:
    recall = [Recall(source="episodic", candidates=(_item("a", 60),))]
    trace = forge(recall, [], ON, words, NOW, used={"episodic:a": NOW - 30 * DAY}).trace
    (item,) = trace["candidates"]
    assert item["scores"]["fade"] == pytest.approx(0.5)
    assert item["importance"] == 0.5 and item["last_used"] is not None
    assert trace["fading"] == {"half_life_days": 30.0, "floor": 0.1}


def test_an_items_own_importance_weighs_in_the_rank_and_none_counts_as_the_default() -> None:
    rated = _item("a", 10, importance=0.9)
    middle = _item("b", 10, importance=DEFAULT_IMPORTANCE)
    unrated = _item("c", 10)
    low = _item("d", 10, importance=0.1)
    ranked = rank([low, unrated, middle, rated], Ranking(), NOW)
    assert [s.candidate.id for s in ranked] == ["a", "b", "c", "d"]
    assert ranked[1].final == ranked[2].final  # no importance of its own: the middle one
