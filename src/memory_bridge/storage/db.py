"""The one database engine of the process, and schema creation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memory_bridge.storage.tables import metadata


def create_engine(url: str) -> AsyncEngine:
    # aiosqlite logs every statement with its parameters at DEBUG, and token configs (with
    # their API keys) are parameters: its debug output must never reach a log.
    logging.getLogger("aiosqlite").setLevel(logging.INFO)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # Each aiosqlite connection is a thread: keep a fixed set rather than opening and
        # closing overflow connections (and threads) under load.
        engine = create_async_engine(
            url, connect_args={"timeout": 30}, pool_size=20, max_overflow=0, pool_timeout=30
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers proceed while the single writer commits; busy_timeout waits for locks.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Sessions(async_sessionmaker[AsyncSession]):
    """Sessions whose write transactions (`begin()`) take turns within this process on SQLite.

    SQLite has one writer at a time; connections that collide wait in its busy handler, which
    sleeps in growing steps (up to 100 ms). Queueing writers on an asyncio lock instead keeps
    the wait as short as the write before it. Readers are unaffected (WAL). PostgreSQL has
    row locks and needs no such turn-taking.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine, expire_on_commit=False)
        serial = engine.dialect.name == "sqlite"
        self._write_turn: asyncio.Lock | None = asyncio.Lock() if serial else None

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncSession]:  # type: ignore[override]
        if self._write_turn is None:
            async with super().begin() as session:
                yield session
            return
        async with self._write_turn, super().begin() as session:
            yield session


def session_factory(engine: AsyncEngine) -> Sessions:
    return Sessions(engine)


async def create_schema(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
