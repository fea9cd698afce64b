"""Purging a token: every memory layer first, the token's row last, then one sweep for work
that was in flight.

1. Every source purges its layer (curated, history, long-term, the episodic shards), then the
   audit log, the traces, the event log with its jobs, and the record of its stored Responses.
   Each step deletes by token id, so a purge that fails midway leaves the token in place and a
   retry does all of it again.
2. The token's row is deleted: from then on its turns are refused by the recorder (which reads
   the row in the transaction that would store them) and its jobs find no token.
3. The last sweep: a turn that committed between step 1 and step 2 (a stream still being
   answered) left rows; they are deleted now, in one transaction, and the vector layers are
   purged once more for a job of it that may have run meanwhile.

A token deleted without `purge` keeps its data (ids are never reused, so nothing reaches it);
a purge of it afterwards (`DELETE /tokens/{id}?purge=true` again) finds the row gone and
purges what is left of it, 404 only when nothing is.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, delete, select

from memory_bridge.events import log as event_log
from memory_bridge.lifecycle import erase_rows
from memory_bridge.sources.longterm.config import history_path
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage import response_owners
from memory_bridge.storage.tables import (
    context_traces,
    curated,
    events,
    jobs,
    memory_access,
    memory_events,
    messages,
    vector_generations,
)
from memory_bridge.storage.traces import TraceStore

log = logging.getLogger(__name__)


async def purge_token(runtime: MemoryServices, token_id: int, traces: TraceStore | None) -> bool:
    """Purge then delete the token (or what is left of one deleted without purge); False
    (nothing done) when there is no such token and nothing of one."""
    if await runtime.tokens.get(token_id) is None:
        return await _purge_remains(runtime, token_id, traces)
    await _purge_layers(runtime, token_id, traces)
    if not await runtime.tokens.delete(token_id):
        return False  # deleted meanwhile by another call, which did or does the same
    await runtime.db.write(lambda conn: _late_rows(conn, token_id))
    if traces is not None:
        await traces.purge(token_id)  # a trace still queued in this process
    runtime.curated.forget(token_id)
    try:
        for source in runtime.sources:
            await source.purge(token_id)
    except Exception as exc:
        # The row is gone and the rows above are; a job of a turn that raced the purge may
        # have left vectors: say so, the data stays unreachable (ids are never reused).
        log.warning(
            "token %d: last sweep of its memory layers failed: %s", token_id, type(exc).__name__
        )
    return True


async def _purge_remains(runtime: MemoryServices, token_id: int, traces: TraceStore | None) -> bool:
    if not await _has_remains(runtime, token_id):
        return False
    await _purge_layers(runtime, token_id, traces)
    await runtime.db.write(lambda conn: _late_rows(conn, token_id))
    runtime.curated.forget(token_id)
    await erase_rows.rewrite_files(runtime.db, runtime.engine)
    log.info("token %d: what its deletion left was purged", token_id)
    return True


async def _has_remains(runtime: MemoryServices, token_id: int) -> bool:
    def rows(conn: Connection) -> bool:
        tables = (memory_events, jobs, messages, curated, events, context_traces, memory_access)
        return any(
            conn.execute(select(t.c.token_id).where(t.c.token_id == token_id).limit(1)).first()
            for t in (*tables, vector_generations)
        )

    if await runtime.db.run(rows):
        return True
    if await runtime.vector_threads.run(lambda: runtime.vectors.shards(token_id)):
        return True
    history = history_path(runtime.longterm.pool.mem0_dir, token_id)
    return any(history.parent.glob(history.name + "*"))


async def _purge_layers(runtime: MemoryServices, token_id: int, traces: TraceStore | None) -> None:
    for source in runtime.sources:
        await source.purge(token_id)
    await runtime.audit.purge(token_id)
    if traces is not None:
        await traces.purge(token_id)
    if runtime.access is not None:
        await runtime.access.purge(token_id)
    await runtime.db.write(lambda conn: event_log.purge(conn, token_id))
    await runtime.db.write(lambda conn: response_owners.purge(conn, token_id))


def _late_rows(conn: Connection, token_id: int) -> None:
    """Everything a turn (or its audit events and trace) committed for the token meanwhile."""
    event_log.purge(conn, token_id)
    for table in (messages, curated, events, context_traces, memory_access):
        conn.execute(delete(table).where(table.c.token_id == token_id))
    response_owners.purge(conn, token_id)
