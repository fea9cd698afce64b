"""The job queue as operators read it: counts per consumer and status, the oldest open job's
age, one job or a list of them (the admin API, the console, `/metrics`, the CLI)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from memory_bridge.events.queue import FAILED, OPEN, UNKNOWN
from memory_bridge.storage.tables import jobs


def summary(conn: Connection, token_id: int) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    query = (
        select(jobs.c.consumer, jobs.c.status, func.count())
        .where(jobs.c.token_id == token_id)
        .group_by(jobs.c.consumer, jobs.c.status)
    )
    for consumer, status, count in conn.execute(query):
        counts.setdefault(consumer, {})[status] = int(count)
    oldest = conn.execute(
        select(func.min(jobs.c.created_at)).where(
            jobs.c.token_id == token_id, jobs.c.status.in_(OPEN)
        )
    ).scalar()
    age = None if oldest is None else max(0.0, time.time() - float(oldest))
    return {"consumers": counts, "oldest_pending_age_seconds": age}


def depth(conn: Connection) -> tuple[dict[tuple[str, str], int], float | None]:
    """Jobs not done, per (consumer, status), over every token, and the oldest open job's age.
    Done jobs are left out: the claim index answers without reading them."""
    statuses = (*OPEN, FAILED, UNKNOWN)
    query = (
        select(jobs.c.consumer, jobs.c.status, func.count())
        .where(jobs.c.status.in_(statuses))
        .group_by(jobs.c.consumer, jobs.c.status)
    )
    counts = {(str(c), str(s)): int(n) for c, s, n in conn.execute(query)}
    oldest = conn.execute(
        select(func.min(jobs.c.created_at)).where(jobs.c.status.in_(OPEN))
    ).scalar()
    return counts, None if oldest is None else max(0.0, time.time() - float(oldest))


def busiest(conn: Connection, limit: int) -> dict[int, int]:
    """The `limit` tokens with the most open jobs, and how many each has (a flood's backlog)."""
    count = func.count().label("open")
    query = (
        select(jobs.c.token_id, count)
        .where(jobs.c.status.in_(OPEN))
        .group_by(jobs.c.token_id)
        .order_by(count.desc(), jobs.c.token_id)
        .limit(limit)
    )
    return {int(t): int(n) for t, n in conn.execute(query)}


def _item(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "event_id": row.event_id,
        "consumer": row.consumer,
        "status": row.status,
        "step": row.step,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def one(conn: Connection, token_id: int, job_id: int) -> dict[str, Any] | None:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id, jobs.c.token_id == token_id)).first()
    return None if row is None else _item(row)


def listed(
    conn: Connection, token_id: int, statuses: Sequence[str], limit: int
) -> list[dict[str, Any]]:
    query = (
        select(jobs)
        .where(jobs.c.token_id == token_id, jobs.c.status.in_(statuses))
        .order_by(jobs.c.id)
        .limit(limit)
    )
    return [_item(row) for row in conn.execute(query)]
