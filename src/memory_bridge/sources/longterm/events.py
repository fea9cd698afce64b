"""The `longterm.*` events: every change Mem0 makes to a token's facts, appended to the log.

A turn's add appends one event per fact it retained, updated or deleted, with the fact's id
and text, its end user and the id of the turn's `session.appended` event: a rebuild can then
restore the facts from the log (re-embedding their texts) without running the memory LLM
again. An admin's delete appends `longterm.deleted` too. Each fact is its own aggregate
(`events.model.longterm_aggregate`), so its versions count its changes.

Payloads (docs/events.md): `{user, memory_id, text, source_event_id}` for `retained` and
`updated`; `{user, memory_id, source_event_id, reason}` for `deleted` (no text: a deleted
fact's words are not kept on purpose). Never a vector, never a secret.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import EventType, NewEvent, StoredEvent, longterm_aggregate
from memory_bridge.sources.longterm.config import end_user
from memory_bridge.sources.longterm.points import StoredMemory
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import jobs

__all__ = ["CONSUMER", "FactChange", "FactLog", "enqueue_after"]

log = logging.getLogger(__name__)

_TYPES = {
    "ADD": EventType.LONGTERM_RETAINED,
    "UPDATE": EventType.LONGTERM_UPDATED,
    "DELETE": EventType.LONGTERM_DELETED,
}


CONSUMER = "consolidation"


def enqueue_after(token_id: int, user: str, event_id: str) -> Callable[[Connection], None]:
    """What enqueues a turn's consolidation job, run in its facts' transaction (once: a retry
    of the extraction logs its facts again but finds the job there)."""

    def then(conn: Connection) -> None:
        found = conn.execute(
            select(jobs.c.id).where(jobs.c.event_id == event_id, jobs.c.consumer == CONSUMER)
        ).first()
        if found is None:
            # One end user's consolidations run one at a time, in order.
            order_key = longterm_aggregate(token_id, user, CONSUMER)
            queue.enqueue(conn, event_id, token_id, order_key, [CONSUMER])

    return then


# The consolidation events one listing of superseded facts reads, at most (a bounded answer).
MAX_LISTED = 10_000


@dataclass(frozen=True, slots=True)
class FactChange:
    """One item of Mem0's add answer: a fact added, updated or deleted (or left alone)."""

    id: str
    text: str
    event: str  # Mem0's ADD / UPDATE / DELETE / NONE

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> FactChange:
        return cls(
            id=str(item.get("id") or ""),
            text=str(item.get("memory") or ""),
            event=str(item.get("event") or "ADD").upper(),
        )


class FactLog:
    """Appends the events of fact changes; with no database (a benchmark's pool), nothing."""

    def __init__(self, db: Database | None) -> None:
        self._db = db

    async def turn(
        self,
        token_id: int,
        user: str,
        changes: Sequence[FactChange],
        removed: Sequence[StoredMemory],
        source_event_id: str,
        embed_model: str,
        then: Callable[[Connection], None] | None = None,
    ) -> int:
        """A turn's add: what an earlier attempt wrote and this one removed, then the add's
        own changes. Returns how many events were appended. `then` runs in the same
        transaction (the consolidation job is enqueued with the events it will read)."""
        events = [
            _deleted(token_id, memory.id, user, source_event_id, "replaced_by_retry")
            for memory in removed
        ]
        for change in changes:
            kind = _TYPES.get(change.event)
            if kind is None or not change.id:
                continue  # NONE: Mem0 left the fact as it was
            if kind is EventType.LONGTERM_DELETED:
                events.append(_deleted(token_id, change.id, user, source_event_id, "memory_llm"))
                continue
            payload = {
                "user": user,
                "memory_id": change.id,
                "text": change.text,
                "source_event_id": source_event_id or None,
            }
            aggregate = longterm_aggregate(token_id, user, change.id)
            events.append(NewEvent(kind, aggregate, payload, embed_model=embed_model))
        return await self._append(token_id, events, then)

    async def deleted(self, token_id: int, memories: Sequence[StoredMemory], reason: str) -> int:
        """Facts deleted by an operator (one, an end user's, or the token's)."""
        events = [
            _deleted(token_id, m.id, _user(token_id, m.namespace), None, reason) for m in memories
        ]
        return await self._append(token_id, events)

    async def updated(self, token_id: int, memory: StoredMemory, embed_model: str) -> int:
        """A fact an operator corrected: its new text, from no turn."""
        user = _user(token_id, memory.namespace)
        payload = {
            "user": user,
            "memory_id": memory.id,
            "text": memory.text,
            "source_event_id": None,
        }
        aggregate = longterm_aggregate(token_id, user, memory.id)
        event = NewEvent(EventType.LONGTERM_UPDATED, aggregate, payload, embed_model=embed_model)
        return await self._append(token_id, [event])

    async def consolidated(self, token_id: int, events: list[NewEvent]) -> int:
        """Merges, supersessions and restores (`consolidation`)."""
        return await self._append(token_id, events)

    async def superseded_facts(self, token_id: int, user: str | None) -> list[dict[str, Any]]:
        """The facts superseded and not restored since (of one end user, or every one), each
        with its history of versions: when it was learned, superseded and restored."""
        if self._db is None:
            return []
        kinds = (EventType.LONGTERM_SUPERSEDED, EventType.LONGTERM_RESTORED)

        def work(conn: Connection) -> list[StoredEvent]:
            return event_log.read(conn, token_id=token_id, types=kinds, limit=MAX_LISTED)

        by_id: dict[str, list[StoredEvent]] = {}
        for event in await self._db.run(work):
            if user is None or event.payload.get("user") == user:
                by_id.setdefault(str(event.payload.get("memory_id")), []).append(event)
        return [_superseded(h) for h in by_id.values() if h[-1].type == kinds[0]]

    async def _append(
        self,
        token_id: int,
        events: list[NewEvent],
        then: Callable[[Connection], None] | None = None,
    ) -> int:
        if self._db is None or not events:
            return 0

        def work(conn: Connection) -> int:
            count = len(event_log.append(conn, token_id, events))
            if then is not None:
                then(conn)  # in the same transaction: both or neither
            return count

        return await event_log.write_appending(self._db, work)


def _deleted(
    token_id: int, memory_id: str, user: str, source_event_id: str | None, reason: str
) -> NewEvent:
    payload = {
        "user": user,
        "memory_id": memory_id,
        "source_event_id": source_event_id or None,
        "reason": reason,
    }
    return NewEvent(
        EventType.LONGTERM_DELETED, longterm_aggregate(token_id, user, memory_id), payload
    )


def _superseded(history: list[StoredEvent]) -> dict[str, Any]:
    last = history[-1].payload
    return {
        "id": last.get("memory_id"),
        "user": last.get("user"),
        "text": last.get("text"),
        "learned_at": last.get("created_at"),
        "superseded_at": history[-1].created_at.isoformat(),
        "superseded_by": {
            "id": last.get("by_id"),
            "text": last.get("by_text"),
            "learned_at": last.get("by_created_at"),
        },
        "history": [
            {"event": e.type, "at": e.created_at.isoformat(), "by_id": e.payload.get("by_id")}
            for e in history
        ],
    }


def _user(token_id: int, namespace: str) -> str:
    user = end_user(token_id, namespace)
    return "" if user is None else user
