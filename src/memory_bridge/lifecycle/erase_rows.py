"""The database side of erasing an end user: a transaction that removes every row holding
what the user said or what was remembered of it, and a last one that appends the `user.erased`
tombstone after removing what the vector layers' own deletes logged meanwhile.

What goes: the user's events in the log (`session.*`, their `curated.*` USER.md, `longterm.*`),
the jobs of those events, the projections (`messages`, their `curated` row), the context traces
of their requests (by the request ids the events name, and any other trace whose candidates
came from those events), their audit rows and the access stats of their memories (fading).
The events are deleted, not blanked: a replay then has nothing of the user to project, and
the tombstone (content-free: who, when, counts) deletes their projection rows again should
any come back from elsewhere.

On SQLite the transaction runs with `secure_delete` on, so freed pages and cells are zeroed
instead of keeping the text in free space; the WAL is then checkpointed and truncated, since
its older frames still hold the pages as they were before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import (
    EventType,
    NewEvent,
    curated_aggregate,
    session_aggregate,
    user_aggregate,
)
from memory_bridge.storage import access
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import (
    context_traces,
    curated,
    events,
    jobs,
    memory_access,
    memory_events,
)
from memory_bridge.storage.tables import messages as message_rows

log = logging.getLogger(__name__)

AUDIT_TYPE = "user_erased"
_CHUNK = 500  # ids per IN (...): far below SQLite's and PostgreSQL's parameter limits
_TRACE_PAGE = 200
# The log's events that belong to one end user (the tombstones stay: they are the record).
_OWNED = {
    EventType.SESSION_STARTED,
    EventType.SESSION_APPENDED,
    EventType.SESSION_COMPACTED,
    EventType.SESSION_DELETED,
    EventType.SESSION_SUMMARISED,
    EventType.CURATED_REPLACED,
    EventType.CURATED_DELETED,
    EventType.LONGTERM_RETAINED,
    EventType.LONGTERM_UPDATED,
    EventType.LONGTERM_DELETED,
    EventType.MEMORY_ADDED,
    EventType.MEMORY_DELETED,
    EventType.LONGTERM_MERGED,
    EventType.LONGTERM_SUPERSEDED,
    EventType.LONGTERM_RESTORED,
}


@dataclass
class RowsErased:
    """What one erasure found in the database (all zero: nothing of the user was there)."""

    events: int = 0
    sessions: int = 0
    messages: int = 0
    curated: int = 0
    jobs: int = 0
    traces: int = 0
    audit: int = 0
    access: int = 0  # access stats of the user's memories (fading)
    # Jobs that were running (a worker may still be writing their vectors): left in place,
    # the caller waits for them and sweeps the vector layers again.
    running_jobs: list[int] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(
            self.events or self.messages or self.curated or self.traces or self.audit or self.access
        )


def erase_rows(conn: Connection, token_id: int, user: str) -> RowsErased:
    """Delete the user's rows (one write unit)."""
    with secure_delete(conn):
        return _erase(conn, token_id, user)


def erase_rows_and_close(
    conn: Connection,
    token_id: int,
    user: str,
    earlier: dict[str, int],
    meta: dict[str, Any],
) -> tuple[RowsErased, dict[str, int]]:
    """The last pass (one write unit): delete whatever of the user's rows appeared since the
    first (the long-term layer's own `longterm.deleted` events, a late job's), then append
    the tombstone with the counts of the whole erasure if it removed anything at all."""
    with secure_delete(conn):
        found = _erase(conn, token_id, user)
    counts = dict(earlier)
    for name, value in counts_of(found).items():
        counts[name] = counts.get(name, 0) + value
    if any(counts.values()):
        event = NewEvent(
            EventType.USER_ERASED,
            user_aggregate(token_id, user),
            {"user": user, "counts": counts},
            meta,
        )
        event_log.append(conn, token_id, [event])
    return found, counts


@contextmanager
def secure_delete(conn: Connection) -> Iterator[None]:
    """SQLite zeroes what this transaction frees instead of leaving it in free space."""
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        conn.exec_driver_sql("PRAGMA secure_delete=ON")
    try:
        yield
    finally:
        if sqlite:
            conn.exec_driver_sql("PRAGMA secure_delete=OFF")


def counts_of(found: RowsErased) -> dict[str, int]:
    return {
        "events": found.events,
        "sessions": found.sessions,
        "messages": found.messages,
        "curated": found.curated,
        "jobs": found.jobs,
        "traces": found.traces,
        "audit": found.audit,
        "access": found.access,
    }


def _erase(conn: Connection, token_id: int, user: str) -> RowsErased:
    out = RowsErased()
    ids, event_ids, request_ids, sessions = _user_events(conn, token_id, user)
    out.events = len(ids)
    of_user = (message_rows.c.token_id == token_id, message_rows.c.user_id == user)
    out.sessions = len(
        sessions
        | {s for (s,) in conn.execute(select(message_rows.c.session_id).where(*of_user).distinct())}
    )
    out.messages = conn.execute(delete(message_rows).where(*of_user)).rowcount
    out.curated = conn.execute(
        delete(curated).where(curated.c.token_id == token_id, curated.c.user_id == user)
    ).rowcount
    for chunk in chunks(event_ids):
        running = conn.execute(
            select(jobs.c.id).where(jobs.c.event_id.in_(chunk), jobs.c.status == queue.RUNNING)
        )
        out.running_jobs.extend(int(r) for (r,) in running)
        out.jobs += conn.execute(
            delete(jobs).where(jobs.c.event_id.in_(chunk), jobs.c.status != queue.RUNNING)
        ).rowcount
    for chunk in chunks(ids):
        conn.execute(delete(memory_events).where(memory_events.c.id.in_(chunk)))
    out.traces = erase_traces(conn, token_id, request_ids, set(event_ids), user)
    out.audit = conn.execute(
        delete(events).where(
            events.c.token_id == token_id,
            events.c.user_id == user,
            events.c.type != AUDIT_TYPE,  # the record of earlier erasures stays
        )
    ).rowcount
    out.access = access.erase_user(conn, token_id, user)
    return out


def _user_events(
    conn: Connection, token_id: int, user: str
) -> tuple[list[int], list[str], set[str], set[str]]:
    """(row ids, event ids, request ids, sessions) of the user's events in the log.

    Aggregate ids narrow the read (a session's and a long-term memory's start with
    `token|user|`; the user's USER.md is one id); the payload's `user` decides, since an
    aggregate prefix alone could also match another user's documents.
    """
    prefix = session_aggregate(token_id, user, "")  # `token|user|`
    own_doc = curated_aggregate(token_id, "user", user)
    agg = memory_events.c.aggregate_id
    query = select(
        memory_events.c.id,
        memory_events.c.event_id,
        memory_events.c.type,
        memory_events.c.payload,
        memory_events.c.meta,
    ).where(
        memory_events.c.token_id == token_id,
        (func.substr(agg, 1, len(prefix)) == prefix) | (agg == own_doc),
    )
    ids: list[int] = []
    event_ids: list[str] = []
    request_ids: set[str] = set()
    sessions: set[str] = set()
    for row in conn.execute(query):
        if row.type not in _OWNED:
            continue
        payload = json.loads(row.payload)
        if payload.get("user") != user:
            continue
        ids.append(int(row.id))
        event_ids.append(str(row.event_id))
        if isinstance(payload.get("session"), str):
            sessions.add(payload["session"])
        request_id = json.loads(row.meta).get("request_id")
        if isinstance(request_id, str) and request_id:
            request_ids.add(request_id)
    return ids, event_ids, request_ids, sessions


def erase_traces(
    conn: Connection,
    token_id: int,
    request_ids: Iterable[str],
    event_ids: set[str],
    user: str | None = None,
    session: str | None = None,
) -> int:
    """The traces of the requests the events came from, any other whose candidates were
    recalled from those events, and (`user`) every trace of that end user's requests, stored
    or not (a trace records its end user; one written before it did is found the other ways);
    with `session` too, only that session's."""
    of_token = context_traces.c.token_id == token_id
    erased = 0
    for chunk in chunks(sorted(request_ids)):
        erased += conn.execute(
            delete(context_traces).where(of_token, context_traces.c.request_id.in_(chunk))
        ).rowcount
    if not event_ids and user is None:
        return erased
    doomed: list[int] = []
    after = 0
    while True:
        page = conn.execute(
            select(context_traces.c.id, context_traces.c.body)
            .where(of_token, context_traces.c.id > after)
            .order_by(context_traces.c.id)
            .limit(_TRACE_PAGE)
        ).all()
        for row in page:
            if _recalls(row.body, event_ids, user, session):
                doomed.append(int(row.id))
        if len(page) < _TRACE_PAGE:
            break
        after = int(page[-1].id)
    for chunk in chunks(doomed):
        erased += conn.execute(
            delete(context_traces).where(context_traces.c.id.in_(chunk))
        ).rowcount
    return erased


def _recalls(
    body: str, event_ids: set[str], user: str | None = None, session: str | None = None
) -> bool:
    try:
        trace = json.loads(body)
        candidates = trace.get("candidates") or []
    except (ValueError, AttributeError):
        return False
    mine = user is not None and trace.get("user") == user
    if mine and (session is None or trace.get("session") == session):
        return True
    for candidate in candidates:
        lineage = candidate.get("lineage") if isinstance(candidate, dict) else None
        if isinstance(lineage, dict) and lineage.get("event_id") in event_ids:
            return True
    return False


def running(conn: Connection, job_ids: Sequence[int]) -> int:
    """How many of these jobs are still running."""
    return sum(
        int(
            conn.execute(
                select(func.count()).where(jobs.c.id.in_(chunk), jobs.c.status == queue.RUNNING)
            ).scalar()
            or 0
        )
        for chunk in chunks(job_ids)
    )


def drop_jobs(conn: Connection, job_ids: Sequence[int]) -> int:
    return sum(
        conn.execute(delete(jobs).where(jobs.c.id.in_(chunk))).rowcount for chunk in chunks(job_ids)
    )


# The tables an erasure (or a delete) removes rows of: rewritten on PostgreSQL.
_REWRITTEN = (memory_events, message_rows, curated, jobs, context_traces, events, memory_access)


async def rewrite_files(db: Database, engine: AsyncEngine) -> str:
    """Make the deleted rows leave the database's files; what was done (for the receipt).

    SQLite (rows deleted with `secure_delete`): the WAL checkpointed and truncated. PostgreSQL:
    `VACUUM FULL` of every table rows were deleted from, which writes each anew without them (a
    plain VACUUM only marks their space reusable, the text stays in the file); it holds an
    exclusive lock on each table while it copies it. The WAL keeps the old rows until its
    segments are recycled (docs/operations.md)."""
    if engine.dialect.name != "postgresql":
        await db.run(checkpoint)
        return "sqlite: secure_delete, WAL checkpointed and truncated"
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in _REWRITTEN:
            await auto.exec_driver_sql(f"VACUUM FULL {table.name}")
    return "postgresql: VACUUM FULL " + ", ".join(t.name for t in _REWRITTEN)


def checkpoint(conn: Connection) -> None:
    """SQLite: copy the WAL into the database file and truncate it (its older frames hold the
    pages as they were before the erasure). Other databases: nothing."""
    if conn.dialect.name != "sqlite":
        return
    busy, _, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
    if busy:
        log.warning("erasure: the WAL could not be truncated now (readers); it will be later")


def chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]
