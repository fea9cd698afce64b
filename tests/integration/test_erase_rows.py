"""The database side of erasure and purge, on SQLite and PostgreSQL: one user's events, jobs,
projections, traces and audit rows go, with a tombstone a replay respects; another user's
stay; and a turn of a token whose row is gone is not stored."""

from __future__ import annotations

import json
import time

from sqlalchemy import ColumnElement, Connection, Table, func, insert, select

from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Scope
from memory_bridge.events import log, queue
from memory_bridge.events.model import EventType, NewEvent, session_aggregate
from memory_bridge.events.recorder import TurnRecorder
from memory_bridge.lifecycle import erase_rows
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import context_traces, events, jobs, memory_events, messages

TOKEN = 7


def _turn(user: str, session: str, text: str, request_id: str) -> NewEvent:
    payload = {
        "user": user,
        "session": session,
        "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}],
        "query": text,
        "finish_reason": "stop",
    }
    aggregate = session_aggregate(TOKEN, user, session)
    return NewEvent(EventType.SESSION_APPENDED, aggregate, payload, {"request_id": request_id})


def _seed(conn: Connection) -> None:
    for user, session, text, rid in (
        ("alice", "s1", "alice secret one", "r1"),
        ("alice", "s2", "alice secret two", "r2"),
        ("alice|s1", "x", "not alice at all", "r3"),  # shares no aggregate with alice
        ("bob", "s1", "bob's words", "r4"),
    ):
        event = _turn(user, session, text, rid)
        log.append(conn, TOKEN, [event])
        queue.enqueue(conn, event.event_id, TOKEN, event.aggregate_id, ["episodic"])
        trace: dict[str, list[object]] = {"candidates": [], "blocks": []}
        conn.execute(
            insert(context_traces),
            [
                {
                    "token_id": TOKEN,
                    "request_id": rid,
                    "created_at": time.time(),
                    "body": json.dumps(trace),
                }
            ],
        )
        conn.execute(
            insert(events),
            [
                {
                    "token_id": TOKEN,
                    "user_id": user,
                    "session_id": session,
                    "type": "memory_gateway_recall_failed",
                    "request_id": rid,
                    "data": "{}",
                }
            ],
        )


def _count(conn: Connection, table: Table, *where: ColumnElement[bool]) -> int:
    return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar() or 0)


async def test_erasing_alice_removes_her_rows_and_a_replay_keeps_them_gone(db: Database) -> None:
    await db.write(_seed)
    first = await db.write(lambda conn: erase_rows.erase_rows(conn, TOKEN, "alice"))
    assert (first.events, first.messages, first.sessions, first.jobs) == (2, 4, 2, 2)
    assert (first.traces, first.audit) == (2, 2)
    meta = {"source": "admin", "request_id": "rq"}
    _, counts = await db.write(
        lambda conn: erase_rows.erase_rows_and_close(
            conn, TOKEN, "alice", {**erase_rows.counts_of(first), "episodic": 4}, meta
        )
    )
    assert counts["events"] == 2 and counts["episodic"] == 4

    def check(conn: Connection) -> None:
        log.rebuild_projections(conn)
        users = {r.user_id for r in conn.execute(select(messages.c.user_id))}
        assert users == {"alice|s1", "bob"}
        payloads = [r.payload for r in conn.execute(select(memory_events.c.payload))]
        assert not any("alice secret" in p for p in payloads)
        erased = [
            json.loads(r.payload)
            for r in conn.execute(
                select(memory_events.c.payload).where(memory_events.c.type == "user.erased")
            )
        ]
        assert erased == [{"user": "alice", "counts": counts}]
        assert _count(conn, jobs) == 2 and _count(conn, context_traces) == 2
        assert _count(conn, events, events.c.user_id == "alice") == 0

    await db.write(check)
    # Idempotent: nothing found, no second tombstone.
    again = await db.write(lambda conn: erase_rows.erase_rows(conn, TOKEN, "alice"))
    assert not erase_rows.counts_of(again)["events"]


async def test_a_turn_of_a_token_without_its_row_is_not_stored(db: Database) -> None:
    recorder = TurnRecorder(db, 10_000)
    reply = Reply(content="hi", tool_calls=(), finish_reason="stop")
    stored = await recorder.record(
        Scope(token_id=TOKEN, user="ada", session="s"),
        [Message(role="user", content="hello")],
        "hello",
        reply,
        ("episodic",),
        {"request_id": "r"},
    )
    assert stored is None

    def rows(conn: Connection) -> tuple[int, int, int]:
        return (_count(conn, memory_events), _count(conn, messages), _count(conn, jobs))

    assert await db.run(rows) == (0, 0, 0)
