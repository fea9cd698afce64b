"""Access stats of recalled memories: when each was last injected, for fading.

Recorded off the request's path, in batches, never as an event per use: `touch` only notes the
injected items in a bounded in-memory buffer (one entry per item, the latest time wins and the
uses add up), and a flusher task writes what gathered in one transaction (an upsert per item),
at most every `flush_interval`, or at once when the buffer is full. A request reads its
candidates' last-used times (`last_used`) from the table and from the buffer, so its own
process's unwritten uses count at once. A batch lost to a crash only makes some memories look
a little older: stats are a ranking signal, not memory (they are not events, so an export or a
rebuild does not carry them: docs/decisions.md).

Rows are per token and end user: an item id read for one user never matches another's, and an
erasure removes them (`forget_user` first drops the user's unwritten ones and waits for a batch
being written, then `lifecycle.erase_rows` deletes the rows). Only ids and times, never text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from memory_bridge.storage.db import Database, mark_background
from memory_bridge.storage.tables import memory_access

log = logging.getLogger(__name__)

MAX_PENDING = 10_000  # distinct items waiting to be written; beyond, new ones are dropped
_MAX_BATCH = 500
_IN_CHUNK = 500
# (token id, end user, source, item id)
Key = tuple[int, str, str, str]


@dataclass(frozen=True, slots=True)
class Use:
    """One item's stats: when it was last injected, its importance then, how often."""

    source: str
    item_id: str
    last_used_at: float
    importance: float | None
    uses: int


class AccessStats:
    def __init__(self, db: Database, flush_interval: float = 1.0) -> None:
        self._db = db
        self._interval = flush_interval
        self._pending: dict[Key, Use] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._writing = asyncio.Lock()  # held while a batch is being written
        self._dropped = 0

    def touch(
        self,
        token_id: int,
        user: str,
        items: Iterable[tuple[str, str, float | None]],
        at: float,
    ) -> None:
        """Note that `items` ((source, id, importance)) were injected at `at`; written with
        the next batch. Never waits, never fails the caller."""
        for source, item_id, importance in items:
            key = (token_id, user, source, item_id)
            before = self._pending.get(key)
            if before is None and len(self._pending) >= MAX_PENDING:
                self._dropped += 1  # the database is failing or far behind: a signal lost
                continue
            uses = 1 if before is None else before.uses + 1
            self._pending[key] = Use(source, item_id, at, importance, uses)
        if self._pending and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        mark_background()  # a batch of stats never goes before a request's write
        if len(self._pending) < _MAX_BATCH:
            await asyncio.sleep(self._interval)
        while self._pending:
            await self.flush()

    async def flush(self) -> None:
        """Write a batch of the buffered uses now (one transaction)."""
        keys = list(self._pending)[:_MAX_BATCH]
        if not keys:
            return
        batch = [(key, self._pending.pop(key)) for key in keys]
        if self._dropped:
            log.warning("access stats: %d use(s) dropped (buffer full)", self._dropped)
            self._dropped = 0

        def work(conn: Connection) -> None:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            rows = [
                {
                    "token_id": token_id,
                    "user_id": user,
                    "source": use.source,
                    "item_id": use.item_id,
                    "last_used_at": use.last_used_at,
                    "importance": use.importance,
                    "uses": use.uses,
                }
                for (token_id, user, _, _), use in batch
            ]
            stmt = dialect.insert(memory_access)
            newer = func.max if conn.dialect.name == "sqlite" else func.greatest
            stmt = stmt.on_conflict_do_update(
                index_elements=["token_id", "user_id", "source", "item_id"],
                set_={
                    "last_used_at": newer(memory_access.c.last_used_at, stmt.excluded.last_used_at),
                    "importance": stmt.excluded.importance,
                    "uses": memory_access.c.uses + stmt.excluded.uses,
                },
            )
            conn.execute(stmt, rows)

        try:
            async with self._writing:
                await self._db.write(work)
        except Exception as exc:
            log.warning("could not record %d memory use(s): %s", len(batch), type(exc).__name__)

    async def last_used(
        self, token_id: int, user: str, items: Sequence[tuple[str, str]]
    ) -> dict[str, float]:
        """When each of `items` ((source, id)) was last injected, by "source:id"; an item
        never injected is absent."""
        if not items:
            return {}
        wanted = {f"{source}:{item_id}" for source, item_id in items}
        ids = sorted({item_id for _, item_id in items})

        def read(conn: Connection) -> list[tuple[str, str, float]]:
            found: list[tuple[str, str, float]] = []
            for start in range(0, len(ids), _IN_CHUNK):
                query = select(
                    memory_access.c.source, memory_access.c.item_id, memory_access.c.last_used_at
                ).where(
                    memory_access.c.token_id == token_id,
                    memory_access.c.user_id == user,
                    memory_access.c.item_id.in_(ids[start : start + _IN_CHUNK]),
                )
                found.extend((s, i, float(t)) for s, i, t in conn.execute(query))
            return found

        out: dict[str, float] = {}
        for source, item_id, at in await self._db.run(read):
            key = f"{source}:{item_id}"
            if key in wanted:
                out[key] = at
        for source, item_id in items:  # this process's uses not written yet
            use = self._pending.get((token_id, user, source, item_id))
            if use is not None:
                key = f"{source}:{item_id}"
                out[key] = max(out.get(key, 0.0), use.last_used_at)
        return out

    async def of_user(self, token_id: int, user: str, limit: int, offset: int = 0) -> list[Use]:
        """The end user's stats, the most recently used first (written ones: `settle` first)."""
        await self.settle()

        def read(conn: Connection) -> list[Use]:
            query = (
                select(memory_access)
                .where(memory_access.c.token_id == token_id, memory_access.c.user_id == user)
                .order_by(memory_access.c.last_used_at.desc(), memory_access.c.item_id)
                .limit(limit)
                .offset(offset)
            )
            return [
                Use(r.source, r.item_id, float(r.last_used_at), r.importance, int(r.uses))
                for r in conn.execute(query)
            ]

        return await self._db.run(read)

    async def settle(self) -> None:
        """Every use noted so far is written when this returns (the buffer, and the batch the
        flusher may be writing at this moment)."""
        while self._pending:
            await self.flush()
        await self._written()

    async def forget_user(self, token_id: int, user: str) -> None:
        """Drop the end user's unwritten uses and wait for a batch being written, so the rows
        an erasure deletes next are not written again behind it."""
        self._pending = {k: v for k, v in self._pending.items() if k[:2] != (token_id, user)}
        await self._written()

    async def purge(self, token_id: int) -> None:
        """Every stat of the token, unwritten or written."""
        self._pending = {k: v for k, v in self._pending.items() if k[0] != token_id}
        await self._written()
        await self._db.write(
            lambda conn: conn.execute(
                delete(memory_access).where(memory_access.c.token_id == token_id)
            )
        )

    async def _written(self) -> None:
        """Wait for the batch being written, if one is (a sleeping flusher holds nothing)."""
        async with self._writing:
            pass

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
        while self._pending:
            await self.flush()


def erase_user(conn: Connection, token_id: int, user: str) -> int:
    """Delete the end user's stats (inside an erasure's transaction); how many rows."""
    return int(
        conn.execute(
            delete(memory_access).where(
                memory_access.c.token_id == token_id, memory_access.c.user_id == user
            )
        ).rowcount
    )
