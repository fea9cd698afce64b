"""Re-extract a token's Mem0 facts: the memory LLM run again over every stored turn, in place.

One transaction appends a `longterm.deleted` event (reason `reextract`) for every live fact
(the replay of the token's `longterm.*` events, `rebuild_longterm.live_facts`) and enqueues the
long-term consumer's job for every stored turn (`session.appended`, in log order, per session
ordered by the queue). The jobs are held until the token's Mem0 facts are cleared from the
shard, then released: each runs Mem0's add through the normal worker, whose fact changes append
`longterm.retained` events as a turn's do. So the log reads retained(old) -> deleted(reextract)
-> retained(new), and a later plain rebuild restores the new facts only.

No new generation: recall sees the facts disappear and come back as the jobs run. The
progress is the long-term consumer's counts in the job queue (`GET .../jobs`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, select, update

from memory_bridge.core.errors import ProxyError
from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import EventType, NewEvent, longterm_aggregate
from memory_bridge.lifecycle.rebuild_longterm import live_facts
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.source import LongTermMemory
from memory_bridge.sources.vector_generations import LONGTERM, RUNNING
from memory_bridge.sources.vector_generations import read as read_row
from memory_bridge.storage.tables import jobs, memory_events

if TYPE_CHECKING:
    from memory_bridge.sources.services import MemoryServices

log = logging.getLogger(__name__)

CONSUMER = LongTermMemory.name
# The jobs wait this long for the clear of the old facts; a process that dies in between
# leaves them to run then (the old facts stay in the shard: a plain rebuild removes them).
HOLD = 60.0


async def start_reextract(
    runtime: MemoryServices, token_id: int, wake: Callable[[], None] | None = None
) -> int:
    """Start the re-extraction of the token's facts; returns how many turns it will run (404:
    no token; 409: no long-term memory, or a long-term rebuild running)."""
    record = await runtime.tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    config = record.config
    if config is None or not mem0_config.enabled(config):
        raise ProxyError(409, "conflict_error", "The token has no long-term memory.")
    pool = runtime.longterm.pool
    try:
        spec = mem0_config.build_spec(token_id, config, pool.mem0_dir)
    except mem0_config.Mem0ConfigError as exc:
        raise ProxyError(409, "conflict_error", f"The token's long-term memory: {exc}") from exc

    def work(conn: Connection) -> int:
        row = read_row(conn, token_id, LONGTERM)
        if row is not None and row.state == RUNNING:
            raise ProxyError(409, "conflict_error", "A rebuild of this layer is already running.")
        deleted = [
            NewEvent(
                EventType.LONGTERM_DELETED,
                longterm_aggregate(token_id, fact.user, memory_id),
                {
                    "user": fact.user,
                    "memory_id": memory_id,
                    "source_event_id": None,
                    "reason": "reextract",
                },
            )
            for memory_id, fact in live_facts(conn, token_id).items()
        ]
        event_log.append(conn, token_id, deleted)
        return _enqueue_turns(conn, token_id)

    turns = await event_log.write_appending(runtime.db, work)
    try:
        await pool.clear(spec)
    finally:
        await runtime.db.write(lambda c: _release(c, token_id))
    log.info("token %d: re-extraction of its facts from %d turn(s) started", token_id, turns)
    if wake is not None:
        wake()
    return turns


def _mine(token_id: int) -> tuple[Any, ...]:
    return (jobs.c.token_id == token_id, jobs.c.consumer == CONSUMER)


def _enqueue_turns(conn: Connection, token_id: int) -> int:
    """One held job of the long-term consumer per stored turn, in log order; a turn whose job
    is still open keeps it (it extracts after the clear anyway). Earlier finished jobs of the
    consumer go: a job is unique per (event, consumer)."""
    mine = _mine(token_id)
    still_open = set(
        conn.execute(select(jobs.c.event_id).where(*mine, jobs.c.status.in_(queue.OPEN))).scalars()
    )
    conn.execute(delete(jobs).where(*mine, jobs.c.status.not_in(queue.OPEN)))
    turns = conn.execute(
        select(memory_events.c.event_id, memory_events.c.aggregate_id, memory_events.c.payload)
        .where(
            memory_events.c.token_id == token_id,
            memory_events.c.type == EventType.SESSION_APPENDED.value,
        )
        .order_by(memory_events.c.id)
    )
    count = 0
    for event_id, aggregate_id, payload in turns:
        if event_id in still_open or not _has_content(payload):
            continue
        queue.enqueue(conn, event_id, token_id, aggregate_id, [CONSUMER])
        count += 1
    # Every pending job of the consumer waits for the clear (an open one of a recent turn too).
    hold = update(jobs).where(*mine, jobs.c.status == queue.PENDING)
    conn.execute(hold.values(next_attempt_at=time.time() + HOLD))
    return count


def _has_content(payload: str) -> bool:
    # An erased user's turns keep no content: nothing to extract from.
    data = json.loads(payload)
    if not isinstance(data, dict):
        return False
    return isinstance(data.get("messages"), list) and all(
        isinstance(data.get(key), str) for key in ("user", "session")
    )


def _release(conn: Connection, token_id: int) -> None:
    now = time.time()
    query = update(jobs).where(
        *_mine(token_id), jobs.c.status == queue.PENDING, jobs.c.next_attempt_at > now
    )
    conn.execute(query.values(next_attempt_at=now))
