"""Database URLs for the storage tests: SQLite always, PostgreSQL when one is reachable.

PostgreSQL tests get a fresh database of their own (created and dropped around the test), so
they never touch tables that live in the shared `test` database.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import pytest

PG_ADMIN_DSN = os.environ.get(
    "MEMORY_BRIDGE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def _reachable() -> str | None:
    async def probe() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
        await conn.close()

    try:
        asyncio.run(probe())
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {type(exc).__name__}"
    return None


_SKIP_REASON = _reachable()
needs_postgres = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")


@contextmanager
def fresh_postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL of a brand-new PostgreSQL database, dropped afterwards."""
    name = f"mb_test_{uuid.uuid4().hex[:12]}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
