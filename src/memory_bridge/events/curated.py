"""Curated documents (MEMORY.md, USER.md), edited only through the admin API.

Snapshots are cached in process for `cache_ttl` seconds, the token auth cache's contract: an
edit (PUT, purge, the token's deletion) made through this process is seen by its next
request at once; one made through another process, within `cache_ttl`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, bindparam, delete, or_, select

from memory_bridge.events import log
from memory_bridge.events.model import EventType, NewEvent, curated_aggregate
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import curated

Kind = Literal["memory", "user"]
_CACHE_LIMIT = 10_000

_SNAPSHOT = select(curated.c.kind, curated.c.user_id, curated.c.body).where(
    curated.c.token_id == bindparam("token_id"),
    or_(curated.c.user_id == "", curated.c.user_id == bindparam("user_id")),
)


@dataclass(frozen=True, slots=True)
class CuratedSnapshot:
    memory: str
    user: str


class CuratedRepository:
    def __init__(self, db: Database, cache_ttl: float = 0.0) -> None:
        self._db = db
        self._ttl = cache_ttl
        self._cache: dict[tuple[int, str], tuple[float, CuratedSnapshot]] = {}
        self._generation = 0  # bumped by every invalidation: a read older than it is not kept

    async def get(self, token_id: int, kind: Kind, user: str) -> str:
        async with self._db() as s:
            body = await s.scalar(
                select(curated.c.body).where(
                    curated.c.token_id == token_id,
                    curated.c.kind == kind,
                    curated.c.user_id == user,
                )
            )
        return body or ""

    async def put(self, token_id: int, kind: Kind, user: str, body: str) -> None:
        try:
            await self._put(token_id, kind, user, body)
        finally:
            self.forget(token_id)

    async def _put(self, token_id: int, kind: Kind, user: str, body: str) -> None:
        # The document is replaced by an event; the table row is its projection.
        payload = {"kind": kind, "user": user, "body": body}
        event = NewEvent(
            EventType.CURATED_REPLACED,
            curated_aggregate(token_id, kind, user),
            payload,
            {"source": "admin"},
        )

        def work(conn: Connection) -> None:
            log.append(conn, token_id, [event])

        await log.write_appending(self._db, work)

    async def snapshot(self, token_id: int, user: str) -> CuratedSnapshot:
        """Both documents in one read. An end user without a USER.md gets the token-wide one."""
        key = (token_id, user)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        generation = self._generation
        params = {"token_id": token_id, "user_id": user}

        def read(conn: Connection) -> Sequence[Any]:
            return conn.execute(_SNAPSHOT, params).all()

        docs = {(kind, user_id): body for kind, user_id, body in await self._db.run(read)}
        user_doc = docs.get(("user", user)) or docs.get(("user", ""), "")
        snap = CuratedSnapshot(memory=docs.get(("memory", ""), ""), user=user_doc)
        if self._ttl > 0 and generation == self._generation:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = (now + self._ttl, snap)
        return snap

    def forget(self, token_id: int) -> None:
        """Drop the token's cached snapshots (its documents changed, or it is gone)."""
        self._generation += 1
        for key in [k for k in self._cache if k[0] == token_id]:
            del self._cache[key]

    async def purge(self, token_id: int) -> None:
        try:
            async with self._db.begin() as s:
                await s.execute(delete(curated).where(curated.c.token_id == token_id))
        finally:
            self.forget(token_id)
