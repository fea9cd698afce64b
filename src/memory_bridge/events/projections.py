"""Projections of the memory event log: the tables recall reads, derived from events only.

`project` is applied in the transaction that appends the event (read-your-writes: the next
request sees the turn) and again, event by event, by a replay. Only what an event says goes
into a row — its time included — so a replay gives byte-identical tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, update

from memory_bridge.events.model import EventType, StoredEvent
from memory_bridge.storage.tables import curated, messages

# The projections a replay rebuilds, in the order they are emptied.
PROJECTION_TABLES = (messages, curated)


def project(conn: Connection, event: StoredEvent, at: datetime) -> None:
    # session.started/compacted and the long-term events have no table of their own here:
    # long-term memory is an asynchronous consumer (its vectors live in the vector engine).
    step = _PROJECTIONS.get(event.type)
    if step is not None:
        step(conn, event.token_id, event.payload, at)


def _appended(conn: Connection, token_id: int, data: dict[str, Any], at: datetime) -> None:
    rows = [
        {
            "token_id": token_id,
            "user_id": data["user"],
            "session_id": data["session"],
            "role": item["role"],
            "body": json.dumps(item, ensure_ascii=False),
            "created_at": at,
        }
        for item in data["messages"]
    ]
    if rows:
        conn.execute(insert(messages), rows)


def _session_deleted(conn: Connection, token_id: int, data: dict[str, Any], _: datetime) -> None:
    conn.execute(
        delete(messages).where(
            messages.c.token_id == token_id,
            messages.c.user_id == data["user"],
            messages.c.session_id == data["session"],
        )
    )


def _curated_replaced(conn: Connection, token_id: int, data: dict[str, Any], at: datetime) -> None:
    where = (
        curated.c.token_id == token_id,
        curated.c.kind == data["kind"],
        curated.c.user_id == data["user"],
    )
    changed = conn.execute(update(curated).where(*where).values(body=data["body"], updated_at=at))
    if not changed.rowcount:
        conn.execute(
            insert(curated).values(
                token_id=token_id,
                kind=data["kind"],
                user_id=data["user"],
                body=data["body"],
                updated_at=at,
            )
        )


def _curated_deleted(conn: Connection, token_id: int, data: dict[str, Any], _: datetime) -> None:
    conn.execute(
        delete(curated).where(
            curated.c.token_id == token_id,
            curated.c.kind == data["kind"],
            curated.c.user_id == data["user"],
        )
    )


def _user_erased(conn: Connection, token_id: int, data: dict[str, Any], _: datetime) -> None:
    user = data["user"]
    conn.execute(
        delete(messages).where(messages.c.token_id == token_id, messages.c.user_id == user)
    )
    conn.execute(delete(curated).where(curated.c.token_id == token_id, curated.c.user_id == user))


_PROJECTIONS: dict[str, Callable[[Connection, int, dict[str, Any], datetime], None]] = {
    EventType.SESSION_APPENDED: _appended,
    EventType.SESSION_DELETED: _session_deleted,
    EventType.CURATED_REPLACED: _curated_replaced,
    EventType.CURATED_DELETED: _curated_deleted,
    EventType.USER_ERASED: _user_erased,
}
