"""Context traces, kept for a bounded count and age per token.

Traces are written in batches off the response's path: `save` only queues one, and a flusher
writes what has queued in one transaction (at most every `flush_interval`, or at once when the
batch is full). One extra write transaction per request would halve SQLite's write throughput
under load (it has one writer); a batch costs one per interval. Pruning runs every
`_PRUNE_EVERY` traces of a token rather than on each. A trace lost to a crash before its
batch was written is acceptable: traces are diagnostics, not memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from memory_bridge.storage.db import Database, mark_background
from memory_bridge.storage.tables import context_traces

log = logging.getLogger(__name__)
_PRUNE_EVERY = 50
_MAX_BATCH = 256
_MAX_QUEUED = 10_000  # beyond this (the database is failing), new traces are dropped


class TraceStore:
    def __init__(
        self, db: Database, keep_count: int, keep_seconds: float, flush_interval: float = 0.05
    ) -> None:
        self._db = db
        self._keep_count = keep_count
        self._keep_seconds = keep_seconds
        self._interval = flush_interval
        self._writes: dict[int, int] = {}
        self._queued: list[dict[str, Any]] = []
        self._flusher: asyncio.Task[None] | None = None

    def save(self, token_id: int, request_id: str, trace: dict[str, Any]) -> None:
        """Queue a trace; it is written with the next batch."""
        if len(self._queued) >= _MAX_QUEUED:
            return
        self._queued.append(
            {
                "token_id": token_id,
                "request_id": request_id,
                "created_at": time.time(),
                # Serialised with its batch, on the database's thread: otherwise part of a
                # memory request's time before its forward. The handler never touches a
                # trace again once it is saved.
                "body": trace,
            }
        )
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        mark_background()  # a batch of traces never goes before a request's write
        if len(self._queued) < _MAX_BATCH:
            await asyncio.sleep(self._interval)
        while self._queued:
            await self.flush()

    async def flush(self) -> None:
        """Write every queued trace now (one transaction per batch)."""
        batch, self._queued = self._queued[:_MAX_BATCH], self._queued[_MAX_BATCH:]
        if not batch:
            return
        prune = []
        for row in batch:
            token_id = row["token_id"]
            writes = self._writes[token_id] = self._writes.get(token_id, 0) + 1
            if writes % _PRUNE_EVERY == 0:
                prune.append(token_id)

        def work(conn: Connection) -> None:
            rows = [{**row, "body": _dump(row["body"])} for row in batch]
            conn.execute(insert(context_traces), rows)
            for token_id in prune:
                self._prune(conn, token_id)

        try:
            await self._db.write(work)
        except Exception as exc:
            log.warning("could not keep %d context trace(s): %s", len(batch), type(exc).__name__)

    async def settle(self) -> None:
        """Every trace saved so far is written when this returns: the queue, and the batch
        the flusher may be writing at this moment (a delete or an erasure must come after
        them, or a trace it should remove would be written behind it)."""
        while self._queued:
            await self.flush()
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(flusher)

    async def close(self) -> None:
        if self._flusher is not None:
            with contextlib.suppress(Exception):
                await self._flusher
        while self._queued:
            await self.flush()

    def _prune(self, conn: Connection, token_id: int) -> None:
        cutoff = time.time() - self._keep_seconds
        of_token = context_traces.c.token_id == token_id
        conn.execute(delete(context_traces).where(of_token, context_traces.c.created_at < cutoff))
        oldest_kept = conn.execute(
            select(context_traces.c.id)
            .where(of_token)
            .order_by(context_traces.c.id.desc())
            .offset(self._keep_count - 1)
            .limit(1)
        ).scalar()
        if oldest_kept is not None:
            conn.execute(delete(context_traces).where(of_token, context_traces.c.id < oldest_kept))

    async def get(self, token_id: int, request_id: str) -> dict[str, Any] | None:
        await self.settle()  # a trace asked for right after its request is written

        # A trace past its retention age is not served, whether or not a prune removed it yet.
        cutoff = time.time() - self._keep_seconds

        def read(conn: Connection) -> str | None:
            return conn.execute(
                select(context_traces.c.body)
                .where(
                    context_traces.c.token_id == token_id,
                    context_traces.c.request_id == request_id,
                    context_traces.c.created_at >= cutoff,
                )
                .order_by(context_traces.c.id.desc())
                .limit(1)
            ).scalar()

        body = await self._db.run(read)
        return None if body is None else dict(json.loads(body))

    async def purge(self, token_id: int) -> None:
        self._queued = [row for row in self._queued if row["token_id"] != token_id]
        await self._db.write(
            lambda conn: conn.execute(
                delete(context_traces).where(context_traces.c.token_id == token_id)
            )
        )


def _dump(trace: dict[str, Any]) -> str:
    return json.dumps(trace, ensure_ascii=False, separators=(",", ":"))
