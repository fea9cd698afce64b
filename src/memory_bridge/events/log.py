"""Appending to the memory event log, with its projections applied in the same transaction.

Everything here is a plain function of a synchronous SQLAlchemy `Connection` inside a write
unit (`Database.write`), so an event, its projection rows and its jobs commit together or not
at all. Versions are per aggregate and unique with it: a second writer of the same version
fails on the constraint instead of silently interleaving.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, bindparam, delete, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from memory_bridge.events.model import NewEvent, StoredEvent
from memory_bridge.events.projections import PROJECTION_TABLES, project
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import jobs, memory_events

T = TypeVar("T")

_VERSION = select(func.max(memory_events.c.version)).where(
    memory_events.c.aggregate_id == bindparam("aggregate_id")
)
_INSERT = insert(memory_events)
_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
# Seconds before the first retry of a version conflict; doubled each time, with full jitter.
CONFLICT_BACKOFF = 0.005


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def current_version(conn: Connection, aggregate_id: str) -> int:
    return int(conn.execute(_VERSION, {"aggregate_id": aggregate_id}).scalar() or 0)


def lock_aggregate(conn: Connection, aggregate_id: str) -> bool:
    """On PostgreSQL, hold the aggregate's append lock until the transaction ends: appends of
    one aggregate (concurrent turns of one session) then take turns instead of racing for the
    same version; whether it was taken (a version read under it is current). SQLite's single
    writer already makes them take turns."""
    if conn.dialect.name != "postgresql":
        return False
    digest = hashlib.blake2b(aggregate_id.encode(), digest_size=8).digest()
    conn.execute(_LOCK, {"key": int.from_bytes(digest, "big", signed=True)})
    return True


def append(
    conn: Connection,
    token_id: int,
    events: Sequence[NewEvent],
    *,
    versions: dict[str, int] | None = None,
) -> list[StoredEvent]:
    """Append `events` in order, project each, and return them as stored (their log `id` is
    not read back: 0; `read` gives it).

    `versions` carries the aggregates' current versions when the caller knows them (one query
    fewer on the hot path); the database's unique constraint guards either way.
    """
    known = dict(versions or {})
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for event in events:
        version = known.get(event.aggregate_id)
        if version is None:
            version = current_version(conn, event.aggregate_id)
        version += 1
        known[event.aggregate_id] = version
        rows.append(
            {
                "event_id": event.event_id,
                "token_id": token_id,
                "type": str(event.type),
                "aggregate_id": event.aggregate_id,
                "version": version,
                "payload": dumps(event.payload),
                "embed_model": event.embed_model,
                "meta": dumps(event.meta),
                "created_at": now,
            }
        )
    if not rows:
        return []
    conn.execute(_INSERT, rows)
    stored = [
        StoredEvent(
            id=0,
            event_id=row["event_id"],
            token_id=token_id,
            type=row["type"],
            aggregate_id=row["aggregate_id"],
            version=row["version"],
            payload=event.payload,
            meta=event.meta,
            embed_model=event.embed_model,
            created_at=now,
        )
        for row, event in zip(rows, events, strict=True)
    ]
    for appended in stored:
        project(conn, appended, now)
    return stored


def read(
    conn: Connection,
    *,
    token_id: int | None = None,
    after: int = 0,
    limit: int | None = 1000,
    types: Collection[str] | None = None,
) -> list[StoredEvent]:
    """Events in log order (by id), optionally of one token and of some types, after the id
    `after`; `limit=None`: all of them."""
    query = select(memory_events).where(memory_events.c.id > after).order_by(memory_events.c.id)
    if token_id is not None:
        query = query.where(memory_events.c.token_id == token_id)
    if types is not None:
        query = query.where(memory_events.c.type.in_(tuple(types)))
    if limit is not None:
        query = query.limit(limit)
    return [stored_event(row) for row in conn.execute(query)]


def iterate(
    conn: Connection, *, token_id: int | None = None, batch: int = 1000
) -> Iterator[StoredEvent]:
    after = 0
    while True:
        page = read(conn, token_id=token_id, after=after, limit=batch)
        yield from page
        if len(page) < batch:
            return
        after = page[-1].id


def replay(conn: Connection, events: Iterable[StoredEvent]) -> int:
    """Project `events` again, each with its original time; returns how many."""
    count = 0
    for event in events:
        project(conn, event, event.created_at)
        count += 1
    return count


def stored_event(row: Any) -> StoredEvent:
    return StoredEvent(
        id=int(row.id),
        event_id=row.event_id,
        token_id=int(row.token_id),
        type=row.type,
        aggregate_id=row.aggregate_id,
        version=int(row.version),
        payload=json.loads(row.payload),
        meta=json.loads(row.meta),
        embed_model=row.embed_model,
        created_at=row.created_at,
    )


async def write_appending(db: Database, work: Callable[[Connection], T], attempts: int = 8) -> T:
    """`db.write(work)` for work that appends events, retried when another writer appended
    the same aggregate version first (a writer that does not take `lock_aggregate`, or a
    version remembered from before another process appended). Each retry reads the versions
    afresh, after a backoff with full jitter, so writers that collided do not collide again."""
    for attempt in range(1, attempts + 1):
        try:
            return await db.write(work)
        except IntegrityError:
            if attempt == attempts:
                raise
        await asyncio.sleep(random.uniform(0, CONFLICT_BACKOFF * 2**attempt))  # noqa: S311 (jitter)
    raise AssertionError("unreachable")


def rebuild_projections(conn: Connection) -> int:
    """Drop every projection table, make it anew and replay the whole log into it; returns
    how many events were replayed. The tables come out byte-identical: rows hold only what
    the events say."""
    for table in PROJECTION_TABLES:
        table.drop(conn)
        table.create(conn)
    return replay(conn, iterate(conn))


def purge(conn: Connection, token_id: int) -> None:
    """Every event and job of a token (a purged token leaves nothing behind)."""
    conn.execute(delete(jobs).where(jobs.c.token_id == token_id))
    conn.execute(delete(memory_events).where(memory_events.c.token_id == token_id))
