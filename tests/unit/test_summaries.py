"""Session summaries, the pure part: when a turn's job summarises (idle or busy session), the
transcript it sends, the answer read (summary and importance, an invalid importance the
default), the forge dropping the raw turns a candidate summary covers, and a summary job's
delay in the queue."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from memory_bridge.context.forge.summarised import drop_summarised
from memory_bridge.core.candidates import Candidate, Drop, Scored
from memory_bridge.events import queue
from memory_bridge.events.model import EventType, StoredEvent
from memory_bridge.sources.summaries import due, parse_answer, summary_point, transcript
from memory_bridge.storage.tables import jobs, metadata

AT = datetime(2025, 5, 1, tzinfo=UTC)


def _event(event_id: str, kind: str = EventType.SESSION_APPENDED, **payload: Any) -> StoredEvent:
    return StoredEvent(0, event_id, 1, kind, "1|ada|s", 1, payload, {}, None, AT)


def _turn(event_id: str, said: str = "hi") -> StoredEvent:
    messages = [{"role": "user", "content": said}, {"role": "assistant", "content": "ok"}]
    return _event(event_id, messages=messages)


def test_a_job_summarises_when_its_turn_is_still_the_latest_or_the_session_is_busy() -> None:
    turns = [_turn(f"t{i}") for i in range(1, 6)]
    # Turn 3's job (due after the idle time): turns 4 and 5 came since, the session is busy
    # talking: not yet. Turn 5's job: nothing since, the session is idle: all five.
    assert due(turns, "t3", turns=20) == []
    assert [e.event_id for e in due(turns, "t5", turns=20)] == ["t1", "t2", "t3", "t4", "t5"]
    # Five unsummarised turns reach `turns=5`: any job summarises them.
    assert len(due(turns, "t1", turns=5)) == 5
    # What a summary covers is not summarised again.
    summary = _event("s1", EventType.SESSION_SUMMARISED, covers=["t1", "t2", "t3"])
    later = [*turns[:3], summary, *turns[3:]]
    assert [e.event_id for e in due(later, "t5", turns=20)] == ["t4", "t5"]
    assert (
        due(
            [
                *turns,
                _event("s2", EventType.SESSION_SUMMARISED, covers=[e.event_id for e in turns]),
            ],
            "t5",
            turns=20,
        )
        == []
    )


def test_the_transcript_holds_the_user_and_assistant_texts_oldest_first() -> None:
    text = transcript([_turn("t1", "I like tea"), _turn("t2", "My cat is Tom")])
    assert text == "user: I like tea\nassistant: ok\nuser: My cat is Tom\nassistant: ok"


def _scored(c: Candidate, rank: int) -> Scored:
    return Scored(c, 0.0, 0.0, 1.0 / rank, rank)


def test_the_raw_turns_a_candidate_summary_covers_are_dropped_as_summarised() -> None:
    summary = Candidate("episodic", "s", "Summary", lineage={"type": "summary", "covers": "t1,t2"})
    covered = Candidate("episodic", "p1", "My cat is Tom", lineage={"event_id": "t1"})
    other = Candidate("episodic", "p2", "I like tea", lineage={"event_id": "t9"})
    ranked = [_scored(covered, 1), _scored(summary, 2), _scored(other, 3)]
    left, dropped = drop_summarised(ranked)
    assert [s.candidate.id for s in left] == ["s", "p2"]
    assert [(o.scored.candidate.id, o.reason) for o in dropped] == [("p1", Drop.SUMMARISED)]
    # No summary among the candidates: nothing changes.
    assert drop_summarised([_scored(covered, 1)]) == ([_scored(covered, 1)], [])


def test_a_consumer_delay_makes_its_job_due_later() -> None:
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    before = time.time()
    with engine.begin() as conn:
        queue.enqueue(conn, "e1", 1, "k", ["episodic", "summary"], {"summary": 900.0})
        due_at = dict(conn.execute(select(jobs.c.consumer, jobs.c.next_attempt_at)).all())
    assert before <= due_at["episodic"] <= time.time()
    assert due_at["summary"] >= before + 900.0


@pytest.mark.parametrize(
    ("answer", "parsed"),
    [
        ('{"summary": "Ada moved to Oslo.", "importance": 0.9}', ("Ada moved to Oslo.", 0.9)),
        ('```json\n{"summary": " Tea. ", "importance": 0}\n```', ("Tea.", 0.0)),
        ('{"summary": "Tea.", "importance": 1}', ("Tea.", 1.0)),
        # Absent or invalid: the default (None), the summary kept.
        ('{"summary": "Tea."}', ("Tea.", None)),
        ('{"summary": "Tea.", "importance": 1.5}', ("Tea.", None)),
        ('{"summary": "Tea.", "importance": -0.1}', ("Tea.", None)),
        ('{"summary": "Tea.", "importance": "high"}', ("Tea.", None)),
        ('{"summary": "Tea.", "importance": true}', ("Tea.", None)),
        ('{"summary": "Tea.", "importance": NaN}', ("Tea.", None)),
        # A model that answered in plain text: that is the summary.
        ("  Ada likes tea.  ", ("Ada likes tea.", None)),
        ("[1, 2]", ("[1, 2]", None)),
        # JSON without a summary text: no summary.
        ('{"importance": 0.9}', ("", None)),
        ('{"summary": "  ", "importance": 0.9}', ("", None)),
    ],
)
def test_the_answer_gives_the_summary_and_a_valid_importance_or_the_default(
    answer: str, parsed: tuple[str, float | None]
) -> None:
    assert parse_answer(answer) == parsed


def test_an_invalid_importance_is_logged_without_the_answers_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="memory_bridge.sources.summaries"):
        assert parse_answer('{"summary": "Code 4417.", "importance": 7}') == ("Code 4417.", None)
    assert "importance" in caplog.text and "4417" not in caplog.text


def test_a_summary_point_carries_its_importance_and_an_older_event_reads_as_the_default() -> None:
    payload = {"user": "ada", "session": "s", "text": "T", "covers": ["t1"], "last_at": str(AT)}
    older = summary_point(1, "s1", payload)
    rated = summary_point(1, "s1", {**payload, "importance": 0.9})
    invalid = summary_point(1, "s1", {**payload, "importance": 3})
    assert (older.importance, rated.importance, invalid.importance) == (None, 0.9, None)
    assert "importance" not in older.extra and rated.extra["importance"] == 0.9
    assert rated.created_at == AT.timestamp()
