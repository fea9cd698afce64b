"""Importing an export into a token of this install: the staged events appended in one
transaction, projected as they go, with the jobs that index them.

Identity: an event keeps its `origin` (the id it was first appended with, on whatever
install) in `meta.origin`, and is stored under an id derived from the target token and that
origin (`imported_id`). An event is skipped when the target token already holds its origin
(a token's own export imported back) or its derived id (the same export imported twice):
importing twice changes nothing, and A → B → A brings nothing back twice.

Aggregates are the target token's: each is recomputed from the payload (`user`, `session`,
`kind`) and the events are versioned after whatever the aggregate already holds. A long-term
fact gets a derived id too (two tokens sharing a vector collection never share a point id).

After the commit, episodic memory is indexed anew (one job per imported turn, the job a turn of
the token would get), and imported long-term facts start the long-term rebuild, which embeds
their texts into the token's Mem0 shard: the import never re-runs the memory LLM over old turns
(cost, and different facts) and never sends history to the target's Memory Gateway.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.turn import Scope
from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import (
    EventType,
    StoredEvent,
    curated_aggregate,
    longterm_aggregate,
    session_aggregate,
)
from memory_bridge.events.projections import project
from memory_bridge.lifecycle.import_lines import LINKED_IDS, ImportEvent, Staged
from memory_bridge.lifecycle.rebuild import start_rebuild
from memory_bridge.lifecycle.rebuild_longterm import FACT_TYPES
from memory_bridge.sources import summaries
from memory_bridge.sources.vector_generations import LONGTERM
from memory_bridge.storage.tables import memory_events

if TYPE_CHECKING:
    from memory_bridge.sources.services import MemoryServices

AUDIT_TYPE = "import"
# The after-turn consumers an imported turn is handed to (see the module's docstring).
REINDEXED = ("episodic",)
_NS = uuid.UUID("8a7c2d51-3f4e-4b6a-9c1d-0e5f7a9b2c43")
_BATCH = 500


def imported_id(token_id: int, origin: str) -> str:
    return str(uuid.uuid5(_NS, f"{token_id}:{origin}"))


@dataclass
class ImportResult:
    imported: int = 0
    skipped: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # imported events per type
    jobs: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "skipped": self.skipped,
            "counts": self.counts,
            "jobs": self.jobs,
        }


async def import_staged(
    runtime: MemoryServices, token_id: int, staged: Staged, *, request_id: str = ""
) -> ImportResult:
    """Append the staged events to `token_id` (404 if it does not exist), then audit."""
    record = await runtime.tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    if record.is_admin:
        raise ProxyError(409, "conflict_error", "The admin token holds no memory.")
    config = record.config
    consumers: tuple[str, ...] = ()
    if config is not None:
        consumers = tuple(
            s.name for s in runtime.sources if s.name in REINDEXED and s.consumes(config)
        )
        if summaries.enabled(config):
            consumers += (summaries.CONSUMER,)

    def work(conn: Connection) -> ImportResult:
        return _apply(conn, token_id, staged.read(), consumers, request_id)

    result = await event_log.write_appending(runtime.db, work, attempts=3)
    runtime.curated.forget(token_id)
    facts = any(result.counts.get(t) for t in FACT_TYPES)
    if facts and config is not None and runtime.longterm.consumes(config):
        # The imported facts reach Mem0 by the long-term rebuild: re-embedded from their
        # events, no LLM call (it replaces a rebuild under way, which would miss them).
        await start_rebuild(runtime, token_id, LONGTERM, reason=AUDIT_TYPE)
    header = staged.header
    data = {
        **result.as_json(),
        "source": {
            "install": str(header.get("install", ""))[:64],
            "masked": bool(header.get("masked")),
        },
    }
    await runtime.audit.record(
        Scope(token_id=token_id, user="", session=""), AUDIT_TYPE, request_id, data
    )
    return result


def _apply(
    conn: Connection,
    token_id: int,
    events: Iterator[ImportEvent],
    consumers: Sequence[str],
    request_id: str,
) -> ImportResult:
    result = ImportResult()
    versions: dict[str, int] = {}
    by_line: dict[str, str] = {}  # a line's own event id -> the id it is appended with
    while batch := _take(events, _BATCH):
        targets = [imported_id(token_id, e.origin) for e in batch]
        wanted = {*targets, *(e.origin for e in batch)}
        present = set(
            conn.execute(
                select(memory_events.c.event_id).where(
                    memory_events.c.token_id == token_id, memory_events.c.event_id.in_(wanted)
                )
            ).scalars()
        )
        fresh: list[StoredEvent] = []
        for event, event_id in zip(batch, targets, strict=True):
            if event.line_id:  # where the line's event is (or was already) in this token
                by_line[event.line_id] = event.origin if event.origin in present else event_id
            if event.origin in present or event_id in present:
                result.skipped += 1
                continue
            present.add(event_id)  # a line repeated within the batch
            stored = _stored(conn, token_id, event, event_id, versions, request_id, by_line)
            fresh.append(stored)
        if not fresh:
            continue
        conn.execute(insert(memory_events), [_row(e) for e in fresh])
        for stored in fresh:
            project(conn, stored, stored.created_at)
            result.imported += 1
            result.counts[stored.type] = result.counts.get(stored.type, 0) + 1
            jobs_for: Sequence[str] = ()
            if stored.type == EventType.SESSION_APPENDED:
                jobs_for = consumers
            elif stored.type == EventType.SESSION_SUMMARISED and summaries.CONSUMER in consumers:
                jobs_for = (summaries.CONSUMER,)  # its job indexes the imported summary
            if jobs_for:
                queue.enqueue(conn, stored.event_id, token_id, stored.aggregate_id, jobs_for)
                for name in jobs_for:
                    result.jobs[name] = result.jobs.get(name, 0) + 1
    return result


def _take(events: Iterator[ImportEvent], n: int) -> list[ImportEvent]:
    batch = []
    for event in events:
        batch.append(event)
        if len(batch) == n:
            break
    return batch


def _stored(
    conn: Connection,
    token_id: int,
    event: ImportEvent,
    event_id: str,
    versions: dict[str, int],
    request_id: str,
    by_line: Mapping[str, str],
) -> StoredEvent:
    payload = dict(event.payload)
    user = payload["user"]
    if event.type.startswith("session."):
        aggregate = session_aggregate(token_id, user, payload["session"])
        if "covers" in payload:  # a summary's lineage: the turns as imported here
            covers = payload["covers"]
            payload["covers"] = [by_line.get(c) or imported_id(token_id, c) for c in covers]
    elif event.type.startswith("curated."):
        aggregate = curated_aggregate(token_id, payload["kind"], user)
    else:
        payload["memory_id"] = imported_id(token_id, payload["memory_id"])
        for key in LINKED_IDS.get(event.type, ()):
            payload[key] = imported_id(token_id, payload[key])
        if payload.get("source_event_id"):
            payload["source_event_id"] = imported_id(token_id, payload["source_event_id"])
        aggregate = longterm_aggregate(token_id, user, payload["memory_id"])
    version = versions.get(aggregate)
    if version is None:
        version = event_log.current_version(conn, aggregate)
    versions[aggregate] = version = version + 1
    meta = {**event.meta, "source": "import", "origin": event.origin, "import_request": request_id}
    return StoredEvent(
        id=0,
        event_id=event_id,
        token_id=token_id,
        type=event.type,
        aggregate_id=aggregate,
        version=version,
        payload=payload,
        meta=meta,
        embed_model=event.embed_model,
        created_at=event.created_at,
    )


def _row(event: StoredEvent) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "token_id": event.token_id,
        "type": event.type,
        "aggregate_id": event.aggregate_id,
        "version": event.version,
        "payload": event_log.dumps(event.payload),
        "embed_model": event.embed_model,
        "meta": event_log.dumps(event.meta),
        "created_at": event.created_at,
    }
