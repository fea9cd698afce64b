"""Deleting one session, one long-term fact or one curated document everywhere at once.

A delete is not only its projection (the `messages` or `curated` row the next request reads):
the same words are in the event log, in vector shards, in the long-term layer and in context
traces. Each delete here removes them from all of these before it answers, so nothing of what
was deleted is recalled again, exported, or rebuilt from the log.

A session (`delete_session`), in order:
1. One write unit (SQLite's `secure_delete` on): the content-free `session.deleted` tombstone
   (its projection deletes the stored messages), the session's own events (`session.started`,
   `appended`, `compacted`: the text), their pending jobs (no worker indexes, extracts or sends
   a deleted turn afterwards), and the context traces of its requests (stored or not) and of
   any request that recalled one of its turns.
2. A job of the session that was already running is waited for (at most
   `MEMORY_STORE_TIMEOUT`), so what it writes is swept by the next steps.
3. The long-term facts the session's turns added (each is tagged with its turn's event id),
   deleted through Mem0 and logged as content-free `longterm.deleted` events.
4. Every vector shard of the token (every generation, a rebuild's target included): the
   session's episodic points and any point tagged with one of its turns; each shard that held
   one is compacted, so the payloads leave the files too.
5. One more write unit: the `longterm.retained` / `updated` events that carried those facts'
   text, any trace that recalled the session or one of those facts (from any session); then
   SQLite's WAL is checkpointed and truncated.
A rebuild running meanwhile replays the tombstone after whatever it indexed earlier, so its new
shard drops the session's points as well. The Memory Gateway keeps what was added to it (its
protocol has no delete).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, select

from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import (
    EventType,
    NewEvent,
    curated_aggregate,
    longterm_aggregate,
    session_aggregate,
)
from memory_bridge.lifecycle import erase_rows
from memory_bridge.lifecycle.erase import wait_for_jobs
from memory_bridge.sources.longterm.config import MODEL_PREFIX, end_user
from memory_bridge.sources.longterm.points import StoredMemory
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.tables import context_traces, curated, jobs, memory_events, messages
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.vectors.index import Where

log = logging.getLogger(__name__)

EPISODIC_KIND = "episodic"
# A session's own events: what it said. Its `session.deleted` tombstones stay (content-free).
_SESSION_TEXT = (
    EventType.SESSION_STARTED.value,
    EventType.SESSION_APPENDED.value,
    EventType.SESSION_COMPACTED.value,
)
_FACT_TEXT = (EventType.LONGTERM_RETAINED.value, EventType.LONGTERM_UPDATED.value)
TRACE_TEXT = 500  # a trace keeps a candidate's first 500 characters (context.forge.trace)
_TRACE_PAGE = 200


@dataclass
class SessionRows:
    """What the first write unit of a session's delete found and removed."""

    found: bool = False
    event_ids: list[str] = field(default_factory=list)
    running_jobs: list[int] = field(default_factory=list)
    traces: int = 0


async def delete_session(
    runtime: MemoryServices,
    token_id: int,
    user: str,
    session: str,
    meta: dict[str, Any],
    *,
    traces: TraceStore | None = None,
) -> bool:
    """Delete one session of an end user everywhere; False when it holds nothing (no stored
    message, no event of a turn)."""
    if traces is not None:
        await traces.settle()  # a trace still queued would be written after the delete

    def first(conn: Connection) -> SessionRows:
        with erase_rows.secure_delete(conn):
            return _delete_session_rows(conn, token_id, user, session, meta)

    rows = await event_log.write_appending(runtime.db, first)
    if not rows.found:
        return False
    if rows.running_jobs:
        await wait_for_jobs(runtime, rows.running_jobs)
    facts = await _delete_facts(runtime, token_id, user, rows.event_ids)
    await _sweep_session(runtime, token_id, user, session, rows.event_ids, bool(facts))

    fact_ids = [m.id for m in facts]
    # A request of another session may have recalled one of those facts: its trace quotes
    # the fact's text, not the turn it came from.
    fact_texts = {m.text[:TRACE_TEXT] for m in facts if m.text}

    def last(conn: Connection) -> None:
        with erase_rows.secure_delete(conn):
            delete_fact_text(conn, token_id, user, fact_ids, rows.event_ids)
            erase_rows.erase_traces(conn, token_id, (), set(rows.event_ids), user, session)
            _erase_traces_quoting(conn, token_id, "longterm", fact_texts)

    await runtime.db.write(last)
    await erase_rows.rewrite_files(runtime.db, runtime.engine)
    log.info(
        "token %d: a session deleted (%d turn(s), %d fact(s))",
        token_id,
        len(rows.event_ids),
        len(facts),
    )
    return True


def _delete_session_rows(
    conn: Connection, token_id: int, user: str, session: str, meta: dict[str, Any]
) -> SessionRows:
    aggregate = session_aggregate(token_id, user, session)
    own = conn.execute(
        select(
            memory_events.c.id, memory_events.c.event_id, memory_events.c.type, memory_events.c.meta
        ).where(
            memory_events.c.token_id == token_id,
            memory_events.c.aggregate_id == aggregate,
            memory_events.c.type.in_(_SESSION_TEXT),
        )
    ).all()
    stored = conn.execute(
        select(messages.c.id)
        .where(
            messages.c.token_id == token_id,
            messages.c.user_id == user,
            messages.c.session_id == session,
        )
        .limit(1)
    ).first()
    out = SessionRows()
    if stored is None and not any(r.type == EventType.SESSION_APPENDED.value for r in own):
        return out
    out.found = True
    tombstone = NewEvent(
        EventType.SESSION_DELETED, aggregate, {"user": user, "session": session}, meta
    )
    # Appended before the session's events go, so the aggregate's version keeps growing.
    event_log.append(conn, token_id, [tombstone])
    out.event_ids = [str(r.event_id) for r in own]
    request_ids = {_request_id(r.meta) for r in own} - {""}
    for chunk in erase_rows.chunks(out.event_ids):
        running = conn.execute(
            select(jobs.c.id).where(jobs.c.event_id.in_(chunk), jobs.c.status == queue.RUNNING)
        )
        out.running_jobs.extend(int(r) for (r,) in running)
        conn.execute(delete(jobs).where(jobs.c.event_id.in_(chunk), jobs.c.status != queue.RUNNING))
    for chunk in erase_rows.chunks([int(r.id) for r in own]):
        conn.execute(delete(memory_events).where(memory_events.c.id.in_(chunk)))
    out.traces = erase_rows.erase_traces(
        conn, token_id, request_ids, set(out.event_ids), user, session
    )
    return out


def _request_id(raw: str) -> str:
    value = _object(raw).get("request_id")
    return value if isinstance(value, str) else ""


def _object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def _delete_facts(
    runtime: MemoryServices, token_id: int, user: str, event_ids: Sequence[str]
) -> list[StoredMemory]:
    """The long-term facts the session's turns added, deleted."""
    if not event_ids:
        return []
    record = await runtime.tokens.get(token_id)
    config = record.config if record is not None else None
    if config is None or not runtime.longterm.consumes(config):
        return []
    return list(
        await runtime.longterm.delete_of_turns(token_id, config, user, event_ids, "session_deleted")
    )


async def _sweep_session(
    runtime: MemoryServices,
    token_id: int,
    user: str,
    session: str,
    event_ids: Sequence[str],
    facts_gone: bool,
) -> None:
    """Every shard of the token: the session's episodic points and any point of its turns
    (the long-term layer's too, in a generation Mem0 is not bound to), then a compaction of
    each shard that held one."""
    by_session = Where(user=user, session=session, kind=EPISODIC_KIND)
    by_turn = Where(user=user, event_id=tuple(event_ids))

    def sweep() -> None:
        for key in runtime.vectors.shards(token_id):
            index = runtime.vectors.index(key.token_id, key.model_id, key.dims)
            held = False
            for where in (by_session, by_turn):
                if not where.matches_nothing() and index.count(where):
                    index.delete_where(where)
                    held = True
            if held or (facts_gone and key.model_id.startswith(MODEL_PREFIX)):
                # A long-term shard compacts too: Mem0 deleted its points itself.
                index.compact()

    await runtime.vector_threads.run(sweep)


def delete_fact_text(
    conn: Connection,
    token_id: int,
    user: str,
    memory_ids: Sequence[str],
    source_event_ids: Sequence[str] = (),
) -> int:
    """The log events that carry the text of deleted facts (`longterm.retained` / `updated`
    of each fact, and of any fact the turns `source_event_ids` produced); how many."""
    removed = 0
    aggregates = [longterm_aggregate(token_id, user, m) for m in memory_ids]
    for chunk in erase_rows.chunks(aggregates):
        removed += conn.execute(
            delete(memory_events).where(
                memory_events.c.token_id == token_id,
                memory_events.c.aggregate_id.in_(chunk),
                memory_events.c.type.in_(_FACT_TEXT),
            )
        ).rowcount
    if source_event_ids:
        wanted = set(source_event_ids)
        prefix = session_aggregate(token_id, user, "")
        rows = conn.execute(
            select(memory_events.c.id, memory_events.c.payload).where(
                memory_events.c.token_id == token_id,
                memory_events.c.type.in_(_FACT_TEXT),
                memory_events.c.aggregate_id.startswith(prefix, autoescape=True),
            )
        ).all()
        doomed = [int(r.id) for r in rows if _object(r.payload).get("source_event_id") in wanted]
        for chunk in erase_rows.chunks(doomed):
            removed += conn.execute(
                delete(memory_events).where(memory_events.c.id.in_(chunk))
            ).rowcount
    return removed


async def delete_facts(
    runtime: MemoryServices,
    token_id: int,
    config: TokenConfig,
    gone: Sequence[StoredMemory],
    *,
    traces: TraceStore | None = None,
) -> None:
    """After the long-term layer deleted `gone` (one fact, an end user's, the token's): the
    log events that carried their text, the traces that recalled them, and the long-term
    shards rewritten without their payloads."""
    if not gone:
        return
    if traces is not None:
        await traces.settle()
    by_user: dict[str, list[str]] = {}
    for memory in gone:
        user = end_user(token_id, memory.namespace)
        by_user.setdefault("" if user is None else user, []).append(memory.id)
    texts = {m.text[:TRACE_TEXT] for m in gone if m.text}

    def work(conn: Connection) -> None:
        with erase_rows.secure_delete(conn):
            for user, ids in by_user.items():
                delete_fact_text(conn, token_id, user, ids)
            _erase_traces_quoting(conn, token_id, "longterm", texts)

    await runtime.db.write(work)

    def compact() -> None:
        for key in runtime.vectors.shards(token_id):
            if key.model_id.startswith(MODEL_PREFIX):
                runtime.vectors.index(key.token_id, key.model_id, key.dims).compact()

    await runtime.vector_threads.run(compact)
    await erase_rows.rewrite_files(runtime.db, runtime.engine)


async def delete_curated(
    runtime: MemoryServices, token_id: int, kind: str, user: str, meta: dict[str, Any]
) -> bool:
    """Delete a curated document: the content-free `curated.deleted` tombstone (its projection
    deletes the row) and the `curated.replaced` events that carried its earlier bodies, in one
    write unit; False when there is no such document. The caller drops cached snapshots."""
    aggregate = curated_aggregate(token_id, kind, user)
    tombstone = NewEvent(EventType.CURATED_DELETED, aggregate, {"kind": kind, "user": user}, meta)

    def work(conn: Connection) -> bool:
        where = (curated.c.token_id == token_id, curated.c.kind == kind, curated.c.user_id == user)
        if conn.execute(select(curated.c.kind).where(*where)).first() is None:
            return False
        with erase_rows.secure_delete(conn):
            event_log.append(conn, token_id, [tombstone])
            conn.execute(
                delete(memory_events).where(
                    memory_events.c.token_id == token_id,
                    memory_events.c.aggregate_id == aggregate,
                    memory_events.c.type == EventType.CURATED_REPLACED.value,
                )
            )
        return True

    found = await event_log.write_appending(runtime.db, work)
    if found:
        await erase_rows.rewrite_files(runtime.db, runtime.engine)
    return found


def _erase_traces_quoting(
    conn: Connection, token_id: int, source: str, texts: Iterable[str]
) -> int:
    """Traces of the token with a candidate of `source` whose text is one of `texts`."""
    wanted = set(texts)
    if not wanted:
        return 0
    doomed: list[int] = []
    after = 0
    while True:
        page = conn.execute(
            select(context_traces.c.id, context_traces.c.body)
            .where(context_traces.c.token_id == token_id, context_traces.c.id > after)
            .order_by(context_traces.c.id)
            .limit(_TRACE_PAGE)
        ).all()
        for row in page:
            candidates = _object(row.body).get("candidates") or []
            if any(
                isinstance(c, dict) and c.get("source") == source and c.get("text") in wanted
                for c in candidates
            ):
                doomed.append(int(row.id))
        if len(page) < _TRACE_PAGE:
            break
        after = int(page[-1].id)
    for chunk in erase_rows.chunks(doomed):
        conn.execute(delete(context_traces).where(context_traces.c.id.in_(chunk)))
    return len(doomed)
