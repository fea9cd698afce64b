"""Exporting a token's memory events as NDJSON: a header line, then one line per event.

The export is streamed: events are read in pages by log id, each page masked (when asked) and
written before the next is read, so its size costs nothing in memory. It covers the log as it
was when the export started (events up to the log id read then), so the header's counts are
the number of lines that follow. Content classes are opt-in (`lifecycle.transfer.CLASSES`);
the token's config is never exported (it holds the provider keys, and the target token has its
own). Every export is audited (`export`: the classes that left, whether masked, the counts)
before its first line leaves.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy import Connection, func, select

from memory_bridge.core.turn import Scope
from memory_bridge.events.log import dumps
from memory_bridge.lifecycle.masking import Masker
from memory_bridge.lifecycle.transfer import CLASS_OF, CLASSES, FORMAT, VERSION
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import memory_events

AUDIT_TYPE = "export"
PAGE = 500


@dataclass(frozen=True, slots=True)
class Export:
    token_id: int
    classes: tuple[str, ...]
    mask: bool
    upto: int  # the last log id the export covers
    header: dict[str, Any]

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(str(t) for name in self.classes for t in CLASSES[name])


async def start_export(
    db: Database,
    audit: AuditLog,
    token_id: int,
    classes: tuple[str, ...],
    *,
    mask: bool,
    install: str,
    request_id: str = "",
) -> Export:
    """Fix what the export covers, write its audit record, and return it with its header (the
    caller checked the token exists)."""

    def survey(conn: Connection) -> tuple[int, dict[str, int]]:
        upto = conn.execute(
            select(func.max(memory_events.c.id)).where(memory_events.c.token_id == token_id)
        ).scalar()
        counts = dict.fromkeys(CLASSES, 0)
        query = (
            select(memory_events.c.type, func.count())
            .where(memory_events.c.token_id == token_id)
            .group_by(memory_events.c.type)
        )
        for kind, count in conn.execute(query):
            name = CLASS_OF.get(kind)
            if name is not None:
                counts[name] += int(count)
        return int(upto or 0), counts

    # Both reads in one unit: the counts are those of events up to `upto` (an event appended
    # between them could only have a larger id, and is then not exported nor counted).
    upto, available = await db.run(survey)
    counts = {name: available[name] for name in classes}
    header = {
        "format": FORMAT,
        "version": VERSION,
        "install": install,
        "token": token_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "classes": list(classes),
        "masked": mask,
        "counts": counts,
        "events": sum(counts.values()),
        "available": available,
    }
    data = {"classes": list(classes), "masked": mask, "counts": counts}
    await audit.record(Scope(token_id=token_id, user="", session=""), AUDIT_TYPE, request_id, data)
    return Export(token_id=token_id, classes=classes, mask=mask, upto=upto, header=header)


async def export_lines(db: Database, export: Export) -> AsyncIterator[bytes]:
    """The export's NDJSON: the header line, then the event lines a page at a time."""
    yield _line(export.header)
    types = export.types
    if not types:
        return
    masker = Masker(secrets.token_bytes(32)) if export.mask else None
    after = 0
    while True:
        page = await db.run(partial(_page, export=export, types=types, after=after))
        # Rendering (and masking: regular expressions over every text) is CPU work: off the
        # event loop, a page at a time, so an export never stalls the proxy's requests.
        yield await asyncio.to_thread(_render, page, masker)
        if len(page) < PAGE:
            return
        after = int(page[-1].id)


def _page(conn: Connection, *, export: Export, types: tuple[str, ...], after: int) -> list[Any]:
    query = (
        select(memory_events)
        .where(
            memory_events.c.token_id == export.token_id,
            memory_events.c.id > after,
            memory_events.c.id <= export.upto,
            memory_events.c.type.in_(types),
        )
        .order_by(memory_events.c.id)
        .limit(PAGE)
    )
    return list(conn.execute(query))


def _render(page: list[Any], masker: Masker | None) -> bytes:
    return b"".join(_line(_event_line(row, masker)) for row in page)


def _event_line(row: Any, masker: Masker | None) -> dict[str, Any]:
    payload = json.loads(row.payload)
    if masker is not None:
        payload = masker.payload(payload)
    created: datetime = row.created_at
    if created.tzinfo is None:  # SQLite hands back naive times; they were stored in UTC
        created = created.replace(tzinfo=UTC)
    return {
        "event_id": row.event_id,
        "type": row.type,
        "payload": payload,
        "meta": json.loads(row.meta),
        "embed_model": row.embed_model,
        "created_at": created.isoformat(),
    }


def _line(value: dict[str, Any]) -> bytes:
    return (dumps(value) + "\n").encode()
