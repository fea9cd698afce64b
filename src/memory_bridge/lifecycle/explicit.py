"""Facts stated on purpose (the MCP `add_memory` tool): added as `memory.added` events whose
jobs index them like a turn's memory, listed, and deleted from every index at once.

An added fact goes to the token's long-term memory (Mem0, stored as it is said, no
extraction) where the token has it, to its episodic index otherwise: one job, of that layer,
committed with the event. Its id is the event id. A delete removes the event row (the text
leaves the log), the jobs not yet running and the context traces that recalled it, appends a
content-free `memory.deleted` tombstone, then deletes what the layers wrote for the event,
waiting for a job that was running so nothing it writes survives the delete.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, select

from memory_bridge.core.turn import Scope
from memory_bridge.events import log, queue
from memory_bridge.events.model import (
    EventType,
    NewEvent,
    StoredEvent,
    memory_aggregate,
    session_aggregate,
)
from memory_bridge.lifecycle import erase_rows
from memory_bridge.lifecycle.forget import delete_facts
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.tables import jobs, memory_events, tokens
from memory_bridge.tenancy.config import TokenConfig

# The session slot of explicit facts: their jobs' order key, the episodic points' session.
SESSION = "mcp"
MAX_CHARS = 8000
_POLL = 0.05


_TOKEN_ROW = (
    select(tokens.c.id).where(tokens.c.id == bindparam("token_id")).with_for_update(read=True)
)


class TokenGone(Exception):
    """The token was deleted while a fact was being added to it."""


class NoMemoryLayer(Exception):
    """The token has neither long-term nor episodic memory: nothing could keep a fact."""


@dataclass(frozen=True, slots=True)
class AddedFact:
    id: str
    text: str
    layer: str
    created_at: datetime | None


def _fact(event: StoredEvent) -> AddedFact:
    data = event.payload
    text = str(data["messages"][0]["content"]) if data.get("messages") else ""
    return AddedFact(event.event_id, text, str(data.get("layer", "")), event.created_at)


class ExplicitMemory:
    def __init__(self, runtime: MemoryServices, wake: Callable[[], None] | None = None) -> None:
        self._runtime = runtime
        self._wake = wake

    def layer(self, config: TokenConfig) -> str | None:
        """Where a fact of this token goes: long-term where it has it, else episodic."""
        if self._runtime.longterm.consumes(config):
            return self._runtime.longterm.name
        episodic = self._runtime.episodic
        if episodic is not None and episodic.consumes(config):
            return episodic.name
        return None

    async def add(
        self, scope: Scope, config: TokenConfig, text: str, meta: dict[str, Any]
    ) -> AddedFact:
        layer = self.layer(config)
        if layer is None:
            raise NoMemoryLayer
        event_id = str(uuid.uuid4())
        payload = {
            "user": scope.user,
            "session": SESSION,
            "messages": [{"role": "user", "content": text[:MAX_CHARS]}],
            "query": "",
            "finish_reason": None,
            "explicit": True,
            "layer": layer,
        }
        aggregate = memory_aggregate(scope.token_id, scope.user, event_id)
        event = NewEvent(EventType.MEMORY_ADDED, aggregate, payload, meta, event_id=event_id)
        order_key = session_aggregate(scope.token_id, scope.user, SESSION)

        def work(conn: Connection) -> StoredEvent:
            # As a turn's recording: a token deleted meanwhile gets nothing (its purge waits
            # for this transaction on PostgreSQL, or runs after it and removes it).
            if conn.execute(_TOKEN_ROW, {"token_id": scope.token_id}).first() is None:
                raise TokenGone
            stored = log.append(conn, scope.token_id, [event])
            queue.enqueue(conn, event_id, scope.token_id, order_key, (layer,))
            return stored[-1]

        stored = await log.write_appending(self._runtime.db, work)
        if self._wake is not None:
            self._wake()
        return _fact(stored)

    async def page(self, token_id: int, user: str, offset: int, limit: int) -> list[AddedFact]:
        """The end user's added facts, oldest first."""
        prefix = memory_aggregate(token_id, user, "")
        agg = memory_events.c.aggregate_id
        query = (
            select(memory_events)
            .where(
                memory_events.c.token_id == token_id,
                memory_events.c.type == EventType.MEMORY_ADDED.value,
                func.substr(agg, 1, len(prefix)) == prefix,
            )
            .order_by(memory_events.c.id)
            .offset(offset)
            .limit(limit)
        )

        def read(conn: Connection) -> list[AddedFact]:
            events = (log.stored_event(row) for row in conn.execute(query))
            return [_fact(e) for e in events if e.payload.get("user") == user]

        return await self._runtime.db.run(read)

    async def delete(
        self, scope: Scope, config: TokenConfig, fact_id: str, meta: dict[str, Any]
    ) -> bool:
        """Delete one of the end user's added facts everywhere; False when they have none
        by that id (another user's or token's id is not found either)."""
        aggregate = memory_aggregate(scope.token_id, scope.user, fact_id)
        tombstone = NewEvent(
            EventType.MEMORY_DELETED, aggregate, {"user": scope.user, "memory_id": fact_id}, meta
        )

        def work(conn: Connection) -> list[int] | None:
            row = conn.execute(
                select(memory_events.c.id).where(
                    memory_events.c.token_id == scope.token_id,
                    memory_events.c.aggregate_id == aggregate,
                    memory_events.c.type == EventType.MEMORY_ADDED.value,
                )
            ).first()
            if row is None:
                return None
            of_event = jobs.c.event_id == fact_id
            running = [
                int(r)
                for (r,) in conn.execute(
                    select(jobs.c.id).where(of_event, jobs.c.status == queue.RUNNING)
                )
            ]
            conn.execute(delete(jobs).where(of_event, jobs.c.status != queue.RUNNING))
            conn.execute(delete(memory_events).where(memory_events.c.id == row.id))
            # The context traces of requests that recalled it hold its text.
            erase_rows.erase_traces(conn, scope.token_id, (), {fact_id})
            log.append(conn, scope.token_id, [tombstone])
            return running

        running = await log.write_appending(self._runtime.db, work)
        if running is None:
            return False
        await self._unindex(scope, config, fact_id)
        if running:
            # A job was writing the fact as it was deleted: once it ends, delete again.
            await self._wait_for(running)
            await self._unindex(scope, config, fact_id)
        return True

    async def _unindex(self, scope: Scope, config: TokenConfig, fact_id: str) -> None:
        runtime = self._runtime
        if runtime.longterm.consumes(config):
            gone = await runtime.longterm.delete_written(
                scope.token_id, config, scope.user, fact_id
            )
            # As an admin delete: the log's text of the facts goes, and the shards are compacted.
            await delete_facts(runtime, scope.token_id, config, gone)
        if runtime.episodic is not None:
            await runtime.episodic.forget(scope.token_id, config, fact_id, 1)

    async def _wait_for(self, job_ids: list[int]) -> None:
        """Until the jobs end (their event is gone: a retry finds nothing to do), at most a
        job's own time limit."""
        deadline = time.monotonic() + self._runtime.settings.memory_store_timeout
        while time.monotonic() < deadline:
            if not await self._runtime.db.run(lambda conn: erase_rows.running(conn, job_ids)):
                break
            await asyncio.sleep(_POLL)
