"""Context traces, kept for a bounded count and age per token.

A trace is written off the response's path (the caller does not wait for it), and pruning
runs every `_PRUNE_EVERY` writes of a token rather than on each one.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import context_traces

_PRUNE_EVERY = 50


class TraceStore:
    def __init__(self, db: Database, keep_count: int, keep_seconds: float) -> None:
        self._db = db
        self._keep_count = keep_count
        self._keep_seconds = keep_seconds
        self._writes: dict[int, int] = {}

    async def save(self, token_id: int, request_id: str, trace: dict[str, Any]) -> None:
        row = {
            "token_id": token_id,
            "request_id": request_id,
            "created_at": time.time(),
            "body": json.dumps(trace, ensure_ascii=False, separators=(",", ":")),
        }
        writes = self._writes[token_id] = self._writes.get(token_id, 0) + 1
        prune = writes % _PRUNE_EVERY == 0

        def work(conn: Connection) -> None:
            conn.execute(insert(context_traces), row)
            if prune:
                self._prune(conn, token_id)

        await self._db.write(work)

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
        def read(conn: Connection) -> str | None:
            return conn.execute(
                select(context_traces.c.body)
                .where(
                    context_traces.c.token_id == token_id,
                    context_traces.c.request_id == request_id,
                )
                .order_by(context_traces.c.id.desc())
                .limit(1)
            ).scalar()

        body = await self._db.run(read)
        return None if body is None else dict(json.loads(body))

    async def purge(self, token_id: int) -> None:
        await self._db.write(
            lambda conn: conn.execute(
                delete(context_traces).where(context_traces.c.token_id == token_id)
            )
        )
